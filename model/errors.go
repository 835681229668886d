package model

import (
	"errors"
	"fmt"
)

// The errors of the model. Every rejected operation returns one of them
// (wrapped with detail; test with errors.Is) and leaves the queue unchanged.
var (
	// ErrStaleClaim: the claim no longer holds the task. A worker's token is
	// not the task's ClaimToken, a broker's version is not the task's Version,
	// or the task the claim names no longer exists.
	ErrStaleClaim = errors.New("leasehold: stale claim")
	// ErrNotFound: no task has this ID (inspector and read operations).
	ErrNotFound = errors.New("leasehold: task not found")
	// ErrInvalidTransition: the operation is not legal from the task's state.
	// The error is a *TransitionError carrying the op and the state.
	ErrInvalidTransition = errors.New("leasehold: invalid transition")
	// ErrInvalidArgument: an argument is out of range (empty ID, non-positive
	// lease, unknown state, zero token, ...).
	ErrInvalidArgument = errors.New("leasehold: invalid argument")
	// ErrConflict: the task is not as the caller expected. Enqueue: the ID is
	// taken, or another task holds the unique key (a *DuplicateError). Inspector actions with an expected version: the task changed since
	// the operator saw it.
	ErrConflict = errors.New("leasehold: conflict")
	// ErrQueueFull: Enqueue would take the queue past its capacity of pending
	// (Scheduled, Ready and Running) tasks.
	ErrQueueFull = errors.New("leasehold: queue full")
	// ErrCorrupt: the store holds a record leasehold cannot read (a field
	// that does not parse, an index entry without its task), and the
	// operation names it: a worker's or broker's decision, InspectRequeue
	// or a batch item on a damaged record, or a queue-wide record (the
	// sequence) that does not parse. The operation changed nothing. Scans
	// set damaged records aside instead (see Queue.Damage).
	ErrCorrupt = errors.New("leasehold: corrupt record in store")
	// ErrCancelled: an operator cancelled the task the claim held (see
	// Queue.Cancel). A worker's op under that claim is refused with an error
	// for which both errors.Is(err, ErrCancelled) and errors.Is(err,
	// ErrStaleClaim) hold: the claim no longer holds the task, and the
	// reason is the cancellation, not another claim.
	ErrCancelled = errors.New("leasehold: task cancelled")
)

// cancelled is the refusal of a worker's op on the task its claim held when
// an operator cancelled it.
func cancelled(id string) error {
	return fmt.Errorf("%w: %w: task %q was cancelled by an operator", ErrCancelled, ErrStaleClaim, id)
}

// DuplicateError is the refusal of an Enqueue (or an EnqueueBatch item)
// whose unique key another task holds: TaskID names that task. It changes
// nothing. errors.Is(err, ErrConflict) holds for it; errors.As finds the
// holder.
type DuplicateError struct {
	Key    string
	TaskID string
}

// Error names the key and the task that holds it.
func (e *DuplicateError) Error() string {
	return fmt.Sprintf("%v: unique key %q is held by task %q", ErrConflict, e.Key, e.TaskID)
}

// Unwrap returns ErrConflict.
func (e *DuplicateError) Unwrap() error { return ErrConflict }

// TransitionError reports an operation that is not legal from a task's state.
// errors.Is(err, ErrInvalidTransition) holds for it.
type TransitionError struct {
	Op    Op
	State State
}

// Error describes the refused transition.
func (e *TransitionError) Error() string {
	return fmt.Sprintf("%v: %v is not allowed from %v", ErrInvalidTransition, e.Op, e.State)
}

// Unwrap returns ErrInvalidTransition.
func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

// Kind returns the sentinel error that err wraps (one of the Err values of
// this package), or nil when err is nil or wraps none of them.
func Kind(err error) error {
	if err == nil {
		return nil
	}
	for _, k := range []error{ErrCancelled, ErrStaleClaim, ErrNotFound, ErrInvalidTransition, ErrInvalidArgument, ErrConflict, ErrQueueFull, ErrCorrupt} {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}
