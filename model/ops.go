package model

import (
	"bytes"
	"fmt"
	"time"
)

// EnqueueArgs are the arguments of Enqueue.
type EnqueueArgs struct {
	ID          string // required, 1..MaxIDLength bytes
	Payload     []byte
	Priority    int       // MinPriority..MaxPriority; higher runs first
	RunAfter    time.Time // the task is Scheduled until then; zero or past: Ready at once
	MaxAttempts int       // >= 1
	// Timeout is the attempt timeout stored with the task, 0..MaxDuration;
	// 0: none (the worker's own applies).
	Timeout time.Duration
	// UniqueKey, when not empty (at most MaxUniqueKeyLength bytes), is a
	// key no other task of the queue may hold while this one does: see
	// "Unique keys" in the package documentation.
	UniqueKey string
	// UniqueFor is how long the key is held: 0, while the task is pending
	// (Scheduled, Ready or Running); else from the store's enqueue time for
	// that long (0..MaxDuration), whatever the task's state. It needs a
	// UniqueKey.
	UniqueFor time.Duration
}

// Enqueue adds a task. It is Scheduled if RunAfter is after now, else Ready.
// A task given a UniqueKey takes it: it becomes the key's holder.
//
// Errors: ErrInvalidArgument, ErrConflict (the ID exists, in any state; or
// a *DuplicateError: another task holds the unique key), ErrQueueFull.
func (q Queue) Enqueue(now time.Time, a EnqueueArgs) (Queue, Task, error) {
	if err := ValidateEnqueue(a); err != nil {
		return q, Task{}, err
	}
	if _, exists := q.tasks.Get(a.ID); exists {
		return q, Task{}, fmt.Errorf("%w: task %q already exists", ErrConflict, a.ID)
	}
	if a.UniqueKey != "" {
		if h, held := q.KeyHolder(now, a.UniqueKey); held {
			return q, Task{}, &DuplicateError{Key: a.UniqueKey, TaskID: h}
		}
	}
	if q.capacity > 0 && q.counts.Pending() >= q.capacity {
		return q, Task{}, fmt.Errorf("%w: %d pending tasks", ErrQueueFull, q.capacity)
	}
	next, v := q.stamp()
	t := Task{
		Queue:       q.name,
		ID:          a.ID,
		Payload:     Stored(a.Payload),
		Priority:    a.Priority,
		MaxAttempts: a.MaxAttempts,
		Timeout:     a.Timeout,
		Version:     v,
		EnqueuedAt:  now,
		UniqueKey:   a.UniqueKey,
		UniqueUntil: UniqueUntil(now, a.UniqueFor),
	}
	t.queueAt(now, Round(a.RunAfter))
	next = next.index(&t)
	if a.UniqueKey != "" {
		next.keys = next.keys.Put(a.UniqueKey, a.ID)
	}
	return next, t, nil
}

// UniqueUntil is the UniqueUntil that Enqueue gives a task enqueued on the
// store's clock reading now with the hold period d: now + d, rounded as
// every instant is, and unset for d = 0 (the key is held while the task is
// pending).
func UniqueUntil(now time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return Round(now.Add(d))
}

// KeyHolder returns the ID of the task that holds the unique key at now,
// and whether one does: the key's last taker (the last task enqueued with
// it), if that task still exists, is not set aside, still carries the key,
// and its hold has not ended (Task.HoldsKey).
func (q Queue) KeyHolder(now time.Time, key string) (string, bool) {
	id, ok := q.keys.Get(key)
	if !ok {
		return "", false
	}
	t, ok := q.tasks.Get(id)
	if !ok || t.UniqueKey != key || !t.HoldsKey(now) {
		return "", false
	}
	return id, true
}

// Promote makes Ready every Scheduled task whose RunAfter is at or before now,
// in order of RunAfter then ID, at most limit of them (0: no limit). It returns
// the IDs it promoted.
func (q Queue) Promote(now time.Time, limit int) (Queue, []string, error) {
	if err := ValidateLimit(limit); err != nil {
		return q, nil, err
	}
	q, due := q.scan(q.scheduled, limit, func(t *Task) bool { return !t.RunAfter.After(now) })
	ids := make([]string, 0, len(due))
	for _, t := range due {
		n := *t
		q, n.Version = q.stamp()
		n.State = Ready
		q = q.replace(t, n)
		ids = append(ids, n.ID)
	}
	return q, ids, nil
}

