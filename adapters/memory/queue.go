package memory

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/model"
)

// queue is one task queue: the tasks by ID and the ordered indexes the
// operations read from. Its lock guards every field; the methods below expect
// the caller to hold it (for writing, unless they only read).
//
// Every task is in the map, in the ID index of its state (byState) and in the
// order index of its state (ready, scheduled, running or finished). An index
// entry carries a copy of the task's key fields, so a task is taken out of its
// indexes (unindex) before any key field changes and put back after (index).
type queue struct {
	mu       sync.RWMutex
	name     string
	capacity int
	seq      uint64 // last value of the queue's sequence
	paused   bool   // set by Pause: pop claims nothing
	counts   model.Counts
	closed   bool // set by Store.Close: every operation returns core.ErrClosed

	tasks     map[string]*task
	slab      []*task                      // by handle: what the index entries name
	free      []uint32                     // handles of the slab free for reuse
	byState   [model.Quarantined + 1]btree // per state, by ID (idEntry): List
	ready     btree                        // (Priority desc, Version asc) (readyEntry): Pop
	scheduled btree                        // (RunAfter, ID) (timeEntry): Promote
	running   btree                        // (Deadline, ID): ClaimExpired, RecoverExpired
	finished  btree                        // (FinishedAt, ID): Prune
	keys      map[string]string            // unique key -> ID of its last taker (model.Queue.KeyHolder)
	scratch   []*task                      // the tasks one batch operation is working on, kept for the next
	nodes     nodePool                     // the nodes the trees freed, for their next splits
}

// task is a task as the queue keeps it, with its handle: its index in the
// queue's slab. Index entries name a task by handle, not by pointer, so the
// entries hold no pointers: moving them around a B-tree node is a plain copy
// (no write barrier) and the garbage collector never scans the nodes.
type task struct {
	model.Task
	h   uint32
	key idKey
	// damaged marks a record Store.Damage damaged and no scan has set aside
	// yet (model.Queue.Damage): it keeps its state and its indexes.
	damaged bool
}

// idKey is the first 16 bytes of an ID, zero-padded, as two big-endian
// words: comparing keys compares IDs bytewise as far as they reach, so most
// comparisons of IDs read no string.
type idKey struct{ hi, lo uint64 }

