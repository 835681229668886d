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

// limitArg turns the model's "0: no limit" into SQL's LIMIT NULL.
func limitArg(limit int) *int64 {
	if limit == 0 {
		return nil
	}
	v := int64(limit)
	return &v
}

// byVersion sorts tasks stamped by one statement into the order the model
// stamps them (RETURNING gives rows in no particular order).
func byVersion(ts []model.Task) {
	slices.SortFunc(ts, func(a, b model.Task) int {
		switch {
		case a.Version < b.Version:
			return -1
		case a.Version > b.Version:
			return 1
		}
		return 0
	})
}

// oneTask runs a statement that changes at most one task and returns it.
// found is false when the statement matched no row.
func (o *opTx) oneTask(q string, args ...any) (task model.Task, found bool, err error) {
	ts, err := scanTasks(o.tx.Query(o.ctx, q, args...))
	if err != nil {
		return model.Task{}, false, err
	}
	switch len(ts) {
	case 0:
		return model.Task{}, false, nil
	case 1:
		return ts[0], true, nil
	}
	return model.Task{}, false, fmt.Errorf("leasehold/postgres: one statement changed %d tasks", len(ts))
}

// probe reads what the guards look at; found is false when the task does
// not exist.
func (o *opTx) probe(id string) (state model.State, token, version uint64, found bool, err error) {
	return probeRow(o.tx.QueryRow(o.ctx, o.s.q.probe, o.queue, []byte(id)), o.queue, id)
}

// failedCancelled is the state probeRow gives a task an operator cancelled:
// Failed, for every guard but a worker's (see claimRefusal and transition).
const failedCancelled model.State = 0xF0

// probeRow reads the answer of the probe statement.
func probeRow(row pgx.Row, queue, id string) (state model.State, token, version uint64, found bool, err error) {
	var st int16
	var tok, ver int64
	err = row.Scan(&st, &tok, &ver)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, 0, false, err
	}
	if st == -int16(model.Failed) && tok >= 0 && ver >= 1 {
		return failedCancelled, uint64(tok), uint64(ver), true, nil
	}
	if st < int16(model.Scheduled) || st > int16(model.Failed) {
		// Set aside, or a state that is none: a record without a version
		// or token anyone may name.
		return model.Quarantined, 0, 0, true, nil
	}
	if tok < 0 || ver < 1 {
		return 0, 0, 0, false, corrupt("task %q in queue %q: state %d, token %d, version %d", id, queue, st, tok, ver)
	}
	return model.State(st), uint64(tok), uint64(ver), true, nil
}

// --- producer and mover ------------------------------------------------------

// validEnqueue is the model's check of Enqueue's arguments.
var validEnqueue = model.ValidateEnqueue

// Enqueue implements core.Store.
func (s *Store) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	var task model.Task
	var pipe pipeFunc
	if p.UniqueKey == "" {
		pipe = s.pipedEnqueue(p, &task)
	}
	write := s.writePiped
	if pipe != nil {
		write = s.writeFinal
	}
	now, err := write(ctx, p.Queue, lockNotify, func() error { return validEnqueue(p.EnqueueArgs) }, func(o *opTx) (err error) {
		task, err = o.enqueue(p.EnqueueArgs)
		return err
	}, pipe)
	if err != nil {
		return core.TaskResult{}, err
	}
	return core.TaskResult{Now: now, Task: task}, nil
}

// pipedEnqueue is the Enqueue of a task without a unique key sent with the
// lock: the statement of o.enqueue with its times from txNow, and the read
// of the ID that says why when it added nothing. A task with a key is
// checked against the key's holder first, which needs the clock reading,
// so it is not sent so.
func (s *Store) pipedEnqueue(p core.EnqueueParams, task *model.Task) pipeFunc {
	return func(o *opTx, b *pgx.Batch) func(pgx.BatchResults) error {
		// The statement of o.enqueue with its times from txNow, and the
		// read of the ID that says why when it added nothing.
		args := o.enqueueArgs(o.newTask(p.EnqueueArgs))
		args[4], args[6] = int16(model.Ready), int64(0)
		b.Queue(s.q.enqueueNow, args...)
		b.Queue(s.q.probe, o.queue, []byte(p.ID))
		return func(res pgx.BatchResults) error {
			var v int64
			err := res.QueryRow().Scan(&v)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			inserted := err == nil
			_, _, _, found, perr := probeRow(res.QueryRow(), o.queue, p.ID)
			if !inserted {
				return o.enqueueRefusal(p.ID, found, perr)
			}
			*task = o.newTask(p.EnqueueArgs)
			task.Version = uint64(v)
			return nil
		}
	}
}

