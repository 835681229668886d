// Command fencing shows leasehold's claim tokens at work on the in-process
// store: a producer, two workers and a broker pay invoices into a ledger that
// accepts a write only if it carries the newest claim token it has seen for
// that invoice.
//
// Worker A claims invoice-1 and then loses the network: its heartbeats fail
// and its lease lapses. The broker claims the expired task and requeues it;
// worker B claims it with a newer token and pays it. When A's network comes
// back, its next heartbeat is refused, so A's handler context is cancelled
// with a cause saying its claim was superseded; its late write carries the
// old token and the ledger refuses it. Every invoice is paid exactly once.
//
// It runs in about a second: go run ./examples/fencing
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fencing:", err)
		os.Exit(1)
	}
}

const (
	queue    = "invoices"
	invoices = 5
	amount   = 100
)

// ledger is a downstream system the handlers write to. It fences every write
// with the claim token: a write with an older token than the newest it saw
// for the same invoice is refused.
type ledger struct {
	mu     sync.Mutex
	tokens map[string]uint64 // newest token seen per invoice
	paid   map[string]int    // amount paid per invoice
	full   chan struct{}     // closed once every invoice is paid
}

var errFenced = errors.New("write refused: a newer claim wrote this invoice")

func (l *ledger) pay(invoice string, token uint64, amount int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if last := l.tokens[invoice]; token < last {
		return fmt.Errorf("%s: token %d is older than token %d: %w", invoice, token, last, errFenced)
	}
	l.tokens[invoice] = token
	// The payment is idempotent per invoice: a retry by the same or a newer
	// claim does not pay twice.
	l.paid[invoice] = amount
	if len(l.paid) == invoices && !isClosed(l.full) {
		close(l.full)
	}
	return nil
}

// partitionable is a store seen through a network that can fail: while cut
// is set, heartbeats do not reach the store.
type partitionable struct {
	core.Store
	cut atomic.Bool
}

var errUnreachable = errors.New("store unreachable")

func (p *partitionable) Extend(ctx context.Context, e core.ExtendParams) (core.TaskResult, error) {
	if p.cut.Load() {
		return core.TaskResult{}, errUnreachable
	}
	return p.Store.Extend(ctx, e)
}

// printer serializes the program's output lines.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}

func run(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	say := (&printer{w: out}).say
	store := memory.New()
	defer store.Close()
	book := &ledger{tokens: map[string]uint64{}, paid: map[string]int{}, full: make(chan struct{})}

	// Short durations so that the program runs in about a second.
	const lease, beat = 300 * time.Millisecond, 100 * time.Millisecond
	workerOpts := []core.WorkerOption{
		core.WithLease(lease), core.WithHeartbeat(beat),
		core.WithPollInterval(10*time.Millisecond, 50*time.Millisecond),
	}

	// The producer.
	q, err := core.NewQueue(store, queue)
	if err != nil {
		return err
	}
	enqueue := func(i int) error {
		_, err := q.Enqueue(ctx, fmt.Appendf(nil, "%d", amount), core.WithID(fmt.Sprintf("invoice-%d", i)))
		return err
	}
	if err := enqueue(1); err != nil {
		return err
	}
	say("producer: enqueued invoice-1")

	// Worker A claims invoice-1, then loses the network.
	netA := &partitionable{Store: store}
	claimedA, healA := make(chan core.Claim, 1), make(chan struct{})
	doneA := make(chan error, 1)
	a, err := core.NewWorker(netA, queue, func(ctx context.Context, c core.Claim, t core.Task) ([]byte, error) {
		if c.TaskID != "invoice-1" || c.Attempt > 1 {
			return nil, book.pay(c.TaskID, c.Token, amount)
		}
		netA.cut.Store(true)
		claimedA <- c
		<-healA
		netA.cut.Store(false)
		// The next heartbeat reaches the store and learns the claim is gone.
		<-ctx.Done()
		say("worker A: %v", context.Cause(ctx))
		// A write that was already on its way carries the old token.
		err := book.pay(c.TaskID, c.Token, amount)
		say("worker A: late write: %v", err)
		doneA <- err
		return nil, context.Cause(ctx)
	}, append(workerOpts, core.WithConcurrency(1))...)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = a.Run(ctx) })
	c := <-claimedA
	say("worker A: claimed %s with token %d; the network fails", c.TaskID, c.Token)

	// The broker requeues tasks whose lease lapsed, at once.
	b, err := core.NewBroker(store, core.WithQueues(queue), core.WithInterval(50*time.Millisecond),
		core.WithRetryPolicy(func(t core.Task, err error) (time.Duration, bool) {
			say("broker: the lease of %s expired (%d lease loss); requeueing it", t.ID, t.LeaseLosses())
			return 0, true
		}))
	if err != nil {
		return err
	}
	brokerCtx, stopBroker := context.WithCancel(ctx)
	defer stopBroker()
	wg.Go(func() { _ = b.Run(brokerCtx) })

	// Worker B pays the other invoices, and invoice-1 once it is requeued.
	for i := 2; i <= invoices; i++ {
		if err := enqueue(i); err != nil {
			return err
		}
	}
	say("producer: enqueued invoice-2 to invoice-%d", invoices)
	bw, err := core.NewWorker(store, queue, func(ctx context.Context, c core.Claim, t core.Task) ([]byte, error) {
		if err := book.pay(c.TaskID, c.Token, amount); err != nil {
			return nil, err
		}
		if c.TaskID == "invoice-1" {
			say("worker B: paid invoice-1 with token %d; worker A's network comes back", c.Token)
			close(healA)
		}
		return []byte("paid"), nil
	}, append(workerOpts, core.WithConcurrency(2))...)
	if err != nil {
		return err
	}
	wg.Go(func() { _ = bw.Run(ctx) })

	select {
	case <-book.full:
	case <-time.After(10 * time.Second):
		return errors.New("the invoices were not paid within 10s")
	}
	lateErr := <-doneA

	// Shut down: workers first (they finish or give back what they hold),
	// then the broker.
	for _, w := range []*core.Worker{a, bw} {
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		err := w.Shutdown(sctx)
		scancel()
		if err != nil {
			return fmt.Errorf("shutdown: %w", err)
		}
	}
	stopBroker()
	wg.Wait()

	ins, err := core.NewInspector(store, queue)
	if err != nil {
		return err
	}
	counts, err := ins.Counts(ctx)
	if err != nil {
		return err
	}
	total := 0
	for _, v := range book.paid {
		total += v
	}
	say("ledger: %d invoices paid, %d in total; %d tasks succeeded", len(book.paid), total, counts.Succeeded)
	sa, sb := a.Stats(), bw.Stats()
	say("worker A: %d acked, %d lease lost; worker B: %d acked; broker: %d requeued, %d stale decisions",
		sa.Acked, sa.LeasesLost, sb.Acked, b.Stats().Requeued, b.Stats().StaleDropped)

	switch {
	case !errors.Is(lateErr, errFenced):
		return fmt.Errorf("worker A's late write was not fenced: %v", lateErr)
	case len(book.paid) != invoices || total != invoices*amount || counts.Succeeded != invoices:
		return fmt.Errorf("ledger %v and counts %+v: want every invoice paid once", book.paid, counts)
	case sa.LeasesLost != 1:
		return fmt.Errorf("worker A lost %d leases, want 1", sa.LeasesLost)
	}
	return nil
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
