// Package postgres is a core.Store kept in a PostgreSQL database, over
// github.com/jackc/pgx/v5 and its pool (pgxpool). Any number of processes
// may open stores on the same schema; every operation gives exactly the
// model's answer (package model): the conformance suite of package spec
// runs on it with each Pop implementation, and the linearizability harness
// checks concurrent histories of many clients against the model.
//
//	store, err := postgres.Open(ctx, "postgres://app@db:5432/app", postgres.WithSchema("jobs"))
//
// # Schema
//
// The tables live in one schema (WithSchema, default DefaultSchema), so
// tenants and tests are isolated by schema. Open creates the schema and
// applies the migrations it lacks, under an advisory lock, each recorded in
// the schema_version table; a schema from a newer build is refused.
//
//   - queues(name, seq, paused): each queue's sequence, the last value
//     drawn, and its paused flag (schema version 4). The row outlives the
//     queue's tasks, so no value is drawn twice. Every write reads the flag
//     with its lock of the row, so a Pop claims nothing once a Pause (which
//     takes the same lock) has committed; Resume notifies the queue's
//     listeners.
//   - tasks: one row per task with every field of model.Task, keyed by
//     (queue, id). The ID is bytea (any bytes, ordered as Go orders
//     strings); times are Unix microseconds, NULL for the zero time; the
//     error history is a jsonb array of {attempt, at, message,
//     lease_expired} (and cancelled: true for an operator's Cancel), and a
//     message that cannot be JSON text in PostgreSQL
//     (not UTF-8, or holding a NUL) also keeps its exact bytes in base64.
//     The attempt timeout is timeout_ns, in nanoseconds, 0 for none
//     (schema version 2 added it; the tasks of version 1 have none). A
//     task's unique key is unique_key (bytea, NULL: none) and the end of
//     its hold unique_until (NULL: while pending); schema version 5 added
//     both.
//   - unique_keys(queue, key, task_id): each unique key's last taker
//     (model.Queue.KeyHolder). An Enqueue of a task with a key reads and
//     writes it under the queue's lock, after the clock reading (so it is
//     not sent with the lock, as a keyless Enqueue is); a trigger deletes
//     the entry with its task, and its WHEN skips a task without a key.
//   - indexes: one partial index per state in the order its operation
//     takes them (Ready by priority and version for Pop, Scheduled by
//     run-after, Running by deadline, finished tasks by finish time), and
//     tasks_other (queue, id) for the rows whose state is none of these
//     (set aside, or damaged). Counts counts each state in its index; List
//     reads the primary key (queue, id) in order, or its state's index.
//     Schema version 6 dropped the index (queue, state, id): no change of a
//     task is a HOT update (each stamps a new version), so every
//     transition inserted an entry into it for List and Counts alone.
//
// # One lock per queue, one statement per change
//
// Every write of a queue runs in one transaction that first locks the
// queue's row (SELECT … FOR UPDATE) and holds it until it commits. The
// writes of a queue therefore take effect one after the other, in the order
// their locks were granted, and each later statement of the transaction (at
// READ COMMITTED, a snapshot per statement) sees every write committed
// before. This is what keeps the sequence exact: a statement that changes
// tasks stamps them with the sequence's value plus their rank and advances
// the sequence by the number it stamped, in the same statement, so a value
// is never drawn twice (by concurrent transactions, or after a crash, which
// rolls back the draw with the change) and never skipped (a refused change
// draws nothing), and versions are those the model gives. A PostgreSQL
// SEQUENCE would never reissue a value either, but it is not transactional:
// a rolled-back or refused operation would leave a gap, and versions would
// no longer be the model's. The lock and the reads that follow it (the
// sequence, the clock) go to the server in one round trip, and so do the
// statements of Enqueue, EnqueueBatch, Pop, AckBatch and a worker's
// decisions (Extend, Ack, Fail, Retry), each followed by the read that
// explains a refusal: they take the clock's reading from the server
// (a setting of the transaction, made by the statement after the lock), so
// they need not wait for the client to learn it, and such a write costs
// two round trips, the second its COMMIT. An Enqueue of a task without a
// unique key needs nothing from the client after its statements: what it
// refuses it writes nothing for (the probe that follows only reads), and
// its statements themselves add nothing to a queue that has tasks but no
// sequence row, or a sequence at 0 (which it then reports ErrCorrupt). So
// a transaction of such Enqueues alone sends its COMMIT in the same round
// trip: one round trip in all. So does an EnqueueBatch of such tasks on a
// store without a capacity (WithCapacity): one statement adds the tasks
// whose IDs are free and returns, for each other ID, its task as it found
// it, which says why.
//
// So do Pop and AckBatch (with or without the pop), which is every
// transaction of a Worker, and a worker's decision made alone (Extend,
// Ack, Fail, Retry): their statements write nothing on a queue
// without a sequence row or with its sequence at 0, and they check every
// row they write themselves, by the rules the client's decoding applies
// (each value in its range, an error history that is a JSON array of
// entries, fields that agree with the state; what the check cannot vouch
// for, such as an error entry with a key the store does not write, it
// refuses). A row that fails the check makes the statement raise an error
// (SQLSTATE LH001, from the schema's unsure function), which aborts the
// transaction: the server skips the COMMIT that follows an error in the
// round trip. The operation then runs again in a transaction that commits
// only after the client has decoded its rows, which sets the damaged
// record aside, as the model's scans do (a decision alone on a damaged
// record answers ErrCorrupt, as the model has it). A Worker's transaction
// so costs one round trip, not two, which counts across a network.
//
// Since the COMMIT of such a transaction may have run whatever the client
// then reads, a failure of the transport answers each of its operations
// with the error (none is run again, and none is answered as refused). An
// error the server answered to one of its statements means the COMMIT
// did not run, and each operation runs again in a transaction of its own.
//
// A queue's row is made by the first write that finds it missing (an
// INSERT that does nothing when it is there), and whether a queue with no
// row or a sequence at 0 has tasks is checked by another statement. A
// store sends those two only until it has seen the row, under its lock,
// with its sequence past 0 (it remembers up to 4 096 queues so): no write
// of the store removes the row or resets the sequence, the lock's own
// statement then says whether tasks exist while the sequence is 0, and a
// row found gone (damage, or a wiped database) makes the store forget the
// queue and run the same writes again, with both statements: nothing the
// first transaction sent was kept (a write needs the row's sequence).
//
// Since the lock is held until COMMIT has flushed the transaction to disk,
// a queue runs at most as many transactions a second as the disk flushes,
// whatever the number of clients. So the writes of one queue that a store
// is asked for while a transaction of that queue is in progress in it wait
// in the store rather than at the lock, and the next transaction runs them
// all (up to 64), in the order they came, each with its own statements and
// guards, under one lock, one clock reading and one COMMIT: concurrent
// producers share a commit, and so do a Worker's Pop and AckBatch. Each
// gets the answer it would get alone, after the ones before it; one that
// the model refuses changes nothing and does not stop the others. Any other
// failure before COMMIT (a damaged row, the connection) rolls the
// transaction back, so none of them happened, and each is then run again in
// a transaction of its own.
//
// A call whose context ends while its transaction runs makes pgx give the
// connection up. The store then closes the connection's socket itself, so
// the server rolls the transaction back and frees the queue's lock at once:
// pgx's own close sends a Terminate message, which a message cut in half by
// the cancelled call swallows (and which over TLS may not go out at all),
// and it leaves the socket open for up to 15 s, the whole queue waiting
// behind the lock meanwhile. EnqueueTx and AckTx do the same with the
// caller's connection, whose transaction holds the queue's lock too: pgx
// has given it up, so it is of no more use to the caller.
//
// The statement that changes a task carries the operation's guard in its
// WHERE clause: a worker's decision (Extend, Ack, Fail, Retry) names the
// task, the claim token and the states the model allows; a broker's
// decision (Requeue, Finalize) the version of its reap claim; an operator's
// action the version the operator saw, if any. When it matches no row, the
// operation reads the task to say why, in the model's order (ErrStaleClaim,
// ErrNotFound, ErrConflict, or a *model.TransitionError) and changes
// nothing.
//
// Pop has two implementations (WithPopMode): PopUpdateReturning claims the
// first Ready tasks with one UPDATE … RETURNING whose subselect takes them
// FOR UPDATE SKIP LOCKED; PopSelectSkipLocked selects them with SELECT … FOR
// UPDATE SKIP LOCKED and claims them with a second statement. AckBatch
// acknowledges claims of distinct tasks with one UPDATE … FROM unnest(…)
// that stamps them in the order of the batch; sent with the lock, the same
// statement also returns, for each claim it did not apply, the task as its
// guard saw it, which says why (a read of its own after the statement cost
// a Worker at 8 slots about a tenth of its time per task). Under the
// queue's lock no other leasehold transaction holds a Ready task's row, so
// SKIP LOCKED skips only rows an application locks itself; it keeps a Pop
// from waiting on those.
//
// # Time
//
// Leases are judged by the database's clock, so the clocks of the clients
// do not matter: each write reads clock_timestamp() in the round trip that
// takes the queue's lock, after the lock is granted, and uses that one
// reading for the whole operation (and reports it as Now; the operations
// that share a transaction share its reading). Not
// transaction_timestamp(): that is the instant the transaction began,
// before it waited for the lock, so an operation that waited would judge
// leases by an instant earlier than the operations that went before it, and
// an EnqueueTx or AckTx would take the start of the caller's transaction,
// however long ago. With clock_timestamp() read under the lock, the
// readings of one queue's operations follow the order they take effect
// (as far as the server's clock does). WithClock replaces the database's
// clock with an injected one, for tests; it is read just before the
// transaction's first round trip, after every operation of the
// transaction was called.
//
// Times are kept to the microsecond by the model's one rounding rule
// (model.Round: truncated, in UTC): clock readings, a RunAfter, a Prune bound
// and a computed deadline or run-after alike, as every leasehold store does.
//
// # The application's transaction
//
// EnqueueTx and AckTx run Enqueue and Ack inside a pgx.Tx of the caller, in
// a savepoint: the task's change commits with the application's own writes
// or not at all, and AckTx checks the claim's token in that transaction, so
// a worker whose claim was superseded gets ErrStaleClaim before it commits
// anything. See the package example.
//
// # Wake-ups
//
// An operation that may make a task Ready (Enqueue, EnqueueBatch, Retry,
// Requeue, InspectRequeue, a Promote or RecoverExpired that did) sends a
// NOTIFY on the schema's channel, with the queue's name as payload, in its
// transaction: it is delivered when it commits. Store implements
// core.Notifier: Wait returns a channel that receives a value on each
// such notification, from one LISTEN connection per store, so a Worker
// waiting for work claims a new task within milliseconds. The Worker's
// polling stays as the fallback: a notification can be lost (the listening
// connection broke), and the notifier then wakes every waiter once it
// listens again.
//
// # Damaged rows
//
// One damaged row does not stop its queue (see "Damaged records" in package
// model). A row whose values are out of their ranges (an unknown state, a
// version below 1, no enqueue time), whose error history is not a JSON
// array of entries (JSON null, or an array holding a null, included), or
// whose fields disagree with its state (a Running task without a deadline,
// a queued one holding a token) is a damaged record. The scans (Promote,
// Pop, ClaimExpired, RecoverExpired) set such a row they reach aside in
// their own transaction: its state becomes Quarantined (in no partial
// index) and the quarantine column (schema version 3) says why; no version
// is drawn, and the scan goes on with the sound tasks. The common case
// costs nothing more: only a scan that met a damaged row runs again, in a
// new transaction that sets each such row aside from a savepoint. A
// decision on a damaged row (Extend, Ack, Fail, Retry, Requeue, Finalize,
// InspectRequeue) is an error wrapping core.ErrCorrupt, whatever its token
// or version (the damage is reported first), and rolls back; in an
// AckBatch only the item that names the damaged row is ErrCorrupt, and the
// other items are decided (the items are judged before the batch's pop, so
// an item on a row that pop then sets aside is ErrCorrupt too; every item
// is judged by the rows as its transaction reads them); Get
// shows it as quarantined with the reason and List passes over it, both
// without writing; Remove with no expected version deletes it. Counts and
// List(core.Quarantined) include rows set aside and rows whose state is
// none. A decision that rewrites the damaged column itself (RecoverExpired
// clears a damaged claim token) finds a sound row afterwards and goes on.
// A queue that has tasks but no sequence row, or a sequence at 0, is
// ErrCorrupt for every operation that needs it, never a restart of the
// versions that could reissue a token a live claim holds.
package postgres
