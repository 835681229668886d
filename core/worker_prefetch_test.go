package core_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// slowCalls makes every AckBatch of s take d of real time, so that a
// worker's no-op handlers are quick beside its claiming calls.
func slowCalls(s *batchRecStore, d time.Duration) {
	s.beforeBatch = func(core.AckBatchParams) { time.Sleep(d) }
}

// waitAcked waits until w has acknowledged n tasks, failing the test after
// guard.
func waitAcked(t *testing.T, w *core.Worker, n int64) {
	t.Helper()
	if !withinGuard(func(done <-chan struct{}) bool {
		for w.Stats().Acked < n {
			select {
			case <-done:
				return false
			case <-time.After(time.Millisecond):
			}
		}
		return true
	}) {
		t.Fatalf("acked %d of %d", w.Stats().Acked, n)
	}
}

// untilReleased is a handler's body that returns "finally" once release is
// closed, or the cause of its context's end.
func untilReleased(ctx context.Context, release <-chan struct{}) ([]byte, error) {
	select {
	case <-release:
		return []byte("finally"), nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// runningNow counts the tasks of queue the store holds Running.
func runningNow(t testing.TB, s core.Store) int {
	t.Helper()
	c, err := s.Counts(context.Background(), core.CountsParams{Queue: queue})
	if err != nil {
		t.Errorf("Counts: %v", err)
	}
	return c.Running
}

func TestWorkerPrefetchOverlapsTheCallWithTheNextHandler(t *testing.T) {
	// At concurrency 1 the default prefetch is MinDefaultPrefetch; handlers
	// that take microseconds beside calls of 10 ms finish more than that
	// many tasks during a call, so the worker comes to claim the whole
	// prefetch ahead (its mean of the calls' time grows by at most 3/8 a
	// call from the first, quick Pop's: a dozen calls). The count is read
	// at every fifth task, so the default's may be seen a few short of it.
	for _, c := range []struct {
		name     string
		opts     []core.WorkerOption
		min, max int32
	}{
		{"default", nil, core.MinDefaultPrefetch * 3 / 4, core.MinDefaultPrefetch},
		{"prefetch=1", []core.WorkerOption{core.WithPrefetch(1)}, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) { testPrefetchOverlap(t, c.opts, c.min, c.max) })
	}
}

// testPrefetchOverlap runs 300 quick tasks at concurrency 1 over calls of
// 10 ms with opts, and wants them run once each, one handler at a time,
// with between lo and hi tasks claimed ahead at most.
func testPrefetchOverlap(t *testing.T, opts []core.WorkerOption, lo, hi int32) {
	clk := core.NewFakeClock(t0)
	s := newBatchRecStore(t, clk)
	slowCalls(s, 10*time.Millisecond)
	const n = 300
	for i := range n {
		enqueue(t, s, clk, fmt.Sprintf("t%03d", i))
	}
	var running, most, held atomic.Int32
	var runs [n]atomic.Int32
	w := newWorker(t, s, clk, func(_ context.Context, _ core.Claim, task core.Task) ([]byte, error) {
		if r := running.Add(1); r > most.Load() {
			most.Store(r)
		}
		defer running.Add(-1)
		var i int
		fmt.Sscanf(task.ID, "t%d", &i)
		runs[i].Add(1)
		// The tasks the store holds Running beyond this one are claimed
		// ahead: at concurrency 1 without prefetching there are none.
		// Counted at every fifth task, so that the handlers stay quick
		// beside the calls (under the race detector a count takes the
		// better part of a millisecond); the count stays up for the whole
		// of a call.
		if i%5 == 0 {
			if r := int32(runningNow(t, s.Store)); r-1 > held.Load() {
				held.Store(r - 1)
			}
		}
		return []byte("ok"), nil
	}, opts...) // concurrency 1
	stop := started(t, w)
	waitAcked(t, w, n)
	stop()
	if most.Load() != 1 {
		t.Errorf("%d handlers ran at once at concurrency 1", most.Load())
	}
	if h := held.Load(); h < lo || h > hi {
		t.Errorf("at most %d task(s) claimed ahead while a handler ran; want %d..%d (the prefetch of a concurrency-1 worker whose handlers are quick)", h, lo, hi)
	}
	for i := range n {
		id := fmt.Sprintf("t%03d", i)
		if task := mustGet(t, s, id); task.State != core.Succeeded || task.Attempt != 1 || runs[i].Load() != 1 {
			t.Errorf("%s: %v attempt %d, run %d times; want succeeded once", id, task.State, task.Attempt, runs[i].Load())
		}
	}
	if st := w.Stats(); st.Acked != n || st.Popped != n || st.LeasesLost != 0 || st.Released != 0 || st.StoreErrors != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestPrefetchAheadIsWhatTheSlotsFinishDuringACall(t *testing.T) {
	ms, us := time.Millisecond, time.Microsecond
	for _, c := range []struct {
		handler, trip time.Duration
		c, most, want int
	}{
		{us, 3 * ms, 1, 64, 64},      // far quicker than the call: the whole prefetch
		{ms, 3 * ms, 1, 64, 3},       // three handlers to a call
		{ms, 3 * ms, 8, 64, 24},      // three each, for eight slots
		{ms, 2500 * us, 8, 64, 20},   // 2.5 each, rounded up over the slots
		{ms, ms, 8, 64, 8},           // as quick as the call: one each
		{ms, 1100 * us, 1, 64, 2},    // a little quicker: rounded up
		{2 * ms, ms, 8, 64, 0},       // slower than the call: none
		{us, 10 * us, 8, 64, 0},      // a call too short to overlap: none
		{us, 3 * ms, 64, 1000, 1000}, // capped at the prefetch
		{us, 3 * ms, 1, 0, 0},        // prefetch off
		{0, 3 * ms, 1, 64, 0},        // no handler measured yet
		{10 * time.Second, 1000 * time.Second, math.MaxInt / 2, 1000, 1000}, // no overflow
	} {
		if got := core.PrefetchAhead(c.handler, c.trip, c.c, c.most); got != c.want {
			t.Errorf("ahead(handler %v, call %v, %d slots, prefetch %d) = %d; want %d", c.handler, c.trip, c.c, c.most, got, c.want)
		}
	}
}

func TestWorkerClaimsAheadWhatItsSlotsFinishDuringACall(t *testing.T) {
	// Handlers of 3 ms beside calls of 12 ms: about four run during a
	// call, so the worker holds about four tasks ahead, not its prefetch
	// of 50 (a task claimed ahead waits about as long as a call takes).
	held := claimedBesideHandlers(t, 40, 12*time.Millisecond, 3*time.Millisecond, core.WithPrefetch(50)) // concurrency 1
	// Scheduling delays stretch both sides; anything from one to a dozen
	// is the rule at work, the prefetch is not.
	if held < 1 || held > 12 {
		t.Errorf("at most %d task(s) claimed ahead of a 3 ms handler over 12 ms calls; want about 4 (1..12), not the prefetch of 50", held)
	}
}

// claimedBesideHandlers runs n tasks through a worker with opts over
// AckBatch calls that take call, each handler taking handler, and returns
// the most tasks the store held Running beside a handler's own as it
// started.
func claimedBesideHandlers(t *testing.T, n int, call, handler time.Duration, opts ...core.WorkerOption) int32 {
	t.Helper()
	clk := core.NewFakeClock(t0)
	s := newBatchRecStore(t, clk)
	for i := range n {
		enqueue(t, s, clk, fmt.Sprintf("t%02d", i))
	}
	slowCalls(s, call)
	var held atomic.Int32
	w := newWorker(t, s, clk, func(context.Context, core.Claim, core.Task) ([]byte, error) {
		if r := int32(runningNow(t, s.Store)); r-1 > held.Load() {
			held.Store(r - 1)
		}
		time.Sleep(handler)
		return nil, nil
	}, opts...)
	stop := started(t, w)
	s.wait(t, "AckBatch", 1)
	waitAcked(t, w, int64(n))
	stop()
	return held.Load()
}

func TestWorkerDoesNotPrefetchBehindSlowHandlers(t *testing.T) {
	// Calls long enough to be worth overlapping, handlers ten times as
	// long: claiming ahead would keep a task waiting behind a handler.
	held := claimedBesideHandlers(t, 8, time.Millisecond, 10*time.Millisecond, core.WithConcurrency(2), core.WithPrefetch(2))
	// Two handlers at once: the other one's task is Running too, but
	// none beyond them.
	if held > 1 {
		t.Errorf("%d tasks Running beside a handler at concurrency 2; want at most 1 (no claims ahead behind slow handlers)", held)
	}
}

// quick is the number of tasks quickTasks enqueues.
const quick = 6

// quickTasks returns a fake clock and a store whose calls take call, with
// quick tasks q0, q1, … enqueued: the first handlers a prefetch test runs
// no-op on them to open the gate.
func quickTasks(t *testing.T, call time.Duration) (*core.FakeClock, *batchRecStore) {
	t.Helper()
	clk := core.NewFakeClock(t0)
	s := newBatchRecStore(t, clk)
	slowCalls(s, call)
	for i := range quick {
		enqueue(t, s, clk, fmt.Sprintf("q%d", i))
	}
	return clk, s
}

func TestWorkerKeepsThePrefetchedTasksLeaseAliveAndRunsItAtShutdown(t *testing.T) {
	clk, s := quickTasks(t, 5*time.Millisecond)
	enqueue(t, s, clk, "long")
	enqueue(t, s, clk, "next")
	begun, release := make(chan struct{}), make(chan struct{})
	var ran atomic.Int32
	w := newWorker(t, s, clk, func(ctx context.Context, _ core.Claim, task core.Task) ([]byte, error) {
		ran.Add(1)
		if task.ID != "long" {
			return nil, nil
		}
		close(begun)
		return untilReleased(ctx, release)
	})
	b := newBroker(t, s, clk)
	stop := started(t, w)
	receive(t, begun)
	// The quick handlers opened the gate: "next" is claimed ahead, with
	// an ack of a quick task, and waits.
	if !withinGuard(func(done <-chan struct{}) bool {
		for mustGet(t, s, "next").State != core.Running || runningNow(t, s.Store) != 2 {
			select {
			case <-done:
				return false
			case <-time.After(time.Millisecond):
			}
		}
		return true
	}) {
		t.Fatalf("next = %v with %d tasks Running while the long handler runs; want next Running beside it (claimed ahead)",
			mustGet(t, s, "next").State, runningNow(t, s.Store))
	}
	// extends counts the heartbeats of a task that renewed its lease.
	extends := func(id string) int {
		n := 0
		for _, e := range s.snapshot() {
			if e.Op == "Extend" && e.TaskID == id && e.Err == nil {
				n++
			}
		}
		return n
	}
	// Ten heartbeats, more than three leases: both claims are renewed, and
	// the broker never finds one expired. (The runner of "next" may list it
	// for heartbeats a beat after the store shows it claimed.)
	for i := 1; i <= 10; i++ {
		blockUntil(t, clk, 1)
		clk.Advance(heartbeat)
		if !withinGuard(func(done <-chan struct{}) bool {
			for extends("long") < i || extends("next") < i-1 {
				select {
				case <-done:
					return false
				case <-time.After(time.Millisecond):
				}
			}
			return true
		}) {
			t.Fatalf("heartbeat %d: long renewed %d times, next %d: %v", i, extends("long"), extends("next"), s.snapshot())
		}
		if p, err := b.RunOnce(context.Background()); err != nil || p.Claimed != 0 {
			t.Fatalf("broker pass after %d heartbeats: %+v, %v; want nothing claimed", i, p, err)
		}
	}
	if ran.Load() != quick+1 {
		t.Fatalf("%d handlers ran, want %d: the task claimed ahead started while the long one ran", ran.Load(), quick+1)
	}
	// A graceful shutdown runs the task claimed ahead once the long
	// handler returns; nothing is given back.
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	close(release)
	receive(t, done)
	for _, id := range []string{"long", "next"} {
		if task := mustGet(t, s, id); task.State != core.Succeeded || task.Attempt != 1 || len(task.Errors) != 0 {
			t.Errorf("%s = %v attempt %d errors %v, want succeeded on its first attempt", id, task.State, task.Attempt, task.Errors)
		}
	}
	if st := w.Stats(); st.Acked != quick+2 || st.LeasesLost != 0 || st.Released != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestWithPrefetchRefusesOutOfRange(t *testing.T) {
	s := newStore(t, core.SystemClock{})
	h := func(context.Context, core.Claim, core.Task) ([]byte, error) { return nil, nil }
	for _, n := range []int{-1, core.MaxBatch + 1} {
		if _, err := core.NewWorker(s, queue, h, core.WithPrefetch(n)); err == nil {
			t.Errorf("WithPrefetch(%d) accepted", n)
		}
	}
	for _, n := range []int{0, 1, core.MaxBatch} {
		if _, err := core.NewWorker(s, queue, h, core.WithPrefetch(n)); err != nil {
			t.Errorf("WithPrefetch(%d): %v", n, err)
		}
	}
}

func TestWorkerPopsARetriedTaskAtOnceWhilePrefetching(t *testing.T) {
	clk, s := quickTasks(t, 2*time.Millisecond)
	enqueue(t, s, clk, "flaky")
	var attempts atomic.Int32
	w := newWorker(t, s, clk, func(_ context.Context, c core.Claim, task core.Task) ([]byte, error) {
		if task.ID == "flaky" && attempts.Add(1) == 1 {
			return nil, errors.New("try again")
		}
		return nil, nil
	}, core.WithRetryPolicy(func(core.Task, error) (time.Duration, bool) { return 0, true }))
	stop := started(t, w)
	// The clock never moves: the retried task must be claimed when its
	// retry frees its slot, not when a poll timer fires. (A fetch loop
	// that claimed ahead would be asleep on its poll timer by then.)
	waitAcked(t, w, quick+1)
	stop()
	if attempts.Load() != 2 {
		t.Fatalf("flaky ran %d times, want 2", attempts.Load())
	}
}
