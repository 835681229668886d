package sqlite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

var _ core.BatchStore = (*Store)(nil)

// EnqueueBatch implements core.BatchStore: the tasks are added in one
// transaction, in order, each with the checks and the statements of Enqueue
// (an ID already taken, also by an earlier item, is ErrConflict; a full queue
// ErrQueueFull), and each is answered on its own. A refused item writes
// nothing, so it needs no savepoint. An error that is not an item's own (a
// damaged row, the transport) fails the whole batch, which then changes
// nothing.
func (s *Store) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	items := make([]core.ItemResult, len(p.Tasks))
	now, err := s.write(ctx, p.Queue, func() error { return model.CheckBatchSize(len(p.Tasks)) }, func(t tx, now time.Time) error {
		clear(items) // the writer may run an operation again in a new transaction
		return t.enqueueBatch(p, now, items)
	})
	if err != nil {
		return core.BatchResult{}, err
	}
	return core.BatchResult{Now: now, Items: items}, nil
}

// enqueueBatch adds the tasks of p in order, answering each in items, and
// advances the sequence once for those added. It returns an error that is
// not an item's own.
func (t tx) enqueueBatch(p core.EnqueueBatchParams, now time.Time, items []core.ItemResult) error {
	base, err := t.base(p.Queue)
	if err != nil {
		return err
	}
	pending, added := -1, 0
	for i, a := range p.Tasks {
		if err := validEnqueue(a); err != nil {
			items[i].Err = err
			continue
		}
		task, err := t.enqueue(p.Queue, a, now, base+int64(added)+1, &pending)
		if err != nil && !isItemError(err) {
			return err
		}
		items[i] = core.ItemResult{Task: task, Err: err}
		if err == nil {
			added++
		}
	}
	if added == 0 {
		return nil
	}
	return t.advance(p.Queue, base+int64(added))
}

// AckBatch implements core.BatchStore: the claims are acknowledged in one
// transaction, in order, each by an UPDATE with the guard of Ack (task ID,
// claim token, a state Ack is legal from) and, when it matches no row, the
// diagnosis of Ack; each is answered on its own. The versions are drawn from
// the queue's sequence in order, and the sequence advances once for the
// successful items. With a pop (p.Pop.N not 0), the same transaction then
// claims the next Ready tasks with Pop's statements, after the acks: one
// transaction and one commit for both. An item that names a damaged record
// is answered ErrCorrupt, whatever its token, and leaves the record as it
// is (when its statement matched the record, the transaction is undone and
// the batch runs again without that item, whose claim that transaction
// diagnoses again: ErrStaleClaim if the record was set aside meanwhile);
// the other items are decided as if it were not there. An error that is not an item's own (the transport,
// a damaged sequence) fails the whole batch, which then changes nothing.
func (s *Store) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	validate := func() error {
		if err := model.CheckBatchSize(len(p.Acks)); err != nil {
			return err
		}
		for i, a := range p.Acks {
			if err := model.ValidateAckBatchItem(p.Queue, i, a.Claim); err != nil {
				return err
			}
		}
		return model.ValidateAckPop(p.Pop.Lease, p.Pop.N)
	}
	items := make([]core.ItemResult, len(p.Acks))
	var claimed []model.Task
	damaged := map[string]*damagedError{} // the items' damaged records met so far
	fn := func(t tx, now time.Time) error {
		clear(items)
		claimed = nil
		// The acks are stamped with the sequence's next values, in order,
		// and the claims after them; the sequence is drawn once for both.
		base, err := t.base(p.Queue)
		if err != nil {
			return err
		}
		acked, err := t.ackItems(p, items, damaged, base, now)
		if err != nil {
			return err
		}
		if acked > 0 {
			if err := t.advance(p.Queue, base+int64(acked)); err != nil {
				return err
			}
		}
		if p.Pop.N == 0 {
			return nil
		}
		claimed, err = s.pop(t, p.Queue, p.Pop.Lease, p.Pop.N, now)
		return err
	}
	for {
		now, err := s.write(ctx, p.Queue, validate, fn)
		var di *damagedItem
		if errors.As(err, &di) && damaged[di.d.id] == nil {
			damaged[di.d.id] = di.d
			if afterDamagedItem != nil {
				afterDamagedItem()
			}
			continue
		}
		if err != nil {
			return core.BatchResult{}, err
		}
		return core.BatchResult{Now: now, Items: items, Claimed: claimed}, nil
	}
}

