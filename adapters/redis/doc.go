// Package redis is the leasehold store for many workers and brokers on many
// machines sharing one Redis (a single node, Sentinel or Cluster): a
// core.Store whose every operation is one Lua function, run atomically by
// the server in one round trip. It also implements core.BatchStore:
// EnqueueBatch and AckBatch are one function call each, and an AckBatch
// with a pop (core.AckPop) acknowledges and claims in that one call
// (lua/ack_pop.lua), so a Worker pays one round trip per task.
//
// Its answers are exactly those of the model (package model): the same
// results, the same errors, the same state afterwards. The conformance suite
// and the differential tests of package spec check it against a real
// redis-server.
//
// # Data layout
//
// All keys of a queue start with the store's prefix (WithPrefix, default
// "leasehold:") and the queue's name in braces, a Redis Cluster hash tag, so
// they all live in one slot: P{queue}:...
//
//	P{q}:seq             string  the last value drawn from the queue's sequence
//	P{q}:task:<id>       string  one task, packed (below)
//	P{q}:ready           zset    Ready IDs, score (32767 - priority) * 2^36 + version
//	P{q}:scheduled       zset    Scheduled IDs, score run_after (µs since the epoch)
//	P{q}:running         zset    Running IDs, score deadline (µs)
//	P{q}:finished        zset    Succeeded and Failed IDs, score finished_at (µs)
//	P{q}:ids:<state>     zset    the IDs of one state, all at score 0, for List
//	P{q}:all             set     every ID the queue holds a record of, and "" (the registry, below)
//	P{q}:req:<request>   string  a write's whole reply, while a resend can come (see Retransmissions)
//	P{q}:paused          string  "1" while the queue is paused (Pause); absent otherwise
//	P{q}:unique          hash    unique key -> ID of its last taker (only with keyed tasks)
//
// The Pop script reads P{q}:paused in the same script that claims, so no Pop
// claims a task once a Pause has returned; Counts reports it. A queue paused
// before its first task has only this key, and is listed (Queues) once it
// has a sequence.
//
// A task is one string, so one GET reads it and one SET writes it: every
// field of model.Task as a MessagePack value, one after the other (as
// Redis's cmsgpack packs its arguments), in this order: payload, priority,
// state (its name), attempt, max_attempts, version, token (the
// ClaimToken), enqueued_at, run_after, claimed_at, deadline, finished_at,
// errors, result, timeout.
// Numbers and times (µs since the epoch) are MessagePack integers, an unset
// time is false (so the zero time stays the zero time), the others strings;
// timeout is the attempt timeout in nanoseconds as a decimal string (empty for
// none), and a record of the 14 fields before it reads as timeout 0;
// errors is the history, entries "<attempt> <at> <0|1|2> <length>:<message>"
// back to back, 1 marking a lease expiry, 2 an operator's Cancel. A reply carries a task as its ID
// and this packed value, which the Go side decodes and checks again.
// Earlier versions packed the same fields as one MessagePack array (as
// cmsgpack packs a Lua list); such a record reads the same, and the first
// script that writes the task stores it in the form above. Unpacked, the
// values one after the other are Lua values on the stack, where the array
// was a table the server had to build and collect: 7 % fewer server
// instructions per task for a Worker at concurrency 8.
//
// A task with a unique key has two fields more, unique_key and unique_until
// (false while the key is held as long as the task is pending), and
// P{q}:unique, a hash, names each key's last taker (model.Queue.KeyHolder).
// Only a task with a key costs anything: the enqueue script reads the hash
// and the holder's packed value (its state and hold only) and writes the
// hash; Remove and Prune drop the entry of a holder they delete. No other
// script reads either: an Ack, Fail or Cancel releases a key by changing
// the holder's state, which the next enqueue of the key judges.
//
// The score of a Ready task orders by priority, highest first, then by the
// version stamped when the task became Ready: the order of Pop. It is exact
// in a double because versions stay below 2^36 (a script refuses with
// ErrSequenceExhausted rather than pass it). The other order indexes break
// ties of time by ID, as sorted sets order equal scores by member bytes: the
// order of Promote, ClaimExpired, RecoverExpired and Prune. Tokens and
// versions from callers are compared as decimal strings, so Lua's doubles
// never round one; stored
// times stay within model.MinTime..model.MaxTime (±2^53 µs of the epoch)
// and leases, claim TTLs and delays within model.MaxDuration, the model's
// range for every store, or the operation is core.ErrInvalidArgument.
//
// Counts is the size of each state's ID index; the capacity (WithCapacity)
// is checked against the Scheduled, Ready and Running ones.
//
// The registry, P{q}:all, holds every ID of the queue from its Enqueue
// until Remove or Prune deletes its record: no transition writes it, and a
// record set aside stays in it. Its member "" marks it complete. It is how
// Enqueue knows, with one SMISMEMBER, that an ID is taken by an index
// entry whose task is gone (see Damaged records) instead of a ZSCORE on
// each of the nine indexes. A queue written by an earlier version has no
// registry: there the scripts look for such an entry in the indexes, as
// before, and the first Enqueue or EnqueueBatch that adds a task builds
// the registry from them in the same call (one ZRANGE of each index, so
// its cost grows with the queue). An earlier version's Remove and Prune do
// not take IDs out of it, so upgrade every client of a store together: an
// ID an earlier version deleted would read as taken (Get shows it
// quarantined; Remove with no expected version clears it).
//
// # Scripts
//
// Each operation is one file in lua/, embedded in the binary; lua/lib.lua
// holds the shared functions, the layout of KEYS and the table of return
// codes. The store loads them as one Redis Functions library (Redis 7.0 and
// later): lib.lua once, then each script as a function of it, so the
// library's functions are made once when the library loads, not on every
// call. Each operation is then one FCALL; a server that lacks the library
// (restarted, flushed) gets it by FUNCTION LOAD REPLACE on the first call
// that finds it missing, or from Preload. The library's name carries a hash
// of its code, so stores of different versions sharing a server never
// replace each other's library. Where Functions are unavailable (a server
// before 7.0, or a user the ACL denies FUNCTION or FCALL), the store falls
// back, for good, to EVALSHA of each script with the parts of lib.lua it
// uses prepended (EVAL the first time a server lacks it). An operation on
// many tasks (Pop, ClaimExpired, Promote, RecoverExpired and the batches)
// reads them with one MGET (and one EXISTS over the keys it found empty,
// since MGET answers nothing for a key of another type), checks their index
// entries with one ZMSCORE per index, and writes each index with one ZREM
// or ZADD and the tasks with one MSET (up to four tasks are written one by
// one instead, each with its own ZADDs, ZREMs and SET: for so few, the Lua
// that groups them costs the server more than the commands it spares).
// Each file's
// header lists its KEYS, ARGV and the codes it returns. The Go side maps a
// code to its error in one place; an unknown code is an internal error
// naming it. The server's refusal of the client's credentials or rights
// (NOPERM, NOAUTH, WRONGPASS, READONLY, from the command or from inside a
// script) is core.ErrPermission.
//
// A Lua error does not roll back the writes before it, so every script
// checks everything before its first write: its arguments, the type of every
// key it will write, every field of every task it reads (a field that does
// not parse, a task breaking a rule every task keeps, an index entry without
// its task or at the wrong score) and the sequence. Anything wrong is
// refused with core.ErrCorrupt and nothing written; a refused operation of
// any kind changes nothing. The types of the two indexes a task enters are
// checked by the writes themselves, with no TYPE read: the ZADD to the new
// state's ID index is the operation's first write, so a key of another type
// fails it before anything is written; the ZADD to the order index comes
// next, and when that key is of another type the entry just added to the
// ID index is removed again before the refusal (one script, so no one sees
// it), and the call still changes nothing.
//
// # Damaged records
//
// One damaged record does not stop its queue (see "Damaged records" in
// package model). A record the store cannot trust is a task key that does
// not hold a packed task (a field that does not parse, a task breaking a
// rule every task keeps, a key of another type), an order index entry
// without its task, or a task missing from an index of its state or at
// another score there. Pop, Promote, ClaimExpired and RecoverExpired set
// such a record they reach aside in the same call and go on with the sound
// tasks: its ID leaves every index for the quarantine index
// (<prefix>{queue}:ids:quarantined, listed by List and counted by Counts
// as core.Quarantined) and its key then holds the reason and the value it
// held. Prune deletes a damaged finished record whose stored state still
// reads as a wanted one, as the model does, and sets aside one whose state
// does not read. Until a scan meets it, a decision on the record (Extend,
// Ack, Fail, Retry, Requeue, Finalize, InspectRequeue) is core.ErrCorrupt,
// Get returns it as quarantined with the reason and List passes over it,
// all without writing; Remove with no expected version deletes it and
// every index entry of its ID. A sound task that is also listed in the
// order index of another state is not damaged: the scan that meets the
// stray entry drops it. Two cases stay refused with core.ErrCorrupt,
// since they are not one record's: a queue-wide key that is damaged (the
// sequence, an index of another type) and a task whose version is beyond
// the sequence (the sequence went back and would hand out versions
// again). An index entry without its task (a task key deleted with its
// entries left, say) is such a record too: its ID stays taken (it is in
// the registry), so an Enqueue of it, alone or as an EnqueueBatch item, is
// core.ErrConflict and writes nothing, and Get shows it quarantined until
// a scan sets it aside or the operator removes it. An index entry of an
// ID the registry does not hold, which no write of the store leaves, is a
// stray entry: the ID is free, and the scan that meets the entry drops it
// (or, when the entry's task is gone, sets it aside and registers it). Neither Enqueue nor an EnqueueBatch item reads
// the record that takes its ID, so its damage never refuses the batch.
// In an AckBatch (with or without its pop), an item that names a damaged
// record is answered core.ErrCorrupt, whatever its token (the record cannot
// say whether the token is its own), and leaves the record as it is; the
// other items are decided as if it were not there.
//
// Every key a script touches is declared in KEYS when the caller can name
// it: the queue's keys, and the task's key for an operation on one task.
// Pop, Promote, ClaimExpired, RecoverExpired, Prune and List find their
// tasks inside the script, in an index, so those task keys cannot be
// declared in advance (reading the index first would take a second round
// trip and a race). They are built inside the script from the task key
// prefix, which is declared as KEYS[11]: it carries the queue's hash tag, so
// the tasks' keys are in the slot of the declared keys, which is what Redis
// Cluster requires of a script.
//
// # Concurrent Enqueue calls
//
// Concurrent Enqueue calls on one queue of one Store go to the server
// together: while one Enqueue script of the queue is on its way, the calls
// that arrive wait for it and then go out as one enqueue_batch script (at
// most model.MaxBatch per script); a call that finds none on its way goes
// out at once, alone, as the enqueue script, so a lone call never waits
// for company. Each call takes effect when its script runs, after the call
// began and before it returns, and is answered with its own item: the
// items run in order, each by the rules of Enqueue against what the ones
// before it left, so each answer (its task, ErrConflict, ErrQueueFull) is
// the one a lone call would get at that moment. A batch its script refuses
// as a whole (the end of the sequence, too near for all its items) wrote
// nothing; each of its calls is then sent alone. A transport error answers
// every call of its batch (each may or may not have taken effect, as for a
// lone call), and a call whose context ends returns at once, without
// disturbing the others: the script is sent with a context no single
// caller can cancel, and a call that had not gone out yet never does.
//
// # Why a stale decision cannot write
//
// Every mutation of a task draws the next value of its queue's sequence and
// stamps it as the task's version; Pop also makes it the task's claim token.
// A worker's Extend, Ack, Fail or Retry carries its token and a broker's
// Requeue or Finalize the version its ClaimExpired stamped, and the script
// compares them with the stored ones before it writes anything. A late
// worker ack, another broker's takeover or an operator's requeue or removal
// has changed the version (a removed and re-enqueued task has a new one too:
// the sequence is never reset), so the stale decision is refused with
// core.ErrStaleClaim and the task keeps what its last rightful owner wrote.
// Check and write are one script, so nothing can come between them.
//
// # Retransmissions: every call takes effect at most once
//
// A client may send a command again when its connection drops after the
// server ran it: go-redis does, up to MaxRetries (3 by default) times. The
// store guarantees that every Store call takes effect at most once, and
// that a retransmission of a call is answered with the call's own answer;
// in particular a call that took effect is never answered with a typed
// refusal, and a call that never reached the server comes back as a
// transport error, never a typed one.
//
// Each call that writes carries a request ID, drawn by the store per call
// (a random base unique to the Store and a counter), as the last argument
// of its script, so a client's retransmission carries the same ID:
//
//   - Every call that changes something keeps its whole reply (the clock
//     reading it used and every task as it left them, packed) under
//     P{q}:req:<request ID>, a declared key of the queue's slot, in the same
//     script as its writes. A call that finds that key was applied: it
//     answers with the reply kept there and writes nothing, whatever other
//     calls did to its tasks since (an Enqueue sent again after a worker
//     popped the task, an Extend sent again after the Ack, a Pop sent again
//     after an operator removed what it claimed).
//   - The reply is kept as long as the client can send the call again: the
//     store reads its go-redis client's options (New and Open do, for a
//     Client, a Ring or a ClusterClient, whose nodes' clients get
//     go-redis's defaults) and adds up, for each of MaxRetries resends, the
//     earlier attempt's read, the backoff, the wait for the pool,
//     DialerRetries dials of DialTimeout, a new connection's handshake and
//     the write; a Cluster client runs a node's retries (none at its
//     defaults) for each of its MaxRedirects and one attempt more. A call
//     whose context has a deadline starts no attempt after it, so its
//     reply is kept until the deadline plus a handshake and a write
//     (concurrent Enqueues sent as one script: the latest of their
//     deadlines, when each has one). Two seconds more cover the network
//     and the server's queue. The request ID carries the seconds to the
//     script. At go-redis's defaults that is 160 s for a call without a
//     deadline and at most 47 s for a Worker's calls, which end within a
//     lease of 30 s; a client without retries keeps a reply 2 s. A client
//     whose read or write timeout is off, or of another type, keeps
//     replies 15 minutes, and a resend later than that runs the call
//     again. The memory the replies take is bounded by that window of
//     writes: shorten it with the client's timeouts (DialerRetries is the
//     largest part at the defaults) or the calls' deadlines.
//   - A call that was refused changed nothing and keeps no reply: sent
//     again, it is judged again, as a new call.
//   - Reads need nothing.
//
// # Replication and failover
//
// Redis replicates asynchronously: a replica promoted after its primary
// died may lack the primary's last writes, among them its queues'
// sequences. Its next Pop could then stamp a token that a worker of the
// old primary still holds, whose stale Ack would pass the guard, and an
// Enqueue acknowledged by the old primary may be missing.
// WithReplicaAcks(n, timeout) closes that: every call that changes
// something is followed, on the same connection, by WAIT n timeout, and
// answers only once n replicas hold its writes. A token is handed to a
// worker, a decision reported done and an Enqueue acknowledged only when
// they are on the replicas, so a promoted one that acknowledged continues
// the sequence past every token a worker holds. When WAIT falls short the
// call returns an error wrapping ErrReplicaAcks: it took effect on the
// primary and may be lost, like a call whose connection dropped, and is
// never reported as refused. A refused call waits for nothing (it wrote
// nothing). The rule holds while the promoted replica is one that
// acknowledged (n = 1 with one replica; with more, promote the most up to
// date, as Sentinel and Cluster failover do); a retransmission answered
// from its kept reply waits only for what its own connection wrote. On a
// Cluster client the WAIT goes to the master of the queue's slot.
// Without the option the store promises nothing across a failover beyond
// what the promoted replica had received.
//
// # Time
//
// By default a script reads the Redis server's clock (TIME) and uses it to
// stamp and to judge expiry. One clock then judges every lease of a queue,
// whatever the clocks of the machines running workers and brokers: a broker
// whose clock runs ahead cannot expire a live lease, and one whose clock
// lags cannot keep a dead one. (After a failover the promoted replica's
// clock takes over, so keep the servers' clocks synchronized.) WithClock
// replaces the server's clock with an injected core.Clock (passed to each
// script as an argument), for tests with a core.FakeClock. Results report the time the script used as Now.
// Times are kept to the microsecond, as by every leasehold store: caller
// times are truncated (Prune's before is rounded up, which keeps "finished
// before" exact) and so are durations.
//
// # Clients
//
// New takes any go-redis UniversalClient; Open makes a client from a URL
// (redis://user:password@host:port/db, rediss:// for TLS). The store sends
// nothing but its functions: FCALL, and FUNCTION LOAD REPLACE when the
// server lacks the library (or from Preload, which spares that first extra
// round trip); without Functions, EVALSHA, EVAL the first time a server
// lacks a script, and SCRIPT LOAD from Preload.
package redis
