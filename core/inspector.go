package core

import (
	"context"
	"fmt"
	"iter"
	"time"
)

// AnyVersion, passed as the expected version of an Inspector action, makes
// the action unconditional.
const AnyVersion uint64 = 0

// Inspector is an operator's view of one queue: read tasks and counts, and
// act on tasks with the operator's authority. Its actions may be conditional
// on the task's Version as the operator saw it (from Get or List): if the
// task changed since, the action fails with ErrConflict and changes nothing.
// An action on a task a broker has claimed makes the broker's decision stale,
// so the operator's action stands. An Inspector is safe for concurrent use.
type Inspector struct {
	store Store
	queue string
}

// NewInspector returns an Inspector of the named queue.
func NewInspector(store Store, queue string) (*Inspector, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidArgument)
	}
	if err := ValidateQueueName(queue); err != nil {
		return nil, err
	}
	return &Inspector{store: store, queue: queue}, nil
}

// Queue returns the name of the inspected queue.
func (i *Inspector) Queue() string { return i.queue }

// Get returns the task with the given ID.
//
// Errors: ErrInvalidArgument, ErrNotFound.
func (i *Inspector) Get(ctx context.Context, id string) (Task, error) {
	return i.store.Get(ctx, GetParams{Queue: i.queue, ID: id})
}

// List returns up to limit (1..MaxBatch) tasks in the state whose ID is
// greater than after, in ID order. Pass "" to start, then the returned Next
// as after; Next is "" on the last page.
//
// Errors: ErrInvalidArgument.
func (i *Inspector) List(ctx context.Context, s State, after string, limit int) (ListResult, error) {
	return i.store.List(ctx, ListParams{Queue: i.queue, State: s, After: after, Limit: limit})
}

// All iterates over every task in the state, in ID order, a page of
// MaxBatch at a time. A page is read when the loop reaches it, so tasks that
// change state meanwhile may be missed or seen twice. An error ends the
// iteration with (Task{}, err).
func (i *Inspector) All(ctx context.Context, s State) iter.Seq2[Task, error] {
	return func(yield func(Task, error) bool) {
		after := ""
		for {
			page, err := i.List(ctx, s, after, MaxBatch)
			if err != nil {
				yield(Task{}, err)
				return
			}
			for _, t := range page.Tasks {
				if !yield(t, nil) {
					return
				}
			}
			if page.Next == "" {
				return
			}
			after = page.Next
		}
	}
}

// Counts returns the number of tasks in each state, and whether the queue is
// paused (Counts.Paused).
func (i *Inspector) Counts(ctx context.Context) (Counts, error) {
	return i.store.Counts(ctx, CountsParams{Queue: i.queue})
}

// Pause pauses the queue: once it returns, no Worker claims a task of the
// queue until Resume. Tasks already running go on: their workers extend
// their leases and decide them, and brokers reap the ones whose lease
// lapses (a task requeued meanwhile waits, Ready). Producers go on
// enqueueing and scheduled tasks still become Ready. Pausing a paused queue
// is not an error. It returns the paused flag (true).
//
// Errors: ErrInvalidArgument.
func (i *Inspector) Pause(ctx context.Context) (bool, error) {
	res, err := i.store.Pause(ctx, PauseParams{Queue: i.queue})
	return res.Paused, err
}

// Resume lets workers claim the queue's tasks again. Resuming a queue that
// is not paused is not an error. It returns the paused flag (false).
//
// Errors: ErrInvalidArgument.
func (i *Inspector) Resume(ctx context.Context) (bool, error) {
	res, err := i.store.Resume(ctx, PauseParams{Queue: i.queue})
	return res.Paused, err
}

// Requeue makes the task Ready with a fresh set of attempts, from any state
// but Ready: a failed or succeeded task runs again, a scheduled one at once,
// and a running one is taken from its worker (whose claim is superseded) and
// from any broker that claimed it. The error history is kept, the result
// cleared. expect is the Version the operator saw, or AnyVersion.
//
// Errors: ErrInvalidArgument, ErrNotFound, ErrConflict (the task changed
// since expect), ErrInvalidTransition (the task is Ready).
func (i *Inspector) Requeue(ctx context.Context, id string, expect uint64) (Task, error) {
	res, err := i.store.InspectRequeue(ctx, InspectParams{Queue: i.queue, ID: id, Expect: expect})
	return res.Task, err
}

// Cancel cancels a task that has not finished: a Scheduled or Ready task
// is Failed at once and never runs; a Running one is Failed too, and the
// Worker holding it learns it at its next heartbeat (or when it records the
// handler's outcome, which is refused): it cancels the handler's context
// with a cause for which errors.Is(cause, ErrCancelled) holds, and neither
// retries nor acknowledges the task, and its retry policy is not asked (a
// handler that returns a failure before that heartbeat has the policy
// asked, but the Retry or Fail it leads to is refused as cancelled and
// changes nothing). A broker's claim on it is stale. The
// task's last error is the cancellation (Task.Cancelled reports it).
// expect is the Version the operator saw, or AnyVersion.
//
// Errors: ErrInvalidArgument, ErrNotFound, ErrConflict (the task changed
// since expect), ErrInvalidTransition (the task is Succeeded or Failed).
func (i *Inspector) Cancel(ctx context.Context, id string, expect uint64) (Task, error) {
	res, err := i.store.Cancel(ctx, InspectParams{Queue: i.queue, ID: id, Expect: expect})
	return res.Task, err
}

// Remove deletes the task, in any state, and returns it as it was. A worker
// or broker holding a claim on it finds the claim stale. expect is the
// Version the operator saw, or AnyVersion.
//
// Errors: ErrInvalidArgument, ErrNotFound, ErrConflict.
func (i *Inspector) Remove(ctx context.Context, id string, expect uint64) (Task, error) {
	res, err := i.store.Remove(ctx, InspectParams{Queue: i.queue, ID: id, Expect: expect})
	return res.Task, err
}

// Prune deletes up to limit (0: no limit) terminal tasks that finished before
// the given time (truncated to the microsecond), oldest first, and returns
// their IDs. states selects Succeeded, Failed or both; none means both.
//
// Errors: ErrInvalidArgument (a state that is not terminal, a negative
// limit).
func (i *Inspector) Prune(ctx context.Context, before time.Time, limit int, states ...State) ([]string, error) {
	if len(states) == 0 {
		states = []State{Succeeded, Failed}
	}
	res, err := i.store.Prune(ctx, PruneParams{Queue: i.queue, States: states, Before: truncate(before), Limit: limit})
	return res.IDs, err
}
