package spec

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// ModelStore is the model behind a mutex: a core.Store whose every answer is
// the specification's. It is the reference the conformance suite and the
// differential tests compare adapters with; it is not meant for production
// (adapters/memory is).
type ModelStore struct {
	mu       sync.Mutex
	clock    core.Clock
	capacity int
	queues   map[string]model.Queue
	closed   bool

	held map[string]*ModelTx // the queues open transactions hold
	rows map[string]bool     // the application's rows committed transactions wrote
}

var _ core.BatchStore = (*ModelStore)(nil)

// NewModelStore returns an empty ModelStore judging time by clock, whose
// queues hold at most capacity pending tasks (0: unlimited).
func NewModelStore(clock core.Clock, capacity int) *ModelStore {
	return &ModelStore{clock: clock, capacity: capacity, queues: map[string]model.Queue{},
		held: map[string]*ModelTx{}, rows: map[string]bool{}}
}

// Queue returns the model state of a queue, for tests that compare states.
func (s *ModelStore) Queue(name string) model.Queue {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q, ok := s.queues[name]; ok {
		return q
	}
	return model.NewQueue(name, s.capacity)
}

// Damage applies the event model.Queue.Damage to task id of queue: the
// model's side of a harness's Damage.
func (s *ModelStore) Damage(queue, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queues[queue].Damage(id)
	if err != nil {
		return err
	}
	s.queues[queue] = q
	return nil
}

// apply runs one model input on the named queue under the lock.
func (s *ModelStore) apply(ctx context.Context, queue string, in model.Input) (time.Time, model.Output, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, model.Output{}, err
	}
	if err := core.ValidateQueueName(queue); err != nil {
		return time.Time{}, model.Output{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return time.Time{}, model.Output{}, core.ErrClosed
	}
	if s.held[queue] != nil && !readOnly(in.Op) {
		return time.Time{}, model.Output{}, fmt.Errorf("spec: queue %s is held by an open transaction", queue)
	}
	q, ok := s.queues[queue]
	if !ok {
		q = model.NewQueue(queue, s.capacity)
	}
	in.Now = model.Round(s.clock.Now())
	next, out := model.Apply(q, in)
	if out.Err == nil && (ok || next.Seq() > 0 || next.Paused()) {
		s.queues[queue] = next
	}
	return in.Now, cloneOutput(out), out.Err
}

// readOnly reports whether op only reads.
func readOnly(op model.Op) bool {
	return op == model.OpGet || op == model.OpList || op == model.OpCounts
}

// cloneOutput returns out with copies of its tasks: the model's snapshots
// share their slices with its state, and a store's answers belong to the
// caller.
func cloneOutput(out model.Output) model.Output {
	out.Task = cloneTask(out.Task)
	for i := range out.Tasks {
		out.Tasks[i] = cloneTask(out.Tasks[i])
	}
	for i := range out.Items {
		out.Items[i].Task = cloneTask(out.Items[i].Task)
	}
	for i := range out.ReapClaims {
		out.ReapClaims[i].Task = cloneTask(out.ReapClaims[i].Task)
	}
	return out
}

// cloneTask returns a copy of t that shares no slice with it.
func cloneTask(t model.Task) model.Task {
	t.Payload = bytes.Clone(t.Payload)
	t.Result = bytes.Clone(t.Result)
	t.Errors = slices.Clone(t.Errors)
	return t
}

func taskResult(now time.Time, out model.Output, err error) (core.TaskResult, error) {
	if err != nil {
		return core.TaskResult{}, err
	}
	return core.TaskResult{Now: now, Task: out.Task}, nil
}

// Enqueue implements core.Store.
func (s *ModelStore) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	return taskResult(s.apply(ctx, p.Queue, model.Input{Op: model.OpEnqueue, Enqueue: p.EnqueueArgs}))
}

// Promote implements core.Store.
func (s *ModelStore) Promote(ctx context.Context, p core.PromoteParams) (core.IDsResult, error) {
	now, out, err := s.apply(ctx, p.Queue, model.Input{Op: model.OpPromote, Limit: p.Limit})
	return core.IDsResult{Now: now, IDs: out.IDs}, err
}

// Pop implements core.Store.
func (s *ModelStore) Pop(ctx context.Context, p core.PopParams) (core.TasksResult, error) {
	now, out, err := s.apply(ctx, p.Queue, model.Input{Op: model.OpPop, Lease: p.Lease, Limit: p.N})
	return core.TasksResult{Now: now, Tasks: out.Tasks}, err
}

// Extend implements core.Store.
func (s *ModelStore) Extend(ctx context.Context, p core.ExtendParams) (core.TaskResult, error) {
	return taskResult(s.apply(ctx, p.Claim.Queue, model.Input{Op: model.OpExtend, Claim: p.Claim, Lease: p.Lease}))
}

// Ack implements core.Store.
func (s *ModelStore) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	return taskResult(s.apply(ctx, p.Claim.Queue, model.Input{Op: model.OpAck, Claim: p.Claim, Result: p.Result}))
}

// Fail implements core.Store.
func (s *ModelStore) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	return taskResult(s.apply(ctx, p.Claim.Queue, model.Input{Op: model.OpFail, Claim: p.Claim, Message: p.Message}))
}

