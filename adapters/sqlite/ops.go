package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// limitArg turns the model's "0: no limit" into SQLite's LIMIT -1.
func limitArg(limit int) int64 {
	if limit == 0 {
		return -1
	}
	return int64(limit)
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

// The queue's sequence (seq.go) is checked whenever it is read: a
// sequence that is not an integer, or a missing row while the queue has
// tasks, fails the operation with ErrCorrupt (and rolls it back) instead of
// restarting the versions and reissuing a token someone may hold.

// draw takes the next n values of the queue's sequence and returns the last
// one, for an operation that then stamps a task with it.
func (t tx) draw(queue string, n int) (int64, error) {
	base, err := t.base(queue)
	if err != nil {
		return 0, err
	}
	return base + int64(n), t.advance(queue, base+int64(n))
}

// stampedRun checks that a statement that stamped tasks with the values
// after base, in their order, used exactly those (tasks sorted by version),
// and draws them.
func (t tx) stampedRun(queue string, base int64, tasks []model.Task) error {
	if len(tasks) == 0 {
		return nil
	}
	last := base + int64(len(tasks))
	if lastVersion(tasks) != uint64(last) || tasks[0].Version != uint64(base)+1 {
		return corrupt("queue %q: %d tasks stamped with %d..%d after the sequence at %d", queue, len(tasks), tasks[0].Version, lastVersion(tasks), base)
	}
	return t.advance(queue, last)
}

// stamped explains an error of a statement that stamps tasks: a queue row
// that is missing or not an integer is ErrCorrupt.
func (t tx) stamped(queue string, err error) error {
	if err == nil {
		return nil
	}
	if _, serr := t.base(queue); serr != nil && errors.Is(serr, core.ErrCorrupt) {
		return serr
	}
	return err
}

// lastVersion is the largest Version of tasks (sorted by version), 0 for
// none.
func lastVersion(ts []model.Task) uint64 {
	if len(ts) == 0 {
		return 0
	}
	return ts[len(ts)-1].Version
}

// withVersion returns args padded to eight parameters, then v as ?9
// (newVersion): an int64, or nil for the queue's next sequence value.
func withVersion(args []any, v any) []any {
	for len(args) < 8 {
		args = append(args, nil)
	}
	return append(args, v)
}

// oneTask runs a statement that changes at most one task and returns it. found
// is false when the statement matched no row.
func (t tx) oneTask(q string, args ...any) (task model.Task, found bool, err error) {
	ts, err := scanTasks(t.query(q, args...))
	if err != nil {
		return model.Task{}, false, err
	}
	switch len(ts) {
	case 0:
		return model.Task{}, false, nil
	case 1:
		return ts[0], true, nil
	}
	return model.Task{}, false, fmt.Errorf("leasehold/sqlite: one statement changed %d tasks", len(ts))
}

// probe reads what the guards look at; found is false when the task does not
// exist.
func (t tx) probe(queue, id string) (state model.State, token, version uint64, found bool, err error) {
	var raw [3]any
	err = t.queryRow(sqlProbe, queue, id).Scan(&raw[0], &raw[1], &raw[2])
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, 0, false, err
	}
	if !validState(raw[0]) {
		// Set aside, or a state that is none: a record without a version
		// or token anyone may name.
		return model.Quarantined, 0, 0, true, nil
	}
	d := decoder{raw: raw[:]}
	state = model.State(d.int(0, "state", int64(model.Scheduled), int64(model.Failed)))
	token = uint64(d.int(1, "claim_token", 0, math.MaxInt64))
	version = uint64(d.int(2, "version", 1, math.MaxInt64))
	if d.err != nil {
		return 0, 0, 0, false, corrupt("task %q in queue %q: %v", id, queue, d.err)
	}
	return state, token, version, true, nil
}

// --- producer and mover ------------------------------------------------------

// validEnqueue is the model's check of Enqueue's arguments.
var validEnqueue = model.ValidateEnqueue