// newTask is the task an Enqueue of a makes, but for its version.
func (o *opTx) newTask(a model.EnqueueArgs) model.Task {
	task := model.Task{
		Queue: o.queue, ID: a.ID, Payload: clone(a.Payload), Priority: a.Priority,
		MaxAttempts: a.MaxAttempts, Timeout: a.Timeout, EnqueuedAt: o.now,
		UniqueKey: a.UniqueKey, UniqueUntil: model.UniqueUntil(o.now, a.UniqueFor),
	}
	task.RunAfter = model.Round(a.RunAfter)
	task.State = queuedState(o.now, task.RunAfter)
	return task
}

// enqueueArgs are the parameters of the enqueue statement for task.
func (o *opTx) enqueueArgs(task model.Task) []any {
	var capacity *int64
	if o.s.capacity > 0 {
		c := int64(o.s.capacity)
		capacity = &c
	}
	var key []byte
	if task.UniqueKey != "" {
		key = []byte(task.UniqueKey)
	}
	return []any{o.queue, []byte(task.ID), task.Payload, int32(task.Priority), int16(task.State),
		int64(task.MaxAttempts), micros(o.now), micros(task.RunAfter), capacity, int64(task.Timeout),
		key, micros(task.UniqueUntil)}
}

// enqueueRefusal says why the enqueue statement added nothing, from the
// probe of the ID that followed it: the model looks at the ID first, then
// at the queue's room.
func (o *opTx) enqueueRefusal(id string, found bool, perr error) error {
	switch {
	case errors.Is(perr, core.ErrCorrupt) || found:
		return fmt.Errorf("%w: task %q already exists", core.ErrConflict, id)
	case perr != nil:
		return perr
	}
	return fmt.Errorf("%w: %d pending tasks", core.ErrQueueFull, o.s.capacity)
}

// enqueue adds one task whose arguments are valid, with the model's checks
// in its order: the ID is free, then no other task holds the unique key
// (only for a task that has one), then the queue has room. A refused task
// writes nothing.
func (o *opTx) enqueue(a model.EnqueueArgs) (model.Task, error) {
	task := o.newTask(a)
	if a.UniqueKey != "" {
		switch _, _, _, found, perr := o.probe(a.ID); {
		case errors.Is(perr, core.ErrCorrupt) || found:
			return model.Task{}, fmt.Errorf("%w: task %q already exists", core.ErrConflict, a.ID)
		case perr != nil:
			return model.Task{}, perr
		}
		if holder, held, err := o.keyHolder(a.UniqueKey); err != nil {
			return model.Task{}, err
		} else if held {
			return model.Task{}, &model.DuplicateError{Key: a.UniqueKey, TaskID: holder}
		}
	}
	var v int64
	err := o.tx.QueryRow(o.ctx, o.s.q.enqueue, o.enqueueArgs(task)...).Scan(&v)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		_, _, _, found, perr := o.probe(a.ID)
		return model.Task{}, o.enqueueRefusal(a.ID, found, perr)
	case err != nil:
		return model.Task{}, err
	}
	task.Version = uint64(v)
	if a.UniqueKey != "" {
		if _, err := o.tx.Exec(o.ctx, o.s.q.takeKey, o.queue, []byte(a.UniqueKey), []byte(a.ID)); err != nil {
			return model.Task{}, err
		}
	}
	return task, nil
}

// keyHolder returns the task that holds the unique key at o.now, if one
// does (model.Queue.KeyHolder): the key's last taker, if it still exists,
// is not set aside, carries the key and its hold lasts.
func (o *opTx) keyHolder(key string) (string, bool, error) {
	var (
		id, k []byte
		state *int16
		until *int64
	)
	err := o.tx.QueryRow(o.ctx, o.s.q.keyHolder, o.queue, []byte(key)).Scan(&id, &state, &k, &until)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if state == nil || *state < int16(model.Scheduled) || *state > int16(model.Failed) || k == nil {
		return "", false, nil // gone, set aside, or a state that is none
	}
	holder := model.Task{ID: string(id), State: model.State(*state), UniqueKey: string(k), UniqueUntil: fromNullMicros(until)}
	if holder.UniqueKey != key || !holder.HoldsKey(o.now) {
		return "", false, nil
	}
	return holder.ID, true, nil
}

// Promote implements core.Store.
func (s *Store) Promote(ctx context.Context, p core.PromoteParams) (core.IDsResult, error) {
	validate := func() error { return model.ValidateLimit(p.Limit) }
	var ids []string
	now, err := s.scanWrite(ctx, p.Queue, 0, validate, func(o *opTx) error {
		ids = []string{}
		if !o.has {
			return nil
		}
		got, err := scanTasks(o.tx.Query(o.ctx, s.q.promote, p.Queue, o.now.UnixMicro(), limitArg(p.Limit)))
		if err != nil {
			return err
		}
		byVersion(got)
		for _, t := range got {
			ids = append(ids, t.ID)
		}
		if len(ids) > 0 {
			return o.notify()
		}
		return nil
	})
	if err != nil {
		return core.IDsResult{}, err
	}
	return core.IDsResult{Now: now, IDs: ids}, nil
}