// Pop claims up to n Ready tasks for a worker, highest priority first and,
// within a priority, the one that became Ready first. Each is Running with
// ClaimToken = its new Version, Attempt + 1 and Deadline = now + lease. An
// empty queue returns no tasks and no error, and so does a paused one (see
// Pause), whatever it holds: its arguments are checked, nothing is claimed
// and no damaged record is set aside.
func (q Queue) Pop(now time.Time, lease time.Duration, n int) (Queue, []Task, error) {
	if err := ValidateLease(lease); err != nil {
		return q, nil, err
	}
	if err := ValidatePopSize(n); err != nil {
		return q, nil, err
	}
	if q.paused {
		return q, []Task{}, nil
	}
	q, first := q.scan(q.ready, n, func(*Task) bool { return true })
	out := make([]Task, 0, len(first))
	for _, t := range first {
		c := *t
		q, c.Version = q.stamp()
		c.State = Running
		c.ClaimToken = c.Version
		c.Attempt++
		c.ClaimedAt = now
		c.Deadline = Round(now.Add(lease))
		q = q.replace(t, c)
		out = append(out, c)
	}
	return q, out, nil
}

// Extend renews the lease of a claim: Deadline = now + lease.
//
// Errors: ErrInvalidArgument, ErrStaleClaim, ErrInvalidTransition.
func (q Queue) Extend(now time.Time, c Claim, lease time.Duration) (Queue, Task, error) {
	if err := ValidateLease(lease); err != nil {
		return q, Task{}, err
	}
	t, err := q.claimed(OpExtend, c)
	if err != nil {
		return q, Task{}, err
	}
	n := *t
	q, n.Version = q.stamp()
	n.Deadline = Round(now.Add(lease))
	return q.replace(t, n), n, nil
}

// Ack records the claim's success: the task is Succeeded with its result.
//
// Errors: ErrInvalidArgument, ErrStaleClaim, ErrInvalidTransition.
func (q Queue) Ack(now time.Time, c Claim, result []byte) (Queue, Task, error) {
	t, err := q.claimed(OpAck, c)
	if err != nil {
		return q, Task{}, err
	}
	n := *t
	q, n.Version = q.stamp()
	n.Result = Stored(result)
	n.finish(Succeeded, now)
	return q.replace(t, n), n, nil
}

// Fail records the claim's failure with the handler's message: the task is
// Failed, whatever attempts it has left.
//
// Errors: ErrInvalidArgument, ErrStaleClaim, ErrInvalidTransition.
func (q Queue) Fail(now time.Time, c Claim, message string) (Queue, Task, error) {
	t, err := q.claimed(OpFail, c)
	if err != nil {
		return q, Task{}, err
	}
	n := *t
	q, n.Version = q.stamp()
	n.Errors = t.withError(TaskError{Attempt: t.Attempt, At: now, Message: message})
	n.finish(Failed, now)
	return q.replace(t, n), n, nil
}

// Retry records the handler's message and returns the task to the queue
// with RunAfter = now + delay, judged on the store's clock (the caller's
// clock plays no part; see [RunAfter]): Scheduled if the delay is at least
// a microsecond, else Ready with RunAfter unset.
//
// Errors: ErrInvalidArgument (a delay outside 0..MaxDuration),
// ErrStaleClaim, ErrInvalidTransition.
func (q Queue) Retry(now time.Time, c Claim, delay time.Duration, message string) (Queue, Task, error) {
	if err := ValidateDelay(delay); err != nil {
		return q, Task{}, err
	}
	t, err := q.claimed(OpRetry, c)
	if err != nil {
		return q, Task{}, err
	}
	n := *t
	q, n.Version = q.stamp()
	n.Errors = t.withError(TaskError{Attempt: t.Attempt, At: now, Message: message})
	n.queueAt(now, RunAfter(now, delay))
	return q.replace(t, n), n, nil
}

