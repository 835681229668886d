package core_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

const claimTTL = 10 * time.Second

// popExpired enqueues a task, pops it with a 30s lease and lets the lease
// lapse, as a worker that died would. It returns the task as popped.
func popExpired(t *testing.T, s core.Store, clk *core.FakeClock, id string, opts ...core.EnqueueOption) core.Task {
	t.Helper()
	enqueue(t, s, clk, id, opts...)
	res, err := s.Pop(context.Background(), core.PopParams{Queue: queue, Lease: lease, N: 1})
	if err != nil || len(res.Tasks) != 1 {
		t.Fatalf("Pop = %+v, %v", res, err)
	}
	clk.Advance(lease)
	return res.Tasks[0]
}

func TestBrokerPromotesDueScheduledTasksInBatches(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newStore(t, clk)
	for _, id := range []string{"a", "b", "c"} {
		enqueue(t, s, clk, id, core.WithDelay(5*time.Second))
	}
	enqueue(t, s, clk, "later", core.WithDelay(time.Minute))
	b := newBroker(t, s, clk, core.WithBatchSize(1))
	if p, err := b.RunOnce(context.Background()); err != nil || p.Promoted != 0 {
		t.Fatalf("pass before due = %+v, %v", p, err)
	}
	clk.Advance(5 * time.Second)
	if p, err := b.RunOnce(context.Background()); err != nil || p.Promoted != 3 {
		t.Fatalf("pass when due = %+v, %v; want 3 promoted, one per call", p, err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if task := mustGet(t, s, id); task.State != core.Ready {
			t.Fatalf("%s = %v, want ready", id, task.State)
		}
	}
	if task := mustGet(t, s, "later"); task.State != core.Scheduled {
		t.Fatalf("later = %v, want still scheduled", task.State)
	}
	if st := b.Stats(); st.Promoted != 3 || st.Passes != 2 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestBrokerRequeuesAnExpiredTaskThroughItsClaimAfterThePolicysDelay(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newRecStore(t, clk)
	popExpired(t, s, clk, "lost")
	var seen core.Task
	b := newBroker(t, s, clk, core.WithRetryPolicy(func(task core.Task, err error) (time.Duration, bool) {
		seen = task
		if !errors.Is(err, core.ErrLeaseExpired) {
			t.Errorf("policy got %v, want ErrLeaseExpired", err)
		}
		return core.Backoff{Min: 5 * time.Second, Jitter: -1}.Policy()(task, err)
	}))
	p, err := b.RunOnce(context.Background())
	if err != nil || p.Claimed != 1 || p.Requeued != 1 || p.Dropped != 0 {
		t.Fatalf("RunOnce = %+v, %v; want one claim requeued", p, err)
	}
	if seen.ID != "lost" || seen.Attempt != 1 || seen.LeaseLosses() != 1 {
		t.Fatalf("policy saw %+v, want the task with this lease loss counted", seen)
	}
	task := mustGet(t, s, "lost")
	now := clk.Now()
	if task.State != core.Scheduled || !task.RunAfter.Equal(now.Add(5*time.Second)) || task.ClaimToken != 0 {
		t.Fatalf("task = %v run after %v token %d, want scheduled 5s after %v", task.State, task.RunAfter, task.ClaimToken, now)
	}
	if len(task.Errors) != 1 || !task.Errors[0].LeaseExpired || task.LeaseLosses() != 1 || task.HandlerFailures() != 0 {
		t.Fatalf("errors = %+v, want one lease loss", task.Errors)
	}
	if st := b.Stats(); st.Claimed != 1 || st.Requeued != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestBrokerFinalizesAnExpiredTaskWithNoAttemptLeft(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newStore(t, clk)
	popExpired(t, s, clk, "last", core.WithMaxAttempts(1))
	b := newBroker(t, s, clk)
	p, err := b.RunOnce(context.Background())
	if err != nil || p.Claimed != 1 || p.Finalized != 1 {
		t.Fatalf("RunOnce = %+v, %v; want one claim finalized", p, err)
	}
	if task := mustGet(t, s, "last"); task.State != core.Failed || task.LeaseLosses() != 1 {
		t.Fatalf("task = %v errors %v, want failed with a lease loss", task.State, task.Errors)
	}
}

// Broker A claims and stalls past its claim TTL; broker B claims and
// decides; A's decision is dropped and the task is requeued once.
func TestBrokerDropsItsDecisionWhenAnotherBrokerTookTheClaimOver(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newStore(t, clk)
	popExpired(t, s, clk, "contested")

	claimedA, resumeA := make(chan struct{}), make(chan struct{})
	a := newBroker(t, s, clk, core.WithClaimTTL(claimTTL), core.WithRetryPolicy(func(core.Task, error) (time.Duration, bool) {
		close(claimedA)
		<-resumeA // a GC pause, a slow callback
		return 0, true
	}))
	b := newBroker(t, s, clk, core.WithClaimTTL(claimTTL), core.WithRetryPolicy(core.FixedDelay(time.Minute)))

	type result struct {
		p   core.Pass
		err error
	}
	passA := make(chan result, 1)
	go func() {
		p, err := a.RunOnce(context.Background())
		passA <- result{p, err}
	}()
	receive(t, claimedA)
	clk.Advance(claimTTL) // A's claim lapses
	if p, err := b.RunOnce(context.Background()); err != nil || p.Claimed != 1 || p.Requeued != 1 {
		t.Fatalf("B's pass = %+v, %v; want B to take the claim over and requeue", p, err)
	}
	close(resumeA)
	if r := receive(t, passA); r.err != nil || r.p.Claimed != 1 || r.p.Dropped != 1 || r.p.Requeued != 0 {
		t.Fatalf("A's pass = %+v, %v; want its decision dropped", r.p, r.err)
	}
	task := mustGet(t, s, "contested")
	if task.State != core.Scheduled || !task.RunAfter.Equal(clk.Now().Add(time.Minute)) || len(task.Errors) != 1 {
		t.Fatalf("task = %v run after %v errors %v, want B's decision only", task.State, task.RunAfter, task.Errors)
	}
	if a.Stats().StaleDropped != 1 || b.Stats().StaleDropped != 0 {
		t.Fatalf("stale drops: A %d, B %d", a.Stats().StaleDropped, b.Stats().StaleDropped)
	}
}

func TestBrokerDropsItsDecisionWhenAnOperatorActedAfterTheClaim(t *testing.T) {
	for name, act := range map[string]func(*core.Inspector) error{
		"Remove": func(ins *core.Inspector) error {
			_, err := ins.Remove(context.Background(), "t", core.AnyVersion)
			return err
		},
		"Requeue": func(ins *core.Inspector) error {
			_, err := ins.Requeue(context.Background(), "t", core.AnyVersion)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			clk := core.NewFakeClock(t0)
			s := newStore(t, clk)
			popExpired(t, s, clk, "t")
			ins, err := core.NewInspector(s, queue)
			if err != nil {
				t.Fatal(err)
			}
			var logs logRecorder
			b := newBroker(t, s, clk, core.WithLogger(slog.New(&logs)), core.WithRetryPolicy(func(core.Task, error) (time.Duration, bool) {
				if err := act(ins); err != nil {
					t.Errorf("operator: %v", err)
				}
				return time.Hour, true
			}))
			if p, err := b.RunOnce(context.Background()); err != nil || p.Dropped != 1 || p.Requeued != 0 {
				t.Fatalf("RunOnce = %+v, %v; want the decision dropped", p, err)
			}
			if !logs.has(slog.LevelDebug, "stale decision dropped") {
				t.Fatalf("no debug record of the dropped decision in %v", logs.messages())
			}
			task, err := ins.Get(context.Background(), "t")
			switch name {
			case "Remove":
				if !errors.Is(err, core.ErrNotFound) {
					t.Fatalf("Get = %+v, %v; want the task to stay removed", task, err)
				}
			case "Requeue":
				if err != nil || task.State != core.Ready || task.Attempt != 0 || len(task.Errors) != 0 {
					t.Fatalf("task = %+v, %v; want the operator's requeue to stand", task, err)
				}
			}
		})
	}
}

func TestBrokerWithRecoverExpiredDecidesInOneStep(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newStore(t, clk)
	popExpired(t, s, clk, "again")
	b := newBroker(t, s, clk, core.WithRecoverExpired(time.Minute), core.WithRetryPolicy(func(core.Task, error) (time.Duration, bool) {
		t.Error("the retry policy was consulted")
		return 0, false
	}))
	p, err := b.RunOnce(context.Background())
	if err != nil || p.Recovered != 1 || p.Claimed != 0 {
		t.Fatalf("RunOnce = %+v, %v; want one task recovered", p, err)
	}
	task := mustGet(t, s, "again")
	if task.State != core.Scheduled || !task.RunAfter.Equal(clk.Now().Add(time.Minute)) || task.LeaseLosses() != 1 {
		t.Fatalf("task = %v run after %v errors %v", task.State, task.RunAfter, task.Errors)
	}
	if b.Stats().Recovered != 1 {
		t.Fatalf("stats = %+v", b.Stats())
	}
}

func TestBrokerFallsBackOnTheDefaultPolicyWhenItsPolicyPanics(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newStore(t, clk)
	popExpired(t, s, clk, "t")
	b := newBroker(t, s, clk, core.WithRetryPolicy(func(core.Task, error) (time.Duration, bool) { panic("policy bug") }))
	if p, err := b.RunOnce(context.Background()); err != nil || p.Requeued != 1 {
		t.Fatalf("RunOnce = %+v, %v; want the default policy's requeue", p, err)
	}
	if task := mustGet(t, s, "t"); task.State != core.Scheduled {
		t.Fatalf("task = %v, want scheduled by the default backoff", task.State)
	}
}

func TestBrokerRunPassesEveryIntervalUntilItsContextIsDone(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newStore(t, clk)
	enqueue(t, s, clk, "soon", core.WithDelay(3*time.Second))
	b := newBroker(t, s, clk, core.WithInterval(time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- b.Run(ctx) }()

	blockUntil(t, clk, 1) // the first pass is done
	for i := 1; i <= 3; i++ {
		if task := mustGet(t, s, "soon"); task.State != core.Scheduled {
			t.Fatalf("after %d passes the task is %v, want scheduled", i, task.State)
		}
		clk.Advance(time.Second)
		blockUntil(t, clk, 1)
	}
	if task := mustGet(t, s, "soon"); task.State != core.Ready {
		t.Fatalf("task = %v, want ready after 3s", task.State)
	}
	if err := b.Run(context.Background()); !errors.Is(err, core.ErrRunning) || errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("second Run = %v, want ErrRunning", err)
	}
	cancel()
	if err := receive(t, ran); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if st := b.Stats(); st.Passes != 4 || st.Promoted != 1 {
		t.Fatalf("stats = %+v", st)
	}
	if clk.Timers() != 0 {
		t.Fatalf("%d timers left behind", clk.Timers())
	}
}

func TestBrokerReportsStoreErrorsForEveryQueue(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newStore(t, clk)
	b, err := core.NewBroker(s, core.WithClock(clk), core.WithQueues("one", "two"))
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	_, err = b.RunOnce(context.Background())
	if !errors.Is(err, core.ErrClosed) {
		t.Fatalf("RunOnce = %v, want ErrClosed", err)
	}
	if st := b.Stats(); st.StoreErrors != 4 {
		t.Fatalf("stats = %+v, want 4 store errors (promote and reap of two queues)", st)
	}
}

func TestNewBrokerRejectsBadOptions(t *testing.T) {
	s := newStore(t, core.NewFakeClock(t0))
	for name, opts := range map[string][]core.BrokerOption{
		"no queue":         nil,
		"bad queue name":   {core.WithQueues("a b")},
		"zero interval":    {core.WithQueues(queue), core.WithInterval(0)},
		"zero claim TTL":   {core.WithQueues(queue), core.WithClaimTTL(0)},
		"negative delay":   {core.WithQueues(queue), core.WithRecoverExpired(-time.Second)},
		"zero batch":       {core.WithQueues(queue), core.WithBatchSize(0)},
		"nil logger":       {core.WithQueues(queue), core.WithLogger(nil)},
		"nil retry policy": {core.WithQueues(queue), core.WithRetryPolicy(nil)},
	} {
		if _, err := core.NewBroker(s, opts...); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := core.NewBroker(nil, core.WithQueues(queue)); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("nil store: err = %v", err)
	}
}

func TestBrokerRunStopsWhenTheStoreIsClosed(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newStore(t, clk)
	b := newBroker(t, s, clk)
	_ = s.Close()
	if err := b.Run(context.Background()); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
}

// limitRecStore is a store that asks for batches of size (core.BatchSizer)
// and records the Limit of each Promote.
type limitRecStore struct {
	core.Store
	size   int
	mu     sync.Mutex
	limits []int
}

func (s *limitRecStore) DefaultBatchSize() int { return s.size }

func (s *limitRecStore) Promote(ctx context.Context, p core.PromoteParams) (core.IDsResult, error) {
	s.mu.Lock()
	s.limits = append(s.limits, p.Limit)
	s.mu.Unlock()
	return s.Store.Promote(ctx, p)
}

// A Broker on a store that asks for a batch size (BatchSizer) promotes at
// most that many tasks a call, below its default of 100; WithBatchSize
// still sets it.
func TestBrokerTakesTheBatchSizeTheStoreAsks(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []core.BrokerOption
		want int
	}{
		{"store's", nil, 2},
		{"broker's", []core.BrokerOption{core.WithBatchSize(4)}, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := core.NewFakeClock(t0)
			s := &limitRecStore{Store: newStore(t, clk), size: 2}
			for i := range 5 {
				enqueue(t, s, clk, fmt.Sprintf("t%d", i), core.WithDelay(time.Second))
			}
			clk.Advance(time.Second)
			b := newBroker(t, s, clk, c.opts...)
			if p, err := b.RunOnce(context.Background()); err != nil || p.Promoted != 5 {
				t.Fatalf("RunOnce = %+v, %v; want 5 promoted", p, err)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, l := range s.limits {
				if l != c.want {
					t.Fatalf("Promote limits %v, want each %d", s.limits, c.want)
				}
			}
			if len(s.limits) < 5/c.want+1 {
				t.Fatalf("Promote limits %v: fewer calls than %d tasks need", s.limits, 5)
			}
		})
	}
}