// --- worker ------------------------------------------------------------------

// Pop implements core.Store.
func (s *Store) Pop(ctx context.Context, p core.PopParams) (core.TasksResult, error) {
	validate := func() error {
		if err := model.ValidateLease(p.Lease); err != nil {
			return err
		}
		return model.ValidatePopSize(p.N)
	}
	var tasks []model.Task
	var pipe pipeFunc
	if s.popMode == PopUpdateReturning {
		pipe = func(o *opTx, b *pgx.Batch) func(pgx.BatchResults) error {
			return o.popPiped(p.Lease, p.N, b, &tasks)
		}
	}
	now, err := s.scanWrite(ctx, p.Queue, 0, validate, func(o *opTx) (err error) {
		tasks, err = o.pop(p.Lease, p.N)
		return err
	}, pipe)
	if err != nil {
		return core.TasksResult{}, err
	}
	return core.TasksResult{Now: now, Tasks: tasks}, nil
}

// pop claims up to n Ready tasks in the operation's transaction, as Pop does
// (and AckBatch's pop).
func (o *opTx) pop(lease time.Duration, n int) ([]model.Task, error) {
	if !o.has || o.paused { // the flag was read under the queue's lock
		return []model.Task{}, nil
	}
	deadline := model.Round(o.now.Add(lease))
	if o.s.popMode == PopSelectSkipLocked {
		return o.popSelect(n, deadline)
	}
	return o.popReturning(n, deadline)
}

// popPiped is popReturning sent with the lock: its statement, with its now
// and deadline from txNow (now is whole microseconds, so the deadline is
// now plus the lease's whole microseconds, as model.Round gives). The
// function it returns reads the claimed tasks into dst.
func (o *opTx) popPiped(lease time.Duration, n int, b *pgx.Batch, dst *[]model.Task) func(pgx.BatchResults) error {
	stmt := o.s.q.popNow
	if o.final {
		stmt = o.s.q.popNowFinal
	}
	b.Queue(stmt, o.queue, n, int64(0), int64(lease/time.Microsecond))
	return func(res pgx.BatchResults) error {
		rows, err := res.Query()
		tasks, err := scanTasksN(rows, err, n)
		if err != nil {
			return err
		}
		byVersion(tasks)
		if tasks == nil {
			tasks = []model.Task{}
		}
		*dst = tasks
		return nil
	}
}

// popReturning claims the first n Ready tasks with one UPDATE … RETURNING.
func (o *opTx) popReturning(n int, deadline time.Time) ([]model.Task, error) {
	rows, err := o.tx.Query(o.ctx, o.s.q.popReturning, o.queue, n, micros(o.now), micros(deadline))
	tasks, err := scanTasksN(rows, err, n)
	if err != nil {
		return nil, err
	}
	byVersion(tasks)
	if tasks == nil {
		tasks = []model.Task{}
	}
	return tasks, nil
}

// popSelect selects the first n Ready tasks with SELECT … FOR UPDATE SKIP
// LOCKED, then claims them with one UPDATE.
func (o *opTx) popSelect(n int, deadline time.Time) ([]model.Task, error) {
	tasks, err := scanTasks(o.tx.Query(o.ctx, o.s.q.popSelect, o.queue, n))
	if err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return []model.Task{}, nil
	}
	ids := make([][]byte, len(tasks))
	for i, t := range tasks {
		ids[i] = []byte(t.ID)
	}
	var claimed, first int64
	if err := o.tx.QueryRow(o.ctx, o.s.q.popClaim, o.queue, ids, micros(o.now), micros(deadline)).Scan(&claimed, &first); err != nil {
		return nil, err
	}
	if claimed != int64(len(tasks)) {
		return nil, fmt.Errorf("leasehold/postgres: pop: %d of %d selected tasks claimed", claimed, len(tasks))
	}
	for i := range tasks {
		c := &tasks[i]
		v := uint64(first) + uint64(i)
		c.Version, c.ClaimToken = v, v
		c.State = model.Running
		c.Attempt++
		c.ClaimedAt, c.Deadline = o.now, deadline
	}
	return tasks, nil
}

// validClaim is the model's check of a worker claim's arguments.
var validClaim = model.ValidateClaim

// timed is a worker decision's statement with its times as offsets from
// txNow (atTxNow), and its arguments after queue, ID and token.
type timed struct {
	stmt string
	args []any
}

