package core_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// An attempt timeout cancels the handler's context with a cause wrapping
// ErrAttemptTimeout, the context carries the deadline, and the attempt is a
// failed one even though the handler returns success after it.
func TestAttemptTimeoutCancelsTheHandlerAndFailsTheAttempt(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	enqueue(t, s, clk, "slow", core.WithMaxAttempts(1))
	const timeout = 5 * time.Second
	type seen struct {
		deadline time.Time
		has      bool
		cause    error
	}
	got := make(chan seen, 1)
	w := newWorker(t, s, clk, func(ctx context.Context, _ core.Claim, _ core.Task) ([]byte, error) {
		dl, ok := ctx.Deadline()
		<-ctx.Done()
		got <- seen{dl, ok, context.Cause(ctx)}
		return []byte("finished anyway"), nil
	}, core.WithTimeout(timeout))
	started(t, w)
	blockUntil(t, clk, 2) // the heartbeat and the attempt's deadline
	start := clk.Now()
	clk.Advance(timeout)
	sn := receive(t, got)
	if !errors.Is(sn.cause, core.ErrAttemptTimeout) {
		t.Fatalf("cause = %v, want ErrAttemptTimeout", sn.cause)
	}
	if !sn.has || !sn.deadline.Equal(start.Add(timeout)) {
		t.Fatalf("ctx.Deadline() = %v, %v; want %v", sn.deadline, sn.has, start.Add(timeout))
	}
	waitFor(t, "the task fails", func() bool { return mustGet(t, s, "slow").State == core.Failed })
	task := mustGet(t, s, "slow")
	if len(task.Errors) != 1 || !strings.Contains(task.Errors[0].Message, "timed out") || task.Result != nil {
		t.Fatalf("task errors %+v result %q, want one timeout and no result", task.Errors, task.Result)
	}
	// The worker counts a decision after the store recorded it.
	waitFor(t, "the failure is counted", func() bool { return w.Stats().Failed == 1 })
	if st := w.Stats(); st.TimedOut != 1 || st.Acked != 0 || st.Failed != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

// A timeout longer than the lease keeps the lease by heartbeat: no broker
// finds the task expired before the timeout, and then the retry policy
// retries it.
func TestAttemptTimeoutLongerThanTheLeaseKeepsHeartbeating(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	enqueue(t, s, clk, "long", core.WithMaxAttempts(2))
	timeout := 3 * lease
	causes := make(chan error, 1)
	w := newWorker(t, s, clk, func(ctx context.Context, _ core.Claim, _ core.Task) ([]byte, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, context.Cause(ctx)
	}, core.WithTimeout(timeout), core.WithRetryPolicy(core.FixedDelay(time.Hour)))
	started(t, w)
	b := newBroker(t, s, clk)
	for elapsed := time.Duration(0); elapsed+heartbeat < timeout; elapsed += heartbeat {
		blockUntil(t, clk, 2)
		n := s.count("Extend")
		clk.Advance(heartbeat)
		waitFor(t, "a heartbeat", func() bool { return s.count("Extend") > n })
		if p, err := b.RunOnce(context.Background()); err != nil || p.Claimed != 0 {
			t.Fatalf("after %v: broker pass %+v, %v; the lease must hold", elapsed+heartbeat, p, err)
		}
	}
	if task := mustGet(t, s, "long"); task.State != core.Running || task.Attempt != 1 {
		t.Fatalf("before the timeout: %v attempt %d", task.State, task.Attempt)
	}
	blockUntil(t, clk, 2)
	clk.Advance(heartbeat)
	if cause := receive(t, causes); !errors.Is(cause, core.ErrAttemptTimeout) {
		t.Fatalf("cause = %v", cause)
	}
	waitFor(t, "the task is retried", func() bool { return mustGet(t, s, "long").State == core.Scheduled })
	if task := mustGet(t, s, "long"); len(task.Errors) != 1 || !strings.Contains(task.Errors[0].Message, "timed out") || task.Errors[0].LeaseExpired {
		t.Fatalf("errors = %+v, want one handler failure by timeout", task.Errors)
	}
	waitFor(t, "the retry is counted", func() bool { return w.Stats().Retried == 1 })
	if st := w.Stats(); st.Extended < int64(timeout/heartbeat)-1 || st.Retried != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

// A timeout stored with the task wins over the Worker's, shorter or longer:
// the handler's context has the task's deadline and its cause names the
// task's timeout, and the attempt fails by it for the retry policy.
func TestATasksOwnTimeoutWinsOverTheWorkers(t *testing.T) {
	const workerTimeout = 10 * time.Second
	for _, own := range []time.Duration{4 * time.Second, 3 * lease} {
		t.Run(own.String(), func(t *testing.T) {
			clk := core.NewFakeClock(t0)
			s := newRecStore(t, clk)
			task := enqueue(t, s, clk, "own", core.WithMaxAttempts(1), core.WithAttemptTimeout(own))
			if task.Timeout != own || mustGet(t, s, "own").Timeout != own {
				t.Fatalf("enqueued with timeout %v, stored %v", own, task.Timeout)
			}
			type seen struct {
				deadline time.Time
				timeout  time.Duration
				cause    error
			}
			got := make(chan seen, 1)
			w := newWorker(t, s, clk, func(ctx context.Context, _ core.Claim, task core.Task) ([]byte, error) {
				dl, _ := ctx.Deadline()
				<-ctx.Done()
				got <- seen{dl, task.Timeout, context.Cause(ctx)}
				return []byte("late"), nil
			}, core.WithTimeout(workerTimeout))
			started(t, w)
			blockUntil(t, clk, 2)
			start := clk.Now()
			// Past the worker's timeout (when it is the shorter) the handler
			// still runs; heartbeats keep the lease until the task's own.
			for clk.Now().Add(heartbeat).Before(start.Add(own)) {
				n := s.count("Extend")
				clk.Advance(heartbeat)
				waitFor(t, "a heartbeat", func() bool { return s.count("Extend") > n })
				blockUntil(t, clk, 2)
			}
			select {
			case sn := <-got:
				t.Fatalf("the handler's context ended at %v after the start, before the task's timeout %v: %v", clk.Now().Sub(start), own, sn.cause)
			default:
			}
			clk.Advance(start.Add(own).Sub(clk.Now()))
			sn := receive(t, got)
			if !errors.Is(sn.cause, core.ErrAttemptTimeout) || !strings.Contains(sn.cause.Error(), own.String()) {
				t.Fatalf("cause = %v, want ErrAttemptTimeout after %v", sn.cause, own)
			}
			if !sn.deadline.Equal(start.Add(own)) || sn.timeout != own {
				t.Fatalf("ctx.Deadline() = %v, task timeout %v; want %v, %v", sn.deadline, sn.timeout, start.Add(own), own)
			}
			waitFor(t, "the task fails", func() bool { return mustGet(t, s, "own").State == core.Failed })
			waitFor(t, "the failure is counted", func() bool { return w.Stats().Failed == 1 })
			if st := w.Stats(); st.TimedOut != 1 || st.Failed != 1 || st.Acked != 0 {
				t.Fatalf("stats = %+v", st)
			}
		})
	}
}

// An attempt timeout out of 0..MaxDuration is refused and enqueues nothing.
func TestEnqueueRefusesAnAttemptTimeoutOutOfRange(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newStore(t, clk)
	q, err := core.NewQueue(s, queue, core.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{-time.Nanosecond, core.MaxDuration + 1} {
		if _, err := q.Enqueue(context.Background(), nil, core.WithID("x"), core.WithAttemptTimeout(d)); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("WithAttemptTimeout(%v): %v, want ErrInvalidArgument", d, err)
		}
	}
	if _, err := q.Get(context.Background(), "x"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("after refused enqueues, Get = %v, want ErrNotFound", err)
	}
	for _, d := range []time.Duration{0, core.MaxDuration} {
		id := "ok-" + d.String()
		if task, err := q.Enqueue(context.Background(), nil, core.WithID(id), core.WithAttemptTimeout(d)); err != nil || task.Timeout != d {
			t.Errorf("WithAttemptTimeout(%v) = %v, %v", d, task.Timeout, err)
		}
	}
}

// Run, once its context is done and the shutdown timeout passed, gives back
// the task of a handler that ignores its context and returns without waiting
// for it.
func TestWorkerRunDoesNotWaitForAHandlerThatIgnoresItsContext(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	enqueue(t, s, clk, "deaf")
	begun, release := make(chan struct{}), make(chan struct{})
	w := newWorker(t, s, clk, func(ctx context.Context, _ core.Claim, _ core.Task) ([]byte, error) {
		close(begun)
		<-release
		return []byte("late"), nil
	}, core.WithShutdownTimeout(time.Second))
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	receive(t, begun)
	cancel()
	blockUntil(t, clk, 2)
	clk.Advance(time.Second)
	if err := receive(t, ran); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if task := mustGet(t, s, "deaf"); task.State != core.Ready || task.Errors[0].Message != core.ErrWorkerStopped.Error() {
		t.Fatalf("task = %v %+v, want given back", task.State, task.Errors)
	}
}