// Retry implements core.Store.
func (s *ModelStore) Retry(ctx context.Context, p core.RetryParams) (core.TaskResult, error) {
	return taskResult(s.apply(ctx, p.Claim.Queue, model.Input{Op: model.OpRetry, Claim: p.Claim, Delay: p.Delay, Message: p.Message}))
}

// ClaimExpired implements core.Store.
func (s *ModelStore) ClaimExpired(ctx context.Context, p core.ClaimExpiredParams) (core.ReapResult, error) {
	now, out, err := s.apply(ctx, p.Queue, model.Input{Op: model.OpClaimExpired, Lease: p.ClaimTTL, Limit: p.Limit})
	return core.ReapResult{Now: now, Claims: out.ReapClaims}, err
}

// Requeue implements core.Store.
func (s *ModelStore) Requeue(ctx context.Context, p core.RequeueParams) (core.TaskResult, error) {
	return taskResult(s.apply(ctx, p.ReapClaim.Queue, model.Input{Op: model.OpRequeue, ReapClaim: p.ReapClaim, Delay: p.Delay, Message: p.Message}))
}

// Finalize implements core.Store.
func (s *ModelStore) Finalize(ctx context.Context, p core.FinalizeParams) (core.TaskResult, error) {
	return taskResult(s.apply(ctx, p.ReapClaim.Queue, model.Input{Op: model.OpFinalize, ReapClaim: p.ReapClaim, Message: p.Message}))
}

// RecoverExpired implements core.Store.
func (s *ModelStore) RecoverExpired(ctx context.Context, p core.RecoverExpiredParams) (core.TasksResult, error) {
	now, out, err := s.apply(ctx, p.Queue, model.Input{Op: model.OpRecoverExpired, Lease: p.Delay, Limit: p.Limit})
	return core.TasksResult{Now: now, Tasks: out.Tasks}, err
}

// Get implements core.Store.
func (s *ModelStore) Get(ctx context.Context, p core.GetParams) (core.Task, error) {
	_, out, err := s.apply(ctx, p.Queue, model.Input{Op: model.OpGet, ID: p.ID})
	return out.Task, err
}

// List implements core.Store.
func (s *ModelStore) List(ctx context.Context, p core.ListParams) (core.ListResult, error) {
	_, out, err := s.apply(ctx, p.Queue, model.Input{Op: model.OpList, State: p.State, After: p.After, Limit: p.Limit})
	return core.ListResult{Tasks: out.Tasks, Next: out.Next}, err
}

// Counts implements core.Store.
func (s *ModelStore) Counts(ctx context.Context, p core.CountsParams) (core.Counts, error) {
	_, out, err := s.apply(ctx, p.Queue, model.Input{Op: model.OpCounts})
	return out.Counts, err
}

// Pause implements core.Store.
func (s *ModelStore) Pause(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	_, out, err := s.apply(ctx, p.Queue, model.Input{Op: model.OpPause})
	return core.PauseResult{Paused: out.Paused}, err
}

// Resume implements core.Store.
func (s *ModelStore) Resume(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	_, out, err := s.apply(ctx, p.Queue, model.Input{Op: model.OpResume})
	return core.PauseResult{Paused: out.Paused}, err
}

// InspectRequeue implements core.Store.
func (s *ModelStore) InspectRequeue(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return taskResult(s.apply(ctx, p.Queue, model.Input{Op: model.OpInspectRequeue, ID: p.ID, Expect: p.Expect}))
}

// Cancel implements core.Store.
func (s *ModelStore) Cancel(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return taskResult(s.apply(ctx, p.Queue, model.Input{Op: model.OpCancel, ID: p.ID, Expect: p.Expect}))
}

// Remove implements core.Store.
func (s *ModelStore) Remove(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return taskResult(s.apply(ctx, p.Queue, model.Input{Op: model.OpRemove, ID: p.ID, Expect: p.Expect}))
}

// Prune implements core.Store.
func (s *ModelStore) Prune(ctx context.Context, p core.PruneParams) (core.IDsResult, error) {
	now, out, err := s.apply(ctx, p.Queue, model.Input{Op: model.OpPrune, States: p.States, Before: p.Before, Limit: p.Limit})
	return core.IDsResult{Now: now, IDs: out.IDs}, err
}

// EnqueueBatch implements core.BatchStore.
func (s *ModelStore) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	return batchResult(s.apply(ctx, p.Queue, model.Input{Op: model.OpEnqueueBatch, Batch: p.Tasks}))
}

// AckBatch implements core.BatchStore.
func (s *ModelStore) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	acks := make([]model.AckItem, len(p.Acks))
	for i, a := range p.Acks {
		acks[i] = model.AckItem{Claim: a.Claim, Result: a.Result}
	}
	return batchResult(s.apply(ctx, p.Queue, model.Input{Op: model.OpAckBatch, Acks: acks, Lease: p.Pop.Lease, Limit: p.Pop.N}))
}

func batchResult(now time.Time, out model.Output, err error) (core.BatchResult, error) {
	if err != nil {
		return core.BatchResult{}, err
	}
	items := make([]core.ItemResult, len(out.Items))
	for i, it := range out.Items {
		items[i] = core.ItemResult{Task: it.Task, Err: it.Err}
	}
	return core.BatchResult{Now: now, Items: items, Claimed: out.Tasks}, nil
}

// Close implements core.Store.
func (s *ModelStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// String names the store.
func (s *ModelStore) String() string { return fmt.Sprintf("model store (%d queues)", len(s.queues)) }
