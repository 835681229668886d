package spec

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// TxHarness tells the conformance suite how to open the application's own
// transactions on the database of a store: the capability of an adapter
// whose store works inside a transaction the caller began (SQLite's
// EnqueueTx and EnqueueBatchTx over a *sql.Tx, PostgreSQL's EnqueueTx and
// AckTx over a pgx.Tx). The transaction scenarios (TxScenarios) run only on
// harnesses that give one; the memory and Redis adapters give none, since
// an application has no transaction of theirs to join.
type TxHarness struct {
	// Open returns the application's access to the database of store s
	// (made by the harness's New), with an application table of its own
	// that holds no row yet.
	Open func(tb testing.TB, s core.Store) TxDB
	// Ack says that the adapter acks a claim inside the transaction: every
	// AppTx Open's TxDB begins is a TxAcker. The scenarios that ack in a
	// transaction run only where it is set, and fail where it is set but
	// the transaction cannot ack.
	Ack bool
}

// TxDB is the application's side of a store's database: it begins
// transactions and reads the application's own table.
type TxDB interface {
	// Begin opens a transaction of the application on the database.
	Begin(ctx context.Context) (AppTx, error)
	// HasRow reports whether the application's table holds the row key,
	// read outside any transaction: only what committed.
	HasRow(ctx context.Context, key string) (bool, error)
}

// AppTx is an open transaction of the application and the store operations
// its adapter makes inside it. The operations follow the single operation's
// rules and errors; one that is refused leaves the transaction as it was,
// and the transaction may go on.
type AppTx interface {
	// Enqueue is the adapter's EnqueueTx.
	Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error)
	// Write inserts the row key into the application's table.
	Write(ctx context.Context, key string) error
	// Commit and Rollback end the transaction.
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// TxBatcher is an AppTx whose adapter enqueues a batch in the transaction
// (SQLite's EnqueueBatchTx). Where the transaction is none, a scenario's
// batch is enqueued one Enqueue at a time in the transaction, which the
// model answers alike: a batch's items follow Enqueue's rules in order, at
// one reading of the clock.
type TxBatcher interface {
	EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error)
}

// TxAcker is an AppTx whose adapter acks a claim in the transaction
// (PostgreSQL's AckTx), with Ack's guard checked there.
type TxAcker interface {
	Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error)
}

// errTxEnded is what a ModelTx answers once it has been committed or rolled
// back.
var errTxEnded = errors.New("spec: the transaction has ended")

// ModelTx is an application's transaction on a ModelStore, the model's side
// of an AppTx, as model's package doc describes a transaction: its
// operations are applied in order to the queues as the transaction found
// them and seen by nobody else; Commit makes them the store's at one
// instant, together with the rows written; Rollback drops them all, as if
// none had been called. From its first operation on a queue to its end the
// transaction holds that queue, as the stores' locks do: any other write of
// the queue is refused meanwhile (a store would make it wait), and reads
// see the queue without the transaction's operations.
type ModelTx struct {
	s      *ModelStore
	queues map[string]model.Queue // the queues as the transaction left them
	rows   []string
	done   bool
}

var (
	_ TxDB      = (*ModelStore)(nil)
	_ TxBatcher = (*ModelTx)(nil)
	_ TxAcker   = (*ModelTx)(nil)
)

// Begin implements TxDB: a transaction of the model's application.
func (s *ModelStore) Begin(ctx context.Context) (AppTx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &ModelTx{s: s, queues: map[string]model.Queue{}}, nil
}

// HasRow implements TxDB: whether a committed transaction wrote the row.
func (s *ModelStore) HasRow(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rows[key], nil
}

// apply runs one model input on the transaction's view of the queue.
func (t *ModelTx) apply(ctx context.Context, queue string, in model.Input) (time.Time, model.Output, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, model.Output{}, err
	}
	if err := core.ValidateQueueName(queue); err != nil {
		return time.Time{}, model.Output{}, err
	}
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return time.Time{}, model.Output{}, core.ErrClosed
	case t.done:
		return time.Time{}, model.Output{}, errTxEnded
	case s.held[queue] != nil && s.held[queue] != t:
		return time.Time{}, model.Output{}, fmt.Errorf("spec: queue %s is held by another open transaction", queue)
	}
	q, ok := t.queues[queue]
	if !ok {
		if q, ok = s.queues[queue]; !ok {
			q = model.NewQueue(queue, s.capacity)
		}
	}
	s.held[queue] = t
	in.Now = model.Round(s.clock.Now())
	next, out := model.Apply(q, in)
	if out.Err == nil {
		t.queues[queue] = next
	}
	return in.Now, cloneOutput(out), out.Err
}

// Enqueue implements AppTx.
func (t *ModelTx) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	return taskResult(t.apply(ctx, p.Queue, model.Input{Op: model.OpEnqueue, Enqueue: p.EnqueueArgs}))
}

// EnqueueBatch implements TxBatcher.
func (t *ModelTx) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	return batchResult(t.apply(ctx, p.Queue, model.Input{Op: model.OpEnqueueBatch, Batch: p.Tasks}))
}

// Ack implements TxAcker.
func (t *ModelTx) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	return taskResult(t.apply(ctx, p.Claim.Queue, model.Input{Op: model.OpAck, Claim: p.Claim, Result: p.Result}))
}

// Write implements AppTx.
func (t *ModelTx) Write(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	if t.done {
		return errTxEnded
	}
	t.rows = append(t.rows, key)
	return nil
}

// Commit implements AppTx: the transaction's operations and rows become
// the store's.
func (t *ModelTx) Commit(ctx context.Context) error { return t.end(ctx, true) }

// Rollback implements AppTx: the store is as if the transaction had done
// nothing.
func (t *ModelTx) Rollback(ctx context.Context) error { return t.end(ctx, false) }

func (t *ModelTx) end(ctx context.Context, commit bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.done {
		return errTxEnded
	}
	t.done = true
	for name, q := range t.queues {
		if commit {
			s.queues[name] = q
		}
	}
	for name, h := range s.held {
		if h == t {
			delete(s.held, name)
		}
	}
	if commit {
		for _, key := range t.rows {
			s.rows[key] = true
		}
	}
	return nil
}
