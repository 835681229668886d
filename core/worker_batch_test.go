package core_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// batchRecStore is a recStore that is also a core.BatchStore: it records
// every AckBatch with its items, its pop and what it claimed, and lets a
// test act on the store just before a batch or an Ack is applied.
type batchRecStore struct {
	*recStore
	batch       core.BatchStore
	beforeBatch func(p core.AckBatchParams)
	ackTwice    atomic.Bool // Ack and AckBatch's acks are applied twice, the second answer returned (a retransmission)
}

func newBatchRecStore(t *testing.T, clk core.Clock) *batchRecStore {
	r := newRecStore(t, clk)
	return &batchRecStore{recStore: r, batch: r.Store.(core.BatchStore)}
}

func (s *batchRecStore) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	return s.batch.EnqueueBatch(ctx, p)
}

func (s *batchRecStore) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	if s.beforeBatch != nil {
		s.beforeBatch(p)
	}
	if s.ackTwice.Load() {
		if _, err := s.batch.AckBatch(ctx, core.AckBatchParams{Queue: p.Queue, Acks: p.Acks}); err != nil {
			return core.BatchResult{}, err
		}
	}
	r, err := s.batch.AckBatch(ctx, p)
	e := event{Op: "AckBatch", Err: err, N: len(p.Acks), Pop: p.Pop.N}
	if len(p.Acks) > 0 {
		e.TaskID = p.Acks[0].Claim.TaskID
	}
	for _, it := range r.Items {
		e.Items = append(e.Items, it.Err)
	}
	for _, t := range r.Claimed {
		e.IDs = append(e.IDs, t.ID)
	}
	s.add(e)
	return r, err
}

func (s *batchRecStore) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	if s.ackTwice.Load() {
		if _, err := s.Store.Ack(ctx, p); err != nil {
			return core.TaskResult{}, err
		}
	}
	return s.recStore.Ack(ctx, p)
}

var _ core.BatchStore = (*batchRecStore)(nil)

