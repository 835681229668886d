package core_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

const (
	lease     = 30 * time.Second
	heartbeat = 10 * time.Second
)

// newWorker returns a worker on queue with one slot, a 30s lease renewed
// every 10s, and a constant 1s poll, judged by clk.
func newWorker(t *testing.T, s core.Store, clk core.Clock, h core.Handler, opts ...core.WorkerOption) *core.Worker {
	t.Helper()
	base := []core.WorkerOption{
		core.WithClock(clk), core.WithConcurrency(1), core.WithLease(lease),
		core.WithHeartbeat(heartbeat), core.WithPollInterval(time.Second, time.Second),
	}
	w, err := core.NewWorker(s, queue, h, append(base, opts...)...)
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	return w
}

// newBroker returns a broker of queue judged by clk.
func newBroker(t *testing.T, s core.Store, clk core.Clock, opts ...core.BrokerOption) *core.Broker {
	t.Helper()
	b, err := core.NewBroker(s, append([]core.BrokerOption{core.WithClock(clk), core.WithQueues(queue)}, opts...)...)
	if err != nil {
		t.Fatalf("NewBroker: %v", err)
	}
	return b
}

// lapse lets the lease of the one running task lapse while the worker's
// heartbeats fail: three beats of 10s, each answered by errNetwork.
func lapse(t *testing.T, s *recStore, clk *core.FakeClock) {
	t.Helper()
	s.failExtend.Store(true)
	for i := 1; i <= 3; i++ {
		blockUntil(t, clk, 1)
		clk.Advance(heartbeat)
		if e := s.wait(t, "Extend", i); !errors.Is(e.Err, errNetwork) {
			t.Fatalf("heartbeat %d: %v, want the network error", i, e.Err)
		}
	}
}