// workerOp runs a worker's decision: q is an UPDATE guarded by task ID,
// claim token and state whose first three parameters are queue, ID and
// token. When it matches no row, the same transaction finds out why and
// the operation changes nothing. In a transaction of the store's own, the
// decision is piped.stmt instead, sent with the lock, and the read of the
// task that says why it matched no row goes with it, and so does the
// COMMIT (decide): one round trip, where q, which needs the clock's
// reading first, takes three.
func (s *Store) workerOp(ctx context.Context, tx pgx.Tx, flags lockFlags, op model.Op, c model.Claim, validate func() error, q string, args func(now time.Time) []any, piped timed) (core.TaskResult, error) {
	var task model.Task
	var ofTask bool // the piped decision was refused on a task's row, which may be damaged
	check := func() error {
		if validate != nil {
			if err := validate(); err != nil {
				return err
			}
		}
		return validClaim(c)
	}
	fn := func(o *opTx) (err error) {
		task, err = o.workerOp(op, c, q, args(o.now))
		return err
	}
	var pipe pipeFunc
	if piped.stmt != "" {
		pipe = func(o *opTx, b *pgx.Batch) func(pgx.BatchResults) error {
			stmt := piped.stmt
			if o.final {
				stmt = s.q.decisionFinal[stmt]
			}
			b.Queue(stmt, append([]any{o.queue, []byte(c.TaskID), int64(c.Token)}, piped.args...)...)
			b.Queue(s.q.probe, o.queue, []byte(c.TaskID))
			return func(res pgx.BatchResults) error {
				ts, err := scanTasks(res.Query())
				if err != nil {
					return err
				}
				state, token, _, found, perr := probeRow(res.QueryRow(), o.queue, c.TaskID)
				switch len(ts) {
				case 0:
					// As diagnoseClaim: a row whose state is none is no
					// task's, and holds no claim whatever it holds.
					ofTask = perr == nil && found && state != model.Quarantined
					return claimRefusal(op, c, state, token, found, perr)
				case 1:
					task = ts[0]
					return nil
				}
				return fmt.Errorf("leasehold/postgres: one statement changed %d tasks", len(ts))
			}
		}
	}
	var now time.Time
	var err error
	if tx != nil {
		now, err = s.writeIn(ctx, tx, c.Queue, flags, check, fn)
	} else {
		now, err = s.decide(ctx, c.Queue, flags, check, fn, pipe)
		if pipe != nil && ofTask && guardRefusal(err) {
			if derr := s.damage(ctx, c.Queue, c.TaskID); derr != nil {
				err = derr
			}
		}
	}
	if err != nil {
		return core.TaskResult{}, err
	}
	return core.TaskResult{Now: now, Task: task}, nil
}

// decide runs a worker's decision in a transaction of the store's own:
// piped, with its COMMIT sent with its statements, one round trip (the
// statement checks the row it writes, see soundSQL); when that statement
// met a row it cannot vouch for, the transaction was undone, and the
// decision runs again in one that commits after its row is decoded, which
// answers ErrCorrupt for a damaged record.
func (s *Store) decide(ctx context.Context, queue string, flags lockFlags, validate func() error, fn func(o *opTx) error, pipe pipeFunc) (time.Time, error) {
	if pipe == nil {
		return s.writePiped(ctx, queue, flags, validate, fn, nil)
	}
	now, err := s.writeFinal(ctx, queue, flags, validate, fn, pipe)
	if isCode(err, unsureCode) {
		if afterUnsure != nil {
			afterUnsure()
		}
		now, err = s.writePiped(ctx, queue, flags, validate, fn, pipe)
	}
	return now, err
}

func (o *opTx) workerOp(op model.Op, c model.Claim, q string, extra []any) (model.Task, error) {
	if !o.has {
		return model.Task{}, fmt.Errorf("%w: task %q no longer exists", core.ErrStaleClaim, c.TaskID)
	}
	got, found, err := o.oneTask(q, append([]any{o.queue, []byte(c.TaskID), int64(c.Token)}, extra...)...)
	if err != nil {
		return model.Task{}, err
	}
	if !found {
		return model.Task{}, o.diagnoseClaim(op, c)
	}
	return got, nil
}

// diagnoseClaim explains why a worker's guarded UPDATE matched no row, in
// the model's order: the task is gone or its token is another
// (ErrStaleClaim), else the op is not legal from its state.
func (o *opTx) diagnoseClaim(op model.Op, c model.Claim) error {
	state, token, _, found, err := o.probe(c.TaskID)
	if err == nil && found && state != model.Quarantined {
		if err := o.damage(c.TaskID); err != nil {
			return err
		}
	}
	return claimRefusal(op, c, state, token, found, err)
}

// damage reads the whole row of a task a guarded statement did not match
// and returns core.ErrCorrupt for it when the row does not decode: a
// decision on a damaged record is ErrCorrupt whatever its token or version
// (the record cannot say whether they are its own), as the model has it.
// Only the refusals pay for it.
func (o *opTx) damage(id string) error {
	_, err := scanTasks(o.tx.Query(o.ctx, o.s.q.get, o.queue, []byte(id)))
	return decided(err)
}

// damage is opTx.damage after the transaction that refused a single
// decision (the piped Ack): the row as it is now. A damaged row makes the
// call ErrCorrupt, which changes nothing, as of this read; a sound one (or
// a read that fails) leaves the refusal as the transaction gave it.
func (s *Store) damage(ctx context.Context, queue, id string) error {
	damage, _ := damageOf(s.pool.Query(ctx, s.q.get, queue, []byte(id)))
	return damage
}

