package model

import (
	"encoding/binary"
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
	counts   Counts

	tasks   tree[*Task]            // by ID; the *Task is never mutated
	byState [Failed + 1]tree[bool] // per state, by ID (for List)

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

// Counts returns the number of tasks in each state.
func (q Queue) Counts() Counts { return q.counts }

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
	return *t, nil
}

// List returns up to limit tasks in state s with an ID greater than after, in
// ID order, and the cursor for the next page ("" when there is none).
func (q Queue) List(s State, after string, limit int) ([]Task, string, error) {
	if !s.Valid() {
		return nil, "", invalid("list: state %d", uint8(s))
	}
	if limit < 1 || limit > MaxBatch {
		return nil, "", invalid("list: limit %d outside 1..%d", limit, MaxBatch)
	}
	var out []Task
	next := ""
	q.byState[s].Ascend(after, func(id string, _ bool) bool {
		if id == after {
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
	if q.name != r.name || q.capacity != r.capacity || q.seq != r.seq || q.counts != r.counts || q.tasks.Len() != r.tasks.Len() {
		return false
	}
	equal := true
	q.tasks.Ascend("", func(id string, t *Task) bool {
		u, ok := r.tasks.Get(id)
		equal = ok && (t == u || t.Equal(*u))
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
	q.tasks.Ascend("", func(id string, t *Task) bool {
		h.Write([]byte(id))
		word(uint64(t.State))
		word(t.Version)
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
