package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
)

// waitFor polls cond every millisecond until it holds, failing after guard.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, guard)
		}
		time.Sleep(time.Millisecond)
	}
}

func getIn(t *testing.T, s core.Store, q, id string) core.Task {
	t.Helper()
	task, err := s.Get(context.Background(), core.GetParams{Queue: q, ID: id})
	if err != nil {
		t.Fatalf("Get(%s/%s): %v", q, id, err)
	}
	return task
}

func succeed(ctx context.Context, c core.Claim, t core.Task) ([]byte, error) {
	return []byte("done " + t.ID), nil
}

// A Client with three queues, one of whose handlers ignores its context,
// shuts down within its deadline and names the task it still holds; that
// task's lease lapses, a later broker pass (of a new Client) requeues it and
// the new Client runs and acks it. Once the ignoring handler returns, no
// goroutine of the first Client is left.
func TestClientShutdownIsBoundedAndTheHeldTaskIsDecidedLater(t *testing.T) {
	before := goleak.IgnoreCurrent()
	s := memory.New()
	defer s.Close()
	const lease = 300 * time.Millisecond

	stuckBegun, release := make(chan struct{}), make(chan struct{})
	var stuckReturned atomic.Bool
	ignoresCtx := func(ctx context.Context, c core.Claim, t core.Task) ([]byte, error) {
		close(stuckBegun)
		<-release // ignores ctx
		stuckReturned.Store(true)
		return []byte("too late"), nil
	}
	c1, err := core.NewClient(s,
		core.WithQueue("mail", succeed, core.WithConcurrency(2)),
		core.WithQueue("thumbs", succeed),
		core.WithQueue("stuck", ignoresCtx),
		core.WithQueueDefaults(core.WithLease(lease), core.WithPollInterval(time.Millisecond, 5*time.Millisecond)),
		core.WithMaintenance(core.WithInterval(10*time.Millisecond)),
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"mail", "thumbs", "stuck"} {
		qh, err := c1.Queue(q)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := qh.Enqueue(context.Background(), []byte("x"), core.WithID(q+"-1")); err != nil {
			t.Fatal(err)
		}
	}
	ran := make(chan error, 1)
	go func() { ran <- c1.Run(context.Background()) }()
	receive(t, stuckBegun)
	waitFor(t, "mail and thumbs succeed", func() bool {
		return getIn(t, s, "mail", "mail-1").State == core.Succeeded && getIn(t, s, "thumbs", "thumbs-1").State == core.Succeeded
	})

	const deadline = 150 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err = c1.Shutdown(ctx)
	took := time.Since(start)
	if took > deadline+2*time.Second { // a loaded machine schedules late; a hang is forever
		t.Errorf("Shutdown took %v, past its deadline of %v", took, deadline)
	}
	var se *core.ShutdownError
	if !errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want a *ShutdownError wrapping DeadlineExceeded", err)
	}
	if len(se.Held) != 1 || se.Held[0].Queue != "stuck" || se.Held[0].TaskID != "stuck-1" || !strings.Contains(err.Error(), "stuck/stuck-1") {
		t.Fatalf("Shutdown named %+v (%v), want stuck/stuck-1 alone", se.Held, err)
	}
	// Run names it too: its worker stopped without settling it.
	if err := receive(t, ran); !errors.As(err, &se) || len(se.Held) != 1 || se.Held[0].TaskID != "stuck-1" {
		t.Fatalf("Run = %v, want a *ShutdownError naming stuck-1", err)
	}
	if err := c1.Run(context.Background()); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Run after Shutdown = %v, want ErrClosed", err)
	}
	// Nothing of c1 is left but the handler that ignores its context.
	if err := goleak.Find(before, goleak.IgnoreAnyFunction("github.com/leasehold/leasehold/core_test.TestClientShutdownIsBoundedAndTheHeldTaskIsDecidedLater.func1")); err != nil {
		t.Fatalf("goroutines left after Shutdown besides the abandoned handler: %v", err)
	}
	if task := getIn(t, s, "stuck", "stuck-1"); task.State != core.Running {
		t.Fatalf("held task = %v, want running until its lease lapses", task.State)
	}

	// A new Client's broker requeues the lapsed task; its worker acks it.
	c2, err := core.NewClient(s,
		core.WithQueue("stuck", succeed, core.WithLease(lease), core.WithRetryPolicy(core.FixedDelay(0)),
			core.WithPollInterval(time.Millisecond, 5*time.Millisecond)),
		core.WithMaintenance(core.WithInterval(10*time.Millisecond)),
	)
	if err != nil {
		t.Fatal(err)
	}
	ran2 := make(chan error, 1)
	go func() { ran2 <- c2.Run(context.Background()) }()
	waitFor(t, "the held task succeeds", func() bool { return getIn(t, s, "stuck", "stuck-1").State == core.Succeeded })
	task := getIn(t, s, "stuck", "stuck-1")
	if task.Attempt != 2 || string(task.Result) != "done stuck-1" || len(task.Errors) != 1 || !task.Errors[0].LeaseExpired {
		t.Fatalf("task = attempt %d result %q errors %+v; want a second attempt after a lapsed lease", task.Attempt, task.Result, task.Errors)
	}
	if st := c2.Stats(); st.Broker.Requeued != 1 || st.Queues["stuck"].Acked != 1 {
		t.Fatalf("c2 stats = %+v, want one requeue and one ack", st)
	}
	if err := c2.Shutdown(context.Background()); err != nil {
		t.Fatalf("c2.Shutdown = %v", err)
	}
	if err := receive(t, ran2); err != nil {
		t.Fatalf("c2.Run = %v", err)
	}

	// The abandoned handler returns: its outcome is discarded and its
	// goroutine ends.
	close(release)
	waitFor(t, "the abandoned handler returns", stuckReturned.Load)
	goleak.VerifyNone(t, before)
	if task := getIn(t, s, "stuck", "stuck-1"); string(task.Result) != "done stuck-1" {
		t.Fatalf("the abandoned handler's late result was recorded: %q", task.Result)
	}
	if st := c1.Stats(); st.Queues["stuck"].Acked != 0 {
		t.Fatalf("c1 acked the abandoned task: %+v", st.Queues["stuck"])
	}
}