// guardRefusal reports whether err is a refusal by a decision's guard (a
// stale claim, a cancelled task, an invalid transition), which a damaged
// record must not give: its damage is reported first.
func guardRefusal(err error) bool {
	var te *model.TransitionError
	return errors.Is(err, core.ErrStaleClaim) || errors.As(err, &te)
}

// claimRefusal is diagnoseClaim's answer from the probe's.
func claimRefusal(op model.Op, c model.Claim, state model.State, token uint64, found bool, err error) error {
	switch {
	case err != nil:
		return err
	case !found:
		return fmt.Errorf("%w: task %q no longer exists", core.ErrStaleClaim, c.TaskID)
	case token != c.Token:
		return fmt.Errorf("%w: token %d no longer holds task %q", core.ErrStaleClaim, c.Token, c.TaskID)
	case state == failedCancelled:
		return fmt.Errorf("%w: %w: task %q was cancelled by an operator", core.ErrCancelled, core.ErrStaleClaim, c.TaskID)
	}
	return transition(op, state, c.TaskID)
}

// transition is the refusal of op from state, after every other guard held.
func transition(op model.Op, state model.State, id string) error {
	if state == failedCancelled {
		state = model.Failed
	}
	if _, legal := model.Row(op, state); legal {
		// The guarded statement should have matched: something is off.
		return fmt.Errorf("leasehold/postgres: %v of task %q in state %v matched no row", op, id, state)
	}
	return &model.TransitionError{Op: op, State: state}
}

// Extend implements core.Store.
func (s *Store) Extend(ctx context.Context, p core.ExtendParams) (core.TaskResult, error) {
	validate := func() error { return model.ValidateLease(p.Lease) }
	// The deadline is now plus the lease's whole microseconds, as
	// model.Round gives (now is whole microseconds).
	return s.workerOp(ctx, nil, 0, model.OpExtend, p.Claim, validate, s.q.extend, func(now time.Time) []any {
		return []any{micros(model.Round(now.Add(p.Lease)))}
	}, timed{s.q.extendNow, []any{int64(p.Lease / time.Microsecond)}})
}

// Ack implements core.Store.
func (s *Store) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	result := clone(p.Result)
	return s.workerOp(ctx, nil, 0, model.OpAck, p.Claim, nil, s.q.ack, func(now time.Time) []any {
		return []any{micros(now), result}
	}, timed{s.q.ackNow, []any{int64(0), result}})
}

// Fail implements core.Store.
func (s *Store) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	text, raw := messageArgs(p.Message)
	return s.workerOp(ctx, nil, 0, model.OpFail, p.Claim, nil, s.q.fail, func(now time.Time) []any {
		return []any{micros(now), text, raw}
	}, timed{s.q.failNow, []any{int64(0), text, raw}})
}

// Retry implements core.Store.
func (s *Store) Retry(ctx context.Context, p core.RetryParams) (core.TaskResult, error) {
	validate := func() error { return model.ValidateDelay(p.Delay) }
	text, raw := messageArgs(p.Message)
	// Sent with the lock: the task runs after now plus the delay's whole
	// microseconds (model.RunAfter), Scheduled, or at once, Ready, when
	// that is none.
	state, after := model.Ready, (*int64)(nil)
	if d := int64(p.Delay / time.Microsecond); d > 0 {
		state, after = model.Scheduled, &d
	}
	return s.workerOp(ctx, nil, lockNotify, model.OpRetry, p.Claim, validate, s.q.retry, func(now time.Time) []any {
		runAfter := model.RunAfter(now, p.Delay)
		return []any{micros(now), text, int16(queuedState(now, runAfter)), micros(runAfter), raw}
	}, timed{s.q.retryNow, []any{int64(0), text, int16(state), after, raw}})
}

// queuedState is where a task returned to the queue lands: Scheduled if
// runAfter is after now, else Ready.
func queuedState(now, runAfter time.Time) model.State {
	if runAfter.After(now) {
		return model.Scheduled
	}
	return model.Ready
}

// --- broker ------------------------------------------------------------------

// ClaimExpired implements core.Store.
func (s *Store) ClaimExpired(ctx context.Context, p core.ClaimExpiredParams) (core.ReapResult, error) {
	validate := func() error {
		if err := model.ValidateClaimTTL(p.ClaimTTL); err != nil {
			return err
		}
		return model.ValidateLimit(p.Limit)
	}
	var claims []model.ReapClaim
	now, err := s.scanWrite(ctx, p.Queue, 0, validate, func(o *opTx) error {
		claims = []model.ReapClaim{}
		if !o.has {
			return nil
		}
		if err := o.soundDeadlines(); err != nil {
			return err
		}
		deadline := model.Round(o.now.Add(p.ClaimTTL))
		tasks, err := scanTasks(o.tx.Query(o.ctx, s.q.claimExpired, p.Queue, o.now.UnixMicro(), limitArg(p.Limit), micros(deadline)))
		if err != nil {
			return err
		}
		byVersion(tasks)
		for _, task := range tasks {
			claims = append(claims, model.ReapClaim{Queue: task.Queue, TaskID: task.ID, Version: task.Version, Deadline: task.Deadline, Task: task})
		}
		return nil
	})
	if err != nil {
		return core.ReapResult{}, err
	}
	return core.ReapResult{Now: now, Claims: claims}, nil
}

