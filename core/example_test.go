package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

func ExampleQueue_Enqueue() {
	ctx := context.Background()
	clock := core.NewFakeClock(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))
	store := memory.New(memory.WithClock(clock))
	q, err := core.NewQueue(store, "emails", core.WithClock(clock))
	if err != nil {
		panic(err)
	}

	// Without WithID the queue generates a sortable unique ID. An ID of your
	// own makes enqueueing idempotent.
	now, _ := q.Enqueue(ctx, []byte("welcome"), core.WithID("welcome-ada"))
	later, _ := q.Enqueue(ctx, []byte("reminder"), core.WithID("remind-ada"),
		core.WithDelay(24*time.Hour), core.WithPriority(5), core.WithMaxAttempts(3))
	_, err = q.Enqueue(ctx, []byte("welcome again"), core.WithID("welcome-ada"))

	fmt.Println(now.ID, now.State, now.MaxAttempts)
	fmt.Println(later.ID, later.State, later.RunAfter.Format(time.RFC3339), later.Priority)
	fmt.Println(errors.Is(err, core.ErrConflict))
	// Output:
	// welcome-ada ready 25
	// remind-ada scheduled 2030-01-02T09:00:00Z 5
	// true
}

func ExampleWorker() {
	ctx := context.Background()
	store := memory.New()
	q, _ := core.NewQueue(store, "greetings")
	for i, name := range []string{"Ada", "Grace", "Barbara"} {
		q.Enqueue(ctx, []byte(name), core.WithPriority(-i)) // Ada first
	}

	greeted := make(chan struct{})
	w, err := core.NewWorker(store, "greetings",
		func(ctx context.Context, c core.Claim, t core.Task) ([]byte, error) {
			fmt.Printf("hello, %s (attempt %d)\n", t.Payload, c.Attempt)
			greeted <- struct{}{}
			return []byte("greeted"), nil
		},
		core.WithConcurrency(1), core.WithLease(time.Minute))
	if err != nil {
		panic(err)
	}
	go w.Run(ctx)
	for range 3 {
		<-greeted
	}
	// Shutdown stops popping and waits for the running handler, whose
	// result it records.
	if err := w.Shutdown(ctx); err != nil {
		panic(err)
	}
	fmt.Printf("acked %d\n", w.Stats().Acked)
	// Output:
	// hello, Ada (attempt 1)
	// hello, Grace (attempt 1)
	// hello, Barbara (attempt 1)
	// acked 3
}

func ExampleBroker() {
	ctx := context.Background()
	clock := core.NewFakeClock(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))
	store := memory.New(memory.WithClock(clock))
	q, _ := core.NewQueue(store, "images", core.WithClock(clock))
	q.Enqueue(ctx, []byte("resize 42.png"), core.WithID("img-42"))

	// A worker claims the task under a 30s lease, then dies without a word.
	store.Pop(ctx, core.PopParams{Queue: "images", Lease: 30 * time.Second, N: 1})
	clock.Advance(time.Minute)

	b, err := core.NewBroker(store, core.WithQueues("images"), core.WithClock(clock),
		core.WithRetryPolicy(core.Backoff{Min: 10 * time.Second, Jitter: -1}.Policy()))
	if err != nil {
		panic(err)
	}
	// Run(ctx) makes a pass every interval; RunOnce makes one.
	pass, _ := b.RunOnce(ctx)
	fmt.Printf("claimed %d, requeued %d\n", pass.Claimed, pass.Requeued)

	t, _ := q.Get(ctx, "img-42")
	fmt.Println(t.State, "for", t.RunAfter.Sub(clock.Now()), "after", t.LeaseLosses(), "lease loss")
	// Output:
	// claimed 1, requeued 1
	// scheduled for 10s after 1 lease loss
}

