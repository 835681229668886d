package spec

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/core"
)

// The tests in this file check that the suite can fail: stores with the bugs
// of the seed reports (and a few more) must be caught by the scenarios that
// describe them, and by Differential.

// staleWorkerStore lets any worker decide a running task, as the SQLite queue
// of seed 001 did: it swaps the caller's token for the task's.
type staleWorkerStore struct{ *ModelStore }

func (s staleWorkerStore) current(c core.Claim) core.Claim {
	if t, err := s.ModelStore.Get(context.Background(), core.GetParams{Queue: c.Queue, ID: c.TaskID}); err == nil && t.State == core.Running {
		c.Token = t.ClaimToken
	}
	return c
}

func (s staleWorkerStore) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	p.Claim = s.current(p.Claim)
	return s.ModelStore.Ack(ctx, p)
}

func (s staleWorkerStore) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	p.Claim = s.current(p.Claim)
	return s.ModelStore.Fail(ctx, p)
}

// unfencedBrokerStore applies a broker's decision whatever happened since
// its claim, as the Redis queue of seed 000 did.
type unfencedBrokerStore struct{ *ModelStore }

func (s unfencedBrokerStore) current(rc core.ReapClaim) core.ReapClaim {
	if t, err := s.ModelStore.Get(context.Background(), core.GetParams{Queue: rc.Queue, ID: rc.TaskID}); err == nil {
		rc.Version = t.Version
	}
	return rc
}

func (s unfencedBrokerStore) Requeue(ctx context.Context, p core.RequeueParams) (core.TaskResult, error) {
	p.ReapClaim = s.current(p.ReapClaim)
	return s.ModelStore.Requeue(ctx, p)
}

func (s unfencedBrokerStore) Finalize(ctx context.Context, p core.FinalizeParams) (core.TaskResult, error) {
	p.ReapClaim = s.current(p.ReapClaim)
	return s.ModelStore.Finalize(ctx, p)
}

// staleBatchAckStore lets a stale claim's item of an AckBatch decide a
// running task, as an AckBatch that skipped the single Ack's token check
// would.
type staleBatchAckStore struct{ staleWorkerStore }

func (s staleBatchAckStore) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	p.Acks = slices.Clone(p.Acks)
	for i := range p.Acks {
		p.Acks[i].Claim = s.current(p.Acks[i].Claim)
	}
	return s.ModelStore.AckBatch(ctx, p)
}

// Ack is the model's own: only the batch is broken.
func (s staleBatchAckStore) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	return s.ModelStore.Ack(ctx, p)
}

// Fail is the model's own: only the batch is broken.
func (s staleBatchAckStore) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	return s.ModelStore.Fail(ctx, p)
}

// staleLockTimeStore shows a task returned to the queue with its old lock
// time, as seed 001's retry() left it.
type staleLockTimeStore struct{ *ModelStore }

func (s staleLockTimeStore) Get(ctx context.Context, p core.GetParams) (core.Task, error) {
	t, err := s.ModelStore.Get(ctx, p)
	if err == nil && (t.State == core.Ready || t.State == core.Scheduled) && t.Attempt > 0 {
		t.ClaimedAt = t.EnqueuedAt
	}
	return t, err
}

// oneAtATimeRecoveryStore recovers one expired task per call, as a loop of
// separate decisions would.
type oneAtATimeRecoveryStore struct{ *ModelStore }

func (s oneAtATimeRecoveryStore) RecoverExpired(ctx context.Context, p core.RecoverExpiredParams) (core.TasksResult, error) {
	p.Limit = 1
	return s.ModelStore.RecoverExpired(ctx, p)
}

type mutantCase struct {
	name   string
	make   func(*ModelStore) core.Store
	caught []string // scenarios that must fail
}