// soundDeadlines fails with a *damagedError (which scanWrite sets aside) if
// a Running task of the queue has no deadline, which the expiry scans would
// skip forever.
func (o *opTx) soundDeadlines() error {
	var id []byte
	switch err := o.tx.QueryRow(o.ctx, o.s.q.damagedDeadline, o.queue).Scan(&id); {
	case err == nil:
		return &damagedError{queue: o.queue, id: string(id), reason: "running without a deadline"}
	case !errors.Is(err, pgx.ErrNoRows):
		return err
	}
	return nil
}

// brokerOp runs a broker's decision: q is an UPDATE guarded by task ID,
// version and state whose first three parameters are queue, ID and version.
func (s *Store) brokerOp(ctx context.Context, op model.Op, rc model.ReapClaim, flags lockFlags, check func() error, q string, args func(now time.Time) []any) (core.TaskResult, error) {
	var task model.Task
	validate := func() error {
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		return model.ValidateReapClaim(rc)
	}
	now, err := s.write(ctx, rc.Queue, flags, validate, func(o *opTx) error {
		if !o.has {
			return fmt.Errorf("%w: task %q no longer exists", core.ErrStaleClaim, rc.TaskID)
		}
		got, found, err := o.oneTask(q, append([]any{o.queue, []byte(rc.TaskID), int64(rc.Version)}, args(o.now)...)...)
		if err != nil {
			return err
		}
		if !found {
			state, _, version, found, err := o.probe(rc.TaskID)
			if err == nil && found && state != model.Quarantined {
				if err := o.damage(rc.TaskID); err != nil {
					return err
				}
			}
			switch {
			case err != nil:
				return err
			case !found:
				return fmt.Errorf("%w: task %q no longer exists", core.ErrStaleClaim, rc.TaskID)
			case version != rc.Version:
				return fmt.Errorf("%w: task %q changed since version %d", core.ErrStaleClaim, rc.TaskID, rc.Version)
			}
			return transition(op, state, rc.TaskID)
		}
		task = got
		return nil
	})
	if err != nil {
		return core.TaskResult{}, err
	}
	return core.TaskResult{Now: now, Task: task}, nil
}

// leaseMessage is the message of a lease-expired error entry.
func leaseMessage(m string) string {
	if m == "" {
		return model.LeaseExpiredMessage
	}
	return m
}

// Requeue implements core.Store.
func (s *Store) Requeue(ctx context.Context, p core.RequeueParams) (core.TaskResult, error) {
	validate := func() error { return model.ValidateDelay(p.Delay) }
	return s.brokerOp(ctx, model.OpRequeue, p.ReapClaim, lockNotify, validate, s.q.requeue, func(now time.Time) []any {
		runAfter := model.RunAfter(now, p.Delay)
		text, raw := messageArgs(leaseMessage(p.Message))
		return []any{micros(now), text, int16(queuedState(now, runAfter)), micros(runAfter), raw}
	})
}

// Finalize implements core.Store.
func (s *Store) Finalize(ctx context.Context, p core.FinalizeParams) (core.TaskResult, error) {
	return s.brokerOp(ctx, model.OpFinalize, p.ReapClaim, 0, nil, s.q.finalize, func(now time.Time) []any {
		text, raw := messageArgs(leaseMessage(p.Message))
		return []any{micros(now), text, raw}
	})
}

// RecoverExpired implements core.Store.
func (s *Store) RecoverExpired(ctx context.Context, p core.RecoverExpiredParams) (core.TasksResult, error) {
	validate := func() error {
		if err := model.ValidateDelay(p.Delay); err != nil {
			return err
		}
		return model.ValidateLimit(p.Limit)
	}
	var tasks []model.Task
	now, err := s.scanWrite(ctx, p.Queue, 0, validate, func(o *opTx) (err error) {
		tasks = []model.Task{}
		if !o.has {
			return nil
		}
		if err := o.soundDeadlines(); err != nil {
			return err
		}
		runAfter := model.Round(o.now.Add(p.Delay))
		tasks, err = scanTasks(o.tx.Query(o.ctx, s.q.recoverExpired, p.Queue, o.now.UnixMicro(), limitArg(p.Limit),
			int16(queuedState(o.now, runAfter)), micros(runAfter)))
		if err != nil {
			return err
		}
		byVersion(tasks)
		if tasks == nil {
			tasks = []model.Task{}
		}
		for _, t := range tasks {
			if t.State == model.Ready {
				return o.notify()
			}
		}
		return nil
	})
	if err != nil {
		return core.TasksResult{}, err
	}
	return core.TasksResult{Now: now, Tasks: tasks}, nil
}

