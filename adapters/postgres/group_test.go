package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// holdQueue locks queue's sequence row from a transaction of its own, as
// a long write of another process would, and returns the function that
// releases it.
func holdQueue(t *testing.T, s *postgres.Store, queue string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q := pgx.Identifier{s.Schema()}.Sanitize()
	var seq int64
	if err := tx.QueryRow(ctx, `SELECT seq FROM `+q+`.queues WHERE name = $1 FOR UPDATE`, queue).Scan(&seq); err != nil {
		tx.Rollback(ctx)
		t.Fatal(err)
	}
	return func() {
		if err := tx.Commit(ctx); err != nil {
			t.Error(err)
		}
	}
}

// transactions is the number of transactions that wrote the tasks of
// queue as they are now (the rows one transaction wrote share their xmin).
func transactions(t *testing.T, s *postgres.Store, queue string) int {
	t.Helper()
	var n int
	q := pgx.Identifier{s.Schema()}.Sanitize()
	if err := s.Pool().QueryRow(context.Background(), `SELECT count(DISTINCT xmin::text) FROM `+q+`.tasks WHERE queue = $1`, queue).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWritesWaitingForTheirQueueShareATransaction: while another
// transaction holds the queue's lock, the enqueues of 20 goroutines on one
// store wait in the store; once it is released they commit in two
// transactions (the first enqueue, which was waiting at the lock, then all
// the others) instead of 20, and each still gets its own version of the
// sequence, with no gap and none twice.
func TestWritesWaitingForTheirQueueShareATransaction(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	enqueue(t, s, "q", "first")
	release := holdQueue(t, s, "q")
	const n = 20
	versions := make([]uint64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: fmt.Sprintf("t%02d", i), MaxAttempts: 1}})
			if err != nil {
				t.Errorf("Enqueue %d: %v", i, err)
				return
			}
			versions[i] = res.Task.Version
		})
	}
	time.Sleep(300 * time.Millisecond) // let every goroutine reach the store
	release()
	wg.Wait()
	slices.Sort(versions)
	for i, v := range versions {
		if v != uint64(i)+2 {
			t.Fatalf("versions %v, want 2..%d", versions, n+1)
		}
	}
	for i := range n {
		task, err := s.Get(ctx, core.GetParams{Queue: "q", ID: fmt.Sprintf("t%02d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if task.State != model.Ready {
			t.Errorf("%s: %v, want Ready", task.ID, task.State)
		}
	}
	// The first task's transaction, the one that waited at the lock, and
	// the rest (a goroutine slow to reach the store may have come after).
	if got := transactions(t, s, "q"); got > 1+n/2 {
		t.Errorf("the %d enqueues committed in %d transactions, want them to share", n, got-1)
	}
}

// TestARefusalInASharedTransactionChangesNothingElse: writes that share a
// transaction are answered each on its own: a stale Ack is refused with
// ErrStaleClaim, and the enqueues beside it are kept.
func TestARefusalInASharedTransactionChangesNothingElse(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	enqueue(t, s, "q", "a")
	pop, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	if err != nil || len(pop.Tasks) != 1 {
		t.Fatalf("Pop: %v", err)
	}
	stale := pop.Tasks[0].Claim()
	stale.Token++
	release := holdQueue(t, s, "q")
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range 5 {
		wg.Go(func() {
			_, errs[i] = s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: fmt.Sprintf("b%d", i), MaxAttempts: 1}})
		})
	}
	wg.Go(func() { _, errs[5] = s.Ack(ctx, core.AckParams{Claim: stale}) })
	time.Sleep(300 * time.Millisecond)
	release()
	wg.Wait()
	for i, err := range errs[:5] {
		if err != nil {
			t.Errorf("Enqueue b%d: %v", i, err)
		}
	}
	if !errors.Is(errs[5], core.ErrStaleClaim) {
		t.Errorf("stale Ack: %v, want ErrStaleClaim", errs[5])
	}
	task, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "a"})
	if err != nil || task.State != model.Running || task.Version != pop.Tasks[0].Version {
		t.Errorf("a after the stale Ack: %+v, %v; want it Running at version %d", task, err, pop.Tasks[0].Version)
	}
	c, err := s.Counts(ctx, core.CountsParams{Queue: "q"})
	if err != nil || c.Ready != 5 {
		t.Errorf("Counts: %+v, %v; want the 5 enqueues Ready", c, err)
	}
}

// TestADamagedRowInASharedTransactionFailsOnlyItsOperation: when a write
// meets a damaged row (ErrCorrupt, after its statement wrote), the shared
// transaction is rolled back and every write is run again on its own: the
// enqueues beside it are kept, with versions of their own, and the damaged
// row is left as it was.
func TestADamagedRowInASharedTransactionFailsOnlyItsOperation(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	enqueue(t, s, "q", "a")
	pop, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	if err != nil || len(pop.Tasks) != 1 {
		t.Fatalf("Pop: %v", err)
	}
	q := pgx.Identifier{s.Schema()}.Sanitize()
	if _, err := s.Pool().Exec(ctx, `UPDATE `+q+`.tasks SET errors = '{"a": 1}' WHERE id = 'a'`); err != nil {
		t.Fatal(err)
	}
	release := holdQueue(t, s, "q")
	var wg sync.WaitGroup
	errs := make([]error, 6)
	versions := make([]uint64, 5)
	for i := range 5 {
		wg.Go(func() {
			var res core.TaskResult
			res, errs[i] = s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: fmt.Sprintf("b%d", i), MaxAttempts: 1}})
			versions[i] = res.Task.Version
		})
	}
	wg.Go(func() { _, errs[5] = s.Ack(ctx, core.AckParams{Claim: pop.Tasks[0].Claim()}) })
	time.Sleep(300 * time.Millisecond)
	release()
	wg.Wait()
	for i, err := range errs[:5] {
		if err != nil {
			t.Errorf("Enqueue b%d: %v", i, err)
		}
	}
	if !errors.Is(errs[5], core.ErrCorrupt) {
		t.Errorf("Ack of the damaged task: %v, want ErrCorrupt", errs[5])
	}
	var state int16
	var version int64
	if err := s.Pool().QueryRow(ctx, `SELECT state, version FROM `+q+`.tasks WHERE id = 'a'`).Scan(&state, &version); err != nil {
		t.Fatal(err)
	}
	if model.State(state) != model.Running || uint64(version) != pop.Tasks[0].Version {
		t.Errorf("the damaged row is %v at version %d after the failed Ack, want Running at %d", model.State(state), version, pop.Tasks[0].Version)
	}
	slices.Sort(versions)
	if !slices.Equal(versions, []uint64{3, 4, 5, 6, 7}) {
		t.Errorf("versions of the enqueues %v, want 3..7", versions)
	}
}

// TestAStoreKeepsNothingForQueuesItIsNotWriting: after writes to 40
// queues, 8 at a time, the store holds no group for any of them.
func TestAStoreKeepsNothingForQueuesItIsNotWriting(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5 {
				q := fmt.Sprintf("q%d", (g*5+i)%40)
				for k := range 3 {
					if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: q, EnqueueArgs: model.EnqueueArgs{ID: fmt.Sprintf("g%d-%d-%d", g, i, k), MaxAttempts: 1}}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if n := s.Groups(); n != 0 {
		t.Errorf("the store keeps %d groups after every write returned, want 0", n)
	}
	names, err := s.Queues(ctx)
	if err != nil || len(names) != 40 {
		t.Errorf("Queues: %d names, %v; want 40", len(names), err)
	}
}