var mutants = []mutantCase{
	{"a stale worker decides", func(m *ModelStore) core.Store { return staleWorkerStore{m} },
		[]string{"StaleWorkerAck", "StaleWorkerFail"}},
	{"broker decisions are not fenced", func(m *ModelStore) core.Store { return unfencedBrokerStore{m} },
		[]string{"WorkerAckRace", "ClaimTakeover", "InspectorRequeueRace"}},
	{"retry leaves the lock time", func(m *ModelStore) core.Store { return staleLockTimeStore{m} },
		[]string{"RetryClearsTimestamps", "StaleWorkerAck"}},
	{"recovery takes one task per call", func(m *ModelStore) core.Store { return oneAtATimeRecoveryStore{m} },
		[]string{"AtomicRecovery"}},
}

func TestScenariosCatchTheSeedBugs(t *testing.T) {
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			var failed []string
			for _, sc := range scenarios {
				clock := core.NewFakeClock(Epoch)
				var msgs []string
				newScenarioRun(m.make(NewModelStore(clock, 0)), NewModelStore(clock, 0), clock, func(format string, args ...any) {
					msgs = append(msgs, fmt.Sprintf(format, args...))
				}).play(sc)
				if len(msgs) > 0 {
					failed = append(failed, sc.Name)
				}
			}
			for _, want := range m.caught {
				if !slices.Contains(failed, want) {
					t.Errorf("scenario %s passes on a store where %s (failing: %v)", want, m.name, failed)
				}
			}
			t.Logf("caught by %v", failed)
		})
	}
	// And none fails on the model itself.
	for _, sc := range scenarios {
		clock := core.NewFakeClock(Epoch)
		newScenarioRun(NewModelStore(clock, 0), NewModelStore(clock, 0), clock, t.Errorf).play(sc)
	}
}

func TestDifferentialCatchesABuggyStore(t *testing.T) {
	for _, name := range []string{"nofailfile", "shrinktime"} {
		f := flag.Lookup("rapid." + name)
		old := f.Value.String()
		value := map[string]string{"nofailfile": "true", "shrinktime": "300ms"}[name]
		if err := f.Value.Set(value); err != nil {
			t.Fatal(err)
		}
		defer f.Value.Set(old)
	}
	batchMutant := mutantCase{name: "a stale claim's batch ack decides", make: func(m *ModelStore) core.Store {
		return staleBatchAckStore{staleWorkerStore{m}}
	}}
	for _, m := range append(mutants[:2:2], batchMutant) {
		t.Run(m.name, func(t *testing.T) {
			h := Harness{Name: m.name, New: func(tb testing.TB, clock core.Clock, capacity int) core.Store {
				return m.make(NewModelStore(clock, capacity))
			}}
			rec := &recordingTB{name: t.Name()}
			done := make(chan struct{})
			go func() {
				defer close(done)
				differential(rec, t, h, nil)
			}()
			<-done
			if !rec.Failed() {
				t.Errorf("Differential passes on a store where %s", m.name)
			}
		})
	}
}

// recordingTB is a rapid.TB that records failure instead of failing the test.
type recordingTB struct {
	name   string
	mu     sync.Mutex
	failed bool
}

func (r *recordingTB) Helper()             {}
func (r *recordingTB) Name() string        { return r.name }
func (r *recordingTB) Logf(string, ...any) {}
func (r *recordingTB) Log(...any)          {}
func (r *recordingTB) Skipf(string, ...any) {
	runtime.Goexit()
}
func (r *recordingTB) Skip(...any)           { runtime.Goexit() }
func (r *recordingTB) SkipNow()              { runtime.Goexit() }
func (r *recordingTB) Errorf(string, ...any) { r.Fail() }
func (r *recordingTB) Error(...any)          { r.Fail() }
func (r *recordingTB) Fatalf(string, ...any) { r.FailNow() }
func (r *recordingTB) Fatal(...any)          { r.FailNow() }
func (r *recordingTB) FailNow()              { r.Fail(); runtime.Goexit() }
func (r *recordingTB) Fail() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}
func (r *recordingTB) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// eagerTxDB is the model's application database, with transactions whose
// store operations the eager function may make beside them.
type eagerTxDB struct {
	*ModelStore
	eager func(s *ModelStore, tx *ModelTx) AppTx
}

