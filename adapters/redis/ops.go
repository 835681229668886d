package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// begin checks what every operation checks first: the context, the queue
// name and that the store is open.
func (s *Store) begin(ctx context.Context, queue string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := model.ValidateQueueName(queue); err != nil {
		return err
	}
	if s.closed.Load() {
		return core.ErrClosed
	}
	return nil
}

// now returns the now argument of a script ("" for the server's TIME) and
// the injected clock's reading (zero with the server's clock), which an
// operation refused before its script reports as Now, as the model does.
func (s *Store) now() (string, time.Time, error) {
	if s.clock == nil {
		return "", time.Time{}, nil
	}
	t := model.Round(s.clock.Now())
	arg, err := micros("clock reading", t)
	if err != nil {
		return "", time.Time{}, err
	}
	return arg, t, nil
}

// permissionMessage reports whether msg, an error reply of the server or of
// a command a script ran, refuses the client's credentials or rights: an
// ACL that denies a command or a key (NOPERM; inside a script "The user
// executing the script can't ..."), a missing or wrong password (NOAUTH,
// WRONGPASS), a write on a read-only replica (READONLY).
func permissionMessage(msg string) bool {
	for _, p := range [...]string{"NOPERM", "NOAUTH", "WRONGPASS", "READONLY"} {
		if strings.HasPrefix(msg, p) || strings.Contains(msg, " "+p+" ") {
			return true
		}
	}
	return strings.Contains(msg, "The user executing the script can't")
}

// permission wraps err with core.ErrPermission when it is the server's
// refusal of the client's credentials or rights.
func permission(err error) error {
	if isRedisError(err) && permissionMessage(err.Error()) {
		return fmt.Errorf("%w: %w", core.ErrPermission, err)
	}
	return err
}

// The argument checks are the model's own (model/rules.go).
var (
	validID        = model.ValidateID
	validLimit     = model.ValidateLimit
	validClaim     = model.ValidateClaim
	validReapClaim = model.ValidateReapClaim
)

// delayArg checks a retry delay (model.ValidateDelay) and encodes it in µs,
// truncated as model.RunAfter truncates it; the script adds it to its clock.
func delayArg(d time.Duration) (string, error) {
	if err := model.ValidateDelay(d); err != nil {
		return "", err
	}
	return strconv.FormatInt(int64(d/time.Microsecond), 10), nil
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

// taskOp runs a script that returns one task.
func (s *Store) taskOp(ctx context.Context, sc *script, queue, id string, args ...any) (core.TaskResult, error) {
	r, err := s.eval(ctx, sc, s.queueKeys(queue, id), id, args...)
	if err != nil {
		return core.TaskResult{}, err
	}
	now, err := parseNow(r.head)
	if err != nil {
		return core.TaskResult{}, err
	}
	tasks, err := decodeTasks(queue, r.rest)
	if err != nil {
		return core.TaskResult{}, err
	}
	if len(tasks) != 1 {
		return core.TaskResult{}, fmt.Errorf("leasehold/redis: %v returned %d tasks", sc.op, len(tasks))
	}
	return core.TaskResult{Now: now, Task: tasks[0]}, nil
}

// tasksOp runs a script that returns now and a list of tasks.
func (s *Store) tasksOp(ctx context.Context, sc *script, queue string, args ...any) (time.Time, []core.Task, error) {
	r, err := s.eval(ctx, sc, s.queueKeys(queue), "", args...)
	if err != nil {
		return time.Time{}, nil, err
	}
	now, err := parseNow(r.head)
	if err != nil {
		return time.Time{}, nil, err
	}
	tasks, err := decodeTasks(queue, r.rest)
	if err != nil {
		return time.Time{}, nil, err
	}
	return now, tasks, nil
}

// idsOp runs a script that returns now and a list of IDs.
func (s *Store) idsOp(ctx context.Context, sc *script, queue string, args ...any) (core.IDsResult, error) {
	r, err := s.eval(ctx, sc, s.queueKeys(queue), "", args...)
	if err != nil {
		return core.IDsResult{}, err
	}
	now, err := parseNow(r.head)
	if err != nil {
		return core.IDsResult{}, err
	}
	return core.IDsResult{Now: now, IDs: r.rest}, nil
}

// Enqueue implements core.Store. Concurrent calls on one queue go to the
// server together when the server is busy with earlier ones (see
// coalesce.go); each is answered as if it had gone alone.
func (s *Store) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	if err := s.begin(ctx, p.Queue); err != nil {
		return core.TaskResult{}, err
	}
	runAfter, err := validEnqueue(p.EnqueueArgs)
	if err != nil {
		return core.TaskResult{}, err
	}
	return s.coalesce(ctx, p, runAfter)
}