func TestWorkerAcksTasksThatFinishTogetherInOneBatch(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newBatchRecStore(t, clk)
	const n = 8
	for i := range n {
		enqueue(t, s, clk, fmt.Sprintf("t%d", i))
	}
	var begun sync.WaitGroup
	begun.Add(n)
	release := make(chan struct{})
	w := newWorker(t, s, clk, func(_ context.Context, c core.Claim, _ core.Task) ([]byte, error) {
		begun.Done()
		<-release
		return []byte("r " + c.TaskID), nil
	}, core.WithConcurrency(n))
	stop := started(t, w)
	begun.Wait()
	close(release)
	// Every ack is recorded; at most a few calls carry them.
	deadline := time.Now().Add(guard)
	for w.Stats().Acked < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stop()
	calls, items := 0, 0
	for _, e := range s.snapshot() {
		switch e.Op {
		case "AckBatch":
			calls++
			items += e.N
		case "Ack":
			calls++
			items++
		}
	}
	if items != n || calls >= n {
		t.Fatalf("%d acks in %d calls (%v), want %d in fewer calls", items, calls, s.snapshot(), n)
	}
	for i := range n {
		id := fmt.Sprintf("t%d", i)
		if task := mustGet(t, s, id); task.State != core.Succeeded || string(task.Result) != "r "+id {
			t.Fatalf("%s = %v %q", id, task.State, task.Result)
		}
	}
	if st := w.Stats(); st.Acked != n || st.LeasesLost != 0 || st.StoreErrors != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestWorkerAcksALoneTaskAtOnce(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newBatchRecStore(t, clk)
	enqueue(t, s, clk, "alone")
	w := newWorker(t, s, clk, func(context.Context, core.Claim, core.Task) ([]byte, error) {
		return nil, nil
	}, core.WithConcurrency(4), core.WithPrefetch(0))
	started(t, w)
	// Nothing else runs: the ack does not wait for company (a linger would
	// show up here as a missing AckBatch; the fake clock never moves). It
	// claims a task for each of the four slots: its own and three free
	// (without prefetching: TestWorkerPrefetch* test the claims ahead).
	if e := s.wait(t, "AckBatch", 1); e.Err != nil || e.TaskID != "alone" || e.N != 1 || e.Pop != 4 || e.Items[0] != nil {
		t.Fatalf("ack: %+v", e)
	}
	if s.count("Ack") != 0 {
		t.Fatal("a lone ack went through Ack while the worker pops")
	}
}

func TestWorkerAtConcurrencyOneAcksAndClaimsTheNextTaskInOneCall(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newBatchRecStore(t, clk)
	const n = 6
	for i := range n {
		enqueue(t, s, clk, fmt.Sprintf("t%d", i))
	}
	var running, most atomic.Int32
	w := newWorker(t, s, clk, func(context.Context, core.Claim, core.Task) ([]byte, error) {
		if r := running.Add(1); r > most.Load() {
			most.Store(r)
		}
		defer running.Add(-1)
		return []byte("ok"), nil
	}, core.WithConcurrency(1), core.WithPrefetch(0))
	stop := started(t, w)
	// The first task comes from a Pop; each ack brings the next task, and
	// the last finds none (without prefetching, which claims two at a time
	// here: see TestWorkerPrefetchOverlapsTheCallWithTheNextHandler).
	s.wait(t, "AckBatch", n)
	stop()
	pops, batches := 0, 0
	var claimed []string
	for _, e := range s.snapshot() {
		switch e.Op {
		case "Pop":
			pops++
			claimed = append(claimed, e.IDs...)
		case "AckBatch":
			batches++
			claimed = append(claimed, e.IDs...)
			if e.N != 1 || e.Pop != 1 || e.Err != nil || e.Items[0] != nil {
				t.Errorf("AckBatch %+v, want one ack and a pop of one", e)
			}
		case "Ack":
			t.Errorf("an Ack call %+v: the ack should have carried the next pop", e)
		}
	}
	if batches != n || len(claimed) != n {
		t.Fatalf("%d AckBatch calls, claims %v; want %d and each task once", batches, claimed, n)
	}
	for i, id := range claimed {
		if id != fmt.Sprintf("t%d", i) {
			t.Fatalf("claimed %v, want t0..t%d in order", claimed, n-1)
		}
	}
	// One Pop for the first task, and the Pops of the idle loop after the
	// last: never one per task.
	if pops > 3 {
		t.Errorf("%d Pop calls for %d tasks: %v", pops, n, s.snapshot())
	}
	if most.Load() != 1 {
		t.Errorf("%d handlers ran at once at concurrency 1", most.Load())
	}
	if st := w.Stats(); st.Acked != n || st.Popped != n || st.StoreErrors != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestWorkerClaimsNothingWithAnAckOnceItStops(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newBatchRecStore(t, clk)
	for _, id := range []string{"first", "second", "third"} {
		enqueue(t, s, clk, id)
	}
	begun, release := make(chan struct{}), make(chan struct{})
	w := newWorker(t, s, clk, func(context.Context, core.Claim, core.Task) ([]byte, error) {
		close(begun)
		<-release
		return nil, nil
	}, core.WithConcurrency(1))
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()
	<-begun
	shut := make(chan error, 1)
	go func() { shut <- w.Shutdown(context.Background()) }()
	// Shutdown stops popping before it waits; then the handler returns.
	for !w.Stopping() {
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := receive(t, shut); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := receive(t, ran); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if e := s.wait(t, "Ack", 1); e.Err != nil || e.TaskID != "first" {
		t.Fatalf("the ack after the stop: %+v", e)
	}
	for _, e := range s.snapshot() {
		if e.Op == "AckBatch" {
			t.Fatalf("a stopping worker sent %+v", e)
		}
	}
	for _, id := range []string{"second", "third"} {
		if task := mustGet(t, s, id); task.State != core.Ready {
			t.Fatalf("%s = %v after the shutdown, want Ready: claimed while stopping", id, task.State)
		}
	}
}

func TestWorkerHandlesEachItemOfAnAckBatchAsASingleAck(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newBatchRecStore(t, clk)
	enqueue(t, s, clk, "kept")
	enqueue(t, s, clk, "removed")
	var begun sync.WaitGroup
	begun.Add(2)
	release := make(chan struct{})
	causes := make(chan error, 2)
	w := newWorker(t, s, clk, func(ctx context.Context, c core.Claim, _ core.Task) ([]byte, error) {
		begun.Done()
		<-release
		go func() { <-ctx.Done(); causes <- context.Cause(ctx) }()
		return []byte("done"), nil
	}, core.WithConcurrency(2))
	// An operator removes a task just before the batch is applied: its item
	// is refused as stale, the other succeeds.
	s.beforeBatch = func(core.AckBatchParams) {
		if _, err := s.Remove(context.Background(), core.InspectParams{Queue: queue, ID: "removed"}); err != nil {
			t.Errorf("Remove: %v", err)
		}
	}
	stop := started(t, w)
	begun.Wait()
	close(release)
	if e := s.wait(t, "AckBatch", 1); e.Err != nil || e.N != 2 {
		t.Fatalf("ack batch: %+v", e)
	}
	stop()
	if st := w.Stats(); st.Acked != 1 || st.LeasesLost != 1 || st.StaleDecisions != 1 {
		t.Fatalf("stats = %+v, want one ack and one lost lease", st)
	}
	superseded := 0
	for range 2 {
		if errors.Is(receive(t, causes), core.ErrClaimSuperseded) {
			superseded++
		}
	}
	if superseded != 1 {
		t.Fatalf("%d handler contexts were told their claim was superseded, want 1", superseded)
	}
	if task := mustGet(t, s, "kept"); task.State != core.Succeeded {
		t.Fatalf("kept = %v", task.State)
	}
}

func TestWorkerNeverCountsItsOwnAckAsALostLease(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newBatchRecStore(t, clk)
	s.ackTwice.Store(true) // the store sees the Ack twice and answers the second
	enqueue(t, s, clk, "twice")
	w := newWorker(t, s, clk, func(context.Context, core.Claim, core.Task) ([]byte, error) {
		return nil, nil
	})
	stop := started(t, w)
	e := s.wait(t, "AckBatch", 1)
	stop()
	if e.Err != nil || len(e.Items) != 1 || !errors.Is(e.Items[0], core.ErrInvalidTransition) {
		t.Fatalf("the second AckBatch: %+v, want its item an invalid transition", e)
	}
	if task := mustGet(t, s, "twice"); task.State != core.Succeeded {
		t.Fatalf("twice = %v", task.State)
	}
	if st := w.Stats(); st.Acked != 1 || st.LeasesLost != 0 || st.StaleDecisions != 0 {
		t.Fatalf("stats = %+v, want the ack counted and no lost lease", st)
	}
}

// extendGate is a store whose Extend waits, once, until the test lets it go.
type extendGate struct {
	*recStore
	entered, proceed chan struct{}
	once             sync.Once
}

func (s *extendGate) Extend(ctx context.Context, p core.ExtendParams) (core.TaskResult, error) {
	s.once.Do(func() {
		close(s.entered)
		<-s.proceed
	})
	return s.recStore.Extend(ctx, p)
}

func TestWorkerHeartbeatThatMeetsItsOwnAckIsNotALostLease(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := &extendGate{recStore: newRecStore(t, clk), entered: make(chan struct{}), proceed: make(chan struct{})}
	enqueue(t, s, clk, "a")
	begun, release := make(chan struct{}), make(chan struct{})
	cause := make(chan error, 1)
	w := newWorker(t, s, clk, func(ctx context.Context, _ core.Claim, _ core.Task) ([]byte, error) {
		close(begun)
		<-release
		go func() { <-ctx.Done(); cause <- context.Cause(ctx) }()
		return nil, nil
	})
	stop := started(t, w)
	receive(t, begun)
	blockUntil(t, clk, 1)
	clk.Advance(heartbeat)
	receive(t, s.entered) // the heartbeat is on its way to the store
	close(release)
	s.wait(t, "Ack", 1) // the worker's own ack lands first
	close(s.proceed)
	if e := s.wait(t, "Extend", 1); !errors.Is(e.Err, core.ErrInvalidTransition) {
		t.Fatalf("the late heartbeat: %v, want an invalid transition (the task succeeded)", e.Err)
	}
	stop()
	if st := w.Stats(); st.Acked != 1 || st.LeasesLost != 0 {
		t.Fatalf("stats = %+v, want the ack and no lost lease", st)
	}
	if c := receive(t, cause); errors.Is(c, core.ErrClaimSuperseded) {
		t.Fatalf("the handler was told its claim was superseded: %v", c)
	}
}

// skewedClock is a worker's or a broker's clock that is off by skew from the
// store's; its timers are the store clock's.
type skewedClock struct {
	*core.FakeClock
	skew time.Duration
}

func (c skewedClock) Now() time.Time { return c.FakeClock.Now().Add(c.skew) }

func TestWorkerRetriesOnTheStoresClockWhateverItsOwnSkew(t *testing.T) {
	const delay = 10 * time.Second
	for _, skew := range []time.Duration{5 * time.Second, -5 * time.Second} {
		t.Run(fmt.Sprintf("skew=%v", skew), func(t *testing.T) {
			clk := core.NewFakeClock(t0)
			s := newRecStore(t, clk)
			enqueue(t, s, clk, "r")
			begun, release := make(chan struct{}), make(chan struct{})
			w := newWorker(t, s, skewedClock{clk, skew}, func(context.Context, core.Claim, core.Task) ([]byte, error) {
				close(begun)
				<-release
				return nil, errors.New("try again")
			}, core.WithRetryPolicy(func(core.Task, error) (time.Duration, bool) { return delay, true }))
			stop := started(t, w)
			receive(t, begun)
			blockUntil(t, clk, 1) // the heartbeat
			clk.Advance(2 * time.Second)
			close(release)
			s.wait(t, "Retry", 1)
			stop()
			task := mustGet(t, s, "r")
			// The store's clock read t0+2s when the handler failed.
			if want := t0.Add(2*time.Second + delay); task.State != core.Scheduled || !task.RunAfter.Equal(want) {
				t.Fatalf("task %v runAfter %v, want scheduled at %v (the store's now + the delay), not shifted by the skew",
					task.State, task.RunAfter, want)
			}
		})
	}
}

func TestBrokerRequeuesOnTheStoresClockWhateverItsOwnSkew(t *testing.T) {
	const delay = 7 * time.Second
	for _, skew := range []time.Duration{5 * time.Second, -5 * time.Second} {
		t.Run(fmt.Sprintf("skew=%v", skew), func(t *testing.T) {
			clk := core.NewFakeClock(t0)
			s := newRecStore(t, clk)
			enqueue(t, s, clk, "lapsed")
			if _, err := s.Pop(context.Background(), core.PopParams{Queue: queue, Lease: lease, N: 1}); err != nil {
				t.Fatal(err)
			}
			clk.Advance(lease)
			b := newBroker(t, s, skewedClock{clk, skew},
				core.WithRetryPolicy(func(core.Task, error) (time.Duration, bool) { return delay, true }))
			p, err := b.RunOnce(context.Background())
			if err != nil || p.Requeued != 1 {
				t.Fatalf("pass = %+v, %v", p, err)
			}
			task := mustGet(t, s, "lapsed")
			if want := t0.Add(lease + delay); task.State != core.Scheduled || !task.RunAfter.Equal(want) {
				t.Fatalf("task %v runAfter %v, want scheduled at %v (the store's now + the delay)", task.State, task.RunAfter, want)
			}
		})
	}
}

func TestWorkerKeepsRunningTasksAfterHandlersEndTheirGoroutines(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newBatchRecStore(t, clk)
	const n = 12
	for i := range n {
		enqueue(t, s, clk, fmt.Sprintf("g%02d", i), core.WithMaxAttempts(1))
	}
	w := newWorker(t, s, clk, func(_ context.Context, c core.Claim, _ core.Task) ([]byte, error) {
		if c.TaskID[2]%2 == 0 {
			runtime.Goexit() // every other handler ends its goroutine
		}
		return nil, nil
	}, core.WithConcurrency(2))
	stop := started(t, w)
	deadline := time.Now().Add(guard)
	for st := w.Stats(); st.Acked+st.Failed < n; st = w.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats = %+v after %v: the worker stopped running tasks", st, guard)
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	if st := w.Stats(); st.Acked != n/2 || st.Failed != n/2 || st.Panics != n/2 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestWorkerWithBatchSizeOneAcksOneByOne(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newBatchRecStore(t, clk)
	const n = 4
	for i := range n {
		enqueue(t, s, clk, fmt.Sprintf("t%d", i))
	}
	var begun sync.WaitGroup
	begun.Add(n)
	release := make(chan struct{})
	w := newWorker(t, s, clk, func(context.Context, core.Claim, core.Task) ([]byte, error) {
		begun.Done()
		<-release
		return nil, nil
	}, core.WithConcurrency(n), core.WithBatchSize(1))
	stop := started(t, w)
	begun.Wait()
	close(release)
	s.wait(t, "AckBatch", n)
	stop()
	for _, e := range s.snapshot() {
		if e.Op == "AckBatch" && (e.N != 1 || e.Pop != 1) {
			t.Fatalf("batch size 1, yet %+v", e)
		}
	}
	if st := w.Stats(); st.Acked != n {
		t.Fatalf("stats = %+v", st)
	}
}

// flightStore is a batchRecStore that counts how many AckBatch calls are
// out at once; flighted adds core.AckFlighter to it.
type flightStore struct {
	*batchRecStore
	out    atomic.Int32
	maxOut atomic.Int32
	second chan struct{} // the first call out waits (a while) for a second
}

type flighted struct {
	*flightStore
	flights int
}

func (s flighted) AckFlights() int { return s.flights }

func (s *flightStore) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	n := s.out.Add(1)
	defer s.out.Add(-1)
	for {
		m := s.maxOut.Load()
		if n <= m || s.maxOut.CompareAndSwap(m, n) {
			break
		}
	}
	if n == 1 {
		// Out alone: give the worker the time of a slow round trip to
		// send another before this one is answered.
		select {
		case <-s.second:
		case <-time.After(50 * time.Millisecond):
		}
	} else {
		select {
		case s.second <- struct{}{}:
		default:
		}
	}
	return s.batchRecStore.AckBatch(ctx, p)
}

// On a store that asks for two AckBatch calls at once (AckFlighter), a
// Worker sends the acks that come while one is out in a second one, without
// waiting for the first's answer; every task is still acknowledged once.
// On a store that does not ask, one call is out at a time.
func TestWorkerKeepsAsManyAckBatchesOutAsTheStoreAsks(t *testing.T) {
	for _, flights := range []int{2, 0} {
		t.Run(fmt.Sprintf("flights=%d", flights), func(t *testing.T) {
			clk := core.NewFakeClock(t0)
			s := &flightStore{batchRecStore: newBatchRecStore(t, clk), second: make(chan struct{})}
			var store core.Store = s
			if flights > 0 {
				store = flighted{s, flights}
			}
			const n = 40
			for i := range n {
				enqueue(t, s, clk, fmt.Sprintf("t%d", i))
			}
			w := newWorker(t, store, clk, func(_ context.Context, c core.Claim, _ core.Task) ([]byte, error) {
				return []byte("r " + c.TaskID), nil
			}, core.WithConcurrency(8))
			stop := started(t, w)
			deadline := time.Now().Add(guard)
			for w.Stats().Acked < n && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			stop()
			for i := range n {
				id := fmt.Sprintf("t%d", i)
				if task := mustGet(t, s, id); task.State != core.Succeeded || task.Attempt != 1 || string(task.Result) != "r "+id {
					t.Fatalf("%s = %v attempt %d %q", id, task.State, task.Attempt, task.Result)
				}
			}
			if st := w.Stats(); st.Acked != n || st.LeasesLost != 0 || st.StoreErrors != 0 {
				t.Fatalf("stats = %+v", st)
			}
			want := int32(max(flights, 1))
			if got := s.maxOut.Load(); got != want {
				t.Fatalf("at most %d AckBatch calls were out at once, want %d", got, want)
			}
		})
	}
}

// sized adds core.BatchSizer to a batchRecStore.
type sized struct {
	*batchRecStore
	size int
}

func (s sized) DefaultBatchSize() int { return s.size }

// A Worker on a store that asks for a batch size (BatchSizer) claims and
// acknowledges at most that many tasks a call, below what its concurrency
// and prefetch would give; WithBatchSize still sets it.
func TestWorkerTakesTheBatchSizeTheStoreAsks(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  []core.WorkerOption
		most  int // the largest Pop or AckBatch wanted
		exact bool
	}{
		{"store's", nil, 3, false},
		{"worker's", []core.WorkerOption{core.WithBatchSize(5)}, 5, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := core.NewFakeClock(t0)
			s := newBatchRecStore(t, clk)
			const n = 60
			for i := range n {
				enqueue(t, s, clk, fmt.Sprintf("t%02d", i))
			}
			w := newWorker(t, sized{s, 3}, clk, func(context.Context, core.Claim, core.Task) ([]byte, error) {
				return nil, nil
			}, append([]core.WorkerOption{core.WithConcurrency(8)}, c.opts...)...)
			stop := started(t, w)
			deadline := time.Now().Add(guard)
			for w.Stats().Acked < n && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			stop()
			if st := w.Stats(); st.Acked != n {
				t.Fatalf("stats = %+v", st)
			}
			largest := 0
			for _, e := range s.snapshot() {
				switch e.Op {
				case "Pop":
					largest = max(largest, e.N)
				case "AckBatch":
					largest = max(largest, e.N, e.Pop)
				}
			}
			if largest > c.most || (c.exact && largest != c.most) {
				t.Fatalf("the largest call wanted %d tasks, want at most %d (exactly: %v)", largest, c.most, c.exact)
			}
		})
	}
}