func (d eagerTxDB) Begin(ctx context.Context) (AppTx, error) {
	tx, err := d.ModelStore.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return d.eager(d.ModelStore, tx.(*ModelTx)), nil
}

// enqueueBesideTx enqueues on the store itself, committed at once, as an
// EnqueueTx on the store's own connection would.
type enqueueBesideTx struct {
	*ModelTx
	s *ModelStore
}

func (t enqueueBesideTx) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	return t.s.Enqueue(ctx, p)
}

func (t enqueueBesideTx) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	return t.s.EnqueueBatch(ctx, p)
}

// compensatedTx enqueues on the store at once and removes the tasks again
// when the transaction rolls back: no task is left, but the versions they
// drew are gone.
type compensatedTx struct {
	enqueueBesideTx
	ids []string
}

func (t *compensatedTx) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	res, err := t.s.Enqueue(ctx, p)
	if err == nil {
		t.ids = append(t.ids, p.Queue+"/"+p.ID)
	}
	return res, err
}

func (t *compensatedTx) Rollback(ctx context.Context) error {
	for _, qid := range t.ids {
		q, id, _ := strings.Cut(qid, "/")
		if _, err := t.s.Remove(ctx, core.InspectParams{Queue: q, ID: id}); err != nil {
			return err
		}
	}
	return t.ModelTx.Rollback(ctx)
}

// ackBesideTx acks on the store itself, committed at once, as an AckTx in a
// transaction of the store's own would.
type ackBesideTx struct {
	*ModelTx
	s *ModelStore
}

func (t ackBesideTx) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	return t.s.Ack(ctx, p)
}

func TestTxScenariosCatchOpsBesideTheTransaction(t *testing.T) {
	for _, m := range []struct {
		name   string
		eager  func(s *ModelStore, tx *ModelTx) AppTx
		caught []string
	}{
		{"an enqueue is committed beside the transaction", func(s *ModelStore, tx *ModelTx) AppTx { return enqueueBesideTx{tx, s} },
			[]string{"EnqueueTxCommitsWithTheApplication", "EnqueueTxRolledBackLeavesNoTaskAndNoGap", "EnqueueBatchTxCommitsAndRollsBack", "UniqueKeyTakenInARolledBackTxIsFree", "AckTxCommitsWithTheApplication", "StaleAckTxIsRefusedInsideTheTransaction"}},
		{"a rollback removes the tasks an enqueue committed", func(s *ModelStore, tx *ModelTx) AppTx {
			return &compensatedTx{enqueueBesideTx: enqueueBesideTx{tx, s}}
		}, []string{"EnqueueTxRolledBackLeavesNoTaskAndNoGap", "UniqueKeyTakenInARolledBackTxIsFree"}},
		{"an ack is committed beside the transaction", func(s *ModelStore, tx *ModelTx) AppTx { return ackBesideTx{tx, s} },
			[]string{"AckTxCommitsWithTheApplication", "AckTxRolledBackKeepsTheClaim"}},
	} {
		t.Run(m.name, func(t *testing.T) {
			var failed []string
			for _, sc := range txScenarios {
				clock := core.NewFakeClock(Epoch)
				store := NewModelStore(clock, 0)
				var msgs []string
				r := newScenarioRun(store, NewModelStore(clock, 0), clock, func(format string, args ...any) {
					msgs = append(msgs, fmt.Sprintf(format, args...))
				})
				r.db, r.txAck = eagerTxDB{store, m.eager}, true
				r.play(sc)
				if len(msgs) > 0 {
					failed = append(failed, sc.Name)
				}
			}
			for _, want := range m.caught {
				if !slices.Contains(failed, want) {
					t.Errorf("scenario %s passes where %s (failing: %v)", want, m.name, failed)
				}
			}
			t.Logf("caught by %v", failed)
		})
	}
}
