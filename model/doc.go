// Package model is the executable specification of leasehold: a pure state
// machine of one task queue, its legal transitions and the guards that decide
// which claim may perform them.
//
// A [Queue] is an immutable value. Every operation is a method that takes the
// current time as an argument and returns the next Queue together with its
// result; a rejected operation returns the receiver unchanged and a typed
// error. The package does no I/O, starts no goroutines, reads no clock and
// draws no random numbers, so the same inputs always give the same outputs.
// Copying a Queue costs a few words: its tasks live in persistent trees that
// share structure between versions, and an operation costs O(log n).
//
// # States
//
// A task is in exactly one [State]:
//
//   - Scheduled: waiting for its RunAfter time. The mover ([Queue.Promote])
//     moves it to Ready.
//   - Ready: waiting for a worker. [Queue.Pop] moves it to Running.
//   - Running: claimed by a worker under a lease. The worker moves it out with
//     Ack, Fail or Retry; when the lease lapses a broker claims it
//     ([Queue.ClaimExpired]) and decides with Requeue or Finalize, or
//     [Queue.RecoverExpired] decides in one step.
//   - Succeeded, Failed: terminal. Only an operator moves a task out
//     ([Queue.InspectRequeue], [Queue.Remove], [Queue.Prune]).
//
// # Identity and guards
//
// The queue owns one sequence. Every mutation of a task stamps it with the
// next value, Task.Version; values are never reused, not even when an ID is
// removed and enqueued again. Pop sets Task.ClaimToken to the version it
// stamps and hands the worker a [Claim]; ClaimExpired hands the broker a
// [ReapClaim] carrying the version it stamped.
//
//   - A worker op (Extend, Ack, Fail, Retry) needs claim.Token ==
//     task.ClaimToken, otherwise [ErrStaleClaim]; then the task must be Running,
//     otherwise an [ErrInvalidTransition]. Lease expiry alone does not revoke a
//     claim: a late worker wins if nobody acted first.
//   - A broker decision (Requeue, Finalize) needs reapClaim.Version ==
//     task.Version, otherwise [ErrStaleClaim]: any mutation since the broker's
//     claim (a worker's ack or extend, another broker's takeover, an operator's
//     action) makes the decision stale.
//   - An inspector action (InspectRequeue, Remove) may name the version the
//     operator saw; if the task has changed since, [ErrConflict].
//
// Returning a task to Ready or Scheduled clears ClaimToken, ClaimedAt,
// Deadline and FinishedAt, so a claim from before can never decide the task
// again.
//
// # Batches
//
// [Queue.EnqueueBatch] and [Queue.AckBatch] apply up to MaxBatch Enqueues or
// Acks of one queue in one atomic step. Each item follows the single
// operation's rules (its own guards, in order, against the queue the items
// before it left) and is answered on its own; a refused item changes nothing
// and does not stop the others. Only an empty or oversized batch, or an
// AckBatch naming a claim of another queue, is refused as a whole.
//
// [Queue.AckBatchPop] is an AckBatch that claims the worker's next tasks in
// the same step: after the acks, at the same now, it pops as Pop does. A
// worker that finishes a task and wants the next one pays one step for both.
//
// # Pause
//
// A queue has a paused flag, set by [Queue.Pause] and cleared by
// [Queue.Resume], both idempotent. While it is set, Pop claims nothing (no
// tasks, no error), in the same step that reads the flag: once a Pause has
// returned, no Pop claims a task of the queue until a Resume. Everything
// else goes on: claims already handed out are extended and decided as
// before, Enqueue adds tasks, Promote makes them Ready, ClaimExpired and
// RecoverExpired reap lapsed leases (a requeued task waits, Ready, for the
// Resume), and the inspector acts. The flag is the queue's, not a task's:
// setting it changes no task and draws no version. Counts reports it, and
// the pop of an AckBatchPop obeys it as Pop does (its acks go on).
//
// # Cancel
//
// [Queue.Cancel] is an operator's cancellation of a Scheduled, Ready or
// Running task: it becomes Failed at once, its last error the cancellation
// (TaskError.Cancelled; [Task.Cancelled] reports it). A cancelled task is
// Failed with a cause rather than in a state of its own: it is a task that
// will not succeed, and everything that handles terminal tasks (Prune,
// InspectRequeue, Remove, Counts, retention) handles it already, with no
// new index, count or key in any store; the cause, which is what tells it
// from a failure, is in its history, where a failure's and a lease loss's
// are. A Running task keeps its ClaimToken, so the worker holding it is
// told at its next op under the claim: ErrCancelled (errors.Is with
// ErrStaleClaim holds too). The claim decides nothing, the broker's claim is
// stale, no index leads anyone to the task, and no retry policy is asked:
// it is never acked, retried or requeued afterwards.
//
// # Unique keys
//
// An Enqueue may name a unique key (EnqueueArgs.UniqueKey, per queue): the
// task is refused with a [*DuplicateError] (errors.Is with [ErrConflict]),
// changing nothing and naming the task that holds the key, if another task
// holds it; else the task takes the key and becomes its holder. The hold
// lasts, by default, while the holder is pending (Scheduled, Ready or
// Running): its Ack, Fail, Cancel or Finalize releases the key. With a
// period (EnqueueArgs.UniqueFor) it lasts from the store's enqueue time for
// that long, on the store's clock (Task.UniqueUntil), whatever the state.
// Removing or pruning the holder releases the key at once, and a record set
// aside as Quarantined holds none: nothing of it can be trusted, its key
// included, and it never runs, so it would only block the key until an
// operator removed it.
//
// A key has one holder, its last taker ([Queue.KeyHolder]): the holder is
// kept in an index (key → ID) every store keeps too, and a task that is not
// the last taker holds nothing. So a task an operator requeues holds its
// key again only if no other task took it meanwhile; two tasks never hold
// one key. The ID check comes first (an ID that exists is ErrConflict
// whatever the key), then the key, then the capacity. A task without a key
// costs nothing: no index is read or written for it, and its transitions
// never look at keys (a hold is judged from the holder's state when the key
// is next asked for, so no Ack, Fail or Cancel writes anything for it).
//
// # Damaged records
//
// A store may hold a record it cannot read: a field that does not parse, an
// index entry whose task is gone. Such a record must neither stop its queue
// nor be decided by anyone. The model describes it through the event
// [Queue.Damage] (the model parses no bytes) and the state [Quarantined]:
// the operations that scan an index (Promote, Pop, ClaimExpired,
// RecoverExpired) set a damaged record they reach aside, in the same step,
// and go on with the sound tasks; a decision on a damaged record (a worker's
// or broker's, InspectRequeue, an AckBatch item) is [ErrCorrupt] and changes
// nothing; reads report it as Quarantined and write nothing. A quarantined
// record is its own state rather than a flag of a task, because nothing of
// it but its queue and ID can be trusted: it carries only those and the
// reason (Task.Quarantine), has Version 0 and no token, is in no order
// index, keeps its ID taken, and leaves only by an operator's Remove with
// expect 0. Counts and List show it. Setting a record aside draws no
// version. The store-level histories of package linearizability damage a
// record mid-history and check every answer after it against this event.
// A damaged queue-wide record (the sequence) cannot be set aside:
// every operation that needs it is ErrCorrupt until it is repaired.
//
// # The application's transactions
//
// A store on a database the application also writes (SQLite, PostgreSQL)
// can make Enqueue, EnqueueBatch and Ack inside a transaction the
// application began, so that a task exists, or a claim is decided, exactly
// when the application's own writes commit. The model has no operation for
// such a transaction and needs none; a transaction maps onto the model so:
//
//   - each operation inside it is the model's operation, with its rules
//     and errors, answered from the queue as the transaction's operations
//     before it left it; a refused one changes nothing, and the
//     transaction goes on;
//   - a transaction that commits is its operations applied in order, one
//     after another, at one instant between its first operation and its
//     commit: from its first operation to its end the transaction holds
//     the queue (the store's lock), so nothing else is applied between,
//     and until it ends everyone else sees the queue without them;
//   - a transaction that rolls back is no operation at all: the queue is
//     as if none of its operations had been called. No task is left, no
//     version or token was drawn (the next ones are those of the queue
//     before it), no unique key was taken, no claim was decided, and an ID
//     it used is free.
//
// So a store's transactional operations are checked against the same
// [Queue] values as the others: the conformance suite of package spec
// applies a transaction's operations to a copy of the queue and keeps the
// copy only if the transaction commits, and the histories of package
// linearizability record a transaction as one operation, applied at one
// point of its span or not at all.
//
// # Arguments and times
//
// Every argument rule is written once, in this package ([ValidateEnqueue],
// [ValidateLease], [ValidateDelay], [ValidateList], [CheckBatchSize] and the
// others), and every store calls the same functions before it changes
// anything, so an argument one store refuses with [ErrInvalidArgument]
// every store refuses.
//
// One range holds on every store: an instant a task keeps is within
// [MinTime]..[MaxTime] (a RunAfter outside is refused), a lease, claim TTL,
// retry delay or attempt timeout is at most [MaxDuration], and an empty
// payload or result is none: every store returns nil for it.
//
// Times have one rounding rule, [Round]: an instant is kept to the
// microsecond, truncated towards the past, in UTC. The operations round the
// instants they are given (a RunAfter, a Prune bound) and the ones they
// compute (now + a lease, a claim TTL or a delay; a delay itself is
// truncated to the microsecond first, see [RunAfter]), and the clock
// reading a store passes as now is rounded the same way. So a RunAfter half
// a microsecond after now is now (Ready), and a lease of 1.5µs ends 1µs
// after now, on every store.
//
// # Calls
//
// One call of a store is one step of this model, applied at most once: a
// store whose client may send a call again after its connection dropped
// (Redis) answers the retransmission with the call's own answer, the clock
// reading included, and applies nothing. So an answer of the model's errors
// always means the step was refused and nothing changed, and a call that
// took effect is never answered with a refusal. Any other error is the
// transport's: the step may or may not have happened, and the checks in
// package linearizability keep both possibilities open.
//
// The whole table of transitions is data: see [Transitions]. The operations
// consult it for every source-state check, and the tests check the two
// against each other.
package model
