package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// busyStore answers the next busy decisions (Ack, AckBatch, Fail, Retry)
// ErrBusy without running them, as a SQLite store does when another
// connection holds the database's write lock past its busy timeout.
// answered counts those answers.
type busyStore struct {
	core.Store
	busy     atomic.Int64 // decisions left to refuse; < 0: every one
	answered atomic.Int64
	// With clk set, the store is busy while clk reads before busyUntil
	// instead.
	clk       core.Clock
	busyUntil time.Time
}

func (s *busyStore) refuse(op string) error {
	if s.clk != nil {
		if !s.clk.Now().Before(s.busyUntil) {
			return nil
		}
		s.answered.Add(1)
		return fmt.Errorf("busyStore: %s: %w", op, core.ErrBusy)
	}
	for {
		n := s.busy.Load()
		if n == 0 {
			return nil
		}
		if n < 0 || s.busy.CompareAndSwap(n, n-1) {
			s.answered.Add(1)
			return fmt.Errorf("busyStore: %s: %w", op, core.ErrBusy)
		}
	}
}

func (s *busyStore) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	if err := s.refuse("ack"); err != nil {
		return core.TaskResult{}, err
	}
	return s.Store.Ack(ctx, p)
}

func (s *busyStore) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	if err := s.refuse("fail"); err != nil {
		return core.TaskResult{}, err
	}
	return s.Store.Fail(ctx, p)
}

func (s *busyStore) Retry(ctx context.Context, p core.RetryParams) (core.TaskResult, error) {
	if err := s.refuse("retry"); err != nil {
		return core.TaskResult{}, err
	}
	return s.Store.Retry(ctx, p)
}

// busyBatchStore is busyStore over a BatchStore, whose AckBatch is busy too.
type busyBatchStore struct {
	*busyStore
	batch core.BatchStore
}

func (s *busyBatchStore) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	return s.batch.EnqueueBatch(ctx, p)
}

func (s *busyBatchStore) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	if err := s.refuse("ack batch"); err != nil {
		return core.BatchResult{}, err
	}
	return s.batch.AckBatch(ctx, p)
}

// newBusyStore returns a busyStore over a memory store judged by clk, and
// the store a worker is given: with batch, a BatchStore (its successes go
// through AckBatch); else a plain Store (Ack).
func newBusyStore(t *testing.T, clk core.Clock, batch bool) (*busyStore, core.Store) {
	s := &busyStore{Store: newStore(t, clk)}
	if batch {
		return s, &busyBatchStore{busyStore: s, batch: s.Store.(core.BatchStore)}
	}
	return s, s
}

// busyForGood returns a fake clock and a store (newBusyStore's, with batch)
// holding task t1 and answering every decision ErrBusy.
func busyForGood(t *testing.T, batch bool) (*core.FakeClock, core.Store) {
	t.Helper()
	clk := core.NewFakeClock(t0)
	s, store := newBusyStore(t, clk, batch)
	enqueue(t, store, clk, "t1")
	s.busy.Store(-1)
	return clk, store
}

