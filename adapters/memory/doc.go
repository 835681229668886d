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
// nodes. Every entry is three words and the handle: the index's key mapped to
// words that order as the key does (the priority, inverted; the Version; an
// instant's Unix microseconds; the first 16 bytes of the ID), so a search
// compares integers inline and reads IDs only for two that share their first
// 16 bytes. The nodes a tree merges away stay in a pool its queue's trees
// share (at most 48 nodes, about 100 KiB), for their next splits: the trees
// of Running and Succeeded tasks, which fill and empty by a batch, then
// allocate nothing.
//
// With n tasks in a queue, Enqueue, Extend, Ack, Fail, Retry, Requeue,
// Finalize, InspectRequeue, Remove and Get cost O(log n); Pop, Promote,
// ClaimExpired and RecoverExpired cost O(log n) for each task they touch and
// nothing for the tasks they do not; EnqueueBatch and AckBatch cost what
// their items would cost one by one, under one lock; List costs O(log n + limit), Counts O(1).
// Prune costs O(log n) per task removed, plus O(1) for each older terminal
// task of a state it was not asked to prune.
//
// # Speed
//
// A Pop of n tasks, an AckBatch and an AckBatch that also pops (its Pop
// field) take the queue's lock once and read the clock once, and allocate
// for each list of tasks they answer the list and one buffer for the
// payloads and results it copies, plus the stored copy of each acknowledged
// result. From one goroutine, on a
// queue of 1 000 Ready tasks that never runs dry, in batches of 100:
//
//	go test -run '^$' -bench 'PopAckBatch/size=1000/n=100/' -benchmem -count 10 ./adapters/memory/
//
// gave 1.33 M cycles (one task popped and acknowledged) per second of the
// benchmark thread's CPU with Pop(100) then AckBatch, 1.38 M with AckBatch
// claiming the next 100 (cycles/cpu-s, medians of 10 runs alternated with
// the adapter before its entries of one type, which gave 0.86 M and 0.87 M:
// +55% and +58%). The machine, two cores, ran at a load average of 30 to 40
// meanwhile, so its wall-clock cycles/s varied by ±90% and is not the figure
// to read; CPU per op, requeue and collector included, went from 2.13 µs to
// 1.44 µs, bytes allocated per cycle from 1 354 to 1 035, and the
// instructions per op (valgrind --tool=callgrind on the test binary, the
// difference of runs of 80 000 and 40 000 ops) from 19 000 to 13 300, the
// adapter's own from 11 500 to 5 800.
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