func keyOf(id string) idKey {
	var b [16]byte
	copy(b[:], id)
	return idKey{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// tieIDs orders the tasks of handles a and b, whose IDs have the same key,
// by ID: the tie function of the indexes whose entries carry ID keys.
func (q *queue) tieIDs(a, b uint32) int {
	return strings.Compare(q.slab[a].ID, q.slab[b].ID)
}

// signed maps v to a word that orders as v does.
func signed(v int64) uint64 { return uint64(v) ^ 1<<63 }

// idEntry is t's entry in the ID index of its state: its ID key.
func idEntry(t *task) entry { return entry{k0: t.key.hi, k1: t.key.lo, h: t.h} }

// readyEntry is t's entry in the ready index: its priority, highest first,
// then the Version stamped when it became Ready, so within a priority the
// index is in Ready order.
func readyEntry(t *task) entry {
	return entry{k0: ^signed(int64(t.Priority)), k1: t.Version, h: t.h}
}

// timeEntry is t's entry in an index ordered by an instant, then by ID.
func timeEntry(at time.Time, t *task) entry {
	return entry{k0: timeWord(at), k1: t.key.hi, k2: t.key.lo, h: t.h}
}

// timeWord is the first word of a timeEntry at t: its Unix microseconds
// (the store keeps whole microseconds), so "due at now" is k0 <= timeWord(now).
func timeWord(t time.Time) uint64 { return signed(t.UnixMicro()) }

// add gives t a handle and puts it in the map; index makes it visible.
func (q *queue) add(t *task) {
	if n := len(q.free); n > 0 {
		t.h = q.free[n-1]
		q.free = q.free[:n-1]
		q.slab[t.h] = t
	} else {
		t.h = uint32(len(q.slab))
		q.slab = append(q.slab, t)
	}
	t.key = keyOf(t.ID)
	if q.tasks == nil {
		q.tasks = map[string]*task{}
	}
	q.tasks[t.ID] = t
}

// drop takes an unindexed t out of the map and frees its handle.
func (q *queue) drop(t *task) {
	delete(q.tasks, t.ID)
	q.slab[t.h] = nil
	q.free = append(q.free, t.h)
}

// newQueue returns an empty queue. It allocates the queue and nothing else
// (trees and the map come with the first task), so the throwaway empty queue
// an operation on a missing queue runs on is cheap.
func newQueue(name string, capacity int) *queue {
	q := &queue{
		name:     name,
		capacity: capacity,
	}
	tie, pool := q.tieIDs, &q.nodes
	q.ready = newBTree(nil, defaultDegree, pool) // versions differ: no ties
	q.scheduled = newBTree(tie, defaultDegree, pool)
	q.running = newBTree(tie, defaultDegree, pool)
	q.finished = newBTree(tie, defaultDegree, pool)
	for _, s := range append(model.States[:len(model.States):len(model.States)], model.Quarantined) {
		q.byState[s] = newBTree(tie, defaultDegree, pool)
	}
	return q
}

// close marks the queue closed and lets its tasks go.
func (q *queue) close() {
	q.closed = true
	q.tasks, q.slab, q.free, q.keys, q.scratch, q.nodes = nil, nil, nil, nil, nil, nodePool{}
	q.byState = [model.Quarantined + 1]btree{}
	q.ready = btree{}
	q.scheduled, q.running, q.finished = btree{}, btree{}, btree{}
}

// legal[op][state] holds when the model's transition table has a row for op
// from state; it is derived from the table, so it cannot disagree with it.
var legal = func() (m [model.OpCounts + 1][model.Quarantined + 1]bool) {
	for _, t := range model.Transitions() {
		m[t.Op][t.From] = true
	}
	return m
}()

func checkFrom(op model.Op, t *task) error {
	if !legal[op][t.State] {
		return &model.TransitionError{Op: op, State: t.State}
	}
	return nil
}

// --- index maintenance -------------------------------------------------------

func (q *queue) count(s model.State) *int {
	switch s {
	case model.Scheduled:
		return &q.counts.Scheduled
	case model.Ready:
		return &q.counts.Ready
	case model.Running:
		return &q.counts.Running
	case model.Succeeded:
		return &q.counts.Succeeded
	case model.Quarantined:
		return &q.counts.Quarantined
	default:
		return &q.counts.Failed
	}
}

// orderIndex returns the order index of t's state (any but Ready) and t's
// entry in it.
func (q *queue) orderIndex(t *task) (*btree, entry) {
	switch t.State {
	case model.Scheduled:
		return &q.scheduled, timeEntry(t.RunAfter, t)
	case model.Running:
		return &q.running, timeEntry(t.Deadline, t)
	default:
		return &q.finished, timeEntry(t.FinishedAt, t)
	}
}

// index adds t to the indexes of its state. With the map it makes t visible.
func (q *queue) index(t *task) {
	q.byState[t.State].Insert(idEntry(t))
	*q.count(t.State)++
	q.order(t)
}

// unready is unindex for t, the first task of the ready index: it takes t
// off that index without searching for it (btree.DeleteMin).
func (q *queue) unready(t *task) {
	q.byState[model.Ready].Delete(idEntry(t))
	q.counts.Ready--
	q.ready.DeleteMin()
}

// keepScratch keeps ts, a batch's tasks, as the queue's scratch slice for
// the next batch, emptied: the queue then allocates no slice per batch, and
// holds no task a batch has finished with.
func (q *queue) keepScratch(ts []*task) {
	clear(ts)
	q.scratch = ts[:0]
}

// unindex takes t out of the indexes of its state.
func (q *queue) unindex(t *task) {
	q.byState[t.State].Delete(idEntry(t))
	*q.count(t.State)--
	q.unorder(t)
}

// order adds t to the order index of its state only: with unorder, for an
// operation that changes a key (a deadline) but not the state.
func (q *queue) order(t *task) {
	if t.State == model.Quarantined {
		return // no scan reaches a record set aside
	}
	if t.State == model.Ready {
		q.ready.Insert(readyEntry(t))
		return
	}
	idx, item := q.orderIndex(t)
	idx.Insert(item)
}

// unorder takes t out of the order index of its state only.
func (q *queue) unorder(t *task) {
	if t.State == model.Quarantined {
		return
	}
	if t.State == model.Ready {
		q.ready.Delete(readyEntry(t))
		return
	}
	idx, item := q.orderIndex(t)
	idx.Delete(item)
}

// stamp draws the next value of the queue's sequence.
func (q *queue) stamp() uint64 {
	q.seq++
	return q.seq
}

// --- operations ---------------------------------------------------------------
//
// Each follows the model method of the same name (model/ops.go): the same
// guards in the same order, the same fields written. now is the store's clock
// reading, in UTC and whole microseconds.

func (q *queue) enqueue(now time.Time, a model.EnqueueArgs) (model.Task, error) {
	if err := model.ValidateEnqueue(a); err != nil {
		return model.Task{}, err
	}
	if _, exists := q.tasks[a.ID]; exists {
		return model.Task{}, fmt.Errorf("%w: task %q already exists", model.ErrConflict, a.ID)
	}
	if a.UniqueKey != "" {
		if h, held := q.keyHolder(now, a.UniqueKey); held {
			return model.Task{}, &model.DuplicateError{Key: a.UniqueKey, TaskID: h}
		}
	}
	if q.capacity > 0 && q.counts.Pending() >= q.capacity {
		return model.Task{}, fmt.Errorf("%w: %d pending tasks", model.ErrQueueFull, q.capacity)
	}
	t := &task{Task: model.Task{
		Queue:       q.name,
		ID:          a.ID,
		Payload:     model.Stored(a.Payload),
		Priority:    a.Priority,
		MaxAttempts: a.MaxAttempts,
		Timeout:     a.Timeout,
		Version:     q.stamp(),
		EnqueuedAt:  now,
		UniqueKey:   a.UniqueKey,
		UniqueUntil: model.UniqueUntil(now, a.UniqueFor),
	}}
	queueAt(t, now, instant(a.RunAfter))
	q.add(t)
	q.index(t)
	if a.UniqueKey != "" {
		if q.keys == nil {
			q.keys = map[string]string{}
		}
		q.keys[a.UniqueKey] = a.ID
	}
	return snapshot(t), nil
}

// keyHolder returns the task that holds the unique key at now, if one does
// (model.Queue.KeyHolder).
func (q *queue) keyHolder(now time.Time, key string) (string, bool) {
	id, ok := q.keys[key]
	if !ok {
		return "", false
	}
	t, ok := q.tasks[id]
	if !ok || t.UniqueKey != key || !t.HoldsKey(now) {
		return "", false
	}
	return id, true
}

// release drops the key index's entry of t's unique key when t is its
// holder (t is being deleted).
func (q *queue) release(t *task) {
	if t.UniqueKey != "" && q.keys[t.UniqueKey] == t.ID {
		delete(q.keys, t.UniqueKey)
	}
}

func (q *queue) promote(now time.Time, limit int) ([]string, error) {
	if err := model.ValidateLimit(limit); err != nil {
		return nil, err
	}
	ids := []string{}
	for limit == 0 || len(ids) < limit {
		it, ok := q.scheduled.Min()
		if !ok || it.k0 > timeWord(now) {
			break
		}
		t := q.slab[it.h]
		if t.damaged {
			q.setAside(t)
			continue
		}
		q.unindex(t)
		t.Version = q.stamp()
		t.State = model.Ready
		q.index(t)
		ids = append(ids, t.ID)
	}
	return ids, nil
}

func (q *queue) pop(now time.Time, lease time.Duration, n int) ([]model.Task, error) {
	if err := model.ValidateLease(lease); err != nil {
		return nil, err
	}
	if err := model.ValidatePopSize(n); err != nil {
		return nil, err
	}
	if q.paused {
		return []model.Task{}, nil
	}
	claimed := q.scratch[:0]
	deadline := instant(now.Add(lease))
	for len(claimed) < n {
		it, ok := q.ready.Min()
		if !ok {
			break
		}
		t := q.slab[it.h]
		if t.damaged {
			q.setAside(t)
			continue
		}
		q.unready(t)
		t.Version = q.stamp()
		t.State = model.Running
		t.ClaimToken = t.Version
		t.Attempt++
		t.ClaimedAt = now
		t.Deadline = deadline
		q.index(t)
		claimed = append(claimed, t)
	}
	out := snapshots(claimed)
	q.keepScratch(claimed)
	return out, nil
}

func (q *queue) extend(now time.Time, c model.Claim, lease time.Duration) (model.Task, error) {
	if err := model.ValidateLease(lease); err != nil {
		return model.Task{}, err
	}
	t, err := q.claimed(model.OpExtend, c)
	if err != nil {
		return model.Task{}, err
	}
	q.unorder(t) // still Running: only the deadline's index changes
	t.Version = q.stamp()
	t.Deadline = instant(now.Add(lease))
	q.order(t)
	return snapshot(t), nil
}

func (q *queue) ack(now time.Time, c model.Claim, result []byte) (model.Task, error) {
	t, err := q.acked(now, c, result)
	if err != nil {
		return model.Task{}, err
	}
	return snapshot(t), nil
}

// acked is ack without the snapshot: AckBatch takes the snapshots of all its
// items at once (snapshots).
func (q *queue) acked(now time.Time, c model.Claim, result []byte) (*task, error) {
	t, err := q.claimed(model.OpAck, c)
	if err != nil {
		return nil, err
	}
	q.unindex(t)
	t.Version = q.stamp()
	t.Result = model.Stored(result)
	finish(t, model.Succeeded, now)
	q.index(t)
	return t, nil
}

func (q *queue) fail(now time.Time, c model.Claim, message string) (model.Task, error) {
	t, err := q.claimed(model.OpFail, c)
	if err != nil {
		return model.Task{}, err
	}
	q.unindex(t)
	t.Version = q.stamp()
	t.Errors = append(t.Errors, model.TaskError{Attempt: t.Attempt, At: now, Message: message})
	finish(t, model.Failed, now)
	q.index(t)
	return snapshot(t), nil
}

func (q *queue) retry(now time.Time, c model.Claim, delay time.Duration, message string) (model.Task, error) {
	if err := model.ValidateDelay(delay); err != nil {
		return model.Task{}, err
	}
	t, err := q.claimed(model.OpRetry, c)
	if err != nil {
		return model.Task{}, err
	}
	q.unindex(t)
	t.Version = q.stamp()
	t.Errors = append(t.Errors, model.TaskError{Attempt: t.Attempt, At: now, Message: message})
	queueAt(t, now, instant(model.RunAfter(now, delay)))
	q.index(t)
	return snapshot(t), nil
}

func (q *queue) claimExpired(now time.Time, claimTTL time.Duration, limit int) ([]model.ReapClaim, error) {
	if err := model.ValidateClaimTTL(claimTTL); err != nil {
		return nil, err
	}
	if err := model.ValidateLimit(limit); err != nil {
		return nil, err
	}
	// Collect first, then renew: with a claim TTL under a microsecond the
	// renewed deadline may still be due, and must not be claimed twice.
	var due, aside []*task
	q.running.Ascend(func(it entry) bool {
		if (limit > 0 && len(due) == limit) || it.k0 > timeWord(now) {
			return false
		}
		if t := q.slab[it.h]; t.damaged {
			aside = append(aside, t)
		} else {
			due = append(due, t)
		}
		return true
	})
	for _, t := range aside {
		q.setAside(t)
	}
	deadline := instant(now.Add(claimTTL))
	out := make([]model.ReapClaim, 0, len(due))
	for _, t := range due {
		q.unorder(t) // still Running: only the deadline's index changes
		t.Version = q.stamp()
		t.Deadline = deadline
		q.order(t)
		out = append(out, model.ReapClaim{Queue: t.Queue, TaskID: t.ID, Version: t.Version, Deadline: t.Deadline, Task: snapshot(t)})
	}
	return out, nil
}

func (q *queue) requeue(now time.Time, rc model.ReapClaim, delay time.Duration, message string) (model.Task, error) {
	if err := model.ValidateDelay(delay); err != nil {
		return model.Task{}, err
	}
	t, err := q.reaped(model.OpRequeue, rc)
	if err != nil {
		return model.Task{}, err
	}
	q.unindex(t)
	t.Version = q.stamp()
	t.Errors = append(t.Errors, leaseError(t, now, message))
	queueAt(t, now, instant(model.RunAfter(now, delay)))
	q.index(t)
	return snapshot(t), nil
}

func (q *queue) finalize(now time.Time, rc model.ReapClaim, message string) (model.Task, error) {
	t, err := q.reaped(model.OpFinalize, rc)
	if err != nil {
		return model.Task{}, err
	}
	q.unindex(t)
	t.Version = q.stamp()
	t.Errors = append(t.Errors, leaseError(t, now, message))
	finish(t, model.Failed, now)
	q.index(t)
	return snapshot(t), nil
}

func (q *queue) recoverExpired(now time.Time, delay time.Duration, limit int) ([]model.Task, error) {
	if err := model.ValidateDelay(delay); err != nil {
		return nil, err
	}
	if err := model.ValidateLimit(limit); err != nil {
		return nil, err
	}
	runAfter := instant(now.Add(delay))
	out := []model.Task{}
	for limit == 0 || len(out) < limit {
		it, ok := q.running.Min()
		if !ok || it.k0 > timeWord(now) {
			break
		}
		t := q.slab[it.h]
		if t.damaged {
			q.setAside(t)
			continue
		}
		q.unindex(t)
		t.Version = q.stamp()
		t.Errors = append(t.Errors, leaseError(t, now, ""))
		if t.Attempt >= t.MaxAttempts {
			finish(t, model.Failed, now)
		} else {
			queueAt(t, now, runAfter)
		}
		q.index(t)
		out = append(out, snapshot(t))
	}
	return out, nil
}

func (q *queue) inspectRequeue(id string, expect uint64) (model.Task, error) {
	t, err := q.inspected(model.OpInspectRequeue, id, expect)
	if err != nil {
		return model.Task{}, err
	}
	q.unindex(t)
	t.Version = q.stamp()
	t.Attempt = 0
	t.Result = nil
	queueAt(t, time.Time{}, time.Time{})
	q.index(t)
	return snapshot(t), nil
}

func (q *queue) cancel(now time.Time, id string, expect uint64) (model.Task, error) {
	t, err := q.inspected(model.OpCancel, id, expect)
	if err != nil {
		return model.Task{}, err
	}
	q.unindex(t)
	t.Version = q.stamp()
	t.Errors = append(t.Errors, model.TaskError{Attempt: t.Attempt, At: now, Message: model.CancelledMessage, Cancelled: true})
	finish(t, model.Failed, now)
	q.index(t)
	return snapshot(t), nil
}

func (q *queue) remove(id string, expect uint64) (model.Task, error) {
	if t, ok := q.tasks[id]; ok && t.damaged {
		if expect != 0 {
			return model.Task{}, fmt.Errorf("%w: task %q is damaged: its version cannot be read", model.ErrConflict, id)
		}
		q.unindex(t)
		q.release(t)
		q.drop(t)
		return quarantined(t), nil
	}
	t, err := q.inspected(model.OpRemove, id, expect)
	if err != nil {
		return model.Task{}, err
	}
	q.unindex(t)
	q.release(t)
	q.drop(t)
	return t.Task, nil // the store keeps no reference to t's slices any more
}

func (q *queue) prune(states []model.State, before time.Time, limit int) ([]string, error) {
	if err := model.ValidatePruneStates(states); err != nil {
		return nil, err
	}
	var want [model.Failed + 1]bool
	for _, s := range states {
		want[s] = true
	}
	if err := model.ValidateLimit(limit); err != nil {
		return nil, err
	}
	before = instant(before)
	var doomed []*task
	q.finished.Ascend(func(it entry) bool {
		if it.k0 >= timeWord(before) {
			return false
		}
		if t := q.slab[it.h]; want[t.State] {
			doomed = append(doomed, t)
		}
		return limit == 0 || len(doomed) < limit
	})
	ids := make([]string, 0, len(doomed))
	for _, t := range doomed {
		q.unindex(t)
		q.release(t)
		q.drop(t)
		ids = append(ids, t.ID)
	}
	return ids, nil
}

func (q *queue) get(id string) (model.Task, error) {
	if err := validID(id); err != nil {
		return model.Task{}, err
	}
	t, ok := q.tasks[id]
	if !ok {
		return model.Task{}, notFound(id)
	}
	if t.damaged {
		return quarantined(t), nil
	}
	return snapshot(t), nil
}

func (q *queue) list(s model.State, after string, limit int) ([]model.Task, string, error) {
	if err := model.ValidateList(s, limit); err != nil {
		return nil, "", err
	}
	var out []model.Task
	next := ""
	q.byState[s].AscendWhere(func(it entry) bool { return q.slab[it.h].ID <= after }, func(it entry) bool {
		if q.slab[it.h].damaged {
			return true // read only: passed over until a scan sets it aside
		}
		if len(out) == limit {
			next = out[len(out)-1].ID
			return false
		}
		out = append(out, snapshot(q.slab[it.h]))
		return true
	})
	return out, next, nil
}

// --- guards ------------------------------------------------------------------

// claimed checks a worker claim: the task exists, its ClaimToken is the
// claim's token, and op is legal from its state.
func (q *queue) claimed(op model.Op, c model.Claim) (*task, error) {
	if err := model.ValidateClaim(c); err != nil {
		return nil, err
	}
	t, ok := q.tasks[c.TaskID]
	if !ok {
		return nil, fmt.Errorf("%w: task %q no longer exists", model.ErrStaleClaim, c.TaskID)
	}
	if t.damaged {
		return nil, damaged(c.TaskID)
	}
	if t.ClaimToken != c.Token {
		return nil, fmt.Errorf("%w: token %d no longer holds task %q", model.ErrStaleClaim, c.Token, c.TaskID)
	}
	if t.Task.Cancelled() {
		return nil, fmt.Errorf("%w: %w: task %q was cancelled by an operator", model.ErrCancelled, model.ErrStaleClaim, c.TaskID)
	}
	return t, checkFrom(op, t)
}

// reaped checks a broker claim: the task exists, its Version is the claim's,
// and op is legal from its state.
func (q *queue) reaped(op model.Op, rc model.ReapClaim) (*task, error) {
	if err := model.ValidateReapClaim(rc); err != nil {
		return nil, err
	}
	t, ok := q.tasks[rc.TaskID]
	if !ok {
		return nil, fmt.Errorf("%w: task %q no longer exists", model.ErrStaleClaim, rc.TaskID)
	}
	if t.damaged {
		return nil, damaged(rc.TaskID)
	}
	if t.Version != rc.Version {
		return nil, fmt.Errorf("%w: task %q changed since version %d", model.ErrStaleClaim, rc.TaskID, rc.Version)
	}
	return t, checkFrom(op, t)
}

// inspected checks an operator's action: the task exists, it is at the
// expected version (if one is given), and op is legal from its state.
func (q *queue) inspected(op model.Op, id string, expect uint64) (*task, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	t, ok := q.tasks[id]
	if !ok {
		return nil, notFound(id)
	}
	if t.damaged {
		return nil, damaged(id)
	}
	if expect != 0 && t.Version != expect {
		return nil, fmt.Errorf("%w: task %q is at version %d, not %d", model.ErrConflict, id, t.Version, expect)
	}
	return t, checkFrom(op, t)
}

// --- damaged records -----------------------------------------------------------

// damage marks the record of id damaged (model.Queue.Damage).
func (q *queue) damage(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	t, ok := q.tasks[id]
	if !ok {
		return notFound(id)
	}
	if t.damaged || t.State == model.Quarantined {
		return fmt.Errorf("%w: task %q is already damaged", model.ErrInvalidTransition, id)
	}
	t.damaged = true
	return nil
}

// setAside moves the damaged record t out of its state's indexes into
// Quarantined, keeping only its queue and ID (model.Queue.Damage). It draws
// no version.
func (q *queue) setAside(t *task) {
	q.unindex(t)
	t.damaged = false
	t.Task = quarantined(t)
	q.index(t)
}

// quarantined is the record of t as the store reports it once set aside.
func quarantined(t *task) model.Task {
	return model.Task{Queue: t.Queue, ID: t.ID, State: model.Quarantined, Quarantine: model.DamagedReason}
}

func damaged(id string) error {
	return fmt.Errorf("%w: task %q is damaged", model.ErrCorrupt, id)
}

// --- helpers -----------------------------------------------------------------

// queueAt returns the task to the queue: Scheduled if runAfter is after now,
// else Ready; the claim and its timestamps are cleared.
func queueAt(t *task, now, runAfter time.Time) {
	t.RunAfter = runAfter
	t.State = model.Ready
	if runAfter.After(now) {
		t.State = model.Scheduled
	}
	t.ClaimToken = 0
	t.ClaimedAt = time.Time{}
	t.Deadline = time.Time{}
	t.FinishedAt = time.Time{}
}

// finish moves a Running task to a terminal state.
func finish(t *task, s model.State, now time.Time) {
	t.State = s
	t.FinishedAt = now
	t.Deadline = time.Time{}
}

func leaseError(t *task, now time.Time, message string) model.TaskError {
	if message == "" {
		message = model.LeaseExpiredMessage
	}
	return model.TaskError{Attempt: t.Attempt, At: now, Message: message, LeaseExpired: true}
}

// snapshot returns a deep copy of t: the caller may keep or change it. Its
// payload and result are copied into one allocation.
func snapshot(t *task) model.Task {
	var c model.Task
	snapshotInto(&c, t, make([]byte, 0, len(t.Payload)+len(t.Result)))
	return c
}

// snapshots returns the snapshots of ts, their payloads and results copied
// into one allocation: a Pop or AckBatch of n tasks allocates twice, not 2n
// times. Each copy is capped at its own length, so a caller appending to one
// reallocates it instead of writing into its neighbour.
func snapshots(ts []*task) []model.Task {
	if len(ts) == 0 {
		return []model.Task{}
	}
	buf := snapshotBuffer(ts)
	out := make([]model.Task, len(ts))
	for i, t := range ts {
		buf = snapshotInto(&out[i], t, buf)
	}
	return out
}

// snapshotBuffer returns an empty buffer with room for the payloads and
// results of ts.
func snapshotBuffer(ts []*task) []byte {
	size := 0
	for _, t := range ts {
		size += len(t.Payload) + len(t.Result)
	}
	return make([]byte, 0, size)
}

// snapshotInto writes the snapshot of t to *c, the bytes copied into buf's
// spare capacity (so a batch's snapshots fill the caller's answer in place);
// it returns buf past them.
func snapshotInto(c *model.Task, t *task, buf []byte) []byte {
	*c = t.Task
	c.Payload, buf = carve(buf, t.Payload)
	c.Result, buf = carve(buf, t.Result)
	c.Errors = slices.Clone(t.Errors)
	return buf
}

// carve copies b to the end of buf and returns the copy (nil for nil, as
// bytes.Clone) with its capacity capped at its length, and buf past it.
func carve(buf, b []byte) ([]byte, []byte) {
	if b == nil {
		return nil, buf
	}
	n := len(buf)
	buf = append(buf, b...)
	return buf[n:len(buf):len(buf)], buf
}

// instant returns t as the store keeps it, by the model's one rounding rule
// (model.Round: UTC, truncated to the microsecond; the zero time stays zero).
func instant(t time.Time) time.Time { return model.Round(t) }

func validID(id string) error { return model.ValidateID(id) }

func notFound(id string) error { return fmt.Errorf("%w: %q", model.ErrNotFound, id) }