// waitStats waits until ok holds of the worker's counters.
func waitStats(t *testing.T, w *core.Worker, ok func(core.WorkerStats) bool) core.WorkerStats {
	t.Helper()
	deadline := time.Now().Add(guard)
	for {
		st := w.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats = %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWorkerSendsADecisionTheStoreAnsweredBusyAgain(t *testing.T) {
	cases := []struct {
		name    string
		handler func() ([]byte, error)
		opts    []core.WorkerOption
		want    core.State
		counted func(core.WorkerStats) int64
	}{
		{"ack", func() ([]byte, error) { return []byte("done"), nil }, nil, core.Succeeded,
			func(st core.WorkerStats) int64 { return st.Acked }},
		{"fail", func() ([]byte, error) { return nil, core.Permanent(errors.New("bad input")) }, nil, core.Failed,
			func(st core.WorkerStats) int64 { return st.Failed }},
		// The default policy retries after a second, and the fake clock
		// stands still: the task waits Scheduled.
		{"retry", func() ([]byte, error) { return nil, errors.New("try later") }, nil, core.Scheduled,
			func(st core.WorkerStats) int64 { return st.Retried }},
	}
	for _, c := range cases {
		for _, batch := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/batch=%v", c.name, batch), func(t *testing.T) {
				clk := core.NewFakeClock(t0)
				s, store := newBusyStore(t, clk, batch)
				enqueue(t, store, clk, "t1", core.WithMaxAttempts(3))
				s.busy.Store(3)
				var runs atomic.Int64
				w := newWorker(t, store, clk, func(context.Context, core.Claim, core.Task) ([]byte, error) {
					runs.Add(1)
					return c.handler()
				}, c.opts...)
				stop := started(t, w)
				st := waitStats(t, w, func(st core.WorkerStats) bool { return c.counted(st) == 1 })
				stop()
				if task := mustGet(t, store, "t1"); task.State != c.want || task.Attempt != 1 {
					t.Fatalf("task %v attempt %d, want %v after one attempt", task.State, task.Attempt, c.want)
				}
				if runs.Load() != 1 || s.answered.Load() != 3 {
					t.Fatalf("handler ran %d times, store answered busy %d times; want 1 and 3", runs.Load(), s.answered.Load())
				}
				if st.BusyResends != 3 || st.StoreErrors != 3 || st.LeasesLost != 0 {
					t.Fatalf("stats = %+v, want 3 busy resends and store errors, no lost lease", st)
				}
			})
		}
	}
}

func TestWorkerStopsSendingABusyDecisionWhenShutdownEnds(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			clk, store := busyForGood(t, batch)
			w := newWorker(t, store, clk, func(context.Context, core.Claim, core.Task) ([]byte, error) {
				return nil, nil
			})
			ran := make(chan error, 1)
			go func() { ran <- w.Run(context.Background()) }()
			waitStats(t, w, func(st core.WorkerStats) bool { return st.BusyResends >= 2 })
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			err := w.Shutdown(ctx)
			var se *core.ShutdownError
			if !errors.As(err, &se) || len(se.Held) != 1 || se.Held[0].TaskID != "t1" {
				t.Fatalf("Shutdown = %v, want a ShutdownError holding t1", err)
			}
			// Run names the same claim.
			if err := receive(t, ran); !errors.As(err, &se) || len(se.Held) != 1 || se.Held[0].TaskID != "t1" {
				t.Fatalf("Run = %v, want a ShutdownError holding t1", err)
			}
			// Nothing was recorded: the claim holds the task until its
			// lease lapses and a broker decides it.
			if task := mustGet(t, store, "t1"); task.State != core.Running {
				t.Fatalf("task %v, want running", task.State)
			}
			if st := w.Stats(); st.Acked != 0 || st.LeasesLost != 0 {
				t.Fatalf("stats = %+v", st)
			}
		})
	}
}

// A worker whose Run context ended and whose shutdown timeout passed while
// it waited to send a busy decision again sends it one last time at once,
// instead of leaving the task to run again once its lease lapses.
func TestWorkerSendsABusyDecisionOnceMoreWhenItsShutdownTimeoutPasses(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s, store := newBusyStore(t, clk, false)
	enqueue(t, store, clk, "t1")
	const timeout = time.Minute
	// Busy until the shutdown timeout passes: only a send after it runs.
	s.clk, s.busyUntil = clk, clk.Now().Add(timeout)
	w, err := runPastShutdownTimeout(t, clk, store, timeout)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if task := mustGet(t, store, "t1"); task.State != core.Succeeded {
		t.Fatalf("task %v, want succeeded: the last send was not made", task.State)
	}
	if st := w.Stats(); st.Acked != 1 || st.BusyResends < 6 {
		t.Fatalf("stats = %+v, want one ack after 6 busy resends or more", st)
	}
}

