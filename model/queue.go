package model

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"time"
)

// Queue is the state of one task queue: an immutable value. Operations return
// a new Queue and never change the receiver, so old values stay valid and may
// be shared freely between goroutines.
type Queue struct {
	name     string
	capacity int    // maximum pending tasks; 0 means unlimited
	seq      uint64 // last value of the queue's sequence
	paused   bool   // Pop claims nothing while set (see Pause)
	counts   Counts

	tasks   tree[*Task]                 // by ID; the *Task is never mutated
	byState [Quarantined + 1]tree[bool] // per state, by ID (for List)
	damaged tree[bool]                  // IDs of damaged records not yet set aside (see Damage)
	keys    tree[string]                // unique key -> ID of its last taker (see KeyHolder)

	// Order indexes: key -> task ID.
	ready     tree[string] // (priority desc, Version asc): Pop order
	scheduled tree[string] // (RunAfter, ID): Promote order
	running   tree[string] // (Deadline, ID): ClaimExpired and RecoverExpired order
	finished  tree[string] // (FinishedAt, ID): Prune order
}

// NewQueue returns an empty queue. capacity bounds the number of pending
// (Scheduled, Ready and Running) tasks; 0 means unlimited.
func NewQueue(name string, capacity int) Queue {
	return Queue{name: name, capacity: max(capacity, 0)}
}

// Name returns the queue's name.
func (q Queue) Name() string { return q.name }

// Capacity returns the maximum number of pending tasks, 0 for unlimited.
func (q Queue) Capacity() int { return q.capacity }

// Seq returns the last value drawn from the queue's sequence.
func (q Queue) Seq() uint64 { return q.seq }

// Len returns the number of tasks.
func (q Queue) Len() int { return q.tasks.Len() }

// Counts returns the number of tasks in each state and the paused flag.
func (q Queue) Counts() Counts {
	c := q.counts
	c.Paused = q.paused
	return c
}

// Paused reports whether the queue is paused (see Pause).
func (q Queue) Paused() bool { return q.paused }

// Pause sets the queue's paused flag and returns it (true). While the queue
// is paused, Pop claims nothing: it answers no tasks and no error, and sets
// no damaged record aside. Nothing else changes: claims already handed out
// keep their leases, heartbeats and decisions; Enqueue, Promote,
// ClaimExpired, RecoverExpired and the inspector's actions go on. Pause is
// idempotent, changes no task and draws no version: the flag is the
// queue's, not a task's.
func (q Queue) Pause() (Queue, bool) {
	q.paused = true
	return q, true
}

// Resume clears the queue's paused flag and returns it (false); Pop claims
// again. Resume is idempotent, changes no task and draws no version.
func (q Queue) Resume() (Queue, bool) {
	q.paused = false
	return q, false
}

// Get returns the task with the given ID: ErrInvalidArgument for an ID that
// no task can have, ErrNotFound when no task has it.
func (q Queue) Get(id string) (Task, error) {
	if err := validID(id); err != nil {
		return Task{}, err
	}
	t, ok := q.tasks.Get(id)
	if !ok {
		return Task{}, notFound(id)
	}
	if q.isDamaged(id) {
		return quarantined(t), nil
	}
	return *t, nil
}

// List returns up to limit tasks in state s with an ID greater than after, in
// ID order, and the cursor for the next page ("" when there is none).
//
// List only reads: it passes over a damaged record (see Damage) that is
// still listed under its former state.
func (q Queue) List(s State, after string, limit int) ([]Task, string, error) {
	if err := ValidateList(s, limit); err != nil {
		return nil, "", err
	}
	var out []Task
	next := ""
	q.byState[s].Ascend(after, func(id string, _ bool) bool {
		if id == after || q.isDamaged(id) {
			return true
		}
		if len(out) == limit {
			next = out[len(out)-1].ID
			return false
		}
		t, _ := q.tasks.Get(id)
		out = append(out, *t)
		return true
	})
	return out, next, nil
}