// enqueueAlone sends one checked Enqueue as the enqueue script.
func (s *Store) enqueueAlone(ctx context.Context, p core.EnqueueParams, runAfter string) (core.TaskResult, error) {
	now, _, err := s.now()
	if err != nil {
		return core.TaskResult{}, err
	}
	// enqueue.lua takes the capacity after the attempts (ARGV[7]).
	a := enqueueArgs(p.EnqueueArgs, runAfter)
	args := make([]any, 0, len(a)+2)
	args = append(args, now)
	args = append(args, a[:5]...)
	args = append(args, s.capacity)
	args = append(args, a[5:]...)
	return s.taskOp(ctx, enqueueScript, p.Queue, p.ID, args...)
}

// Promote implements core.Store.
func (s *Store) Promote(ctx context.Context, p core.PromoteParams) (core.IDsResult, error) {
	if err := s.begin(ctx, p.Queue); err != nil {
		return core.IDsResult{}, err
	}
	now, clockNow, err := s.now()
	if err != nil {
		return core.IDsResult{}, err
	}
	if err := validLimit(p.Limit); err != nil {
		return core.IDsResult{Now: clockNow}, err
	}
	return s.idsOp(ctx, promoteScript, p.Queue, now, p.Limit)
}

// Pop implements core.Store.
func (s *Store) Pop(ctx context.Context, p core.PopParams) (core.TasksResult, error) {
	if err := s.begin(ctx, p.Queue); err != nil {
		return core.TasksResult{}, err
	}
	now, clockNow, err := s.now()
	if err != nil {
		return core.TasksResult{}, err
	}
	if err := model.ValidateLease(p.Lease); err != nil {
		return core.TasksResult{Now: clockNow}, err
	}
	if err := model.ValidatePopSize(p.N); err != nil {
		return core.TasksResult{Now: clockNow}, err
	}
	lease, err := duration("lease", p.Lease)
	if err != nil {
		return core.TasksResult{Now: clockNow}, err
	}
	r, err := s.eval(ctx, popScript, s.pausedKeys(p.Queue), "", now, lease, p.N)
	if err != nil {
		return core.TasksResult{}, err
	}
	at, err := parseNow(r.head)
	if err != nil {
		return core.TasksResult{}, err
	}
	tasks, err := decodeTasks(p.Queue, r.rest)
	if err != nil {
		return core.TasksResult{}, err
	}
	return core.TasksResult{Now: at, Tasks: tasks}, nil
}

// Extend implements core.Store.
func (s *Store) Extend(ctx context.Context, p core.ExtendParams) (core.TaskResult, error) {
	if err := s.begin(ctx, p.Claim.Queue); err != nil {
		return core.TaskResult{}, err
	}
	if err := model.ValidateLease(p.Lease); err != nil {
		return core.TaskResult{}, err
	}
	if err := validClaim(p.Claim); err != nil {
		return core.TaskResult{}, err
	}
	lease, err := duration("lease", p.Lease)
	if err != nil {
		return core.TaskResult{}, err
	}
	now, _, err := s.now()
	if err != nil {
		return core.TaskResult{}, err
	}
	return s.taskOp(ctx, extendScript, p.Claim.Queue, p.Claim.TaskID,
		now, p.Claim.TaskID, u64(p.Claim.Token), lease)
}

// Ack implements core.Store.
func (s *Store) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	return s.decide(ctx, ackScript, p.Claim, p.Result)
}

// Fail implements core.Store.
func (s *Store) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	return s.decide(ctx, failScript, p.Claim, p.Message)
}

// decide runs a worker's final decision on its claim (Ack, Fail): the
// script's ARGV are now, the task ID, the token and arg.
func (s *Store) decide(ctx context.Context, sc *script, c core.Claim, arg any) (core.TaskResult, error) {
	if err := s.begin(ctx, c.Queue); err != nil {
		return core.TaskResult{}, err
	}
	if err := validClaim(c); err != nil {
		return core.TaskResult{}, err
	}
	now, _, err := s.now()
	if err != nil {
		return core.TaskResult{}, err
	}
	return s.taskOp(ctx, sc, c.Queue, c.TaskID, now, c.TaskID, u64(c.Token), arg)
}

// Retry implements core.Store.
func (s *Store) Retry(ctx context.Context, p core.RetryParams) (core.TaskResult, error) {
	if err := s.begin(ctx, p.Claim.Queue); err != nil {
		return core.TaskResult{}, err
	}
	if err := validClaim(p.Claim); err != nil {
		return core.TaskResult{}, err
	}
	delay, err := delayArg(p.Delay)
	if err != nil {
		return core.TaskResult{}, err
	}
	now, _, err := s.now()
	if err != nil {
		return core.TaskResult{}, err
	}
	return s.taskOp(ctx, retryScript, p.Claim.Queue, p.Claim.TaskID,
		now, p.Claim.TaskID, u64(p.Claim.Token), delay, p.Message)
}