func ExampleInspector() {
	ctx := context.Background()
	store := memory.New()
	q, _ := core.NewQueue(store, "reports")
	for _, id := range []string{"r1", "r2", "r3"} {
		q.Enqueue(ctx, nil, core.WithID(id))
	}
	ins, _ := core.NewInspector(store, "reports")

	// The operator looks at r1, but a worker claims it before the operator
	// removes it: the conditional Remove refuses to act on a task that
	// changed since.
	seen, _ := ins.Get(ctx, "r1")
	store.Pop(ctx, core.PopParams{Queue: "reports", Lease: time.Minute, N: 1})
	_, err := ins.Remove(ctx, "r1", seen.Version)
	fmt.Println("remove r1:", errors.Is(err, core.ErrConflict))

	// Unconditional actions pass core.AnyVersion.
	removed, _ := ins.Remove(ctx, "r2", core.AnyVersion)
	fmt.Println("removed", removed.ID)

	counts, _ := ins.Counts(ctx)
	fmt.Printf("ready %d, running %d\n", counts.Ready, counts.Running)
	for t, err := range ins.All(ctx, core.Ready) {
		if err != nil {
			panic(err)
		}
		fmt.Println("ready:", t.ID)
	}
	// Output:
	// remove r1: true
	// removed r2
	// ready 1, running 1
	// ready: r3
}

// A handler fences its side effects with its claim's token: a later claim of
// the same task always has a larger token, so a downstream write that keeps
// the largest token it has seen refuses the writes of a superseded claim.
func Example_fencing() {
	ctx := context.Background()
	clock := core.NewFakeClock(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))
	store := memory.New(memory.WithClock(clock))
	q, _ := core.NewQueue(store, "payments", core.WithClock(clock))
	q.Enqueue(ctx, []byte("100"), core.WithID("invoice-7"))

	newest := map[string]uint64{} // the downstream system's fence
	pay := func(c core.Claim) error {
		if c.Token < newest[c.TaskID] {
			return fmt.Errorf("token %d refused: token %d wrote %s", c.Token, newest[c.TaskID], c.TaskID)
		}
		newest[c.TaskID] = c.Token
		return nil
	}

	// Worker A claims the task and stalls past its lease; the broker
	// requeues it; worker B claims it again and pays.
	first, _ := store.Pop(ctx, core.PopParams{Queue: "payments", Lease: 30 * time.Second, N: 1})
	a := first.Tasks[0].Claim()
	clock.Advance(time.Minute)
	b, _ := core.NewBroker(store, core.WithQueues("payments"), core.WithClock(clock),
		core.WithRetryPolicy(core.FixedDelay(0)))
	b.RunOnce(ctx)
	second, _ := store.Pop(ctx, core.PopParams{Queue: "payments", Lease: 30 * time.Second, N: 1})
	bc := second.Tasks[0].Claim()
	fmt.Println("B pays:", pay(bc))
	_, err := store.Ack(ctx, core.AckParams{Claim: bc})
	fmt.Println("B acks:", err)

	// A wakes up: its write is fenced, and its ack is stale.
	fmt.Println("A pays:", pay(a))
	_, err = store.Ack(ctx, core.AckParams{Claim: a})
	fmt.Println("A acks, stale:", errors.Is(err, core.ErrStaleClaim))
	// Output:
	// B pays: <nil>
	// B acks: <nil>
	// A pays: token 2 refused: token 5 wrote invoice-7
	// A acks, stale: true
}

func ExampleBatchStore() {
	ctx := context.Background()
	clock := core.NewFakeClock(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))
	var store core.Store = memory.New(memory.WithClock(clock))
	bs := store.(core.BatchStore) // every adapter of this module is one

	// Each item is answered on its own: the duplicate ID is refused, the
	// others are added, all in one atomic step.
	added, _ := bs.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "mail", Tasks: []model.EnqueueArgs{
		{ID: "a", MaxAttempts: 3}, {ID: "a", MaxAttempts: 3}, {ID: "b", MaxAttempts: 3},
	}})
	for i, it := range added.Items {
		if it.Err != nil {
			fmt.Println("enqueue item", i, "refused, conflict:", errors.Is(it.Err, core.ErrConflict))
			continue
		}
		fmt.Println("enqueue item", i, it.Task.ID, it.Task.State)
	}

	popped, _ := store.Pop(ctx, core.PopParams{Queue: "mail", Lease: time.Minute, N: 2})
	acks := []core.AckItem{}
	for _, t := range popped.Tasks {
		acks = append(acks, core.AckItem{Claim: t.Claim(), Result: []byte("sent")})
	}
	acks = append(acks, acks[0]) // the same claim twice: acknowledged once
	acked, _ := bs.AckBatch(ctx, core.AckBatchParams{Queue: "mail", Acks: acks})
	for i, it := range acked.Items {
		fmt.Println("ack item", i, it.Err == nil, errors.Is(it.Err, core.ErrInvalidTransition))
	}
	// Output:
	// enqueue item 0 a ready
	// enqueue item 1 refused, conflict: true
	// enqueue item 2 b ready
	// ack item 0 true false
	// ack item 1 true false
	// ack item 2 false true
}