// ClaimExpired hands a broker the Running tasks whose Deadline is at or before
// now, in order of Deadline then ID, at most limit (0: no limit). Expiry is
// judged in the same step that renews: each claimed task gets Deadline = now +
// claimTTL and a new Version, which the ReapClaim carries. ClaimToken is not
// changed, so the worker may still decide first.
func (q Queue) ClaimExpired(now time.Time, claimTTL time.Duration, limit int) (Queue, []ReapClaim, error) {
	if err := ValidateClaimTTL(claimTTL); err != nil {
		return q, nil, err
	}
	if err := ValidateLimit(limit); err != nil {
		return q, nil, err
	}
	q, expired := q.scan(q.running, limit, func(t *Task) bool { return !t.Deadline.After(now) })
	out := make([]ReapClaim, 0, len(expired))
	for _, t := range expired {
		n := *t
		q, n.Version = q.stamp()
		n.Deadline = Round(now.Add(claimTTL))
		q = q.replace(t, n)
		out = append(out, ReapClaim{Queue: n.Queue, TaskID: n.ID, Version: n.Version, Deadline: n.Deadline, Task: n})
	}
	return q, out, nil
}

// Requeue is a broker's decision to run a task again after its lease lapsed.
// The lease-expired error (message, or LeaseExpiredMessage when empty) is
// appended; the task returns to the queue with RunAfter = now + delay, on
// the store's clock (see [RunAfter]): Scheduled if the delay is at least a
// microsecond, else Ready with RunAfter unset.
//
// Errors: ErrInvalidArgument (a delay outside 0..MaxDuration),
// ErrStaleClaim, ErrInvalidTransition.
func (q Queue) Requeue(now time.Time, rc ReapClaim, delay time.Duration, message string) (Queue, Task, error) {
	if err := ValidateDelay(delay); err != nil {
		return q, Task{}, err
	}
	t, err := q.reaped(OpRequeue, rc)
	if err != nil {
		return q, Task{}, err
	}
	n := *t
	q, n.Version = q.stamp()
	n.Errors = t.withError(leaseError(t, now, message))
	n.queueAt(now, RunAfter(now, delay))
	return q.replace(t, n), n, nil
}

// Finalize is a broker's decision to give up on a task after its lease
// lapsed: the lease-expired error is appended and the task is Failed.
//
// Errors: ErrInvalidArgument, ErrStaleClaim, ErrInvalidTransition.
func (q Queue) Finalize(now time.Time, rc ReapClaim, message string) (Queue, Task, error) {
	t, err := q.reaped(OpFinalize, rc)
	if err != nil {
		return q, Task{}, err
	}
	n := *t
	q, n.Version = q.stamp()
	n.Errors = t.withError(leaseError(t, now, message))
	n.finish(Failed, now)
	return q.replace(t, n), n, nil
}

// RecoverExpired decides every Running task whose Deadline is at or before now
// in one step, in order of Deadline then ID, at most limit (0: no limit): the
// lease-expired error is appended; a task with Attempt >= MaxAttempts is
// Failed, any other returns to the queue with RunAfter = now + delay. It
// returns the tasks as it left them.
func (q Queue) RecoverExpired(now time.Time, delay time.Duration, limit int) (Queue, []Task, error) {
	if err := ValidateDelay(delay); err != nil {
		return q, nil, err
	}
	if err := ValidateLimit(limit); err != nil {
		return q, nil, err
	}
	q, expired := q.scan(q.running, limit, func(t *Task) bool { return !t.Deadline.After(now) })
	out := make([]Task, 0, len(expired))
	for _, t := range expired {
		n := *t
		q, n.Version = q.stamp()
		n.Errors = t.withError(leaseError(t, now, ""))
		if t.Attempt >= t.MaxAttempts {
			n.finish(Failed, now)
		} else {
			n.queueAt(now, Round(now.Add(delay)))
		}
		q = q.replace(t, n)
		out = append(out, n)
	}
	return q, out, nil
}

// InspectRequeue is an operator's requeue: the task becomes Ready with a fresh
// set of attempts (Attempt = 0); its error history is kept and its result
// cleared. expect, when not 0, is the Version the operator saw.
//
// Errors: ErrInvalidArgument, ErrNotFound, ErrConflict, ErrInvalidTransition
// (the task is already Ready).
func (q Queue) InspectRequeue(id string, expect uint64) (Queue, Task, error) {
	t, err := q.inspected(OpInspectRequeue, id, expect)
	if err != nil {
		return q, Task{}, err
	}
	n := *t
	q, n.Version = q.stamp()
	n.Attempt = 0
	n.Result = nil
	n.queueAt(time.Time{}, time.Time{})
	return q.replace(t, n), n, nil
}