// ClaimExpired implements core.Store.
func (s *Store) ClaimExpired(ctx context.Context, p core.ClaimExpiredParams) (core.ReapResult, error) {
	if err := s.begin(ctx, p.Queue); err != nil {
		return core.ReapResult{}, err
	}
	now, clockNow, err := s.now()
	if err != nil {
		return core.ReapResult{}, err
	}
	if err := model.ValidateClaimTTL(p.ClaimTTL); err != nil {
		return core.ReapResult{Now: clockNow}, err
	}
	if err := validLimit(p.Limit); err != nil {
		return core.ReapResult{Now: clockNow}, err
	}
	ttl, err := duration("claim TTL", p.ClaimTTL)
	if err != nil {
		return core.ReapResult{Now: clockNow}, err
	}
	at, tasks, err := s.tasksOp(ctx, claimExpiredScript, p.Queue, now, ttl, p.Limit)
	if err != nil {
		return core.ReapResult{}, err
	}
	claims := make([]core.ReapClaim, len(tasks))
	for i, t := range tasks {
		claims[i] = core.ReapClaim{Queue: t.Queue, TaskID: t.ID, Version: t.Version, Deadline: t.Deadline, Task: t}
	}
	return core.ReapResult{Now: at, Claims: claims}, nil
}

// Requeue implements core.Store.
func (s *Store) Requeue(ctx context.Context, p core.RequeueParams) (core.TaskResult, error) {
	rc := p.ReapClaim
	if err := s.begin(ctx, rc.Queue); err != nil {
		return core.TaskResult{}, err
	}
	if err := validReapClaim(rc); err != nil {
		return core.TaskResult{}, err
	}
	delay, err := delayArg(p.Delay)
	if err != nil {
		return core.TaskResult{}, err
	}
	now, _, err := s.now()
	if err != nil {
		return core.TaskResult{}, err
	}
	return s.taskOp(ctx, requeueScript, rc.Queue, rc.TaskID,
		now, rc.TaskID, u64(rc.Version), delay, p.Message)
}

// Finalize implements core.Store.
func (s *Store) Finalize(ctx context.Context, p core.FinalizeParams) (core.TaskResult, error) {
	rc := p.ReapClaim
	if err := s.begin(ctx, rc.Queue); err != nil {
		return core.TaskResult{}, err
	}
	if err := validReapClaim(rc); err != nil {
		return core.TaskResult{}, err
	}
	now, _, err := s.now()
	if err != nil {
		return core.TaskResult{}, err
	}
	return s.taskOp(ctx, finalizeScript, rc.Queue, rc.TaskID,
		now, rc.TaskID, u64(rc.Version), p.Message)
}

// RecoverExpired implements core.Store.
func (s *Store) RecoverExpired(ctx context.Context, p core.RecoverExpiredParams) (core.TasksResult, error) {
	if err := s.begin(ctx, p.Queue); err != nil {
		return core.TasksResult{}, err
	}
	now, clockNow, err := s.now()
	if err != nil {
		return core.TasksResult{}, err
	}
	delay, err := delayArg(p.Delay)
	if err != nil {
		return core.TasksResult{Now: clockNow}, err
	}
	if err := validLimit(p.Limit); err != nil {
		return core.TasksResult{Now: clockNow}, err
	}
	at, tasks, err := s.tasksOp(ctx, recoverExpiredScript, p.Queue, now, delay, p.Limit)
	if err != nil {
		return core.TasksResult{}, err
	}
	return core.TasksResult{Now: at, Tasks: tasks}, nil
}

// Get implements core.Store.
func (s *Store) Get(ctx context.Context, p core.GetParams) (core.Task, error) {
	if err := s.begin(ctx, p.Queue); err != nil {
		return core.Task{}, err
	}
	if err := validID(p.ID); err != nil {
		return core.Task{}, err
	}
	r, err := s.eval(ctx, getScript, s.queueKeys(p.Queue, p.ID), p.ID, p.ID)
	if err != nil {
		return core.Task{}, err
	}
	tasks, err := decodeTasks(p.Queue, r.rest)
	if err != nil {
		return core.Task{}, err
	}
	if len(tasks) != 1 {
		return core.Task{}, fmt.Errorf("leasehold/redis: Get returned %d tasks", len(tasks))
	}
	return tasks[0], nil
}