func ExampleWithPeriodic() {
	clock := core.NewFakeClock(time.Date(2030, 1, 1, 9, 0, 30, 0, time.UTC))
	store := memory.New(memory.WithClock(clock))
	defer store.Close()

	// Every day at 09:00 UTC, and every 15 minutes. Each occurrence's task ID
	// is the schedule's name and the occurrence time, so every Client that
	// keeps these schedules enqueues each occurrence once between them.
	daily, err := core.Cron("0 9 * * *")
	if err != nil {
		panic(err)
	}
	quarterly, err := core.Every(15 * time.Minute)
	if err != nil {
		panic(err)
	}
	report := func(ctx context.Context, c core.Claim, t core.Task) ([]byte, error) {
		return []byte("sent"), nil
	}
	newClient := func() *core.Client {
		client, err := core.NewClient(store, core.WithClock(clock),
			core.WithQueue("reports", report),
			core.WithPeriodic(
				// Missed while down: skipped (CatchUp 0).
				core.Periodic{Name: "daily-report", Queue: "reports", Schedule: daily},
				// Missed while down: caught up, the last hour's.
				core.Periodic{Name: "sync", Queue: "reports", Schedule: quarterly, CatchUp: time.Hour},
			))
		if err != nil {
			panic(err)
		}
		return client
	}
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	for _, c := range []*core.Client{newClient(), newClient()} {
		running.Go(func() { _ = c.Run(ctx) })
		// Starting at 09:00:30, it catches up 08:15, 08:30, 08:45 and 09:00:
		// the first Client enqueues them, the second finds them taken.
		for st := c.Stats().Scheduler; st.Enqueued+st.Duplicates < 4; st = c.Stats().Scheduler {
			time.Sleep(time.Millisecond)
		}
		st := c.Stats().Scheduler
		fmt.Println("enqueued:", st.Enqueued, "duplicates:", st.Duplicates)
	}
	cancel()
	running.Wait()
	for _, id := range []string{"sync@2030-01-01T08:15:00.000000Z", "sync@2030-01-01T09:00:00.000000Z", "daily-report@2030-01-01T09:00:00.000000Z"} {
		_, err := store.Get(context.Background(), core.GetParams{Queue: "reports", ID: id})
		fmt.Println(id, err == nil)
	}
	// Output:
	// enqueued: 4 duplicates: 0
	// enqueued: 0 duplicates: 4
	// sync@2030-01-01T08:15:00.000000Z true
	// sync@2030-01-01T09:00:00.000000Z true
	// daily-report@2030-01-01T09:00:00.000000Z false
}

func ExampleWithUniqueKey() {
	ctx := context.Background()
	clock := core.NewFakeClock(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))
	store := memory.New(memory.WithClock(clock))
	q, err := core.NewQueue(store, "emails", core.WithClock(clock))
	if err != nil {
		panic(err)
	}

	// One pending digest per user: a second one is refused while the first
	// waits or runs, and the refusal names the task that holds the key.
	first, _ := q.Enqueue(ctx, []byte("digest"), core.WithUniqueKey("digest:ada"))
	_, err = q.Enqueue(ctx, []byte("digest"), core.WithUniqueKey("digest:ada"))
	var dup *core.DuplicateError
	fmt.Println(errors.Is(err, core.ErrConflict), errors.As(err, &dup) && dup.TaskID == first.ID)

	// At most one reminder an hour, whatever becomes of it.
	_, err = q.Enqueue(ctx, []byte("reminder"), core.WithUniqueKey("remind:ada"), core.WithUniqueFor(time.Hour))
	fmt.Println(err)
	clock.Advance(59 * time.Minute)
	_, err = q.Enqueue(ctx, []byte("reminder"), core.WithUniqueKey("remind:ada"), core.WithUniqueFor(time.Hour))
	fmt.Println(errors.Is(err, core.ErrConflict))
	clock.Advance(time.Minute)
	_, err = q.Enqueue(ctx, []byte("reminder"), core.WithUniqueKey("remind:ada"), core.WithUniqueFor(time.Hour))
	fmt.Println(err)
	// Output:
	// true true
	// <nil>
	// true
	// <nil>
}