// --- inspector ---------------------------------------------------------------

// inspectorOp runs an operator's action, diagnosing a miss in the model's
// order: ErrNotFound, ErrConflict (expected version), then the state.
func (s *Store) inspectorOp(ctx context.Context, op model.Op, p core.InspectParams, flags lockFlags, q string) (core.TaskResult, error) {
	var task model.Task
	now, err := s.write(ctx, p.Queue, flags, func() error { return model.ValidateID(p.ID) }, func(o *opTx) error {
		if !o.has {
			return fmt.Errorf("%w: %q", core.ErrNotFound, p.ID)
		}
		guarded := op == model.OpRemove && p.Expect != 0
		if guarded {
			// A damaged row at the expected version is deleted by the
			// statement before it fails to decode: undone here, since a
			// refusal must change nothing.
			if _, err := o.tx.Exec(o.ctx, `SAVEPOINT expect`); err != nil {
				return err
			}
		}
		args := []any{p.Queue, []byte(p.ID), int64(p.Expect)}
		if op == model.OpCancel {
			args = append(args, micros(o.now))
		}
		got, found, err := o.oneTask(q, args...)
		var d *damagedError
		switch {
		case op == model.OpRemove && errors.As(err, &d) && guarded:
			if _, err := o.tx.Exec(o.ctx, `ROLLBACK TO SAVEPOINT expect`); err != nil {
				return err
			}
			return fmt.Errorf("%w: task %q is damaged: it has no version to expect", core.ErrConflict, p.ID)
		case op == model.OpRemove && errors.As(err, &d):
			// A record that does not decode: deleted when no version
			// is expected, since it has none anyone could have seen.
			got, found, err = d.quarantinedTask(), true, nil
		case err == nil && guarded:
			_, err = o.tx.Exec(o.ctx, `RELEASE SAVEPOINT expect`)
		}
		if err != nil {
			return err
		}
		if !found {
			state, _, version, found, err := o.probe(p.ID)
			if err == nil && found && state != model.Quarantined && op != model.OpRemove {
				// A damaged record is ErrCorrupt before its version or
				// state is judged: neither can be trusted (the model's
				// order; a Remove at a version is ErrConflict instead).
				err = o.damage(p.ID)
			}
			switch {
			case err != nil:
				return err
			case !found:
				return fmt.Errorf("%w: %q", core.ErrNotFound, p.ID)
			case p.Expect != 0 && version != p.Expect:
				return fmt.Errorf("%w: task %q is at version %d, not %d", core.ErrConflict, p.ID, version, p.Expect)
			}
			return transition(op, state, p.ID)
		}
		task = got
		return nil
	})
	if err != nil {
		return core.TaskResult{}, err
	}
	return core.TaskResult{Now: now, Task: task}, nil
}

// InspectRequeue implements core.Store.
func (s *Store) InspectRequeue(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return s.inspectorOp(ctx, model.OpInspectRequeue, p, lockNotify, s.q.inspectRequeue)
}

// Cancel implements core.Store.
func (s *Store) Cancel(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return s.inspectorOp(ctx, model.OpCancel, p, 0, s.q.cancel)
}

// Remove implements core.Store. The queue's sequence is not reset, so an ID
// enqueued again never gets a version or token it had before.
func (s *Store) Remove(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return s.inspectorOp(ctx, model.OpRemove, p, 0, s.q.remove)
}