// Enqueue implements core.Store.
func (s *Store) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	var task model.Task
	now, err := s.write(ctx, p.Queue, func() error { return validEnqueue(p.EnqueueArgs) }, func(t tx, now time.Time) error {
		// The task is stamped with the sequence's next value, which is
		// drawn once it is added: a refused task writes nothing.
		base, err := t.base(p.Queue)
		if err != nil {
			return err
		}
		pending := -1
		task, err = t.enqueue(p.Queue, p.EnqueueArgs, now, base+1, &pending)
		if err != nil {
			return err
		}
		return t.advance(p.Queue, base+1)
	})
	if err != nil {
		return core.TaskResult{}, err
	}
	return core.TaskResult{Now: now, Task: task}, nil
}

// enqueue adds one task whose arguments are valid, with version v (the
// sequence's next value, which the caller then draws), and the model's
// checks in its order: the ID is free, then no other task holds the unique
// key (only for a task that has one), then the queue has room.
// *pending is the queue's number of pending tasks, -1 when not counted yet;
// enqueue counts them when it needs to and keeps the count up to date. A
// refused task writes nothing.
func (t tx) enqueue(queue string, a model.EnqueueArgs, now time.Time, v int64, pending *int) (model.Task, error) {
	conflict := func() error { return fmt.Errorf("%w: task %q already exists", core.ErrConflict, a.ID) }
	if a.UniqueKey != "" {
		switch _, _, _, found, err := t.probe(queue, a.ID); {
		case errors.Is(err, core.ErrCorrupt) || found:
			return model.Task{}, conflict()
		case err != nil:
			return model.Task{}, err
		}
		if holder, held, err := t.keyHolder(queue, a.UniqueKey, now); err != nil {
			return model.Task{}, err
		} else if held {
			return model.Task{}, &model.DuplicateError{Key: a.UniqueKey, TaskID: holder}
		}
	}
	if capacity := t.s.capacity; capacity > 0 {
		if *pending < 0 {
			if err := t.queryRow(sqlPending, queue, capacity).Scan(pending); err != nil {
				return model.Task{}, err
			}
		}
		if *pending >= capacity {
			switch _, _, _, found, err := t.probe(queue, a.ID); {
			case errors.Is(err, core.ErrCorrupt) || found:
				return model.Task{}, conflict() // the model looks at the ID first
			case err != nil:
				return model.Task{}, err
			}
			return model.Task{}, fmt.Errorf("%w: %d pending tasks", core.ErrQueueFull, capacity)
		}
	}
	task := model.Task{
		Queue: queue, ID: a.ID, Payload: clone(a.Payload), Priority: a.Priority,
		MaxAttempts: a.MaxAttempts, Timeout: a.Timeout, Version: uint64(v), EnqueuedAt: now,
		UniqueKey: a.UniqueKey, UniqueUntil: model.UniqueUntil(now, a.UniqueFor),
	}
	task.RunAfter = model.Round(a.RunAfter)
	task.State = queuedState(now, task.RunAfter)
	res, err := t.exec(sqlInsertNew, taskArgs(task)...)
	if err != nil {
		return model.Task{}, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return model.Task{}, err
	} else if n == 0 {
		return model.Task{}, conflict()
	}
	if a.UniqueKey != "" {
		if _, err := t.exec(sqlTakeKey, queue, a.UniqueKey, a.ID); err != nil {
			return model.Task{}, err
		}
	}
	if *pending >= 0 {
		*pending++
	}
	return task, nil
}

// keyHolder returns the task that holds the unique key at now, if one does
// (model.Queue.KeyHolder): the key's last taker, if it still exists, is not
// set aside, carries the key and its hold lasts. A holder whose columns do
// not parse holds nothing.
func (t tx) keyHolder(queue, key string, now time.Time) (string, bool, error) {
	var id, state, k, until any
	err := t.queryRow(sqlKeyHolder, queue, key).Scan(&id, &state, &k, &until)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if !validState(state) || k == nil {
		return "", false, nil
	}
	d := decoder{raw: []any{id, k, until}}
	holder := model.Task{ID: d.text(0, "task_id"), State: model.State(state.(int64)), UniqueKey: d.text(1, "unique_key"), UniqueUntil: d.time(2, "unique_until")}
	if d.err != nil || holder.UniqueKey != key || !holder.HoldsKey(now) {
		return "", false, nil
	}
	return holder.ID, true, nil
}

