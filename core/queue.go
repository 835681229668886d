package core

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/leasehold/leasehold/model"
)

// Limits and defaults of the consumer API.
const (
	// MaxBatch bounds a Pop batch, a broker call and a List page.
	MaxBatch = model.MaxBatch
	// MinPriority and MaxPriority bound a task's priority; higher runs first.
	MinPriority = model.MinPriority
	MaxPriority = model.MaxPriority
	// MaxIDLength is the longest task ID, in bytes.
	MaxIDLength = model.MaxIDLength
	// MaxUniqueKeyLength is the longest unique key (WithUniqueKey), in
	// bytes.
	MaxUniqueKeyLength = model.MaxUniqueKeyLength
	// MaxDuration bounds a retry delay and an attempt timeout (100 years).
	MaxDuration = model.MaxDuration
	// DefaultMaxAttempts is the number of attempts a task gets when Enqueue
	// is not given WithMaxAttempts.
	DefaultMaxAttempts = 25
)

// NewID returns a new task ID: a version 7 UUID in its 36-character text
// form. IDs generated later sort after IDs generated earlier (by the
// millisecond, and within one process strictly), so List, which pages in ID
// order, lists generated tasks roughly in the order they were enqueued.
func NewID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("leasehold: generate task ID: %w", err)
	}
	return id.String(), nil
}

// Queue is a producer's handle on one named queue of a Store. It is safe for
// concurrent use.
type Queue struct {
	common
	store Store
	name  string
	tel   queueTelemetry
}

// NewQueue returns a handle on the queue called name. The name must pass
// ValidateQueueName. Queues need no creation: a queue exists once a task was
// enqueued in it.
func NewQueue(store Store, name string, opts ...QueueOption) (*Queue, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidArgument)
	}
	if err := ValidateQueueName(name); err != nil {
		return nil, err
	}
	q := &Queue{store: store, name: name}
	q.init()
	for _, o := range opts {
		o.applyQueue(q)
	}
	if q.err != nil {
		return nil, q.err
	}
	q.tel = newQueueTelemetry(&q.common, name)
	return q, nil
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// EnqueueOption sets an argument of Queue.Enqueue.
type EnqueueOption func(*enqueueArgs)

type enqueueArgs struct {
	model.EnqueueArgs
	delay    time.Duration
	hasDelay bool
	hasID    bool // WithID was given: the ID is the caller's, never generated
}

// WithID gives the task an ID (1..MaxIDLength bytes) instead of a generated
// one. Enqueue fails with ErrConflict if a task with this ID exists in the
// queue, in any state; an ID makes enqueueing idempotent.
//
// An empty id is refused: Enqueue returns ErrInvalidArgument and enqueues
// nothing, rather than generating an ID, which would turn two enqueues meant
// to be idempotent into two tasks. Omit WithID to have the ID generated. As
// with every option, the last WithID given wins.
func WithID(id string) EnqueueOption {
	return func(a *enqueueArgs) { a.ID, a.hasID = id, true }
}

// WithPriority sets the task's priority (MinPriority..MaxPriority, default
// 0). Ready tasks of higher priority are popped first.
func WithPriority(p int) EnqueueOption {
	return func(a *enqueueArgs) { a.Priority = p }
}

// WithRunAfter makes the task Scheduled until t (truncated to the
// microsecond); a broker's mover makes it Ready then. A zero or past t makes
// it Ready at once. It replaces an earlier WithDelay.
func WithRunAfter(t time.Time) EnqueueOption {
	return func(a *enqueueArgs) { a.RunAfter, a.hasDelay = t, false }
}

// WithDelay makes the task Scheduled until d after now, as read from the
// Queue's clock. It replaces an earlier WithRunAfter.
func WithDelay(d time.Duration) EnqueueOption {
	return func(a *enqueueArgs) { a.delay, a.hasDelay = d, true }
}