// Cancel is an operator's cancellation of a task that has not finished: a
// Scheduled, Ready or Running task becomes Failed at once, with the
// cancellation (CancelledMessage, TaskError.Cancelled) appended to its
// errors. expect, when not 0, is the Version the operator saw.
//
// A Running task keeps its ClaimToken, so its worker learns of the
// cancellation at its next op under the claim (a heartbeat's Extend, or its
// decision): ErrCancelled, for which errors.Is(err, ErrStaleClaim) holds
// too, and which changes nothing. A broker's claim on it is stale (the
// Version changed), and no index leads a broker or a Pop to it: it is never
// retried, requeued or run again, unless an operator requeues it.
//
// Errors: ErrInvalidArgument, ErrNotFound, ErrConflict, ErrInvalidTransition
// (the task is Succeeded or Failed already).
func (q Queue) Cancel(now time.Time, id string, expect uint64) (Queue, Task, error) {
	t, err := q.inspected(OpCancel, id, expect)
	if err != nil {
		return q, Task{}, err
	}
	n := *t
	q, n.Version = q.stamp()
	n.Errors = t.withError(TaskError{Attempt: t.Attempt, At: now, Message: CancelledMessage, Cancelled: true})
	n.finish(Failed, now)
	return q.replace(t, n), n, nil
}

// Remove deletes a task in any state and returns it as it was. expect, when
// not 0, is the Version the operator saw. The ID may be enqueued again; the
// queue's sequence is not reset, so no token or version is reused.
//
// Errors: ErrInvalidArgument, ErrNotFound, ErrConflict.
func (q Queue) Remove(id string, expect uint64) (Queue, Task, error) {
	if err := validID(id); err != nil {
		return q, Task{}, err
	}
	if t, ok := q.tasks.Get(id); ok && q.isDamaged(id) {
		if expect != 0 {
			return q, Task{}, fmt.Errorf("%w: task %q is damaged: its version cannot be read", ErrConflict, id)
		}
		return q.unindex(t).forget(id).release(t), quarantined(t), nil
	}
	t, err := q.inspected(OpRemove, id, expect)
	if err != nil {
		return q, Task{}, err
	}
	return q.unindex(t).release(t), *t, nil
}

// Prune deletes terminal tasks in the given states whose FinishedAt is before
// before, oldest first, at most limit (0: no limit), and returns their IDs.
//
// Errors: ErrInvalidArgument (no states, or a state that is not terminal).
func (q Queue) Prune(states []State, before time.Time, limit int) (Queue, []string, error) {
	if err := ValidatePruneStates(states); err != nil {
		return q, nil, err
	}
	var want [Failed + 1]bool
	for _, s := range states {
		want[s] = true
	}
	if err := ValidateLimit(limit); err != nil {
		return q, nil, err
	}
	before = Round(before)
	var doomed []*Task
	q.finished.Ascend("", func(_ string, id string) bool {
		t, _ := q.tasks.Get(id)
		if !t.FinishedAt.Before(before) {
			return false
		}
		if want[t.State] {
			doomed = append(doomed, t)
		}
		return limit == 0 || len(doomed) < limit
	})
	ids := make([]string, 0, len(doomed))
	for _, t := range doomed {
		q = q.unindex(t).forget(t.ID).release(t)
		ids = append(ids, t.ID)
	}
	return q, ids, nil
}

// --- guards ------------------------------------------------------------------

// claimed checks a worker claim: the task exists, its ClaimToken is the
// claim's token, and op is legal from its state.
func (q Queue) claimed(op Op, c Claim) (*Task, error) {
	if err := ValidateClaim(c); err != nil {
		return nil, err
	}
	t, ok := q.tasks.Get(c.TaskID)
	if !ok {
		return nil, fmt.Errorf("%w: task %q no longer exists", ErrStaleClaim, c.TaskID)
	}
	if q.isDamaged(c.TaskID) {
		return nil, damaged(c.TaskID)
	}
	if t.ClaimToken != c.Token {
		return nil, fmt.Errorf("%w: token %d no longer holds task %q", ErrStaleClaim, c.Token, c.TaskID)
	}
	if t.Cancelled() {
		return nil, cancelled(c.TaskID)
	}
	return t, checkFrom(op, t)
}