// runPastShutdownTimeout runs a worker with a no-op handler and the
// shutdown timeout on store until its decision has been answered busy six
// times (the next pause, 320 ms, is long past the moment the timeout
// passes), then ends Run's context, lets the timeout pass on clk and
// returns the worker and what Run returned.
func runPastShutdownTimeout(t *testing.T, clk *core.FakeClock, store core.Store, timeout time.Duration) (*core.Worker, error) {
	t.Helper()
	w := newWorker(t, store, clk, func(context.Context, core.Claim, core.Task) ([]byte, error) {
		return nil, nil
	}, core.WithShutdownTimeout(timeout))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	waitStats(t, w, func(st core.WorkerStats) bool { return st.BusyResends >= 6 })
	cancel()
	// The shutdown timer is armed: the worker has stopped popping.
	blockUntilTimerAt(t, clk, clk.Now().Add(timeout))
	clk.Advance(timeout)
	return w, receive(t, ran)
}

// A worker whose last send after the shutdown timeout is answered busy too
// leaves the claim to lapse, and says so: Run, and a Shutdown after it,
// return a *ShutdownError naming the claim.
func TestWorkerNamesTheClaimWhoseLastBusySendWasAnsweredBusy(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			clk, store := busyForGood(t, batch)
			w, err := runPastShutdownTimeout(t, clk, store, time.Minute)
			var se *core.ShutdownError
			if !errors.As(err, &se) || !errors.Is(err, context.Canceled) || len(se.Held) != 1 || se.Held[0].TaskID != "t1" {
				t.Fatalf("Run = %v, want a ShutdownError holding t1 and wrapping Run's context's error", err)
			}
			if err := w.Shutdown(context.Background()); !errors.As(err, &se) || len(se.Held) != 1 || se.Held[0].TaskID != "t1" {
				t.Fatalf("Shutdown after Run = %v, want the same ShutdownError", err)
			}
			if task := mustGet(t, store, "t1"); task.State != core.Running {
				t.Fatalf("task %v, want running under its lapsing lease", task.State)
			}
			if st := w.Stats(); st.Acked != 0 || st.LeasesLost != 0 || st.BusyResends < 6 {
				t.Fatalf("stats = %+v", st)
			}
		})
	}
}

// downStore fails every Ack once down is set, as a store the network lost
// does: the call may or may not have run, and the worker does not send it
// again. It hides the memory store's batch calls, so successes go by Ack.
type downStore struct {
	core.Store
	down atomic.Bool
}

func (s *downStore) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	if s.down.Load() {
		return core.TaskResult{}, errors.New("downStore: connection reset")
	}
	return s.Store.Ack(ctx, p)
}

// A worker that Shutdown stops without a deadline, and whose last outcome
// cannot be recorded, names the claim it leaves to lapse: Shutdown and Run
// return a *ShutdownError holding it, with ErrClosed as what ended the run.
func TestWorkerNamesTheClaimWhoseOutcomeFailedDuringShutdown(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := &downStore{Store: newStore(t, clk)}
	enqueue(t, s, clk, "t1")
	begun, release := make(chan struct{}), make(chan struct{})
	w := newWorker(t, s, clk, func(context.Context, core.Claim, core.Task) ([]byte, error) {
		close(begun)
		<-release
		return nil, nil
	})
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()
	receive(t, begun)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Shutdown(context.Background()) }()
	waitFor(t, "the worker stops popping", func() bool { return w.Stopping() })
	s.down.Store(true)
	close(release)
	var se *core.ShutdownError
	err := receive(t, stopped)
	if !errors.As(err, &se) || !errors.Is(err, core.ErrClosed) || len(se.Held) != 1 || se.Held[0].TaskID != "t1" {
		t.Fatalf("Shutdown = %v, want a *ShutdownError holding t1 and wrapping ErrClosed", err)
	}
	if err := receive(t, ran); !errors.As(err, &se) || len(se.Held) != 1 || se.Held[0].TaskID != "t1" {
		t.Fatalf("Run = %v, want the same *ShutdownError", err)
	}
	if task := mustGet(t, s, "t1"); task.State != core.Running {
		t.Fatalf("task %v, want running under its lapsing lease", task.State)
	}
}
