package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// EnqueueTx adds a task inside the caller's transaction tx: the task exists
// if and only if tx commits, together with whatever else tx wrote. It has
// the rules and errors of Enqueue (p.ID is required). It runs in a
// savepoint, so a refused or failed enqueue leaves tx as it was.
//
// From EnqueueTx until tx ends, tx holds the queue's row lock, which every
// write of that queue takes: keep tx short, and call EnqueueTx last, just
// before Commit. Workers are notified when tx commits. tx should be at the
// READ COMMITTED isolation level (PostgreSQL's default); under REPEATABLE
// READ or SERIALIZABLE a concurrent write of the queue makes EnqueueTx fail
// with a serialization error, and tx must be retried.
func (s *Store) EnqueueTx(ctx context.Context, tx pgx.Tx, p core.EnqueueParams) (core.TaskResult, error) {
	var task model.Task
	now, err := s.writeIn(ctx, tx, p.Queue, lockNotify, func() error { return validEnqueue(p.EnqueueArgs) }, func(o *opTx) (err error) {
		task, err = o.enqueue(p.EnqueueArgs)
		return err
	})
	if err != nil {
		return core.TaskResult{}, err
	}
	return core.TaskResult{Now: now, Task: task}, nil
}

// AckTx records a claim's success inside the caller's transaction tx, with
// the guard of Ack checked there: if the claim no longer holds the task
// (its lease lapsed and a broker or another worker acted), AckTx returns
// ErrStaleClaim and the caller should roll tx back, so its own writes made
// under the lost claim do not commit either. When tx commits, the task is
// Succeeded and the caller's writes are in; when it rolls back, neither
// is. AckTx runs in a savepoint, so a refusal leaves tx as it was.
//
// As with EnqueueTx, tx holds the queue's row lock from AckTx until it
// ends: call AckTx last, just before Commit, at READ COMMITTED.
func (s *Store) AckTx(ctx context.Context, tx pgx.Tx, p core.AckParams) (core.TaskResult, error) {
	return s.workerOp(ctx, tx, 0, model.OpAck, p.Claim, nil, s.q.ack, func(now time.Time) []any {
		return []any{micros(now), clone(p.Result)}
	}, timed{})
}