// Tasks returns every task in ID order.
func (q Queue) Tasks() []Task {
	out := make([]Task, 0, q.tasks.Len())
	q.tasks.Ascend("", func(_ string, t *Task) bool {
		out = append(out, *t)
		return true
	})
	return out
}

// Equal reports whether two queues hold the same tasks with the same fields
// and the same sequence.
func (q Queue) Equal(r Queue) bool {
	if q.name != r.name || q.capacity != r.capacity || q.seq != r.seq || q.paused != r.paused || q.counts != r.counts ||
		q.tasks.Len() != r.tasks.Len() || q.damaged.Len() != r.damaged.Len() || q.keys.Len() != r.keys.Len() {
		return false
	}
	equal := true
	q.keys.Ascend("", func(k string, id string) bool {
		v, ok := r.keys.Get(k)
		equal = ok && v == id
		return equal
	})
	q.tasks.Ascend("", func(id string, t *Task) bool {
		u, ok := r.tasks.Get(id)
		equal = ok && (t == u || t.Equal(*u)) && q.isDamaged(id) == r.isDamaged(id)
		return equal
	})
	return equal
}

// Hash returns a hash consistent with Equal: equal queues hash alike.
func (q Queue) Hash() uint64 {
	h := fnv.New64a()
	var b [8]byte
	word := func(v uint64) {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	h.Write([]byte(q.name))
	word(q.seq)
	if q.paused {
		word(1)
	}
	q.tasks.Ascend("", func(id string, t *Task) bool {
		h.Write([]byte(id))
		word(uint64(t.State))
		word(t.Version)
		if q.isDamaged(id) {
			word(1)
		}
		return true
	})
	return h.Sum64()
}

// --- index maintenance -------------------------------------------------------

// timeKey orders by instant, then by ID.
func timeKey(t time.Time, id string) string {
	var b [12]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.Unix())^(1<<63))
	binary.BigEndian.PutUint32(b[8:], uint32(t.Nanosecond()))
	return string(b[:]) + id
}

// readyKey orders by priority (highest first), then by the Version stamped
// when the task became Ready (first first).
func readyKey(t *Task) string {
	var b [10]byte
	binary.BigEndian.PutUint16(b[:2], uint16(MaxPriority-t.Priority))
	binary.BigEndian.PutUint64(b[2:], t.Version)
	return string(b[:])
}

// unindex removes t from every index and the task map.
func (q Queue) unindex(t *Task) Queue {
	q.tasks = q.tasks.Delete(t.ID)
	q.byState[t.State] = q.byState[t.State].Delete(t.ID)
	q.counts.add(t.State, -1)
	switch t.State {
	case Ready:
		q.ready = q.ready.Delete(readyKey(t))
	case Scheduled:
		q.scheduled = q.scheduled.Delete(timeKey(t.RunAfter, t.ID))
	case Running:
		q.running = q.running.Delete(timeKey(t.Deadline, t.ID))
	case Succeeded, Failed:
		q.finished = q.finished.Delete(timeKey(t.FinishedAt, t.ID))
	}
	return q
}

// index adds t to the task map and the indexes of its state.
func (q Queue) index(t *Task) Queue {
	q.tasks = q.tasks.Put(t.ID, t)
	q.byState[t.State] = q.byState[t.State].Put(t.ID, true)
	q.counts.add(t.State, 1)
	switch t.State {
	case Ready:
		q.ready = q.ready.Put(readyKey(t), t.ID)
	case Scheduled:
		q.scheduled = q.scheduled.Put(timeKey(t.RunAfter, t.ID), t.ID)
	case Running:
		q.running = q.running.Put(timeKey(t.Deadline, t.ID), t.ID)
	case Succeeded, Failed:
		q.finished = q.finished.Put(timeKey(t.FinishedAt, t.ID), t.ID)
	}
	return q
}

// replace swaps the stored old task for next (same ID).
func (q Queue) replace(old *Task, next Task) Queue {
	return q.unindex(old).index(&next)
}

