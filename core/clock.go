package core

import (
	"sync"
	"time"
)

// Clock is where leasehold reads the time and waits for it. Every
// time-dependent path of the library goes through a Clock, so tests drive
// leases with a FakeClock instead of sleeping.
type Clock interface {
	// Now returns the current time, truncated to the microsecond.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer from a Clock.
type Timer interface {
	// C delivers the time when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it stopped it.
	Stop() bool
}

// SystemClock is the host's clock: UTC, truncated to the microsecond (the
// precision every store keeps), without a monotonic reading.
type SystemClock struct{}

// Now returns the current UTC time truncated to the microsecond.
func (SystemClock) Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// NewTimer returns a timer of the time package.
func (SystemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (s systemTimer) C() <-chan time.Time { return s.t.C }
func (s systemTimer) Stop() bool          { return s.t.Stop() }

// FakeClock is a Clock that moves only when told to. Its timers fire during
// Advance or Set, in order of their deadlines. It is safe for concurrent use.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	// waiters are woken whenever a timer is created, for BlockUntil.
	changed chan struct{}
}

// NewFakeClock returns a FakeClock that reads start (truncated to the
// microsecond, in UTC).
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start.UTC().Truncate(time.Microsecond), changed: make(chan struct{})}
}

// Now returns the fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and fires every timer now due.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.setLocked(c.now.Add(d))
	c.mu.Unlock()
}

// Set moves the clock to t (it never moves backwards) and fires every timer
// now due.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.setLocked(t)
	}
	c.mu.Unlock()
}

func (c *FakeClock) setLocked(t time.Time) {
	c.now = t.UTC().Truncate(time.Microsecond)
	kept := c.timers[:0]
	for _, ft := range c.timers {
		if !ft.at.After(c.now) {
			ft.fire(c.now)
		} else {
			kept = append(kept, ft)
		}
	}
	clear(c.timers[len(kept):])
	c.timers = kept
}

// NewTimer returns a timer that fires when the clock reaches Now() + d.
func (c *FakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	ft := &fakeTimer{clock: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		ft.fire(c.now)
	} else {
		c.timers = append(c.timers, ft)
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return ft
}

// Timers returns the number of timers waiting to fire.
func (c *FakeClock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// BlockUntil waits until at least n timers are waiting to fire, so a test can
// advance the clock knowing the goroutine it drives is parked on its timer. It
// returns false if done is closed first.
func (c *FakeClock) BlockUntil(n int, done <-chan struct{}) bool {
	for {
		c.mu.Lock()
		count, changed := len(c.timers), c.changed
		c.mu.Unlock()
		if count >= n {
			return true
		}
		select {
		case <-changed:
		case <-done:
			return false
		}
	}
}

type fakeTimer struct {
	clock *FakeClock
	at    time.Time
	ch    chan time.Time
	fired bool
}

func (t *fakeTimer) fire(now time.Time) {
	t.fired = true
	select {
	case t.ch <- now:
	default:
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, ft := range c.timers {
		if ft == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return true
		}
	}
	return false
}
