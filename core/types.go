package core

import (
	"errors"

	"github.com/leasehold/leasehold/model"
)

// The types a consumer and an adapter share are the model's own, so a value
// returned by any store can be compared with the specification directly.
type (
	// Task is one unit of work and everything the queue knows about it.
	Task = model.Task
	// TaskError is one entry of a task's error history.
	TaskError = model.TaskError
	// State is where a task is in its life.
	State = model.State
	// Claim is a worker's hold on a Running task, handed out by Pop.
	Claim = model.Claim
	// ReapClaim is a broker's hold on a task whose lease lapsed.
	ReapClaim = model.ReapClaim
	// Counts is the number of tasks of a queue in each state.
	Counts = model.Counts
	// TransitionError reports an operation that is not legal from a state.
	TransitionError = model.TransitionError
	// DuplicateError is the refusal of an Enqueue whose unique key another
	// task holds (see WithUniqueKey); TaskID names that task, and
	// errors.Is(err, ErrConflict) holds.
	DuplicateError = model.DuplicateError
)

// The states of a task; see the model package for who moves a task out of each.
const (
	Scheduled = model.Scheduled
	Ready     = model.Ready
	Running   = model.Running
	Succeeded = model.Succeeded
	Failed    = model.Failed
	// Quarantined holds records the store could not read, set aside so they
	// never block a queue; an operator removes them.
	Quarantined = model.Quarantined
)

// The errors every store returns, wrapped with detail. Test with errors.Is.
var (
	// ErrStaleClaim: the claim no longer holds the task.
	ErrStaleClaim = model.ErrStaleClaim
	// ErrCancelled: an operator cancelled the task the claim held
	// (Inspector.Cancel). A store refuses a worker's op under that claim
	// with an error for which errors.Is holds with both ErrCancelled and
	// ErrStaleClaim, and a Worker cancels the handler's context with a
	// cause that wraps it.
	ErrCancelled = model.ErrCancelled
	// ErrNotFound: no task has the ID.
	ErrNotFound = model.ErrNotFound
	// ErrInvalidTransition: the op is not legal from the task's state.
	ErrInvalidTransition = model.ErrInvalidTransition
	// ErrInvalidArgument: an argument is out of range.
	ErrInvalidArgument = model.ErrInvalidArgument
	// ErrConflict: the ID is taken, the unique key is held by another task
	// (a *DuplicateError), or the task changed since the version the caller
	// expected.
	ErrConflict = model.ErrConflict
	// ErrQueueFull: the queue holds as many pending tasks as it may.
	ErrQueueFull = model.ErrQueueFull
	// ErrCorrupt: the store holds a record leasehold cannot read (a field
	// that does not parse, an index entry without its task) and the
	// operation named it, or the queue's sequence does not parse. The
	// operation changed nothing. Operations that scan a queue set such a
	// record aside as Quarantined instead (see model.ErrCorrupt).
	ErrCorrupt = model.ErrCorrupt
	// ErrPermission: the store refused the client's credentials or rights
	// (a wrong password, an access list that denies a command or a key, a
	// read-only replica). It fails again until the store's configuration or
	// the client's credentials change. As for a transport error, the call
	// may have taken effect by an earlier send (see Store).
	ErrPermission = errors.New("leasehold: the store refused the client's credentials or rights")
	// ErrClosed: the store, worker or broker was closed.
	ErrClosed = errors.New("leasehold: closed")
	// ErrBusy: the store could not start the call, because another
	// connection held what the call needs for longer than the store waits
	// for it (SQLite: another process held the database's write lock past
	// the store's busy timeout). The call did not run: nothing changed,
	// and it is safe to make it again. Unlike a transport error, it is a
	// definite answer.
	ErrBusy = errors.New("leasehold: store busy, the call did not run")
)