// stamp draws the next value of the queue's sequence.
func (q Queue) stamp() (Queue, uint64) {
	q.seq++
	return q, q.seq
}

// --- damaged records ---------------------------------------------------------

// DamagedReason is the Quarantine text of a record the model set aside. A
// store says what it could not read instead; the conformance suite compares
// only that the text is not empty.
const DamagedReason = "damaged"

// Damage is the event "the store's record of task id was damaged": not an
// operation of a store, but what a fault (a disk, an operator's stray write)
// does to it, applied by the tests to say what every later operation must
// answer: by the conformance suite, and by the linearizability harness,
// whose plans damage a record mid-history and record that as an operation
// the checker applies as this event. The record keeps its place in the indexes of its state (the
// damage hooks of the tests damage only what does not decide it), and from
// then on:
//
//   - An operation that scans an index (Promote, Pop, ClaimExpired,
//     RecoverExpired) and reaches the record, in its order and within its
//     condition (due, expired), sets it aside as Quarantined in the same
//     step and goes on with the tasks after it; the record does not count
//     against the limit, and no version is drawn for it. Prune deletes it
//     as it deletes a sound task.
//   - A worker's op, a broker's decision, InspectRequeue, and an AckBatch
//     item that name the record are ErrCorrupt and change nothing: nobody
//     decides a task the store cannot read, and a worker never sees its
//     ack accepted. Enqueue of its ID is ErrConflict.
//   - Remove with expect 0 deletes it and returns it as Quarantined; with
//     any other expect it is ErrConflict (its version cannot be read).
//   - Reads do not write: Get returns it as Quarantined, List passes over
//     it, and Counts counts it in its former state until it is set aside.
//
// A quarantined record never runs and never blocks: no index reaches it;
// a worker's or broker's claim on it is ErrStaleClaim (it holds no token
// and has Version 0); InspectRequeue is ErrInvalidTransition; Remove (expect
// 0) is its only transition, and Enqueue of its ID is ErrConflict until
// then.
//
// Errors: ErrInvalidArgument, ErrNotFound, and ErrInvalidTransition for a
// record already damaged or quarantined.
func (q Queue) Damage(id string) (Queue, error) {
	if err := validID(id); err != nil {
		return q, err
	}
	t, ok := q.tasks.Get(id)
	if !ok {
		return q, notFound(id)
	}
	if t.State == Quarantined || q.isDamaged(id) {
		return q, fmt.Errorf("%w: task %q is already damaged", ErrInvalidTransition, id)
	}
	q.damaged = q.damaged.Put(id, true)
	return q, nil
}

// Damaged reports whether the record of id is damaged and not yet set
// aside.
func (q Queue) Damaged(id string) bool { return q.isDamaged(id) }

func (q Queue) isDamaged(id string) bool {
	if q.damaged.Len() == 0 {
		return false
	}
	_, ok := q.damaged.Get(id)
	return ok
}

// quarantined is the record of t as a store reports it once set aside.
func quarantined(t *Task) Task {
	return Task{Queue: t.Queue, ID: t.ID, State: Quarantined, Quarantine: DamagedReason}
}

// setAside moves the damaged record t out of every index into Quarantined.
func (q Queue) setAside(t *Task) Queue {
	q.damaged = q.damaged.Delete(t.ID)
	n := quarantined(t)
	return q.unindex(t).index(&n)
}

// release drops the key index's entry of t's unique key when t is its
// holder (t was deleted).
func (q Queue) release(t *Task) Queue {
	if t.UniqueKey != "" {
		if id, ok := q.keys.Get(t.UniqueKey); ok && id == t.ID {
			q.keys = q.keys.Delete(t.UniqueKey)
		}
	}
	return q
}

// forget drops id from the damaged set (the record was deleted).
func (q Queue) forget(id string) Queue {
	if q.isDamaged(id) {
		q.damaged = q.damaged.Delete(id)
	}
	return q
}
