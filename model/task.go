package model

import (
	"bytes"
	"slices"
	"time"
)

// Limits on arguments. Values outside them are ErrInvalidArgument.
const (
	// MaxIDLength is the longest task ID, in bytes.
	MaxIDLength = 255
	// MinPriority and MaxPriority bound Task.Priority. Higher runs first.
	MinPriority = -1 << 15
	MaxPriority = 1<<15 - 1
	// MaxUniqueKeyLength is the longest unique key, in bytes.
	MaxUniqueKeyLength = 256
	// MaxBatch bounds a Pop batch, a List page and the items of an
	// EnqueueBatch or AckBatch.
	MaxBatch = 1000
	// MaxDuration bounds a lease, a claim TTL, a retry delay and an
	// attempt timeout: 100 years (365-day ones), so an instant of now + one
	// of them stays within MinTime..MaxTime, every store's range of
	// instants.
	MaxDuration = 100 * 365 * 24 * time.Hour
)

// LeaseExpiredMessage is the error recorded when a broker or RecoverExpired
// decides a task whose lease lapsed and no message was given.
const LeaseExpiredMessage = "lease expired"

// CancelledMessage is the error Cancel records when the operator gave no
// message.
const CancelledMessage = "cancelled by an operator"

// Task is one unit of work and everything the queue knows about it.
//
// Times are instants; the zero time means "not set". A Task returned by the
// model or a store is a snapshot: the model never mutates the slices it holds,
// and callers must not either.
type Task struct {
	Queue       string
	ID          string
	Payload     []byte
	Priority    int
	State       State
	Attempt     int // number of Pops of this task since it was enqueued or requeued by an operator
	MaxAttempts int // attempts allowed before RecoverExpired fails the task
	// Timeout is the attempt timeout stored with the task (0: none): set
	// by Enqueue and kept by every transition. A Worker cancels an attempt
	// that runs longer, in place of its own timeout.
	Timeout    time.Duration
	Version    uint64 // queue sequence value stamped by the last mutation
	ClaimToken uint64 // Version stamped by the Pop that holds (or last held and decided) the task; 0 when none
	EnqueuedAt time.Time
	RunAfter   time.Time // when a Scheduled task becomes due
	ClaimedAt  time.Time // set by Pop; cleared on return to Ready or Scheduled
	Deadline   time.Time // lease (or broker claim) deadline of a Running task
	FinishedAt time.Time // set on entering Succeeded or Failed
	Errors     []TaskError
	Result     []byte // set by Ack
	// Quarantine says why the store set the record aside; set only in
	// state Quarantined, whose records carry nothing else but Queue and ID.
	Quarantine string
	// UniqueKey is the unique key the task was enqueued with ("" for none)
	// and UniqueUntil the end of its hold when it was given a period (zero:
	// held while the task is pending). Set by Enqueue and kept by every
	// transition; see HoldsKey.
	UniqueKey   string
	UniqueUntil time.Time
}

// TaskError is one entry in a task's error history.
type TaskError struct {
	Attempt int
	At      time.Time
	Message string
	// LeaseExpired is true when the entry was recorded because the lease
	// lapsed (by a broker decision or RecoverExpired), false for a failure
	// the handler reported (Fail, Retry).
	LeaseExpired bool
	// Cancelled is true when the entry was recorded by an operator's
	// Cancel: the task is Failed, and was neither run again nor decided by
	// anyone after it.
	Cancelled bool
}

// Claim is a worker's hold on a Running task, handed out by Pop. Token is the
// task's ClaimToken at the time of the Pop; a handler may use it to fence its
// own side effects (a later claim always has a larger token).
type Claim struct {
	Queue    string
	TaskID   string
	Token    uint64
	Attempt  int
	Deadline time.Time
}

// ReapClaim is a broker's hold on a Running task whose lease lapsed, handed out
// by ClaimExpired. Version is the task's Version stamped by that claim; Task is
// the task as the claim left it, for the retry callback.
type ReapClaim struct {
	Queue    string
	TaskID   string
	Version  uint64
	Deadline time.Time
	Task     Task
}

// Claim returns the worker claim of a Running task.
func (t Task) Claim() Claim {
	return Claim{Queue: t.Queue, TaskID: t.ID, Token: t.ClaimToken, Attempt: t.Attempt, Deadline: t.Deadline}
}

// LeaseLosses counts the attempts that ended because the lease lapsed.
func (t Task) LeaseLosses() int {
	n := 0
	for _, e := range t.Errors {
		if e.LeaseExpired {
			n++
		}
	}
	return n
}

// HandlerFailures counts the attempts whose handler reported an error.
func (t Task) HandlerFailures() int { return len(t.Errors) - t.LeaseLosses() }

// Equal reports whether two tasks are the same in every field. Times compare
// as instants.
func (t Task) Equal(u Task) bool {
	return t.Queue == u.Queue && t.ID == u.ID && bytes.Equal(t.Payload, u.Payload) &&
		t.Priority == u.Priority && t.State == u.State && t.Attempt == u.Attempt &&
		t.MaxAttempts == u.MaxAttempts && t.Timeout == u.Timeout && t.Version == u.Version && t.ClaimToken == u.ClaimToken &&
		t.EnqueuedAt.Equal(u.EnqueuedAt) && t.RunAfter.Equal(u.RunAfter) &&
		t.ClaimedAt.Equal(u.ClaimedAt) && t.Deadline.Equal(u.Deadline) &&
		t.FinishedAt.Equal(u.FinishedAt) && bytes.Equal(t.Result, u.Result) && t.Quarantine == u.Quarantine &&
		t.UniqueKey == u.UniqueKey && t.UniqueUntil.Equal(u.UniqueUntil) &&
		slices.EqualFunc(t.Errors, u.Errors, func(a, b TaskError) bool {
			return a.Attempt == b.Attempt && a.At.Equal(b.At) && a.Message == b.Message && a.LeaseExpired == b.LeaseExpired && a.Cancelled == b.Cancelled
		})
}

// HoldsKey reports whether the task's hold of its unique key lasts at now,
// were it the key's holder: with a period (UniqueUntil set), while now is
// before UniqueUntil, whatever the state; without one, while the task is
// pending (Scheduled, Ready or Running). A task without a key, and a record
// set aside (Quarantined), holds none.
func (t Task) HoldsKey(now time.Time) bool {
	switch {
	case t.UniqueKey == "" || t.State == Quarantined:
		return false
	case !t.UniqueUntil.IsZero():
		return now.Before(t.UniqueUntil)
	}
	return t.State.Valid() && !t.State.Terminal()
}

// Cancelled reports whether an operator's Cancel decided the task: it is
// Failed and its last error is the cancellation.
func (t Task) Cancelled() bool {
	return t.State == Failed && len(t.Errors) > 0 && t.Errors[len(t.Errors)-1].Cancelled
}

// withError returns the errors with e appended, never sharing the new backing
// array with t (snapshots handed out earlier stay as they were).
func (t Task) withError(e TaskError) []TaskError {
	out := make([]TaskError, len(t.Errors), len(t.Errors)+1)
	copy(out, t.Errors)
	return append(out, e)
}