// Promote implements core.Store.
func (s *Store) Promote(ctx context.Context, p core.PromoteParams) (core.IDsResult, error) {
	validate := func() error { return model.ValidateLimit(p.Limit) }
	var ids []string
	now, err := s.write(ctx, p.Queue, validate, func(t tx, now time.Time) error {
		if err := t.setAsideBadTimes(p.Queue, sqlDamagedRunAfter, "scheduled with a run-after time that is not a time"); err != nil {
			return err
		}
		return t.settingAside(func() error {
			base, err := t.base(p.Queue)
			if err != nil {
				return err
			}
			tasks, err := scanTasks(t.query(sqlPromote, p.Queue, now.UnixMicro(), limitArg(p.Limit), base))
			if err != nil {
				return t.stamped(p.Queue, err)
			}
			byVersion(tasks)
			ids = make([]string, len(tasks))
			for i, task := range tasks {
				ids[i] = task.ID
			}
			return t.stampedRun(p.Queue, base, tasks)
		})
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
	now, err := s.write(ctx, p.Queue, validate, func(t tx, now time.Time) (err error) {
		tasks, err = s.pop(t, p.Queue, p.Lease, p.N, now)
		return err
	})
	if err != nil {
		return core.TasksResult{}, err
	}
	return core.TasksResult{Now: now, Tasks: tasks}, nil
}

// pop claims up to n Ready tasks in t, as Pop does (and AckBatch's pop),
// setting aside the damaged rows it meets, and draws the values it stamped
// them with. Its statements read the queue's paused flag themselves
// (notPaused): a paused queue's Pop claims nothing.
func (s *Store) pop(t tx, queue string, lease time.Duration, n int, now time.Time) (tasks []model.Task, err error) {
	deadline := model.Round(now.Add(lease))
	err = t.settingAside(func() (err error) {
		base, err := t.base(queue)
		if err != nil {
			return err
		}
		if s.popMode == PopSelectUpdate {
			tasks, err = t.popSelectUpdate(queue, n, now, deadline, base)
		} else {
			tasks, err = t.popReturning(queue, n, now, deadline, base)
		}
		if err != nil {
			return t.stamped(queue, err)
		}
		return t.stampedRun(queue, base, tasks)
	})
	return tasks, err
}

// Pause implements core.Store: it sets the queue's paused flag, which every
// Pop's statement reads in its own write transaction.
func (s *Store) Pause(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	return s.setPaused(ctx, p.Queue, true)
}

// Resume implements core.Store: it clears the queue's paused flag.
func (s *Store) Resume(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	return s.setPaused(ctx, p.Queue, false)
}

func (s *Store) setPaused(ctx context.Context, queue string, paused bool) (core.PauseResult, error) {
	flag := 0
	if paused {
		flag = 1
	}
	_, err := s.write(ctx, queue, nil, func(t tx, _ time.Time) error {
		_, err := t.exec(sqlSetPaused, queue, flag)
		return err
	})
	if err != nil {
		return core.PauseResult{}, err
	}
	return core.PauseResult{Paused: paused}, nil
}

// popReturning claims the first n Ready tasks with one UPDATE … RETURNING
// (for one task, one that needs no ranking: sqlPopOne), stamped with the
// values after base.
func (t tx) popReturning(queue string, n int, now, deadline time.Time, base int64) ([]model.Task, error) {
	args := []any{queue, n, micros(now), micros(deadline), base}
	var known [numColumns]any
	known[colQueue], known[colState] = queue, int64(model.Running)
	known[colClaimedAt], known[colDeadline] = micros(now), micros(deadline)
	q, ret := sqlPopReturned, popReturned
	if n == 1 {
		q, ret = sqlPopOneReturned, popOneReturned
		known[colVersion], known[colClaimToken] = base+1, base+1
	}
	rows, err := t.query(q, args...)
	tasks, err := scanReturned(ret, &known, rows, err)
	if err != nil {
		return nil, err
	}
	byVersion(tasks)
	if tasks == nil {
		tasks = []model.Task{}
	}
	return tasks, nil
}

// popSelectUpdate selects the first n Ready tasks, then claims each with an
// UPDATE that re-checks its state and version, stamped with the values
// after base.
func (t tx) popSelectUpdate(queue string, n int, now, deadline time.Time, base int64) ([]model.Task, error) {
	tasks, err := scanTasks(t.query(sqlPopSelect, queue, n))
	if err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return []model.Task{}, nil
	}
	for i := range tasks {
		c := &tasks[i]
		v := base + int64(i) + 1
		res, err := t.exec(sqlPopClaim, queue, c.ID, v, micros(now), micros(deadline), int64(c.Version))
		if err != nil {
			return nil, err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return nil, fmt.Errorf("leasehold/sqlite: pop: task %q changed between select and update (%d rows, %v)", c.ID, n, err)
		}
		c.Version, c.ClaimToken = uint64(v), uint64(v)
		c.State = model.Running
		c.Attempt++
		c.ClaimedAt, c.Deadline = now, deadline
	}
	return tasks, nil
}

// validClaim is the model's check of a worker claim's arguments.
var validClaim = model.ValidateClaim

// workerOp runs a worker's decision: q is an UPDATE guarded by task ID, claim
// token and Running state whose first three parameters are queue, ID and
// token. When it matches no row, the same transaction finds out why and the
// operation changes nothing.
func (s *Store) workerOp(ctx context.Context, op model.Op, c model.Claim, validate func() error, q string, args func(now time.Time) []any) (core.TaskResult, error) {
	var task model.Task
	now, err := s.write(ctx, c.Queue, func() error {
		if validate != nil {
			if err := validate(); err != nil {
				return err
			}
		}
		return validClaim(c)
	}, func(t tx, now time.Time) error {
		base, err := t.base(c.Queue)
		if err != nil {
			return err
		}
		all := withVersion(append([]any{c.Queue, c.TaskID, int64(c.Token)}, args(now)...), base+1)
		got, found, err := t.oneTask(q, all...)
		if err != nil {
			return t.stamped(c.Queue, err)
		}
		if !found {
			return t.diagnoseClaim(op, c) // the statement changed nothing
		}
		task = got
		return t.stampedRun(c.Queue, base, []model.Task{got})
	})
	if err != nil {
		return core.TaskResult{}, err
	}
	return core.TaskResult{Now: now, Task: task}, nil
}

// diagnoseClaim explains why a worker's guarded UPDATE matched no row, in the
// model's order: the task is gone or its token is another (ErrStaleClaim),
// else the op is not legal from its state.
func (t tx) diagnoseClaim(op model.Op, c model.Claim) error {
	state, token, _, found, err := t.probe(c.Queue, c.TaskID)
	if err == nil && found && state != model.Quarantined {
		err = t.damage(c.Queue, c.TaskID)
	}
	switch {
	case err != nil:
		return err
	case !found:
		return fmt.Errorf("%w: task %q no longer exists", core.ErrStaleClaim, c.TaskID)
	case token != c.Token:
		return fmt.Errorf("%w: token %d no longer holds task %q", core.ErrStaleClaim, c.Token, c.TaskID)
	case state == model.Failed:
		var one int
		switch err := t.queryRow(sqlCancelled, c.Queue, c.TaskID).Scan(&one); {
		case err == nil:
			return fmt.Errorf("%w: %w: task %q was cancelled by an operator", core.ErrCancelled, core.ErrStaleClaim, c.TaskID)
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
	}
	return transition(op, state, c.TaskID)
}

// damage reads the whole row of a task a guarded statement did not match
// and returns its *damagedError when the row does not decode: a decision
// on a damaged record is ErrCorrupt whatever its token or version (the
// record cannot say whether they are its own), as the model has it. Only
// the refusals pay for it.
func (t tx) damage(queue, id string) error {
	_, err := scanTasks(t.query(sqlGet, queue, id))
	var d *damagedError
	if errors.As(err, &d) {
		return d
	}
	return err
}

// transition is the refusal of op from state, after every other guard held.
func transition(op model.Op, state model.State, id string) error {
	if _, legal := model.Row(op, state); legal {
		// The guarded statement should have matched: something is off.
		return fmt.Errorf("leasehold/sqlite: %v of task %q in state %v matched no row", op, id, state)
	}
	return &model.TransitionError{Op: op, State: state}
}

// Extend implements core.Store.
func (s *Store) Extend(ctx context.Context, p core.ExtendParams) (core.TaskResult, error) {
	validate := func() error { return model.ValidateLease(p.Lease) }
	return s.workerOp(ctx, model.OpExtend, p.Claim, validate, sqlExtend, func(now time.Time) []any {
		return []any{micros(model.Round(now.Add(p.Lease)))}
	})
}

// Ack implements core.Store.
func (s *Store) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	return s.workerOp(ctx, model.OpAck, p.Claim, nil, sqlAck, func(now time.Time) []any {
		return []any{micros(now), blob(p.Result)}
	})
}

// Fail implements core.Store.
func (s *Store) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	return s.workerOp(ctx, model.OpFail, p.Claim, nil, sqlFail, func(now time.Time) []any {
		text, raw := messageArgs(p.Message)
		return []any{micros(now), text, raw}
	})
}