// Prune implements core.Store.
func (s *Store) Prune(ctx context.Context, p core.PruneParams) (core.IDsResult, error) {
	var succeeded, failed bool
	validate := func() error {
		if err := model.ValidatePruneStates(p.States); err != nil {
			return err
		}
		for _, st := range p.States {
			succeeded = succeeded || st == model.Succeeded
			failed = failed || st == model.Failed
		}
		return model.ValidateLimit(p.Limit)
	}
	var ids []string
	now, err := s.write(ctx, p.Queue, 0, validate, func(o *opTx) error {
		ids = []string{}
		if !o.has {
			return nil
		}
		rows, err := o.tx.Query(o.ctx, s.q.prune, p.Queue, model.Round(p.Before).UnixMicro(), succeeded, failed, limitArg(p.Limit))
		if err != nil {
			return err
		}
		type pruned struct {
			id       []byte
			finished *int64
		}
		var got []pruned
		for rows.Next() {
			var r pruned
			if err := rows.Scan(&r.id, &r.finished); err != nil {
				rows.Close()
				return err
			}
			if r.finished == nil {
				rows.Close()
				return corrupt("prune: task %q finished at no time", r.id)
			}
			got = append(got, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		slices.SortFunc(got, func(a, b pruned) int {
			if *a.finished != *b.finished {
				if *a.finished < *b.finished {
					return -1
				}
				return 1
			}
			return strings.Compare(string(a.id), string(b.id))
		})
		for _, r := range got {
			ids = append(ids, string(r.id))
		}
		return nil
	})
	if err != nil {
		return core.IDsResult{}, err
	}
	return core.IDsResult{Now: now, IDs: ids}, nil
}

// Get implements core.Store.
func (s *Store) Get(ctx context.Context, p core.GetParams) (core.Task, error) {
	var task model.Task
	err := s.read(ctx, p.Queue, func() error { return model.ValidateID(p.ID) }, func() error {
		ts, err := scanTasks(s.pool.Query(ctx, s.q.get, p.Queue, []byte(p.ID)))
		var d *damagedError
		if errors.As(err, &d) {
			ts, err = []model.Task{d.quarantinedTask()}, nil // shown, not set aside
		}
		if err != nil {
			return err
		}
		if len(ts) == 0 {
			return fmt.Errorf("%w: %q", core.ErrNotFound, p.ID)
		}
		task = ts[0]
		return nil
	})
	return task, err
}

// List implements core.Store.
func (s *Store) List(ctx context.Context, p core.ListParams) (core.ListResult, error) {
	validate := func() error { return model.ValidateList(p.State, p.Limit) }
	var res core.ListResult
	err := s.read(ctx, p.Queue, validate, func() error {
		// A damaged row still in a state is passed over (only a scan sets
		// it aside); in Quarantined, it is listed with why.
		var ts []model.Task
		after := p.After
		for len(ts) <= p.Limit {
			got, damaged, n, last, err := scanLenient(s.pool.Query(ctx, s.q.list[p.State], p.Queue, []byte(after), p.Limit+1))
			if err != nil {
				return err
			}
			if p.State == model.Quarantined {
				got = sortedByID(append(got, damaged...))
			}
			ts = append(ts, got...)
			if n <= p.Limit {
				break
			}
			after = last
		}
		if len(ts) > p.Limit {
			ts = ts[:p.Limit]
			res.Next = ts[p.Limit-1].ID
		}
		res.Tasks = ts
		return nil
	})
	if err != nil {
		return core.ListResult{}, err
	}
	return res, nil
}

// Counts implements core.Store.
func (s *Store) Counts(ctx context.Context, p core.CountsParams) (core.Counts, error) {
	var c core.Counts
	err := s.read(ctx, p.Queue, nil, func() error {
		rows, err := s.pool.Query(ctx, s.q.counts, p.Queue)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var flag bool
			var st int16
			var n int64
			if err := rows.Scan(&flag, &st, &n); err != nil {
				return err
			}
			if flag {
				c.Paused = n == 1
				continue
			}
			switch state := model.State(st); {
			case st < int16(model.Scheduled) || st > int16(model.Failed):
				c.Quarantined += int(n) // set aside, or a state that is none
			case state == model.Scheduled:
				c.Scheduled = int(n)
			case state == model.Ready:
				c.Ready = int(n)
			case state == model.Running:
				c.Running = int(n)
			case state == model.Succeeded:
				c.Succeeded = int(n)
			case state == model.Failed:
				c.Failed = int(n)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return core.Counts{}, err
	}
	return c, nil
}

// Pause implements core.Store: it sets the queue's paused flag under the
// queue's row lock, which every Pop takes and reads the flag under.
func (s *Store) Pause(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	return s.setPaused(ctx, p.Queue, true)
}

// Resume implements core.Store: it clears the queue's paused flag and
// wakes the queue's waiting workers.
func (s *Store) Resume(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	return s.setPaused(ctx, p.Queue, false)
}

func (s *Store) setPaused(ctx context.Context, queue string, paused bool) (core.PauseResult, error) {
	var flags lockFlags
	if !paused {
		flags = lockNotify // the queue's Ready tasks may be claimed again
	}
	_, err := s.write(ctx, queue, flags, nil, func(o *opTx) error {
		if _, err := o.tx.Exec(o.ctx, s.q.setPaused, queue, paused); err != nil {
			return err
		}
		o.paused = paused // for the writes after it in the same transaction
		return nil
	})
	if err != nil {
		return core.PauseResult{}, err
	}
	return core.PauseResult{Paused: paused}, nil
}

func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

var _ core.QueueLister = (*Store)(nil)

// Queues implements core.QueueLister: the queues of the schema that have
// had a task, sorted.
func (s *Store) Queues(ctx context.Context) ([]string, error) {
	var names []string
	// enter validates a queue name; any valid one will do for a
	// schema-wide read.
	err := s.read(ctx, "queues", nil, func() error {
		rows, err := s.pool.Query(ctx, s.q.queues)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return err
			}
			names = append(names, n)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return names, nil
}
