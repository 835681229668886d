package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// cutConn is a client connection whose next write that its cutter's
// condition picks, once armed, sends the first half of its bytes and then
// stalls until the write deadline pgx sets when the caller's context ends:
// a write cut short by a cancelled call, which leaves the server with half
// a message.
type cutConn struct {
	net.Conn
	c *cutter

	mu       sync.Mutex
	deadline time.Time
}

func (c *cutConn) SetDeadline(t time.Time) error {
	c.note(t)
	return c.Conn.SetDeadline(t)
}

func (c *cutConn) SetWriteDeadline(t time.Time) error {
	c.note(t)
	return c.Conn.SetWriteDeadline(t)
}

func (c *cutConn) note(t time.Time) {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
}

func (c *cutConn) passed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.deadline.IsZero() && !time.Now().Before(c.deadline)
}

// cutter arms the cut of the next write its condition picks, on any of its
// connections, and tells when one is stalled.
type cutter struct {
	mu      sync.Mutex
	when    func([]byte) bool // nil: disarmed
	stalled chan struct{}
	port    int // the client port of the stalled connection
}

func (c *cutConn) Write(b []byte) (int, error) {
	c.c.mu.Lock()
	cut := c.c.when != nil && c.c.when(b)
	if cut {
		c.c.when = nil
		c.c.port = c.Conn.LocalAddr().(*net.TCPAddr).Port
	}
	c.c.mu.Unlock()
	if !cut {
		return c.Conn.Write(b)
	}
	n, err := c.Conn.Write(b[:len(b)/2])
	if err != nil {
		return n, err
	}
	close(c.c.stalled)
	// Stall as a full socket buffer does, until the deadline passes.
	for give := time.Now().Add(30 * time.Second); !c.passed(); {
		if time.Now().After(give) {
			return n, errors.New("cutConn: no deadline came in 30 s")
		}
		time.Sleep(time.Millisecond)
	}
	return n, os.ErrDeadlineExceeded
}

// TestACallCutMidMessageFreesItsQueue cancels a call while a message of its
// transaction is half written: the server holds the queue's lock, has half
// a message, and waits for the rest. pgx gives the connection up, but its
// Terminate only adds to the half message, so the server goes on waiting,
// with the lock, until pgx closes the socket 15 s later. (Over TLS a write
// cut by a deadline leaves the stream unwritable, so a Terminate is lost
// even when the cut fell between messages.) The store closes the socket
// itself, so the server rolls the transaction back at once, and another
// store's Enqueue of the queue goes through. The cut lands in the
// statements (an Enqueue of a large payload) or in the COMMIT sent after
// them (an operator's Cancel, which reads before it commits; a Pop before
// it sends its COMMIT with its statements), or in an EnqueueTx, whose
// lock the caller's transaction holds.
func TestACallCutMidMessageFreesItsQueue(t *testing.T) {
	enqueue := func(ctx context.Context, s *postgres.Store, id string, payload []byte) error {
		_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: id, Payload: payload, MaxAttempts: 1}})
		return err
	}
	var pool *pgxpool.Pool // the cut store's, set by each case
	bigGone := func(ctx context.Context, s *postgres.Store) error {
		if _, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "big"}); !errors.Is(err, core.ErrNotFound) {
			return fmt.Errorf("Get of the cut Enqueue's task = %v, want ErrNotFound", err)
		}
		return nil
	}
	big := func(b []byte) bool { return len(b) > 64<<10 }
	for _, tc := range []struct {
		name string
		when func([]byte) bool
		call func(context.Context, *postgres.Store) error
		// gone is the task the cut call would have added or changed.
		gone func(context.Context, *postgres.Store) error
	}{
		{"statement", big,
			func(ctx context.Context, s *postgres.Store) error {
				return enqueue(ctx, s, "big", bytes.Repeat([]byte("p"), 1<<20))
			}, bigGone},
		// EnqueueTx locks the queue in the caller's transaction, which
		// then rolls back.
		{"callers-transaction", big,
			func(ctx context.Context, s *postgres.Store) error {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return err
				}
				_, err = s.EnqueueTx(ctx, tx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{
					ID: "big", Payload: bytes.Repeat([]byte("p"), 1<<20), MaxAttempts: 1}})
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = tx.Rollback(rctx)
				return err
			}, bigGone},
		{"commit", func(b []byte) bool { return bytes.Contains(b, []byte("COMMIT")) && !bytes.Contains(b, []byte("BEGIN")) },
			func(ctx context.Context, s *postgres.Store) error {
				// The Pop's COMMIT goes with its BEGIN, in one message,
				// and so would an Ack's.
				r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
				if err != nil {
					return fmt.Errorf("the Pop before the cut Cancel: %w", err)
				}
				if len(r.Tasks) != 1 {
					return fmt.Errorf("the Pop before the cut Cancel claimed %d tasks", len(r.Tasks))
				}
				_, err = s.Cancel(ctx, core.InspectParams{Queue: "q", ID: "first"})
				return err
			},
			func(ctx context.Context, s *postgres.Store) error {
				got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "first"})
				if err != nil || got.State != model.Running {
					return fmt.Errorf("Get of the task the cut Cancel cancelled = %v, %v; want it Running", got.State, err)
				}
				return nil
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := pgtest.URL(t)
			schema := pgtest.Take()
			defer pgtest.Give(t, schema)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			cfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			cut := &cutter{stalled: make(chan struct{})}
			// Without TLS, so the cutter sees the messages.
			cfg.ConnConfig.TLSConfig = nil
			cfg.ConnConfig.Fallbacks = nil
			dial := cfg.ConnConfig.DialFunc
			cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
				nc, err := dial(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &cutConn{Conn: nc, c: cut}, nil
			}
			pool, err = pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			cutStore, err := postgres.New(ctx, pool, postgres.WithSchema(schema))
			if err != nil {
				t.Fatal(err)
			}
			defer cutStore.Close()
			other, err := postgres.New(ctx, pgtest.Pool(t), postgres.WithSchema(schema))
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			if err := enqueue(ctx, cutStore, "first", []byte("x")); err != nil {
				t.Fatal(err)
			}

			cut.mu.Lock()
			cut.when = tc.when
			cut.mu.Unlock()
			callCtx, cancelCall := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- tc.call(callCtx, cutStore) }()
			select {
			case <-cut.stalled:
			case err := <-done:
				t.Fatalf("the call returned (%v) before its request was cut", err)
			}
			cut.mu.Lock()
			port := cut.port
			cut.mu.Unlock()
			waitLocked(ctx, t, port)
			cancelCall()
			if err := <-done; err == nil {
				t.Fatal("a call whose request was cut returned nil")
			}

			start := time.Now()
			within, stop := context.WithTimeout(ctx, 5*time.Second)
			defer stop()
			if err := enqueue(within, other, "second", []byte("y")); err != nil {
				t.Fatalf("another store's Enqueue of the queue, %v after the cut call returned: %v", time.Since(start).Round(time.Millisecond), err)
			}
			t.Logf("the queue was free again after %v", time.Since(start).Round(time.Millisecond))
			if err := tc.gone(ctx, other); err != nil {
				t.Error(err)
			}
		})
	}
}

// waitLocked waits until the test server's session of the client port is
// in a transaction and waits for its client.
func waitLocked(ctx context.Context, t *testing.T, port int) {
	t.Helper()
	for {
		var n int
		err := pgtest.Pool(t).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
 WHERE client_port = $1 AND wait_event = 'ClientRead' AND xact_start IS NOT NULL`, port).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the session of the cut request does not wait for its client in a transaction")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
