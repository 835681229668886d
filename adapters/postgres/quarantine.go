package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// damagedError is a row the store cannot read: its queue, ID and why. It
// wraps core.ErrCorrupt, which is what an operation that decides on the row
// returns; the scans set the row aside instead (see scanWrite).
type damagedError struct{ queue, id, reason string }

func (e *damagedError) Error() string {
	return fmt.Sprintf("%v: task %q in queue %q: %s", core.ErrCorrupt, e.id, e.queue, e.reason)
}

func (e *damagedError) Unwrap() error { return core.ErrCorrupt }

// quarantinedTask is a damaged row as the reads report it before a scan
// sets it aside: its queue, ID and why.
func (e *damagedError) quarantinedTask() model.Task {
	return model.Task{Queue: e.queue, ID: e.id, State: model.Quarantined, Quarantine: e.reason}
}

// lifeStates lists the five states of a task's life, as SQL.
func lifeStates() string {
	s := make([]string, len(model.States))
	for i, st := range model.States {
		s[i] = fmt.Sprint(int(st))
	}
	return strings.Join(s, ", ")
}

// scanWrite runs a scan (Promote, Pop, ClaimExpired, RecoverExpired) as
// write does. When step meets a damaged row, its transaction rolls back and
// the operation runs again in a new one, in which each damaged row step
// meets is set aside as Quarantined (its state 6, the reason in the
// quarantine column, so in no partial index) and step runs again from a
// savepoint: the operation takes effect once, in one transaction, without
// the damaged rows its scan reached, as the model's scans do. A scan that
// meets none costs what it did before. The rows set aside are listed in
// o.setAside while step runs again (AckBatch judges its items by them).
//
// pipe, when not nil, is the step's piped form for the first attempt (see
// writePiped), whose statements commit with their COMMIT (writeFinal) and
// check the rows they write themselves (soundSQL).
func (s *Store) scanWrite(ctx context.Context, queue string, flags lockFlags, validate func() error, step func(o *opTx) error, pipe ...pipeFunc) (time.Time, error) {
	var now time.Time
	var err error
	if len(pipe) > 0 && pipe[0] != nil {
		// First with the COMMIT sent with the statements, one round trip
		// (see soundSQL); when they met a row they cannot vouch for, that
		// transaction was undone, and the operation runs again in one that
		// commits after its rows are decoded.
		now, err = s.writeFinal(ctx, queue, flags, validate, step, pipe[0])
		if isCode(err, unsureCode) {
			if afterUnsure != nil {
				afterUnsure()
			}
			now, err = s.writePiped(ctx, queue, flags, validate, step, pipe[0])
		}
	} else {
		now, err = s.write(ctx, queue, flags, validate, step)
	}
	var d *damagedError
	if !errors.As(err, &d) {
		return now, err
	}
	return s.write(ctx, queue, flags, validate, func(o *opTx) error {
		defer func() { o.setAside = nil }() // the next operation of the transaction set none aside
		for {
			if _, err := o.tx.Exec(o.ctx, `SAVEPOINT scan`); err != nil {
				return err
			}
			err := step(o)
			var d *damagedError
			if !errors.As(err, &d) {
				if err != nil {
					return err
				}
				_, err = o.tx.Exec(o.ctx, `RELEASE SAVEPOINT scan`)
				return err
			}
			if _, err := o.tx.Exec(o.ctx, `ROLLBACK TO SAVEPOINT scan`); err != nil {
				return err
			}
			if _, err := o.tx.Exec(o.ctx, `RELEASE SAVEPOINT scan`); err != nil {
				return err
			}
			tag, err := o.tx.Exec(o.ctx, s.q.setAside, d.queue, []byte(d.id), d.reason)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return fmt.Errorf("leasehold/postgres: setting aside task %q: %d rows", d.id, tag.RowsAffected())
			}
			o.setAside = append(o.setAside, d.id)
		}
	})
}

// afterUnsure, when set (by tests), runs when an operation's statements
// sent with their COMMIT met a row they could not vouch for, before the
// operation runs again.
var afterUnsure func()

// scanLenient reads every row of rows as a task and closes rows, passing
// over the damaged ones (List): it returns the tasks, the damaged rows
// as quarantined tasks, how many rows it read and the last row's ID.
func scanLenient(rows pgx.Rows, err error) (tasks, damaged []model.Task, n int, last string, _ error) {
	if err != nil {
		return nil, nil, 0, "", err
	}
	defer rows.Close()
	s := newRowScanner()
	for rows.Next() {
		if err := s.scan(rows); err != nil {
			return nil, nil, 0, "", err
		}
		n, last = n+1, string(s.r.id)
		t, err := s.r.decode()
		var d *damagedError
		switch {
		case errors.As(err, &d):
			damaged = append(damaged, d.quarantinedTask())
		case err != nil:
			return nil, nil, 0, "", err
		default:
			tasks = append(tasks, t)
		}
	}
	return tasks, damaged, n, last, rows.Err()
}

// sortedByID sorts tasks by ID, in place, and returns them.
func sortedByID(ts []model.Task) []model.Task {
	slices.SortFunc(ts, func(a, b model.Task) int { return strings.Compare(a.ID, b.ID) })
	return ts
}

// decided is err of a decision, which refuses a damaged row with
// core.ErrCorrupt rather than have scanWrite set it aside.
func decided(err error) error {
	var d *damagedError
	if errors.As(err, &d) {
		return corrupt("task %q in queue %q: %s", d.id, d.queue, d.reason)
	}
	return err
}
