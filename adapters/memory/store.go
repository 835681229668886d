package memory

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// Store is the in-process core.Store. The zero value is not usable; call New.
// It is safe for concurrent use by many goroutines.
type Store struct {
	clock    core.Clock
	capacity int

	mu     sync.RWMutex // guards queues and closed
	queues map[string]*queue
	closed bool
}

var _ core.BatchStore = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store judge time by clock (a core.FakeClock in tests).
// The default, and the clock used when clock is nil, is core.SystemClock{}.
func WithClock(clock core.Clock) Option {
	return func(s *Store) {
		if clock != nil {
			s.clock = clock
		}
	}
}

// WithCapacity bounds the number of pending (Scheduled, Ready and Running)
// tasks of each queue: Enqueue into a full queue returns core.ErrQueueFull.
// 0, the default, means unlimited; a negative capacity counts as 0.
func WithCapacity(n int) Option {
	return func(s *Store) { s.capacity = max(n, 0) }
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{clock: core.SystemClock{}, queues: map[string]*queue{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// queue returns the named queue, creating it when create is set. A queue that
// does not exist behaves exactly as an empty one, so when create is not set
// and the queue is missing it returns a fresh empty queue that is not stored:
// no operation but Enqueue changes an empty queue.
func (s *Store) queue(ctx context.Context, name string, create bool) (*queue, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	q, closed := s.queues[name], s.closed
	s.mu.RUnlock()
	if q != nil && !closed {
		return q, nil // only a valid name names a queue: no need to check it again
	}
	if err := core.ValidateQueueName(name); err != nil {
		return nil, err
	}
	switch {
	case closed:
		return nil, core.ErrClosed
	case !create:
		return newQueue(name, s.capacity), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, core.ErrClosed
	}
	if q = s.queues[name]; q == nil {
		q = newQueue(name, s.capacity)
		s.queues[name] = q
	}
	return q, nil
}

// write runs fn under the write lock of the named queue, with the store's
// clock read under that lock (so the readings of one queue's operations
// follow the order the operations take effect in). It returns that reading.
func (s *Store) write(ctx context.Context, name string, create bool, fn func(q *queue, now time.Time) error) (time.Time, error) {
	q, err := s.queue(ctx, name, create)
	if err != nil {
		return time.Time{}, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return time.Time{}, core.ErrClosed
	}
	now := instant(s.clock.Now())
	if err := fn(q, now); err != nil {
		return time.Time{}, err
	}
	return now, nil
}

// read runs fn under the read lock of the named queue.
func (s *Store) read(ctx context.Context, name string, fn func(q *queue) error) error {
	q, err := s.queue(ctx, name, false)
	if err != nil {
		return err
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return core.ErrClosed
	}
	return fn(q)
}

func taskResult(now time.Time, t model.Task, err error) (core.TaskResult, error) {
	if err != nil {
		return core.TaskResult{}, err
	}
	return core.TaskResult{Now: now, Task: t}, nil
}

// Enqueue adds a task (model.Queue.Enqueue). RunAfter is kept in UTC to the
// microsecond.
func (s *Store) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	var t model.Task
	now, err := s.write(ctx, p.Queue, true, func(q *queue, now time.Time) (err error) {
		t, err = q.enqueue(now, p.EnqueueArgs)
		return err
	})
	return taskResult(now, t, err)
}

// Promote makes due Scheduled tasks Ready (model.Queue.Promote), in order of
// RunAfter then ID, at O(log n) per task.
func (s *Store) Promote(ctx context.Context, p core.PromoteParams) (core.IDsResult, error) {
	var ids []string
	now, err := s.write(ctx, p.Queue, false, func(q *queue, now time.Time) (err error) {
		ids, err = q.promote(now, p.Limit)
		return err
	})
	if err != nil {
		return core.IDsResult{}, err
	}
	return core.IDsResult{Now: now, IDs: ids}, nil
}

// Pop claims up to p.N Ready tasks (model.Queue.Pop): highest priority
// first, then the one that became Ready first, at O(log n) per task.
func (s *Store) Pop(ctx context.Context, p core.PopParams) (core.TasksResult, error) {
	var tasks []model.Task
	now, err := s.write(ctx, p.Queue, false, func(q *queue, now time.Time) (err error) {
		tasks, err = q.pop(now, p.Lease, p.N)
		return err
	})
	if err != nil {
		return core.TasksResult{}, err
	}
	return core.TasksResult{Now: now, Tasks: tasks}, nil
}

// Extend renews a claim's lease (model.Queue.Extend).
func (s *Store) Extend(ctx context.Context, p core.ExtendParams) (core.TaskResult, error) {
	var t model.Task
	now, err := s.write(ctx, p.Claim.Queue, false, func(q *queue, now time.Time) (err error) {
		t, err = q.extend(now, p.Claim, p.Lease)
		return err
	})
	return taskResult(now, t, err)
}

// Ack records a claim's success (model.Queue.Ack).
func (s *Store) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	var t model.Task
	now, err := s.write(ctx, p.Claim.Queue, false, func(q *queue, now time.Time) (err error) {
		t, err = q.ack(now, p.Claim, p.Result)
		return err
	})
	return taskResult(now, t, err)
}

// Fail records a claim's final failure (model.Queue.Fail).
func (s *Store) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	var t model.Task
	now, err := s.write(ctx, p.Claim.Queue, false, func(q *queue, now time.Time) (err error) {
		t, err = q.fail(now, p.Claim, p.Message)
		return err
	})
	return taskResult(now, t, err)
}