// WithMaxAttempts sets how many attempts the task gets (default
// DefaultMaxAttempts): the retry policy and RecoverExpired stop retrying it
// once Attempt reaches this number.
func WithMaxAttempts(n int) EnqueueOption {
	return func(a *enqueueArgs) { a.MaxAttempts = n }
}

// WithAttemptTimeout stores an attempt timeout with the task, 0..MaxDuration
// (default 0: none; a value out of range makes Enqueue return
// ErrInvalidArgument). A Worker cancels each attempt of the task d
// after it starts, as WithTimeout does for a whole queue, and the task's own
// timeout wins over the Worker's. The timeout is part of the task: Get, List
// and the inspector show it, and it stays the same through retries and
// requeues.
func WithAttemptTimeout(d time.Duration) EnqueueOption {
	return func(a *enqueueArgs) { a.Timeout = d }
}

// WithUniqueKey gives the task a unique key (1..MaxUniqueKeyLength bytes;
// longer is ErrInvalidArgument): while the task holds it, Enqueue of
// another task of the queue with the same key is refused with a
// *DuplicateError naming the holder (errors.Is(err, ErrConflict) holds),
// and changes nothing. The key is held while the task is pending
// (Scheduled, Ready or Running) unless WithUniqueFor gives a period.
// Removing or pruning the holder releases it. An empty key is none.
func WithUniqueKey(key string) EnqueueOption {
	return func(a *enqueueArgs) { a.UniqueKey = key }
}

// WithUniqueFor makes the task's unique key (WithUniqueKey, required) held
// for d from the store's enqueue time, on the store's clock, whatever the
// task's state: a task that succeeds at once still keeps the key for d. d
// is 0..MaxDuration (0: while pending; negative is ErrInvalidArgument).
func WithUniqueFor(d time.Duration) EnqueueOption {
	return func(a *enqueueArgs) { a.UniqueFor = d }
}

// Enqueue adds a task with the payload to the queue and returns it as
// stored: Ready, or Scheduled when it has a run-after time in the future.
//
// Errors: ErrInvalidArgument (an option out of range, or WithID("")),
// ErrConflict (WithID names an existing task, or a *DuplicateError:
// another task holds the WithUniqueKey key), ErrQueueFull, or an error of
// the store's transport.
func (q *Queue) Enqueue(ctx context.Context, payload []byte, opts ...EnqueueOption) (task Task, err error) {
	ctx, span := q.tel.startEnqueue(ctx)
	defer func() { q.tel.enqueueDone(ctx, span, task, err) }()
	a := enqueueArgs{EnqueueArgs: model.EnqueueArgs{MaxAttempts: DefaultMaxAttempts}}
	for _, o := range opts {
		o(&a)
	}
	if a.hasDelay {
		if a.delay < 0 {
			return Task{}, fmt.Errorf("%w: delay %v < 0", ErrInvalidArgument, a.delay)
		}
		if a.delay > 0 {
			a.RunAfter = q.clock.Now().Add(a.delay)
		}
	}
	if a.hasID && a.ID == "" {
		return Task{}, fmt.Errorf("%w: empty task ID given to WithID", ErrInvalidArgument)
	}
	a.RunAfter = truncate(a.RunAfter)
	if a.ID == "" {
		id, err := NewID()
		if err != nil {
			return Task{}, err
		}
		a.ID = id
	}
	a.Payload = payload
	res, err := q.store.Enqueue(ctx, EnqueueParams{Queue: q.name, EnqueueArgs: a.EnqueueArgs})
	if err != nil {
		return Task{}, err
	}
	q.logger.DebugContext(ctx, "task enqueued", "queue", q.name, "task", res.Task.ID, "state", res.Task.State)
	return res.Task, nil
}

// Get returns the task with the given ID.
//
// Errors: ErrInvalidArgument, ErrNotFound, or an error of the store's
// transport.
func (q *Queue) Get(ctx context.Context, id string) (Task, error) {
	return q.store.Get(ctx, GetParams{Queue: q.name, ID: id})
}

// truncate rounds t by the stores' rule (model.Round).
func truncate(t time.Time) time.Time { return model.Round(t) }