// Retry implements core.Store.
func (s *Store) Retry(ctx context.Context, p core.RetryParams) (core.TaskResult, error) {
	validate := func() error { return model.ValidateDelay(p.Delay) }
	return s.workerOp(ctx, model.OpRetry, p.Claim, validate, sqlRetry, func(now time.Time) []any {
		runAfter := model.RunAfter(now, p.Delay)
		text, raw := messageArgs(p.Message)
		return []any{micros(now), text, int64(queuedState(now, runAfter)), micros(runAfter), raw}
	})
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
	now, err := s.write(ctx, p.Queue, validate, func(t tx, now time.Time) error {
		if err := t.soundDeadlines(p.Queue); err != nil {
			return err
		}
		deadline := model.Round(now.Add(p.ClaimTTL))
		return t.settingAside(func() error {
			base, err := t.base(p.Queue)
			if err != nil {
				return err
			}
			tasks, err := scanTasks(t.query(sqlClaimExpired, p.Queue, now.UnixMicro(), limitArg(p.Limit), micros(deadline), base))
			if err != nil {
				return t.stamped(p.Queue, err)
			}
			byVersion(tasks)
			claims = make([]model.ReapClaim, len(tasks))
			for i, task := range tasks {
				claims[i] = model.ReapClaim{Queue: task.Queue, TaskID: task.ID, Version: task.Version, Deadline: task.Deadline, Task: task}
			}
			return t.stampedRun(p.Queue, base, tasks)
		})
	})
	if err != nil {
		return core.ReapResult{}, err
	}
	return core.ReapResult{Now: now, Claims: claims}, nil
}