// reaped checks a broker claim: the task exists, its Version is the claim's,
// and op is legal from its state.
func (q Queue) reaped(op Op, rc ReapClaim) (*Task, error) {
	if err := ValidateReapClaim(rc); err != nil {
		return nil, err
	}
	t, ok := q.tasks.Get(rc.TaskID)
	if !ok {
		return nil, fmt.Errorf("%w: task %q no longer exists", ErrStaleClaim, rc.TaskID)
	}
	if q.isDamaged(rc.TaskID) {
		return nil, damaged(rc.TaskID)
	}
	if t.Version != rc.Version {
		return nil, fmt.Errorf("%w: task %q changed since version %d", ErrStaleClaim, rc.TaskID, rc.Version)
	}
	return t, checkFrom(op, t)
}

// inspected checks an operator's action: the task exists, it is at the
// expected version (if one is given), and op is legal from its state.
func (q Queue) inspected(op Op, id string, expect uint64) (*Task, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	t, ok := q.tasks.Get(id)
	if !ok {
		return nil, notFound(id)
	}
	if q.isDamaged(id) {
		return nil, damaged(id)
	}
	if expect != 0 && t.Version != expect {
		return nil, fmt.Errorf("%w: task %q is at version %d, not %d", ErrConflict, id, t.Version, expect)
	}
	return t, checkFrom(op, t)
}

// --- helpers -----------------------------------------------------------------

// scan returns, in index order, up to limit tasks (0: no limit) from the
// front of an order index while ok holds. The damaged records it reaches
// on the way are set aside in the queue it returns and not counted.
func (q Queue) scan(index tree[string], limit int, ok func(*Task) bool) (Queue, []*Task) {
	var out, aside []*Task
	index.Ascend("", func(_ string, id string) bool {
		if limit > 0 && len(out) == limit {
			return false
		}
		t, _ := q.tasks.Get(id)
		if !ok(t) {
			return false
		}
		if q.isDamaged(id) {
			aside = append(aside, t)
		} else {
			out = append(out, t)
		}
		return true
	})
	for _, t := range aside {
		q = q.setAside(t)
	}
	return q, out
}

// queueAt returns the task to the queue: Scheduled if runAfter is after now,
// else Ready; the claim and its timestamps are cleared.
func (t *Task) queueAt(now, runAfter time.Time) {
	t.RunAfter = runAfter
	t.State = Ready
	if runAfter.After(now) {
		t.State = Scheduled
	}
	t.ClaimToken = 0
	t.ClaimedAt = time.Time{}
	t.Deadline = time.Time{}
	t.FinishedAt = time.Time{}
}

// RunAfter is the RunAfter that Retry and Requeue give a task that runs
// again after delay on the store's clock reading now: now + delay, the
// delay truncated to the microsecond (the precision of stored times), and
// unset when that leaves no delay.
func RunAfter(now time.Time, delay time.Duration) time.Time {
	delay = delay.Truncate(time.Microsecond)
	if delay <= 0 {
		return time.Time{}
	}
	return Round(now.Add(delay))
}

// finish moves a Running task to a terminal state.
func (t *Task) finish(s State, now time.Time) {
	t.State = s
	t.FinishedAt = now
	t.Deadline = time.Time{}
}

func leaseError(t *Task, now time.Time, message string) TaskError {
	if message == "" {
		message = LeaseExpiredMessage
	}
	return TaskError{Attempt: t.Attempt, At: now, Message: message, LeaseExpired: true}
}

func validID(id string) error { return ValidateID(id) }

func notFound(id string) error { return fmt.Errorf("%w: %q", ErrNotFound, id) }

func damaged(id string) error {
	return fmt.Errorf("%w: task %q does not parse", ErrCorrupt, id)
}

// Stored is a payload or result b as every store keeps it: a copy, and nil
// when b is empty (a store returns nil for an empty one, never an empty
// slice).
func Stored(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}