// Retry returns a claimed task to the queue (model.Queue.Retry).
func (s *Store) Retry(ctx context.Context, p core.RetryParams) (core.TaskResult, error) {
	var t model.Task
	now, err := s.write(ctx, p.Claim.Queue, false, func(q *queue, now time.Time) (err error) {
		t, err = q.retry(now, p.Claim, p.Delay, p.Message)
		return err
	})
	return taskResult(now, t, err)
}

// ClaimExpired hands a broker the Running tasks whose lease lapsed
// (model.Queue.ClaimExpired), in order of Deadline then ID, at O(log n) per
// task.
func (s *Store) ClaimExpired(ctx context.Context, p core.ClaimExpiredParams) (core.ReapResult, error) {
	var claims []model.ReapClaim
	now, err := s.write(ctx, p.Queue, false, func(q *queue, now time.Time) (err error) {
		claims, err = q.claimExpired(now, p.ClaimTTL, p.Limit)
		return err
	})
	if err != nil {
		return core.ReapResult{}, err
	}
	return core.ReapResult{Now: now, Claims: claims}, nil
}

// Requeue is a broker's decision to run a task again (model.Queue.Requeue).
func (s *Store) Requeue(ctx context.Context, p core.RequeueParams) (core.TaskResult, error) {
	var t model.Task
	now, err := s.write(ctx, p.ReapClaim.Queue, false, func(q *queue, now time.Time) (err error) {
		t, err = q.requeue(now, p.ReapClaim, p.Delay, p.Message)
		return err
	})
	return taskResult(now, t, err)
}

// Finalize is a broker's decision to fail a task (model.Queue.Finalize).
func (s *Store) Finalize(ctx context.Context, p core.FinalizeParams) (core.TaskResult, error) {
	var t model.Task
	now, err := s.write(ctx, p.ReapClaim.Queue, false, func(q *queue, now time.Time) (err error) {
		t, err = q.finalize(now, p.ReapClaim, p.Message)
		return err
	})
	return taskResult(now, t, err)
}

// RecoverExpired decides every expired task in one step
// (model.Queue.RecoverExpired).
func (s *Store) RecoverExpired(ctx context.Context, p core.RecoverExpiredParams) (core.TasksResult, error) {
	var tasks []model.Task
	now, err := s.write(ctx, p.Queue, false, func(q *queue, now time.Time) (err error) {
		tasks, err = q.recoverExpired(now, p.Delay, p.Limit)
		return err
	})
	if err != nil {
		return core.TasksResult{}, err
	}
	return core.TasksResult{Now: now, Tasks: tasks}, nil
}