// ackItems acknowledges the claims of p in order, each answered in items,
// stamping those that succeed with the sequence's values after base, and
// returns how many succeeded. The claims that are valid and whose records
// were not met damaged before run several to a statement (ackMany) when
// they name distinct tasks, else one by one; the others are answered first
// (their answers read only their own records). It returns an error that
// is not an item's own.
func (t tx) ackItems(p core.AckBatchParams, items []core.ItemResult, damaged map[string]*damagedError, base int64, now time.Time) (int, error) {
	var run []int // the items to acknowledge, in order
	for i, a := range p.Acks {
		c := a.Claim
		if err := validClaim(c); err != nil {
			items[i].Err = err
			continue
		}
		if damaged[c.TaskID] != nil {
			// An earlier attempt met its damaged record: it is
			// answered as of this transaction, since a scan may have
			// set the record aside in between (a claim on a record
			// set aside is ErrStaleClaim).
			err := t.diagnoseClaim(model.OpAck, c)
			var d *damagedError
			if !isItemError(err) && !errors.As(err, &d) {
				return 0, err
			}
			items[i].Err = err
			continue
		}
		run = append(run, i)
	}
	seen := make(map[string]bool, len(run))
	for _, i := range run {
		id := p.Acks[i].Claim.TaskID
		if seen[id] {
			// A task named twice: the second claim is judged after the
			// first changed the task, so each runs its own statement.
			return t.ackEach(p, run, items, base, now)
		}
		seen[id] = true
	}
	acked := 0
	for len(run) > 0 {
		chunk := run[:min(len(run), ackManyMax)]
		run = run[len(chunk):]
		var n int
		var err error
		if len(chunk) == 1 {
			n, err = t.ackEach(p, chunk, items, base+int64(acked), now)
		} else {
			n, err = t.ackMany(p, chunk, items, base+int64(acked), now)
		}
		if err != nil {
			return 0, err
		}
		acked += n
	}
	return acked, nil
}

// ackEach acknowledges the items run of p one statement each (ackItem), in
// order, and returns how many succeeded.
func (t tx) ackEach(p core.AckBatchParams, run []int, items []core.ItemResult, base int64, now time.Time) (int, error) {
	acked := 0
	for _, i := range run {
		c := p.Acks[i].Claim
		v := base + int64(acked) + 1
		task, found, err := t.ackItem(p.Queue, c, p.Acks[i].Result, now, v)
		var d *damagedError
		if errors.As(err, &d) && d.id == c.TaskID {
			// The statement matched the record and changed it:
			// undone with the transaction, and run again without it.
			return 0, &damagedItem{d}
		}
		if err != nil {
			return 0, t.stamped(p.Queue, err)
		}
		if !found {
			if err := t.refused(c, items, i); err != nil {
				return 0, err
			}
			continue
		}
		if task.Version != uint64(v) {
			return 0, corrupt("queue %q: task %q acknowledged with version %d, want %d", p.Queue, c.TaskID, task.Version, v)
		}
		items[i].Task = task
		acked++
	}
	return acked, nil
}

