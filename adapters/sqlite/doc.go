// Package sqlite is a core.Store kept in one SQLite database file: durable,
// embedded (no server), safe across goroutines and across processes that
// open the same file. It uses modernc.org/sqlite, a SQLite compiled to pure
// Go, so it needs no cgo.
//
// Every operation gives exactly the model's answer (package model): the
// conformance suite of package spec runs on it with each Pop implementation.
//
// # Connections and transactions
//
// A Store holds two database/sql pools on the file:
//
//   - the writer: one connection of the driver's own, opened with the
//     pool's settings, held for the store's whole life and driven directly,
//     by one operation's goroutine at a time (below). Every write
//     transaction is BEGIN IMMEDIATE, so it takes SQLite's write lock
//     before it reads anything. Within a process, writes queue for the
//     writer connection; across processes, for the lock,
//     waiting up to the busy timeout (WithBusyTimeout). When another
//     process holds the lock past it, BEGIN fails with SQLITE_BUSY and
//     every operation of that transaction is answered core.ErrBusy: it did
//     not run, and may be made again. A transaction
//     therefore never reads a state that another writer changes before it
//     commits, and never fails with a "database is locked" upgrade error
//     half-way through. Every statement, BEGIN and COMMIT included, is
//     prepared once on this connection and reused.
//   - the readers: a pool of query_only connections for Get, List and Counts.
//     Each read is one statement, so it sees one committed state, and with
//     the write-ahead log (journal_mode=WAL) readers never wait for the
//     writer nor block it.
//
// Writes queue for the writer connection, and the operations waiting at the
// same moment are committed in one transaction (group commit): the caller
// of an operation that finds the writer idle runs the transaction on its
// own goroutine, with every operation queued by then, and hands the next
// batch to the oldest operation that arrived meanwhile. An operation needs
// no savepoint: each checks before it writes, and a guarded statement that
// refuses matches no row, so one that is refused has changed nothing and
// the others of its batch go on; one that fails after it has written (a
// damaged row found late, an error of SQLite) rolls the transaction back,
// and the others run again in a new one. With synchronous=FULL (the
// default, see WithSynchronous) a batch costs one sync of the log instead
// of one per operation. Every operation still returns only once the commit that holds
// it is durable against a crash of the process or the host. An operation
// whose context ends while it waits for the writer is not performed; one
// that has started runs to its end.
//
// EnqueueBatch and AckBatch (core.BatchStore) are one write operation
// each: their items run in order in its transaction, each with the
// checks and the guarded statement of Enqueue or Ack, answered one by one. A
// refused item writes nothing. An AckBatch's claims on distinct tasks run up
// to 32 in one statement, each claim with Ack's guard, stamped in the
// batch's order; the claims it did not match are then diagnosed one by one.
//
// The write-ahead log is checkpointed into the database file when it reaches
// WithCheckpointPages pages (DefaultCheckpointPages).
//
// An operation reads the clock after it holds the write lock and reports
// that reading as Now, so the time an operation judges leases by is the time
// it takes effect.
//
// # The application's transaction
//
// EnqueueTx and EnqueueBatchTx run Enqueue's statements on a *sql.Tx of the
// caller's, open on the same file, inside a savepoint: the task commits or
// rolls back with the caller's own writes, and the sequence with it.
//
// # Schema
//
// The schema carries a version in PRAGMA user_version (SchemaVersion) and the
// application ID "LSHD" in PRAGMA application_id; Open applies the forward
// migrations in one transaction and refuses a database from a newer build.
//
//   - queues(name, seq, paused, owner): each queue's sequence, its paused
//     flag and the owner of the sequence. Every change to a task stamps it
//     with the next value (Task.Version); a Pop's value is also the claim
//     token. With owner 0, seq is the last value drawn. A store that writes
//     the file alone writes its own random owner value there at its first
//     draw and then keeps drawing in memory, without rewriting the row (one
//     page of the log less per transaction); the sequence is then the
//     largest of seq and the versions of the queue's tasks, which is what
//     any other writer reads (once) when it finds the row owned by someone
//     else, and which a store that has seen another connection commit in
//     the last second, Close, Remove and Prune (before a deletion) write
//     back exact. The pager's data version (SQLITE_FCNTL_DATA_VERSION),
//     read as each transaction begins and ends, tells a store whether
//     another connection has committed since its last transaction. The row outlives the queue's tasks, so no value is ever
//     drawn twice, also after a crash. A Pop reads the flag in its own
//     write transaction and claims nothing while it is 1 (Pause); Pausing a
//     queue with no row yet makes the row, with the sequence at 0. Schema
//     version 4 added the flag, version 7 the owner.
//   - tasks: one row per task with every field of model.Task, keyed by
//     (queue, id). Times are Unix microseconds, NULL for the zero time;
//     payload and result are BLOBs; the error history is a JSON array of
//     {attempt, at, message, lease_expired} (and cancelled: true for an
//     operator's Cancel); a message that is not valid
//     UTF-8 also keeps its exact bytes, in base64, as message_bytes. A
//     task's unique key is unique_key (NULL: none) and the end of its hold
//     unique_until (NULL: while pending); schema version 6 added both.
//   - unique_keys(queue, key, task_id): each unique key's last taker
//     (model.Queue.KeyHolder), read and written only by an Enqueue of a
//     task with a key; a trigger deletes the entry with its task, and its
//     WHEN skips a task without a key.
//   - indexes: the tasks of each state in the order its operations take
//     them, each a partial index over that state alone: Ready by
//     (priority DESC, version) for Pop, Scheduled by (run_after, id) for
//     Promote, Running by (deadline, id) for ClaimExpired and
//     RecoverExpired, Succeeded and Failed by (finished_at, id) for Prune;
//     and tasks_other, by (queue, id), for the records in no state of a
//     task's life (set aside, or damaged). Every ordered operation reads
//     its index in order and stops at its limit, and a transition rewrites
//     only the entries of the states it leaves and enters. Counts counts
//     each state in its own index; List reads the primary key (queue, id)
//     from its cursor and keeps the tasks of its state, so a page of a
//     state that few tasks of the queue are in reads past the others
//     (schema version 5 dropped the index of every task by (queue, state,
//     id), which cost each transition two entries, often two pages of the
//     log, for List alone).
//
// Times are kept to the microsecond by the model's one rounding rule
// (model.Round: truncated, in UTC): clock readings, a RunAfter, a Prune bound
// and a computed deadline or run-after alike, as every leasehold store does.
//
// # Guarded updates
//
// Each operation is atomic (it commits with its batch or changes nothing),
// and the statement that changes a task
// carries the operation's guard in its WHERE clause: a worker's decision
// (Extend, Ack, Fail, Retry) names the task ID, the claim token and the
// Running state; a broker's decision (Requeue, Finalize) names the version of
// its reap claim and the Running state; an operator's action names the
// version the operator saw, if any; and each names the source states the
// model's transition table allows. A statement that matches no row changes
// nothing, and the transaction then reads the task to say why, in the model's
// order: ErrStaleClaim (the task is gone, or holds another token or version),
// ErrNotFound or ErrConflict for the inspector, or a *model.TransitionError
// naming the op and the state. An operation on one task stamps it with the
// queue's next sequence value, bound to its statement; only when the
// statement has matched does the operation draw that value, and check that
// it is the one stamped. A refused operation thus writes nothing. A
// statement that stamps several tasks numbers them from the sequence's
// value by rank, and the sequence then advances past the values used.
//
// Pop has two implementations (WithPopMode): PopReturning claims the first
// Ready tasks and returns them with one UPDATE … FROM … RETURNING statement;
// PopSelectUpdate selects them, then updates each one with its state and
// version re-checked in the UPDATE's WHERE clause. ClaimExpired and
// RecoverExpired judge expiry and decide in the same statement, so two
// processes recovering at once recover each task once.
//
// A row that does not decode (an unknown state, an error history that is not
// a JSON array of entries, JSON null included, a time that is not an
// integer, ...) or whose fields disagree
// with its state (a Running task without a deadline, a queued one holding a
// token, ...) makes the operation that reads it fail with an error wrapping
// core.ErrCorrupt, and roll back. ClaimExpired and RecoverExpired first look
// for a Running task whose deadline is not a time, which a comparison with
// the clock would skip forever, and fail the same way. The queue's sequence
// row is checked each time it is read (at a store's first draw, and after
// any other connection has committed): a value that is not an integer, or a
// missing row while the queue has tasks, is ErrCorrupt, never a restart of
// the versions that could hand out a token a live claim holds. A decision
// on a damaged row is ErrCorrupt whatever its token or version (the damage
// is reported first); in an AckBatch only the item that names it is, and
// the other items are decided. A row
// is checked as the operation leaves it, so an operation that overwrites
// every damaged field (an Extend over a damaged deadline) succeeds and
// leaves a sound row.
//
// # Migrating from LiteQueue
//
// Open recognizes a database created by LiteQueue (litements/litequeue): a
// database whose only table is Queue(data, message_id, status, in_time,
// lock_time, done_time), with no application ID and user_version 0. In the
// transaction that creates the leasehold schema it copies every message into
// one queue and drops the Queue table (with its indexes and maxsize trigger).
// Either every message moves or nothing changes. Stop LiteQueue's workers
// first: after the migration LiteQueue can no longer open the file.
//
//   - The queue is named by WithLiteQueueName, by default the LiteQueue name
//     in the file name ("<name>.queue.sqlite3"), else DefaultLiteQueueName.
//   - message_id becomes the task ID, data the payload; priority is 0 and
//     MaxAttempts is WithLiteQueueMaxAttempts (default 3).
//   - Versions are assigned in message_id order, the order LiteQueue pops in
//     (its IDs are UUIDv7, ordered by time), so Pop keeps LiteQueue's order.
//   - Times are nanoseconds since the epoch in LiteQueue; they are kept to the
//     microsecond. in_time becomes EnqueuedAt.
//
// The states map as follows:
//
//	LiteQueue status   leasehold task
//	0 READY            Ready, Attempt 0.
//	1 LOCKED           Running, Attempt 1, ClaimedAt = lock_time, and
//	                   Deadline = lock_time: no leasehold worker holds the claim
//	                   (LiteQueue had none to give), so the lease is already
//	                   over and ClaimExpired or RecoverExpired decides the task
//	                   as if its worker had stopped. It is never lost nor run
//	                   twice at once.
//	2 DONE             Succeeded, FinishedAt = done_time; Attempt 1 and
//	                   ClaimedAt = lock_time if it was ever popped.
//	3 FAILED           Failed, the same, with one error entry
//	                   (LiteQueueFailedMessage).
//
// Any other status, a duplicated message_id or an ID longer than
// model.MaxIDLength aborts the migration with an error wrapping
// core.ErrCorrupt, leaving the file as it was. LiteQueue's maxsize counted
// READY messages only; leasehold's capacity (WithCapacity, ErrQueueFull)
// counts pending tasks and is an option of the Store, not stored in the file.
package sqlite