// List implements core.Store.
func (s *Store) List(ctx context.Context, p core.ListParams) (core.ListResult, error) {
	if err := s.begin(ctx, p.Queue); err != nil {
		return core.ListResult{}, err
	}
	if err := model.ValidateList(p.State, p.Limit); err != nil {
		return core.ListResult{}, err
	}
	r, err := s.eval(ctx, listScript, s.queueKeys(p.Queue), "", p.State.String(), p.After, p.Limit)
	if err != nil {
		return core.ListResult{}, err
	}
	tasks, err := decodeTasks(p.Queue, r.rest)
	if err != nil {
		return core.ListResult{}, err
	}
	if len(tasks) == 0 {
		tasks = nil // as the model: an empty page has no slice
	}
	return core.ListResult{Tasks: tasks, Next: r.head}, nil
}

// Counts implements core.Store.
func (s *Store) Counts(ctx context.Context, p core.CountsParams) (core.Counts, error) {
	if err := s.begin(ctx, p.Queue); err != nil {
		return core.Counts{}, err
	}
	r, err := s.eval(ctx, countsScript, s.pausedKeys(p.Queue), "")
	if err != nil {
		return core.Counts{}, err
	}
	if len(r.rest) != 7 {
		return core.Counts{}, fmt.Errorf("leasehold/redis: Counts returned %d numbers", len(r.rest))
	}
	var n [7]int
	for i, v := range r.rest {
		if n[i], err = strconv.Atoi(v); err != nil {
			return core.Counts{}, fmt.Errorf("leasehold/redis: Counts returned %q", v)
		}
	}
	return core.Counts{Scheduled: n[0], Ready: n[1], Running: n[2], Succeeded: n[3], Failed: n[4], Quarantined: n[5], Paused: n[6] == 1}, nil
}

// Pause implements core.Store: it sets the queue's paused key, which the Pop
// script reads in the step that claims.
func (s *Store) Pause(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	return s.setPaused(ctx, p.Queue, true)
}

// Resume implements core.Store: it deletes the queue's paused key.
func (s *Store) Resume(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	return s.setPaused(ctx, p.Queue, false)
}

func (s *Store) setPaused(ctx context.Context, queue string, paused bool) (core.PauseResult, error) {
	if err := s.begin(ctx, queue); err != nil {
		return core.PauseResult{}, err
	}
	arg := "0"
	if paused {
		arg = "1"
	}
	r, err := s.eval(ctx, pauseScript, s.pausedKeys(queue), "", arg)
	if err != nil {
		return core.PauseResult{}, err
	}
	if r.head != arg {
		return core.PauseResult{}, fmt.Errorf("leasehold/redis: %v returned %q", pauseScript.op, r.head)
	}
	return core.PauseResult{Paused: paused}, nil
}

// InspectRequeue implements core.Store.
func (s *Store) InspectRequeue(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return s.inspect(ctx, inspectRequeueScript, p)
}

// Cancel implements core.Store.
func (s *Store) Cancel(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return s.inspect(ctx, cancelScript, p, model.CancelledMessage)
}

// Remove implements core.Store.
func (s *Store) Remove(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return s.inspect(ctx, removeScript, p)
}

// inspect runs an operator's action on one task (InspectRequeue, Remove,
// Cancel): the script's ARGV are now, the task ID, the expected version and
// extra.
func (s *Store) inspect(ctx context.Context, sc *script, p core.InspectParams, extra ...any) (core.TaskResult, error) {
	if err := s.begin(ctx, p.Queue); err != nil {
		return core.TaskResult{}, err
	}
	if err := validID(p.ID); err != nil {
		return core.TaskResult{}, err
	}
	now, _, err := s.now()
	if err != nil {
		return core.TaskResult{}, err
	}
	return s.taskOp(ctx, sc, p.Queue, p.ID, append([]any{now, p.ID, u64(p.Expect)}, extra...)...)
}

// Prune implements core.Store.
func (s *Store) Prune(ctx context.Context, p core.PruneParams) (core.IDsResult, error) {
	if err := s.begin(ctx, p.Queue); err != nil {
		return core.IDsResult{}, err
	}
	now, clockNow, err := s.now()
	if err != nil {
		return core.IDsResult{}, err
	}
	if err := model.ValidatePruneStates(p.States); err != nil {
		return core.IDsResult{Now: clockNow}, err
	}
	args := []any{now, boundMicros(p.Before), p.Limit}
	for _, st := range p.States {
		args = append(args, st.String())
	}
	if err := validLimit(p.Limit); err != nil {
		return core.IDsResult{Now: clockNow}, err
	}
	return s.idsOp(ctx, pruneScript, p.Queue, args...)
}