// Get returns a copy of one task (model.Queue.Get).
func (s *Store) Get(ctx context.Context, p core.GetParams) (core.Task, error) {
	var t model.Task
	err := s.read(ctx, p.Queue, func(q *queue) (err error) {
		t, err = q.get(p.ID)
		return err
	})
	return t, err
}

// List returns a page of the tasks in one state, in ID order
// (model.Queue.List), at O(log n + limit).
func (s *Store) List(ctx context.Context, p core.ListParams) (core.ListResult, error) {
	var res core.ListResult
	err := s.read(ctx, p.Queue, func(q *queue) (err error) {
		res.Tasks, res.Next, err = q.list(p.State, p.After, p.Limit)
		return err
	})
	if err != nil {
		return core.ListResult{}, err
	}
	return res, nil
}

// Counts returns the number of tasks in each state, in O(1).
func (s *Store) Counts(ctx context.Context, p core.CountsParams) (core.Counts, error) {
	var c core.Counts
	err := s.read(ctx, p.Queue, func(q *queue) error {
		c = q.counts
		c.Paused = q.paused
		return nil
	})
	return c, err
}

// Pause sets the queue's paused flag (model.Queue.Pause), under the queue's
// lock, which every Pop takes: a Pop that starts after Pause returned claims
// nothing. Pausing creates the queue if it has had no task yet.
func (s *Store) Pause(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	return s.setPaused(ctx, p.Queue, true)
}

// Resume clears the queue's paused flag (model.Queue.Resume).
func (s *Store) Resume(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	return s.setPaused(ctx, p.Queue, false)
}

func (s *Store) setPaused(ctx context.Context, name string, paused bool) (core.PauseResult, error) {
	_, err := s.write(ctx, name, paused, func(q *queue, _ time.Time) error {
		q.paused = paused
		return nil
	})
	if err != nil {
		return core.PauseResult{}, err
	}
	return core.PauseResult{Paused: paused}, nil
}

// InspectRequeue is an operator's requeue (model.Queue.InspectRequeue).
func (s *Store) InspectRequeue(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	var t model.Task
	now, err := s.write(ctx, p.Queue, false, func(q *queue, _ time.Time) (err error) {
		t, err = q.inspectRequeue(p.ID, p.Expect)
		return err
	})
	return taskResult(now, t, err)
}

// Cancel is an operator's cancellation (model.Queue.Cancel).
func (s *Store) Cancel(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	var t model.Task
	now, err := s.write(ctx, p.Queue, false, func(q *queue, now time.Time) (err error) {
		t, err = q.cancel(now, p.ID, p.Expect)
		return err
	})
	return taskResult(now, t, err)
}

// Remove deletes a task and returns it as it was (model.Queue.Remove).
func (s *Store) Remove(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	var t model.Task
	now, err := s.write(ctx, p.Queue, false, func(q *queue, _ time.Time) (err error) {
		t, err = q.remove(p.ID, p.Expect)
		return err
	})
	return taskResult(now, t, err)
}

// Prune deletes terminal tasks finished before p.Before (model.Queue.Prune),
// oldest first.
func (s *Store) Prune(ctx context.Context, p core.PruneParams) (core.IDsResult, error) {
	var ids []string
	now, err := s.write(ctx, p.Queue, false, func(q *queue, _ time.Time) (err error) {
		ids, err = q.prune(p.States, p.Before, p.Limit)
		return err
	})
	if err != nil {
		return core.IDsResult{}, err
	}
	return core.IDsResult{Now: now, IDs: ids}, nil
}

// EnqueueBatch adds up to model.MaxBatch tasks to one queue in one step
// under the queue's lock (model.Queue.EnqueueBatch): each item is answered as
// Enqueue would answer it, in order.
func (s *Store) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	if err := model.CheckBatchSize(len(p.Tasks)); err != nil {
		return core.BatchResult{}, err
	}
	items := make([]core.ItemResult, len(p.Tasks))
	now, err := s.write(ctx, p.Queue, true, func(q *queue, now time.Time) error {
		for i, a := range p.Tasks {
			items[i].Task, items[i].Err = q.enqueue(now, a)
		}
		return nil
	})
	if err != nil {
		return core.BatchResult{}, err
	}
	return core.BatchResult{Now: now, Items: items}, nil
}