func TestWorkerAcksASuccessfulHandlerWithItsResult(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	enqueue(t, s, clk, "a")
	var got core.Claim
	w := newWorker(t, s, clk, func(_ context.Context, c core.Claim, task core.Task) ([]byte, error) {
		got = c
		return append([]byte("done: "), task.Payload...), nil
	})
	stop := started(t, w)
	s.wait(t, "Ack", 1)
	stop()

	task := mustGet(t, s, "a")
	if task.State != core.Succeeded || string(task.Result) != "done: payload of a" || task.Attempt != 1 {
		t.Fatalf("task = %v %q attempt %d, want succeeded with the handler's result", task.State, task.Result, task.Attempt)
	}
	if got.TaskID != "a" || got.Token != task.ClaimToken || got.Token == 0 || got.Queue != queue {
		t.Fatalf("handler got claim %+v, task token %d", got, task.ClaimToken)
	}
	if st := w.Stats(); st.Popped != 1 || st.Acked != 1 || st.Failed+st.Retried+st.LeasesLost != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestWorkerHeartbeatsKeepALongHandlersLeaseAlive(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	enqueue(t, s, clk, "long")
	begun, release := make(chan struct{}), make(chan struct{})
	w := newWorker(t, s, clk, func(ctx context.Context, _ core.Claim, _ core.Task) ([]byte, error) {
		close(begun)
		return untilReleased(ctx, release)
	})
	b := newBroker(t, s, clk)
	stop := started(t, w)
	receive(t, begun)

	// Ten heartbeats: 100s, more than three leases. The broker passes after
	// each and never finds the task expired.
	for i := 1; i <= 10; i++ {
		blockUntil(t, clk, 1)
		clk.Advance(heartbeat)
		if e := s.wait(t, "Extend", i); e.Err != nil {
			t.Fatalf("heartbeat %d: %v", i, e.Err)
		}
		if p, err := b.RunOnce(context.Background()); err != nil || p.Claimed != 0 {
			t.Fatalf("broker pass after %d heartbeats: %+v, %v; want nothing claimed", i, p, err)
		}
	}
	close(release)
	if e := s.wait(t, "Ack", 1); e.Err != nil {
		t.Fatalf("ack: %v", e.Err)
	}
	stop()

	task := mustGet(t, s, "long")
	if task.State != core.Succeeded || task.Attempt != 1 || len(task.Errors) != 0 {
		t.Fatalf("task = %v attempt %d errors %v, want succeeded on the first attempt", task.State, task.Attempt, task.Errors)
	}
	if st := w.Stats(); st.Extended != 10 || st.Acked != 1 || st.LeasesLost != 0 {
		t.Fatalf("stats = %+v, want 10 heartbeats and 1 ack", st)
	}
}

// The first race of the Redis seed, end to end: a worker stalls past its
// lease, the broker claims the task, the worker's late ack wins, and the
// broker's requeue is dropped.
func TestWorkerLateAckWinsAndTheBrokersDecisionIsDropped(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	enqueue(t, s, clk, "slow")
	begun, release := make(chan struct{}), make(chan struct{})
	w := newWorker(t, s, clk, func(ctx context.Context, _ core.Claim, _ core.Task) ([]byte, error) {
		close(begun)
		select {
		case <-release:
			return []byte("late result"), nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	})
	stop := started(t, w)
	receive(t, begun)
	lapse(t, s, clk)

	// The broker claims the expired task; while its retry policy runs, the
	// worker finishes and acks.
	policyRan := false
	b := newBroker(t, s, clk, core.WithRetryPolicy(func(task core.Task, err error) (time.Duration, bool) {
		policyRan = true
		if !errors.Is(err, core.ErrLeaseExpired) || task.LeaseLosses() != 1 {
			t.Errorf("policy got %v with %d lease losses", err, task.LeaseLosses())
		}
		close(release)
		if e := s.wait(t, "Ack", 1); e.Err != nil {
			t.Errorf("late ack: %v", e.Err)
		}
		return 0, true
	}))
	p, err := b.RunOnce(context.Background())
	if err != nil || !policyRan {
		t.Fatalf("RunOnce: %v (policy ran: %v)", err, policyRan)
	}
	if p.Claimed != 1 || p.Dropped != 1 || p.Requeued != 0 {
		t.Fatalf("pass = %+v, want the claim's requeue dropped", p)
	}
	if e := s.wait(t, "Requeue", 1); !errors.Is(e.Err, core.ErrStaleClaim) {
		t.Fatalf("requeue: %v, want ErrStaleClaim", e.Err)
	}
	stop()

	task := mustGet(t, s, "slow")
	if task.State != core.Succeeded || string(task.Result) != "late result" || len(task.Errors) != 0 {
		t.Fatalf("task = %v %q errors %v, want succeeded with the late result and no error", task.State, task.Result, task.Errors)
	}
	if st := b.Stats(); st.StaleDropped != 1 || st.Requeued != 0 {
		t.Fatalf("broker stats = %+v", st)
	}
	if st := w.Stats(); st.Acked != 1 || st.LeasesLost != 0 || st.StoreErrors != 3 {
		t.Fatalf("worker stats = %+v, want 1 ack and 3 failed heartbeats", st)
	}
}

func TestWorkerWhoseClaimWasSupersededSeesItsContextCancelledWithTheCause(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	enqueue(t, s, clk, "t")
	begun := make(chan struct{})
	causes := make(chan error, 1)
	w := newWorker(t, s, clk, func(ctx context.Context, c core.Claim, _ core.Task) ([]byte, error) {
		if c.Attempt > 1 {
			return []byte("second attempt"), nil
		}
		close(begun)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return []byte("must not be recorded"), nil
	})
	stop := started(t, w)
	receive(t, begun)
	lapse(t, s, clk)

	// The broker requeues the expired task: the first claim is superseded.
	b := newBroker(t, s, clk, core.WithRetryPolicy(core.FixedDelay(0)))
	if p, err := b.RunOnce(context.Background()); err != nil || p.Requeued != 1 {
		t.Fatalf("RunOnce = %+v, %v; want the task requeued", p, err)
	}
	// The network heals; the next heartbeat learns the claim is gone.
	s.failExtend.Store(false)
	blockUntil(t, clk, 1)
	clk.Advance(heartbeat)
	cause := receive(t, causes)
	if !errors.Is(cause, core.ErrClaimSuperseded) || !errors.Is(cause, core.ErrStaleClaim) {
		t.Fatalf("cause = %v, want ErrClaimSuperseded wrapping ErrStaleClaim", cause)
	}

	// The slot is free again: the worker pops the task anew and succeeds.
	if e := s.wait(t, "Ack", 1); e.Err != nil {
		t.Fatalf("ack: %v", e.Err)
	}
	stop()
	task := mustGet(t, s, "t")
	if task.State != core.Succeeded || string(task.Result) != "second attempt" || task.Attempt != 2 {
		t.Fatalf("task = %v %q attempt %d, want the second attempt's success", task.State, task.Result, task.Attempt)
	}
	if task.LeaseLosses() != 1 || task.HandlerFailures() != 0 {
		t.Fatalf("errors = %v, want one lease loss", task.Errors)
	}
	if n := s.count("Retry") + s.count("Fail"); n != 0 {
		t.Fatalf("%d Retry/Fail calls, want none: a superseded attempt records nothing", n)
	}
	if st := w.Stats(); st.LeasesLost != 1 || st.StaleDecisions != 0 || st.Acked != 1 || st.Popped != 2 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestWorkerIsToldWhenAnOperatorRemovesItsTask(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	enqueue(t, s, clk, "doomed")
	begun := make(chan struct{})
	causes := make(chan error, 1)
	w := newWorker(t, s, clk, func(ctx context.Context, _ core.Claim, _ core.Task) ([]byte, error) {
		close(begun)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	started(t, w)
	receive(t, begun)
	ins, err := core.NewInspector(s, queue)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ins.Remove(context.Background(), "doomed", core.AnyVersion); err != nil {
		t.Fatal(err)
	}
	blockUntil(t, clk, 1)
	clk.Advance(heartbeat)
	if cause := receive(t, causes); !errors.Is(cause, core.ErrClaimSuperseded) {
		t.Fatalf("cause = %v, want ErrClaimSuperseded", cause)
	}
}

func TestWorkerTurnsAHandlerPanicIntoAFailedAttempt(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	enqueue(t, s, clk, "p")
	var policyErr error
	w := newWorker(t, s, clk, func(_ context.Context, c core.Claim, _ core.Task) ([]byte, error) {
		if c.Attempt == 1 {
			panic("boom")
		}
		return []byte("ok"), nil
	}, core.WithRetryPolicy(func(task core.Task, err error) (time.Duration, bool) {
		policyErr = err
		return 0, true
	}))
	stop := started(t, w)
	if e := s.wait(t, "Ack", 1); e.Err != nil {
		t.Fatalf("ack: %v", e.Err)
	}
	stop()

	var pe *core.PanicError
	if !errors.As(policyErr, &pe) || pe.Value != "boom" || !strings.Contains(string(pe.Stack), "worker_test.go") {
		t.Fatalf("policy saw %v, want a *PanicError with the value and the stack", policyErr)
	}
	task := mustGet(t, s, "p")
	if task.State != core.Succeeded || task.Attempt != 2 || len(task.Errors) != 1 || task.Errors[0].Message != "panic: boom" {
		t.Fatalf("task = %v attempt %d errors %v, want a failed first attempt with the panic message", task.State, task.Attempt, task.Errors)
	}
	if task.HandlerFailures() != 1 || task.LeaseLosses() != 0 {
		t.Fatalf("errors = %v, want one handler failure", task.Errors)
	}
	if st := w.Stats(); st.Panics != 1 || st.Retried != 1 || st.Acked != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestWorkerTurnsAHandlerGoexitIntoAFailedAttempt(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	enqueue(t, s, clk, "g", core.WithMaxAttempts(1))
	w := newWorker(t, s, clk, func(context.Context, core.Claim, core.Task) ([]byte, error) {
		runtime.Goexit()
		return nil, nil
	})
	stop := started(t, w)
	if e := s.wait(t, "Fail", 1); e.Err != nil {
		t.Fatalf("fail: %v", e.Err)
	}
	stop()
	task := mustGet(t, s, "g")
	if task.State != core.Failed || len(task.Errors) != 1 || !strings.Contains(task.Errors[0].Message, "Goexit") {
		t.Fatalf("task = %v errors %v, want failed with a Goexit message", task.State, task.Errors)
	}
}

func TestWorkerFailsAPermanentErrorWithoutRetrying(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	enqueue(t, s, clk, "bad")
	policyRan := atomic.Bool{}
	w := newWorker(t, s, clk, func(context.Context, core.Claim, core.Task) ([]byte, error) {
		return nil, core.Permanent(errors.New("malformed payload"))
	}, core.WithRetryPolicy(func(core.Task, error) (time.Duration, bool) {
		policyRan.Store(true)
		return 0, true
	}))
	stop := started(t, w)
	if e := s.wait(t, "Fail", 1); e.Err != nil {
		t.Fatalf("fail: %v", e.Err)
	}
	stop()
	task := mustGet(t, s, "bad")
	if task.State != core.Failed || task.Attempt != 1 || task.Errors[0].Message != "malformed payload" || policyRan.Load() {
		t.Fatalf("task = %v attempt %d errors %v (policy ran: %v), want failed at once", task.State, task.Attempt, task.Errors, policyRan.Load())
	}
	if st := w.Stats(); st.Failed != 1 || st.Retried != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestWorkerRetriesWithBackoffUntilTheTaskRunsOutOfAttempts(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	enqueue(t, s, clk, "flaky", core.WithMaxAttempts(3))
	w := newWorker(t, s, clk, func(_ context.Context, c core.Claim, _ core.Task) ([]byte, error) {
		return nil, fmt.Errorf("attempt %d failed", c.Attempt)
	}, core.WithRetryPolicy(core.Backoff{Min: time.Second, Max: time.Minute, Jitter: -1}.Policy()))
	b := newBroker(t, s, clk)
	stop := started(t, w)

	for attempt := 1; attempt <= 2; attempt++ {
		if e := s.wait(t, "Retry", attempt); e.Err != nil {
			t.Fatalf("retry %d: %v", attempt, e.Err)
		}
		// The worker polls the queue, finds it empty and parks on its 1s
		// poll timer; the clock has not moved since the retry.
		blockUntil(t, clk, 1)
		task := mustGet(t, s, "flaky")
		want := time.Second << (attempt - 1)
		last := task.Errors[len(task.Errors)-1]
		if task.State != core.Scheduled || task.RunAfter.Sub(last.At) != want || last.Message != fmt.Sprintf("attempt %d failed", attempt) {
			t.Fatalf("after attempt %d: %v, run after %v, last error %+v; want scheduled %v later", attempt, task.State, task.RunAfter, last, want)
		}
		// Let the backoff elapse, one empty poll a second (or more: see
		// advanceToPoll).
		for elapsed := time.Duration(0); elapsed < want; elapsed += time.Second {
			if e := advanceToPoll(t, s, clk); len(e.IDs) != 0 {
				t.Fatalf("popped %v before the mover made the task ready", e.IDs)
			}
		}
		if p, err := b.RunOnce(context.Background()); err != nil || p.Promoted != 1 {
			t.Fatalf("RunOnce = %+v, %v; want the task promoted", p, err)
		}
		if e := advanceToPoll(t, s, clk); len(e.IDs) != 1 { // the next poll claims it
			t.Fatalf("the poll after the promotion claimed %v, want the task", e.IDs)
		}
	}
	if e := s.wait(t, "Fail", 1); e.Err != nil {
		t.Fatalf("fail: %v", e.Err)
	}
	stop()
	task := mustGet(t, s, "flaky")
	if task.State != core.Failed || task.Attempt != 3 || task.HandlerFailures() != 3 || task.LeaseLosses() != 0 {
		t.Fatalf("task = %v attempt %d errors %v, want failed after 3 handler failures", task.State, task.Attempt, task.Errors)
	}
	if st := w.Stats(); st.Retried != 2 || st.Failed != 1 || st.Popped != 3 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestWorkerShutdownPastItsDeadlineNamesHeldTasksAndNeverAcksThem(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	enqueue(t, s, clk, "unfinished")
	begun := make(chan struct{})
	causes := make(chan error, 1)
	w := newWorker(t, s, clk, func(ctx context.Context, _ core.Claim, _ core.Task) ([]byte, error) {
		close(begun)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return []byte("pretends to be done"), nil
	})
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()
	receive(t, begun)

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace: no time left to give anything back
	err := w.Shutdown(ctx)
	var se *core.ShutdownError
	if !errors.As(err, &se) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want a *ShutdownError wrapping context.Canceled", err)
	}
	if len(se.Held) != 1 || se.Held[0].TaskID != "unfinished" || !strings.Contains(err.Error(), "unfinished") {
		t.Fatalf("Shutdown named %+v (%v), want the task unfinished", se.Held, err)
	}
	// Run names the same claim: it stopped without settling it.
	if err := receive(t, ran); !errors.As(err, &se) || !errors.Is(err, context.Canceled) || len(se.Held) != 1 || se.Held[0].TaskID != "unfinished" {
		t.Fatalf("Run = %v, want a *ShutdownError naming the task unfinished", err)
	}
	if cause := receive(t, causes); !errors.Is(cause, core.ErrWorkerStopped) {
		t.Fatalf("cause = %v, want ErrWorkerStopped", cause)
	}
	if s.count("Ack") != 0 {
		t.Fatal("unfinished work was acked")
	}
	if task := mustGet(t, s, "unfinished"); task.State != core.Running {
		t.Fatalf("task = %v, want still running under the lapsing lease", task.State)
	}
	// Its lease lapses and a broker decides it: it runs again.
	clk.Advance(lease + time.Second)
	b, err := core.NewBroker(s, core.WithQueues(queue), core.WithClock(clk), core.WithRetryPolicy(core.FixedDelay(0)))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := b.RunOnce(context.Background()); err != nil || p.Requeued != 1 {
		t.Fatalf("RunOnce = %+v, %v; want the held task requeued", p, err)
	}
	res, err := s.Pop(context.Background(), core.PopParams{Queue: queue, Lease: lease, N: 1})
	if err != nil || len(res.Tasks) != 1 || res.Tasks[0].ID != "unfinished" || res.Tasks[0].Attempt != 2 {
		t.Fatalf("Pop = %+v, %v; want the task's second attempt", res.Tasks, err)
	}
	if st := w.Stats(); st.Released != 0 || st.Acked != 0 {
		t.Fatalf("stats = %+v", st)
	}
	if err := w.Run(context.Background()); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Run after Shutdown = %v, want ErrClosed", err)
	}
}

func TestWorkerShutdownStopsPoppingAndWaitsForRunningHandlers(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	enqueue(t, s, clk, "first", core.WithPriority(1))
	enqueue(t, s, clk, "second")
	begun, release := make(chan struct{}), make(chan struct{})
	w := newWorker(t, s, clk, func(ctx context.Context, _ core.Claim, _ core.Task) ([]byte, error) {
		close(begun)
		select {
		case <-release:
			return []byte("finished in time"), nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}, core.WithShutdownTimeout(5*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	receive(t, begun)

	cancel()
	// The heartbeat timer and the shutdown timer: the worker has stopped
	// popping and waits for the handler.
	blockUntil(t, clk, 2)
	close(release)
	if err := receive(t, ran); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if task := mustGet(t, s, "first"); task.State != core.Succeeded {
		t.Fatalf("first = %v, want succeeded: it finished within the grace period", task.State)
	}
	if task := mustGet(t, s, "second"); task.State != core.Ready || task.Attempt != 0 {
		t.Fatalf("second = %v attempt %d, want never popped", task.State, task.Attempt)
	}
	if clk.Timers() != 0 {
		t.Fatalf("%d timers left behind", clk.Timers())
	}
}

func TestWorkerRunGivesUnfinishedTasksBackAfterTheShutdownTimeout(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	enqueue(t, s, clk, "stuck")
	begun := make(chan struct{})
	w := newWorker(t, s, clk, func(ctx context.Context, _ core.Claim, _ core.Task) ([]byte, error) {
		close(begun)
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}, core.WithShutdownTimeout(5*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	receive(t, begun)
	cancel()
	blockUntil(t, clk, 2)
	clk.Advance(5 * time.Second)
	if err := receive(t, ran); err != nil {
		t.Fatalf("Run = %v", err)
	}
	task := mustGet(t, s, "stuck")
	if task.State != core.Ready || task.Errors[0].Message != core.ErrWorkerStopped.Error() {
		t.Fatalf("task = %v errors %v, want given back", task.State, task.Errors)
	}
}

func TestWorkerPopsInBatchesOfItsFreeSlots(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	for i := range 6 {
		enqueue(t, s, clk, fmt.Sprintf("t%d", i))
	}
	begun := make(chan string, 6)
	release := make(chan struct{})
	w := newWorker(t, s, clk, func(_ context.Context, c core.Claim, _ core.Task) ([]byte, error) {
		begun <- c.TaskID
		<-release
		return nil, nil
	}, core.WithConcurrency(4))
	stop := started(t, w)
	var ids []string
	for range 4 {
		ids = append(ids, receive(t, begun))
	}
	first := s.wait(t, "Pop", 1)
	if first.N != 4 || !slices.Equal(first.IDs, []string{"t0", "t1", "t2", "t3"}) {
		t.Fatalf("first pop asked %d and got %v, want one batch of 4 in order", first.N, first.IDs)
	}
	close(release)
	s.wait(t, "Ack", 6)
	stop()
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"t0", "t1", "t2", "t3"}) {
		t.Fatalf("first handlers ran %v", ids)
	}
	if st := w.Stats(); st.Popped != 6 || st.Acked != 6 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestWorkerPollsAnEmptyQueueWithBackoff(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	w := newWorker(t, s, clk, func(context.Context, core.Claim, core.Task) ([]byte, error) {
		return nil, nil
	}, core.WithPollInterval(time.Second, 4*time.Second))
	started(t, w)

	// Polls at 0s, then after waits of 1s, 2s, 4s, 4s.
	s.wait(t, "Pop", 1)
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		blockUntil(t, clk, 1)
		clk.Advance(wait - time.Millisecond)
		if n := s.count("Pop"); n != i+1 {
			t.Fatalf("%d polls before the wait of %v elapsed, want %d", n, wait, i+1)
		}
		clk.Advance(time.Millisecond)
		s.wait(t, "Pop", i+2)
	}
	// Work resets the wait to the minimum.
	enqueue(t, s, clk, "w")
	blockUntil(t, clk, 1)
	clk.Advance(4 * time.Second)
	s.wait(t, "Ack", 1)
	e := s.wait(t, "Pop", 7) // the poll right after the work, found empty
	if len(e.IDs) != 0 {
		t.Fatalf("poll after work got %v", e.IDs)
	}
	// The heartbeat loop's timer for "w" may still be armed: wait for the
	// poll's own, one second out.
	blockUntilTimerAt(t, clk, clk.Now().Add(time.Second))
	clk.Advance(time.Second)
	s.wait(t, "Pop", 8)
}

func TestWorkerRunsOnceAndRejectsBadOptions(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newStore(t, clk)
	h := func(context.Context, core.Claim, core.Task) ([]byte, error) { return nil, nil }
	for name, opts := range map[string][]core.WorkerOption{
		"heartbeat not shorter than the lease": {core.WithLease(time.Second), core.WithHeartbeat(time.Second)},
		"zero concurrency":                     {core.WithConcurrency(0)},
		"negative lease":                       {core.WithLease(-1)},
		"inverted poll interval":               {core.WithPollInterval(2*time.Second, time.Second)},
		"nil clock":                            {core.WithClock(nil)},
		"batch beyond MaxBatch":                {core.WithBatchSize(core.MaxBatch + 1)},
		"nil policy":                           {core.WithRetryPolicy(nil)},
	} {
		if _, err := core.NewWorker(s, queue, h, opts...); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := core.NewWorker(s, "bad name!", h); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("bad queue name: err = %v", err)
	}

	w, err := core.NewWorker(s, queue, h, core.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown before Run = %v", err)
	}
	if err := w.Run(context.Background()); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Run after Shutdown = %v, want ErrClosed", err)
	}

	w2, err := core.NewWorker(s, queue, h, core.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	stop := started(t, w2)
	blockUntil(t, clk, 1) // parked on its poll timer: running
	if err := w2.Run(context.Background()); !errors.Is(err, core.ErrRunning) || errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("second Run = %v, want ErrRunning", err)
	}
	stop()
}

func TestWorkerRunStopsWhenTheStoreIsClosed(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newStore(t, clk)
	w := newWorker(t, s, clk, func(context.Context, core.Claim, core.Task) ([]byte, error) { return nil, nil })
	_ = s.Close()
	if err := w.Run(context.Background()); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	if st := w.Stats(); st.StoreErrors != 1 {
		t.Fatalf("stats = %+v", st)
	}
}
