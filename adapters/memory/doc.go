// Package memory is the in-process leasehold store: a core.Store that keeps
// its queues in the memory of the process, for programs that need a task
// queue but no second process, and for the tests of code that uses leasehold.
// It is the embedded default of `leasehold check`, which checks it for
// linearizability against the model.
//
// Its answers are exactly those of the model (package model): the same
// results, the same errors, the same state afterwards; the conformance suite
// and the differential tests of package spec check it. It does not run the
// model, though: each queue has its own data structures, built for speed.
//
// # Data structures and cost
//
// Each queue keeps its tasks in a map by ID, and every task in two ordered
// indexes (B-trees): the ID index of its state, which List pages through, and
// the order index of its state, which the operations that pick tasks read:
//
//   - Ready: by priority (highest first), then by the Version stamped when the
//     task became Ready: the order of Pop.
//   - Scheduled: by RunAfter, then ID: the order of Promote.
//   - Running: by Deadline, then ID: ClaimExpired and RecoverExpired.
//   - Succeeded and Failed: by FinishedAt, then ID: Prune.
//
// Index entries name a task by a handle into the queue's slab of tasks, not
// by pointer: entries hold no pointers, so inserting or deleting one moves a
// node's entries with a plain copy, and the garbage collector never scans the
// nodes.
//
// With n tasks in a queue, Enqueue, Extend, Ack, Fail, Retry, Requeue,
// Finalize, InspectRequeue, Remove and Get cost O(log n); Pop, Promote,
// ClaimExpired and RecoverExpired cost O(log n) for each task they touch and
// nothing for the tasks they do not; EnqueueBatch and AckBatch cost what
// their items would cost one by one, under one lock; List costs O(log n + limit), Counts O(1).
// Prune costs O(log n) per task removed, plus O(1) for each older terminal
// task of a state it was not asked to prune.
//
// # Concurrency
//
// A Store is safe for concurrent use. Each queue has its own lock: operations
// on different queues run in parallel, Get, List and Counts of one queue run
// in parallel with each other, and every operation is atomic. An operation
// reads the store's clock while it holds its queue's lock, so the times of a
// queue's operations increase in the order the operations take effect.
//
// # Time
//
// The store judges time by its clock (WithClock; core.SystemClock by default).
// Like every leasehold store it keeps times in UTC to the microsecond by the
// model's one rule (model.Round): clock readings, the times a caller passes
// (RunAfter, Prune's Before) and computed deadlines are truncated. The zero time means "not set" and stays
// zero.
//
// # Damaged records
//
// Records held as Go values do not decay, but Store.Damage makes one
// unreadable on purpose, as a disk or a stray write would on another store,
// so that code that must carry on past a poison record can be tested here:
// the store then answers exactly as the model says (model.Queue.Damage). The
// first scan that reaches the record sets it aside as core.Quarantined
// (listed and counted as such, removable by the operator) and goes on with
// the sound tasks; until then a decision on it is core.ErrCorrupt.
//
// Tasks returned by the store are deep copies: the caller may keep and change
// them, including their Payload, Result and Errors.
package memory
