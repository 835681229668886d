package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// EnqueueTx adds a task inside the caller's transaction tx, which must be
// open on the store's database file (sql.Open("sqlite", path) of the same
// path, or the *sql.DB of DB): the task exists if and only if tx commits,
// together with whatever else tx wrote. It has Enqueue's rules and errors,
// and p.ID is required (core.NewID makes one). The queue's sequence is drawn
// inside tx, so a rollback leaves it where it was and no later Pop meets a
// gap or a reissued version. It runs in a savepoint: a refused or failed
// enqueue leaves tx as it was, and tx may go on.
//
// SQLite lets one transaction write at a time. From EnqueueTx until tx
// ends, tx holds the database's write lock, and the store's own writes wait
// for it (up to the busy timeout): keep tx short. Begin tx as a write
// transaction (BEGIN IMMEDIATE: the DSN parameter _txlock=immediate of
// modernc.org/sqlite) so that a write the store commits after tx first read
// cannot make tx fail with SQLITE_BUSY_SNAPSHOT; a tx begun DEFERRED may
// fail so, and must then be retried. Workers learn of the task when they
// next poll.
func (s *Store) EnqueueTx(ctx context.Context, tx *sql.Tx, p core.EnqueueParams) (core.TaskResult, error) {
	res, err := s.EnqueueBatchTx(ctx, tx, core.EnqueueBatchParams{Queue: p.Queue, Tasks: []model.EnqueueArgs{p.EnqueueArgs}})
	if err != nil {
		return core.TaskResult{}, err
	}
	if it := res.Items[0]; it.Err != nil {
		return core.TaskResult{}, it.Err
	}
	return core.TaskResult{Now: res.Now, Task: res.Items[0].Task}, nil
}

// EnqueueBatchTx is EnqueueBatch inside the caller's transaction tx, as
// EnqueueTx describes: each item is applied in order and answered on its
// own, a refused item changes nothing, and the batch fails as a whole (and
// leaves tx as it was) only for the errors of EnqueueBatch itself, a damaged
// sequence or an error of tx.
func (s *Store) EnqueueBatchTx(ctx context.Context, stx *sql.Tx, p core.EnqueueBatchParams) (core.BatchResult, error) {
	if stx == nil {
		return core.BatchResult{}, fmt.Errorf("%w: nil transaction", core.ErrInvalidArgument)
	}
	validate := func() error {
		if err := model.CheckBatchSize(len(p.Tasks)); err != nil {
			return err
		}
		for _, a := range p.Tasks {
			if a.ID == "" {
				return fmt.Errorf("%w: EnqueueTx needs the task's ID", core.ErrInvalidArgument)
			}
		}
		return nil
	}
	if err := s.enter(ctx, p.Queue, validate); err != nil {
		return core.BatchResult{}, err
	}
	defer s.mu.RUnlock()
	c := &sqlTx{ctx: ctx, tx: stx}
	if _, err := c.execFor(nil, `SAVEPOINT leasehold_enqueue`); err != nil {
		return core.BatchResult{}, fmt.Errorf("leasehold/sqlite: savepoint: %w", err)
	}
	now := model.Round(s.clock.Now())
	items := make([]core.ItemResult, len(p.Tasks))
	if err := (tx{s: s, c: c, op: &opState{}, sq: &seqs{caller: true, m: map[string]*seqState{}}}).enqueueBatch(p, now, items); err != nil {
		if _, rerr := c.execFor(nil, `ROLLBACK TO leasehold_enqueue`); rerr != nil {
			err = errors.Join(err, fmt.Errorf("leasehold/sqlite: rollback to savepoint: %w", rerr))
		}
		_, _ = c.execFor(nil, `RELEASE leasehold_enqueue`)
		var redo *redoError
		if errors.As(err, &redo) {
			err = redo.d // a damaged record: the caller's tx cannot set it aside
		}
		return core.BatchResult{}, err
	}
	if _, err := c.execFor(nil, `RELEASE leasehold_enqueue`); err != nil {
		return core.BatchResult{}, fmt.Errorf("leasehold/sqlite: release savepoint: %w", err)
	}
	return core.BatchResult{Now: now, Items: items}, nil
}

// sqlTx runs a transaction's statements on a caller's *sql.Tx.
type sqlTx struct {
	ctx context.Context
	tx  *sql.Tx
}

func (c *sqlTx) execFor(op *opState, q string, args ...any) (driver.Result, error) {
	res, err := c.tx.ExecContext(c.ctx, q, args...)
	if op != nil && (err != nil || res != nil) {
		op.wrote = true
	}
	return res, err
}

func (c *sqlTx) queryFor(op *opState, q string, args ...any) (*rows, error) {
	sr, err := c.tx.QueryContext(c.ctx, q, args...)
	if err != nil {
		return nil, err
	}
	cols, err := sr.Columns()
	if err != nil {
		sr.Close()
		return nil, err
	}
	r := &rows{sr: sr, vals: make([]driver.Value, len(cols)), svals: make([]any, len(cols)), ptrs: make([]any, len(cols))}
	for i := range r.svals {
		r.ptrs[i] = &r.svals[i]
	}
	return r, nil
}