// AckBatch records the success of up to model.MaxBatch claims of one queue
// in one step under the queue's lock (model.Queue.AckBatchPop): each item is
// answered as Ack would answer it, in order, and then, when p.Pop.N is not
// 0, the tasks Pop would claim are claimed under the same lock and clock
// reading. A claim of another queue makes the whole batch an invalid
// argument, as does a pop Pop would refuse.
func (s *Store) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	if err := model.CheckBatchSize(len(p.Acks)); err != nil {
		return core.BatchResult{}, err
	}
	for i, a := range p.Acks {
		if err := model.ValidateAckBatchItem(p.Queue, i, a.Claim); err != nil {
			return core.BatchResult{}, err
		}
	}
	if err := model.ValidateAckPop(p.Pop.Lease, p.Pop.N); err != nil {
		return core.BatchResult{}, err
	}
	items := make([]core.ItemResult, len(p.Acks))
	var claimed []model.Task
	now, err := s.write(ctx, p.Queue, false, func(q *queue, now time.Time) (err error) {
		// Every item first, then the snapshots, in one allocation: a task
		// an item acknowledged is left as it was by the later items (an
		// acknowledged task is Succeeded, and only Ack is in the batch).
		acked := q.scratch[:0]
		for i, a := range p.Acks {
			var t *task
			if t, items[i].Err = q.acked(now, a.Claim, a.Result); t != nil {
				acked = append(acked, t)
			}
		}
		buf := snapshotBuffer(acked)
		next := acked
		for i := range items {
			if items[i].Err == nil {
				buf = snapshotInto(&items[i].Task, next[0], buf)
				next = next[1:]
			}
		}
		q.keepScratch(acked)
		if p.Pop.N > 0 {
			// After the snapshots: the pop claims only Ready tasks, so
			// it changes no task an item acknowledged.
			claimed, err = q.pop(now, p.Pop.Lease, p.Pop.N)
		}
		return err
	})
	if err != nil {
		return core.BatchResult{}, err
	}
	return core.BatchResult{Now: now, Items: items, Claimed: claimed}, nil
}

// Close drops every task. Operations that start after Close return
// core.ErrClosed; operations in progress finish first. Close is idempotent
// and always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	queues := s.queues
	s.queues, s.closed = nil, true
	s.mu.Unlock()
	for _, q := range queues {
		q.mu.Lock()
		q.close()
		q.mu.Unlock()
	}
	return nil
}

var _ core.QueueLister = (*Store)(nil)

// Queues implements core.QueueLister: the queues that have had a task, sorted.
func (s *Store) Queues(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, core.ErrClosed
	}
	qs := make([]*queue, 0, len(s.queues))
	for _, q := range s.queues {
		qs = append(qs, q)
	}
	s.mu.RUnlock()
	var names []string
	for _, q := range qs {
		q.mu.RLock()
		used := q.seq > 0
		q.mu.RUnlock()
		if used { // a queue made by a refused Enqueue holds nothing
			names = append(names, q.name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// Damage makes the record of task id of queue one the store can no longer
// read, as a fault would on a store that keeps bytes (the event
// model.Queue.Damage): for tests of code that must carry on past a poison
// record. The record keeps its state and its place in the indexes; from
// then on the first Promote, Pop, ClaimExpired or RecoverExpired that
// reaches it sets it aside as core.Quarantined and goes on with the sound
// tasks, a decision on it is core.ErrCorrupt, Get returns it as
// quarantined, List passes over it, and Remove with no expected version
// deletes it.
//
// Errors: core.ErrNotFound when the queue holds no task id,
// core.ErrInvalidTransition when the record is already damaged or set
// aside, core.ErrInvalidArgument for an empty ID or a bad queue name.
func (s *Store) Damage(ctx context.Context, queue, id string) error {
	q, err := s.queue(ctx, queue, false)
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return core.ErrClosed
	}
	return q.damage(id) // reads no clock: a fault is no operation of the store
}