// soundDeadlines sets aside every Running task of the queue whose deadline
// is not a time, which the expiry scans would otherwise skip forever.
func (t tx) soundDeadlines(queue string) error {
	return t.setAsideBadTimes(queue, sqlDamagedDeadline, "running with a deadline that is not a time")
}

// setAsideBadTimes sets aside, one by one, the tasks query finds (see
// damagedTime), with why as the reason.
func (t tx) setAsideBadTimes(queue, query, why string) error {
	for {
		var id string
		switch err := t.queryRow(query, queue).Scan(&id); {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return err
		}
		if err := t.setAside(&damagedError{queue: queue, id: id, reason: why}); err != nil {
			return err
		}
	}
}

// setAside moves a damaged record into Quarantined, out of every order
// index, with the reason it does not parse. No version is drawn.
func (t tx) setAside(d *damagedError) error {
	res, err := t.exec(sqlSetAside, d.queue, d.id, d.reason)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("leasehold/sqlite: setting aside task %q: %d rows, %v", d.id, n, err)
	}
	return nil
}

// settingAside runs a scan's step. When the step meets a damaged record,
// the operation runs again from its start (see commitBatch), and this time
// the records met so far are set aside first: the operation takes effect
// once, without the damaged records its scan reached, as the model's scans
// do. A record gone by then (removed by an operation that ran in between)
// is passed over.
func (t tx) settingAside(step func() error) error {
	for _, d := range t.op.aside {
		res, err := t.exec(sqlSetAside, d.queue, d.id, d.reason)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n > 1 {
			return fmt.Errorf("leasehold/sqlite: setting aside task %q: %d rows, %v", d.id, n, err)
		}
	}
	err := step()
	var d *damagedError
	if errors.As(err, &d) {
		return &redoError{d: d}
	}
	return err
}

