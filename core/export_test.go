package core

import "time"

// Stopping reports whether the worker has stopped popping (a test hook).
func (w *Worker) Stopping() bool { return closed(w.stopping) }

// BlockUntilTimerAt waits until a timer due at at is waiting to fire (a
// test hook: the count BlockUntil reads cannot tell a poll timer from a
// heartbeat timer that stays armed after its job ended). It returns false
// if done is closed first.
func (c *FakeClock) BlockUntilTimerAt(at time.Time, done <-chan struct{}) bool {
	for {
		c.mu.Lock()
		found, changed := false, c.changed
		for _, ft := range c.timers {
			found = found || ft.at.Equal(at)
		}
		c.mu.Unlock()
		if found {
			return true
		}
		select {
		case <-changed:
		case <-done:
			return false
		}
	}
}

// PrefetchAhead is pace.ahead for a handler mean of handler and a
// claiming-call mean of trip (a test hook).
func PrefetchAhead(handler, trip time.Duration, c, most int) int {
	var p pace
	p.handler.v.Store(int64(handler))
	p.trip.v.Store(int64(trip))
	return p.ahead(c, most)
}