// Two Clients on one store, with no leader: handlers that fail, and handlers
// that outlive their lease so the brokers of both race to reap them. Every
// task ends Succeeded with exactly one accepted Ack.
func TestTwoClientsOnOneStoreDecideEveryTaskOnce(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	s := &cutBeats{Store: mem, cut: func(c core.Claim) bool {
		var i int
		fmt.Sscanf(c.TaskID, "t%d", &i)
		return c.Attempt == 1 && i%5 == 2
	}}
	const n = 60
	const lease = 40 * time.Millisecond
	var mu sync.Mutex
	successes := map[string]int{} // handler successes per task
	handler := func(ctx context.Context, c core.Claim, t core.Task) ([]byte, error) {
		var i int
		fmt.Sscanf(t.ID, "t%d", &i)
		switch {
		case c.Attempt == 1 && i%3 == 1:
			return nil, errors.New("first attempt fails")
		case c.Attempt == 1 && i%5 == 2:
			// Its heartbeats are cut off: it outlives its lease, ignoring
			// ctx, and a broker reaps it.
			time.Sleep(3 * lease)
		}
		mu.Lock()
		successes[t.ID]++
		mu.Unlock()
		return []byte(t.ID), nil
	}
	mk := func() *core.Client {
		c, err := core.NewClient(s,
			core.WithRetryPolicy(core.FixedDelay(0)),
			core.WithQueue("q", handler, core.WithConcurrency(4), core.WithLease(lease),
				core.WithPollInterval(time.Millisecond, 4*time.Millisecond)),
			core.WithMaintenance(core.WithInterval(5*time.Millisecond), core.WithClaimTTL(lease)),
		)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := mk(), mk()
	q, err := a.Queue("q")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := q.Enqueue(context.Background(), nil, core.WithID(fmt.Sprintf("t%d", i)), core.WithMaxAttempts(10)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var runs sync.WaitGroup
	for _, c := range []*core.Client{a, b} {
		runs.Go(func() {
			if err := c.Run(ctx); err != nil {
				t.Errorf("Run = %v", err)
			}
		})
	}
	waitFor(t, "every task succeeds", func() bool {
		cs, err := s.Counts(context.Background(), core.CountsParams{Queue: "q"})
		return err == nil && cs.Succeeded == n
	})
	cancel()
	runs.Wait()
	var acked, requeued int64
	for _, c := range []*core.Client{a, b} {
		st := c.Stats()
		acked += st.Queues["q"].Acked
		requeued += st.Broker.Requeued
	}
	if acked != n {
		t.Fatalf("%d acks accepted for %d tasks", acked, n)
	}
	if requeued == 0 {
		t.Fatal("no broker requeued a lapsed task: the test did not exercise the brokers")
	}
	for i := range n {
		id := fmt.Sprintf("t%d", i)
		task := getIn(t, s, "q", id)
		if task.State != core.Succeeded || string(task.Result) != id {
			t.Fatalf("%s = %v result %q", id, task.State, task.Result)
		}
		mu.Lock()
		got := successes[id]
		mu.Unlock()
		if got < 1 {
			t.Fatalf("%s succeeded without a handler success", id)
		}
	}
}

func TestClientRefusesBadOptionsAndASecondRun(t *testing.T) {
	s := memory.New()
	defer s.Close()
	clk := core.NewFakeClock(t0)
	cases := map[string][]core.ClientOption{
		"no queue":               {core.WithClock(clk)},
		"queue twice":            {core.WithQueue("a", succeed), core.WithQueue("a", succeed)},
		"bad queue name":         {core.WithQueue("a b", succeed)},
		"nil handler":            {core.WithQueue("a", nil)},
		"clock given per queue":  {core.WithQueue("a", succeed, core.WithClock(clk))},
		"clock in maintenance":   {core.WithQueue("a", succeed), core.WithMaintenance(core.WithClock(clk))},
		"WithQueues in a client": {core.WithQueue("a", succeed), core.WithMaintenance(core.WithQueues("b"))},
		"bad lease":              {core.WithQueue("a", succeed, core.WithLease(-1))},
		"bad timeout":            {core.WithQueue("a", succeed, core.WithTimeout(0))},
	}
	for name, opts := range cases {
		if _, err := core.NewClient(s, opts...); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := core.NewClient(nil, core.WithQueue("a", succeed)); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("nil store: err = %v", err)
	}

	c, err := core.NewClient(s, core.WithClock(clk), core.WithQueue("a", succeed))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- c.Run(context.Background()) }()
	blockUntil(t, clk, 2) // the worker's poll timer and the broker's interval
	if err := c.Run(context.Background()); !errors.Is(err, core.ErrRunning) || errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("second Run = %v, want ErrRunning", err)
	}
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if err := receive(t, ran); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// cutBeats is a store whose heartbeats of some claims never arrive, as
// behind a partition.
type cutBeats struct {
	*memory.Store
	cut func(core.Claim) bool
}

func (s *cutBeats) Extend(ctx context.Context, p core.ExtendParams) (core.TaskResult, error) {
	if s.cut(p.Claim) {
		return core.TaskResult{}, errNetwork
	}
	return s.Store.Extend(ctx, p)
}
