package postgres

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/core"
)

var _ core.Notifier = (*Store)(nil)

// notifier holds one connection that LISTENs on the schema's channel and
// hands each notification (its payload is a queue name) to the waiters of
// that queue. It connects on the first Wait and reconnects after an error,
// waking every waiter then, since notifications may have been lost.
type notifier struct {
	s       *Store
	channel string

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
	started bool
	stop    context.CancelFunc
	done    chan struct{}
}

// channelName is the notification channel of a schema: "leasehold:<schema>"
// when that fits PostgreSQL's 63 bytes, else named by a hash of the schema.
func channelName(schema string) string {
	if c := "leasehold:" + schema; len(c) <= 63 {
		return c
	}
	h := fnv.New64a()
	h.Write([]byte(schema))
	return fmt.Sprintf("leasehold:%016x", h.Sum64())
}

func newNotifier(s *Store) *notifier {
	return &notifier{s: s, channel: channelName(s.schema), waiters: map[string]map[chan struct{}]struct{}{}}
}

// Wait implements core.Notifier: the channel it returns receives a value
// (at most one is kept) whenever a transaction that may have made a task of
// queue Ready commits, from now until ctx ends. A Worker selects on it
// beside its poll timer, so it claims a new task within milliseconds; the
// poll stays as the fallback for a lost notification. A store opened
// WithoutNotifications returns a channel that never receives.
func (s *Store) Wait(ctx context.Context, queue string) <-chan struct{} {
	ch := make(chan struct{}, 1)
	if s.notifier == nil {
		return ch
	}
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return ch
	}
	n := s.notifier
	n.mu.Lock()
	if n.waiters[queue] == nil {
		n.waiters[queue] = map[chan struct{}]struct{}{}
	}
	n.waiters[queue][ch] = struct{}{}
	if !n.started {
		n.started = true
		ctx, cancel := context.WithCancel(context.Background())
		n.stop, n.done = cancel, make(chan struct{})
		go n.listen(ctx)
	}
	n.mu.Unlock()
	go func() {
		<-ctx.Done()
		n.mu.Lock()
		delete(n.waiters[queue], ch)
		if len(n.waiters[queue]) == 0 {
			delete(n.waiters, queue)
		}
		n.mu.Unlock()
	}()
	return ch
}

func (n *notifier) signal(queue string, all bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for q, chans := range n.waiters {
		if !all && q != queue {
			continue
		}
		for ch := range chans {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

func (n *notifier) listen(ctx context.Context) {
	defer close(n.done)
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		err := n.session(ctx)
		if ctx.Err() != nil {
			return
		}
		_ = err // a lost connection: wake everyone, then listen again
		n.signal("", true)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

// session listens on one connection until it fails or ctx ends.
func (n *notifier) session(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, n.s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{n.channel}.Sanitize()); err != nil {
		return err
	}
	// Anything enqueued before LISTEN took effect was not announced.
	n.signal("", true)
	for {
		note, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		n.signal(note.Payload, false)
	}
}

func (n *notifier) close() {
	n.mu.Lock()
	stop, done := n.stop, n.done
	n.started = true // no later Wait starts a listener
	n.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}