// brokerOp runs a broker's decision: q is an UPDATE guarded by task ID,
// version and Running state whose first three parameters are queue, ID and
// version.
func (s *Store) brokerOp(ctx context.Context, op model.Op, rc model.ReapClaim, check func() error, q string, args func(now time.Time) []any) (core.TaskResult, error) {
	var task model.Task
	validate := func() error {
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		return model.ValidateReapClaim(rc)
	}
	now, err := s.write(ctx, rc.Queue, validate, func(t tx, now time.Time) error {
		base, err := t.base(rc.Queue)
		if err != nil {
			return err
		}
		all := withVersion(append([]any{rc.Queue, rc.TaskID, int64(rc.Version)}, args(now)...), base+1)
		got, found, err := t.oneTask(q, all...)
		if err != nil {
			return t.stamped(rc.Queue, err)
		}
		if !found {
			state, _, version, found, err := t.probe(rc.Queue, rc.TaskID)
			if err == nil && found && state != model.Quarantined {
				err = t.damage(rc.Queue, rc.TaskID)
			}
			switch {
			case err != nil:
				return err
			case !found:
				err = fmt.Errorf("%w: task %q no longer exists", core.ErrStaleClaim, rc.TaskID)
			case version != rc.Version:
				err = fmt.Errorf("%w: task %q changed since version %d", core.ErrStaleClaim, rc.TaskID, rc.Version)
			default:
				err = transition(op, state, rc.TaskID)
			}
			return err
		}
		task = got
		return t.stampedRun(rc.Queue, base, []model.Task{got})
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
	return s.brokerOp(ctx, model.OpRequeue, p.ReapClaim, validate, sqlRequeue, func(now time.Time) []any {
		runAfter := model.RunAfter(now, p.Delay)
		text, raw := messageArgs(leaseMessage(p.Message))
		return []any{micros(now), text, int64(queuedState(now, runAfter)), micros(runAfter), raw}
	})
}

// Finalize implements core.Store.
func (s *Store) Finalize(ctx context.Context, p core.FinalizeParams) (core.TaskResult, error) {
	return s.brokerOp(ctx, model.OpFinalize, p.ReapClaim, nil, sqlFinalize, func(now time.Time) []any {
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
	now, err := s.write(ctx, p.Queue, validate, func(t tx, now time.Time) (err error) {
		if err := t.soundDeadlines(p.Queue); err != nil {
			return err
		}
		runAfter := model.Round(now.Add(p.Delay))
		return t.settingAside(func() (err error) {
			base, err := t.base(p.Queue)
			if err != nil {
				return err
			}
			tasks, err = scanTasks(t.query(sqlRecoverExpired, p.Queue, now.UnixMicro(), limitArg(p.Limit),
				int64(queuedState(now, runAfter)), micros(runAfter), base))
			if err != nil {
				return t.stamped(p.Queue, err)
			}
			byVersion(tasks)
			if tasks == nil {
				tasks = []model.Task{}
			}
			return t.stampedRun(p.Queue, base, tasks)
		})
	})
	if err != nil {
		return core.TasksResult{}, err
	}
	return core.TasksResult{Now: now, Tasks: tasks}, nil
}

// --- inspector ---------------------------------------------------------------

// inspectorOp runs an operator's action, diagnosing a miss in the model's
// order: ErrNotFound, ErrConflict (expected version), then the state.
func (s *Store) inspectorOp(ctx context.Context, op model.Op, p core.InspectParams, q string, advance bool, extra ...func(now time.Time) []any) (core.TaskResult, error) {
	var task model.Task
	now, err := s.write(ctx, p.Queue, func() error { return model.ValidateID(p.ID) }, func(t tx, now time.Time) error {
		// Every action reads the sequence first: a Remove writes it to the
		// queue's row before its task (which may hold the last value drawn)
		// is deleted.
		base, err := t.base(p.Queue)
		if err != nil {
			return err
		}
		args := []any{p.Queue, p.ID, int64(p.Expect)}
		for _, x := range extra {
			args = append(args, x(now)...)
		}
		if advance {
			args = withVersion(args, base+1)
		}
		got, found, err := t.oneTask(q, args...)
		if advance && err != nil {
			err = t.stamped(p.Queue, err)
		}
		var d *damagedError
		if op == model.OpRemove && errors.As(err, &d) {
			// A damaged record is deleted and reported as set aside.
			got, found, err = quarantinedTask(p.Queue, p.ID, stateQuarantined, d.reason), true, nil
		}
		if err != nil {
			return err
		}
		if found && got.State == model.Quarantined && p.Expect != 0 {
			return fmt.Errorf("%w: task %q is quarantined: it has no version to expect", core.ErrConflict, p.ID)
		}
		if !found {
			state, _, version, found, err := t.probe(p.Queue, p.ID)
			if err == nil && found && state != model.Quarantined && op != model.OpRemove {
				// A damaged record is ErrCorrupt before its version or
				// state is judged: neither can be trusted (the model's
				// order; a Remove at a version is ErrConflict instead).
				err = t.damage(p.Queue, p.ID)
			}
			switch {
			case err != nil:
				return err
			case !found:
				err = fmt.Errorf("%w: %q", core.ErrNotFound, p.ID)
			case p.Expect != 0 && version != p.Expect:
				err = fmt.Errorf("%w: task %q is at version %d, not %d", core.ErrConflict, p.ID, version, p.Expect)
			default:
				err = transition(op, state, p.ID)
			}
			return err
		}
		task = got
		if advance {
			return t.stampedRun(p.Queue, base, []model.Task{got})
		}
		return t.persistSeq(p.Queue) // Remove: the task is gone

	})
	if err != nil {
		return core.TaskResult{}, err
	}
	return core.TaskResult{Now: now, Task: task}, nil
}

// InspectRequeue implements core.Store.
func (s *Store) InspectRequeue(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return s.inspectorOp(ctx, model.OpInspectRequeue, p, sqlInspectRequeue, true)
}

// Cancel implements core.Store.
func (s *Store) Cancel(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return s.inspectorOp(ctx, model.OpCancel, p, sqlCancel, true, func(now time.Time) []any {
		return []any{micros(now), model.CancelledMessage}
	})
}

// Remove implements core.Store. The queue's sequence is not reset, so an ID
// enqueued again never gets a version or token it had before.
func (s *Store) Remove(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return s.inspectorOp(ctx, model.OpRemove, p, sqlRemove, false)
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
	now, err := s.write(ctx, p.Queue, validate, func(t tx, now time.Time) error {
		for _, q := range sqlDamagedFinished {
			if err := t.setAsideBadTimes(p.Queue, q, "finished with a finish time that is not a time"); err != nil {
				return err
			}
		}
		// The sequence is read before the deletion: a task deleted may hold
		// the last value drawn (persistSeq, below).
		if _, err := t.base(p.Queue); err != nil {
			return err
		}
		rows, err := t.query(sqlPrune, p.Queue, model.Round(p.Before).UnixMicro(), succeeded, failed, limitArg(p.Limit))
		if err != nil {
			return err
		}
		type pruned struct {
			id       string
			finished int64
		}
		var got []pruned
		for rows.Next() {
			var r pruned
			if err := rows.Scan(&r.id, &r.finished); err != nil {
				rows.Close()
				return corrupt("prune: %v", err)
			}
			got = append(got, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		slices.SortFunc(got, func(a, b pruned) int {
			if a.finished != b.finished {
				if a.finished < b.finished {
					return -1
				}
				return 1
			}
			return strings.Compare(a.id, b.id)
		})
		ids = make([]string, len(got))
		for i, r := range got {
			ids[i] = r.id
		}
		if len(got) == 0 {
			return nil
		}
		return t.persistSeq(p.Queue) // a deleted task may hold the last value drawn
	})
	if err != nil {
		return core.IDsResult{}, err
	}
	return core.IDsResult{Now: now, IDs: ids}, nil
}

// Get implements core.Store.
func (s *Store) Get(ctx context.Context, p core.GetParams) (core.Task, error) {
	var task model.Task
	err := s.read(ctx, p.Queue, func() error { return model.ValidateID(p.ID) }, sqlGet, func(st *sql.Stmt) error {
		ts, err := scanTasks(st.QueryContext(ctx, p.Queue, p.ID))
		var d *damagedError
		if errors.As(err, &d) {
			// Reads write nothing: a damaged record is reported as it will
			// be once a scan sets it aside.
			ts, err = []model.Task{quarantinedTask(p.Queue, p.ID, stateQuarantined, d.reason)}, nil
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
	validate := func() error {
		return model.ValidateList(p.State, p.Limit)
	}
	var res core.ListResult
	err := s.read(ctx, p.Queue, validate, sqlList[p.State], func(st *sql.Stmt) error {
		ts, err := listSound(p.Limit + 1)(st.QueryContext(ctx, p.Queue, p.After, -1))
		if err != nil {
			return err
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
	err := s.read(ctx, p.Queue, nil, sqlCounts, func(st *sql.Stmt) error {
		rows, err := st.QueryContext(ctx, p.Queue)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var kind int
			var st any
			var n int64
			if err := rows.Scan(&kind, &st, &n); err != nil {
				return corrupt("counts: %v", err)
			}
			if kind == 1 {
				c.Paused = n == 1
				continue
			}
			state := model.Quarantined // set aside, or a state that is none
			if validState(st) {
				state = model.State(st.(int64))
			}
			switch state {
			case model.Scheduled:
				c.Scheduled = int(n)
			case model.Ready:
				c.Ready = int(n)
			case model.Running:
				c.Running = int(n)
			case model.Succeeded:
				c.Succeeded = int(n)
			case model.Failed:
				c.Failed = int(n)
			case model.Quarantined:
				c.Quarantined += int(n)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return core.Counts{}, err
	}
	return c, nil
}

func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

var _ core.QueueLister = (*Store)(nil)

// Queues implements core.QueueLister: the names in the queues table, sorted.
func (s *Store) Queues(ctx context.Context) ([]string, error) {
	var names []string
	// enter validates a queue name; any valid one will do for a store-wide read.
	err := s.read(ctx, "queues", nil, sqlQueues, func(st *sql.Stmt) error {
		rows, err := st.QueryContext(ctx)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return corrupt("queues: %v", err)
			}
			names = append(names, n)
		}
		return rows.Err()
	})
	return names, err
}

// listSound reads up to n tasks of a List page from rows, in order, passing
// over the damaged ones (reads write nothing; a scan sets them aside), and
// closes rows.
func listSound(n int) func(*sql.Rows, error) ([]model.Task, error) {
	return func(rows *sql.Rows, err error) ([]model.Task, error) {
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []model.Task
		for len(out) < n && rows.Next() {
			t, err := scanTask(rows)
			var d *damagedError
			if errors.As(err, &d) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out = append(out, t)
		}
		return out, rows.Err()
	}
}