// ackMany acknowledges the items run of p, which name distinct tasks, in
// one statement (sqlAckMany), and returns how many succeeded. Each claim
// the statement did not match is then diagnosed as Ack diagnoses it: a
// diagnosis reads its own task only, which the statement left as it was.
func (t tx) ackMany(p core.AckBatchParams, run []int, items []core.ItemResult, base int64, now time.Time) (int, error) {
	args := make([]any, 3, 3+3*len(run))
	args[0], args[1], args[2] = p.Queue, micros(now), base
	for _, i := range run {
		a := p.Acks[i]
		args = append(args, a.Claim.TaskID, int64(a.Claim.Token), blob(a.Result))
	}
	var known [numColumns]any
	known[colQueue], known[colState], known[colFinishedAt] = p.Queue, int64(model.Succeeded), micros(now)
	rows, err := t.query(sqlAckMany[len(run)], args...)
	ts, err := scanReturned(ackManyReturned, &known, rows, err)
	var d *damagedError
	if errors.As(err, &d) && slices.ContainsFunc(run, func(i int) bool { return p.Acks[i].Claim.TaskID == d.id }) {
		// The statement matched the record and changed it: undone with
		// the transaction, and run again without it.
		return 0, &damagedItem{d}
	}
	if err != nil {
		return 0, t.stamped(p.Queue, err)
	}
	got := make(map[string]model.Task, len(ts))
	for _, task := range ts {
		got[task.ID] = task
	}
	acked := 0
	for _, i := range run {
		c := p.Acks[i].Claim
		task, ok := got[c.TaskID]
		if !ok {
			if err := t.refused(c, items, i); err != nil {
				return 0, err
			}
			continue
		}
		v := base + int64(acked) + 1
		if task.Version != uint64(v) || task.ClaimToken != c.Token {
			return 0, corrupt("queue %q: task %q acknowledged with version %d and token %d, want %d and %d", p.Queue, c.TaskID, task.Version, task.ClaimToken, v, c.Token)
		}
		task.Result = clone(p.Acks[i].Result)
		items[i].Task = task
		acked++
	}
	if len(ts) != acked { // a row twice, or one of a task it was not given
		return 0, corrupt("queue %q: %d claims acknowledged %d rows", p.Queue, acked, len(ts))
	}
	return acked, nil
}

// refused answers item i, the claim c, which its statement did not match,
// with Ack's diagnosis, or returns the error that is not an item's own.
func (t tx) refused(c model.Claim, items []core.ItemResult, i int) error {
	err := t.diagnoseClaim(model.OpAck, c)
	if !isItemError(err) {
		return err
	}
	items[i].Err = err
	return nil
}

// afterDamagedItem, when set (by tests), runs when an AckBatch is about to
// run again without an item whose damaged record it met.
var afterDamagedItem func()

// ackItem runs the guarded UPDATE of one AckBatch item, stamping the task
// with version v, and returns the task as it leaves it; found is false when
// the statement matched no row. The statement returns only the columns it
// neither sets nor matches (ackReturned): the others are the claim's and
// the values bound.
func (t tx) ackItem(queue string, c model.Claim, result []byte, now time.Time, v int64) (task model.Task, found bool, err error) {
	var known [numColumns]any
	known[colQueue], known[colID], known[colClaimToken] = queue, c.TaskID, int64(c.Token)
	known[colState], known[colVersion] = int64(model.Succeeded), v
	known[colFinishedAt], known[colResult] = micros(now), blob(clone(result))
	rows, err := t.query(sqlAckReturned, withVersion([]any{queue, c.TaskID, int64(c.Token), micros(now), blob(result)}, v)...)
	ts, err := scanReturned(ackReturned, &known, rows, err)
	switch {
	case err != nil:
		return model.Task{}, false, err
	case len(ts) == 0:
		return model.Task{}, false, nil
	case len(ts) > 1:
		return model.Task{}, false, fmt.Errorf("leasehold/sqlite: one statement changed %d tasks", len(ts))
	}
	return ts[0], true, nil
}

// damagedItem is what AckBatch's step returns when an item's statement met
// its damaged record: the transaction is undone and the batch runs again
// with that item answered ErrCorrupt.
type damagedItem struct{ d *damagedError }

func (e *damagedItem) Error() string { return e.d.Error() }

func (e *damagedItem) Unwrap() error { return e.d }

// isItemError reports whether err is one of the model's refusals, which
// refuse one item of a batch and change nothing.
func isItemError(err error) bool {
	return model.Kind(err) != nil
}
