package core

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/model"
)

// Store is the contract every storage adapter implements: one method per
// operation of the model, each one atomic. A store judges time by its own
// clock (for Redis the server's, for the memory and SQLite adapters the host's,
// or an injected Clock in tests) and reports the instant it used as Now in the
// result of every operation that depends on time.
//
// Times are kept with microsecond precision; the zero time means "not set".
// Delays (of Retry, Requeue and RecoverExpired) are added by the store to
// its own clock reading, so no caller's clock decides when a task runs again.
// Every store rounds by one rule, model.Round (truncated to the microsecond,
// in UTC): its clock readings, the times it is given (RunAfter, Before) and
// the ones it computes (now + a lease, a claim TTL or a delay), so stores
// agree on every fraction of a microsecond. Every store checks its
// arguments with the model's rules (model.ValidateEnqueue, ValidateLease,
// ValidateDelay and the others) before anything changes.
//
// A rejected operation changes nothing and returns an error for which
// errors.Is holds with one of ErrInvalidArgument, ErrStaleClaim, ErrNotFound,
// ErrInvalidTransition, ErrConflict, ErrQueueFull or ErrCorrupt; any other
// error comes from the store's transport (for example a dropped connection),
// and then the operation may or may not have happened. ErrPermission (the
// store refused the client's credentials or rights) is of the second kind
// for the effect: the send it answers changed nothing, but a client that
// sent the call again (after a dropped connection, or to a primary that had
// become a replica) may have had an earlier send take effect. ErrBusy
// (the store could not start the call in time: another process held
// SQLite's write lock past the busy timeout) and ErrClosed mean that the
// call did not run: nothing changed, and it may be made again.
//
// Every call takes effect at most once. An adapter whose client may
// retransmit a call (Redis, whose client retries a command after a dropped
// connection) answers a retransmission with the call's own answer, not with
// the answer a second application would get (a stale claim, an invalid
// transition from the state the first one left), so a typed error always
// means that nothing changed, and a call that took effect is never reported
// as refused.
//
// The behaviour of each method is that of the model method of the same name;
// the conformance suite in package spec checks an adapter against it.
type Store interface {
	// Enqueue adds a task (model.Queue.Enqueue). ID is required here; the
	// Queue type generates one when the caller gives none.
	// Errors: ErrInvalidArgument, ErrConflict, ErrQueueFull.
	Enqueue(ctx context.Context, p EnqueueParams) (TaskResult, error)
	// Promote makes due Scheduled tasks Ready (model.Queue.Promote).
	// Errors: ErrInvalidArgument.
	Promote(ctx context.Context, p PromoteParams) (IDsResult, error)
	// Pop claims up to N Ready tasks (model.Queue.Pop); none is not an error.
	// Errors: ErrInvalidArgument.
	Pop(ctx context.Context, p PopParams) (TasksResult, error)
	// Extend renews a claim's lease (model.Queue.Extend).
	// Errors: ErrInvalidArgument, ErrStaleClaim, ErrInvalidTransition.
	Extend(ctx context.Context, p ExtendParams) (TaskResult, error)
	// Ack records a claim's success (model.Queue.Ack).
	// Errors: ErrInvalidArgument, ErrStaleClaim, ErrInvalidTransition.
	Ack(ctx context.Context, p AckParams) (TaskResult, error)
	// Fail records a claim's final failure (model.Queue.Fail).
	// Errors: ErrInvalidArgument, ErrStaleClaim, ErrInvalidTransition.
	Fail(ctx context.Context, p FailParams) (TaskResult, error)
	// Retry returns a claimed task to the queue (model.Queue.Retry).
	// Errors: ErrInvalidArgument, ErrStaleClaim, ErrInvalidTransition.
	Retry(ctx context.Context, p RetryParams) (TaskResult, error)
	// ClaimExpired hands a broker the tasks whose lease lapsed
	// (model.Queue.ClaimExpired). Errors: ErrInvalidArgument.
	ClaimExpired(ctx context.Context, p ClaimExpiredParams) (ReapResult, error)
	// Requeue is a broker's decision to run a task again
	// (model.Queue.Requeue).
	// Errors: ErrInvalidArgument, ErrStaleClaim, ErrInvalidTransition.
	Requeue(ctx context.Context, p RequeueParams) (TaskResult, error)
	// Finalize is a broker's decision to fail a task (model.Queue.Finalize).
	// Errors: ErrInvalidArgument, ErrStaleClaim, ErrInvalidTransition.
	Finalize(ctx context.Context, p FinalizeParams) (TaskResult, error)
	// RecoverExpired decides every expired task in one step
	// (model.Queue.RecoverExpired). Errors: ErrInvalidArgument.
	RecoverExpired(ctx context.Context, p RecoverExpiredParams) (TasksResult, error)
	// Get returns one task. Errors: ErrInvalidArgument, ErrNotFound.
	Get(ctx context.Context, p GetParams) (Task, error)
	// List returns a page of the tasks in one state, in ID order.
	// Errors: ErrInvalidArgument.
	List(ctx context.Context, p ListParams) (ListResult, error)
	// Counts returns the number of tasks in each state.
	// Errors: ErrInvalidArgument.
	Counts(ctx context.Context, p CountsParams) (Counts, error)
	// InspectRequeue is an operator's requeue (model.Queue.InspectRequeue).
	// Errors: ErrInvalidArgument, ErrNotFound, ErrConflict,
	// ErrInvalidTransition.
	InspectRequeue(ctx context.Context, p InspectParams) (TaskResult, error)
	// Cancel is an operator's cancellation (model.Queue.Cancel): a
	// Scheduled, Ready or Running task becomes Failed, its last error the
	// cancellation; a worker op under the claim that held it is then
	// refused with ErrCancelled (and ErrStaleClaim).
	// Errors: ErrInvalidArgument, ErrNotFound, ErrConflict,
	// ErrInvalidTransition.
	Cancel(ctx context.Context, p InspectParams) (TaskResult, error)
	// Remove deletes a task and returns it as it was (model.Queue.Remove).
	// Errors: ErrInvalidArgument, ErrNotFound, ErrConflict.
	Remove(ctx context.Context, p InspectParams) (TaskResult, error)
	// Prune deletes old terminal tasks (model.Queue.Prune).
	// Errors: ErrInvalidArgument.
	Prune(ctx context.Context, p PruneParams) (IDsResult, error)
	// Pause sets the queue's paused flag (model.Queue.Pause): from its
	// return on, Pop claims nothing of the queue until a Resume, while
	// claims already handed out keep their leases and decisions. The flag
	// is read in the same atomic step as every Pop. Idempotent; a queue
	// with no task yet may be paused. Errors: ErrInvalidArgument.
	Pause(ctx context.Context, p PauseParams) (PauseResult, error)
	// Resume clears the queue's paused flag (model.Queue.Resume).
	// Idempotent. Errors: ErrInvalidArgument.
	Resume(ctx context.Context, p PauseParams) (PauseResult, error)
	// Close releases the store's resources. Operations after Close return
	// ErrClosed.
	Close() error
}

// BatchStore is a Store that also adds and decides many tasks of one queue
// in one atomic step (one script, one transaction): EnqueueBatch and AckBatch
// are the model's Queue.EnqueueBatch and Queue.AckBatch. Each item is applied
// in order, guarded by its own checks and answered on its own: an item that
// is refused changes nothing and does not stop the others. The batch as a
// whole fails (and changes nothing) only for ErrInvalidArgument of the batch
// itself (no items, more than MaxBatch, an item of another queue), ErrClosed
// or a transport error. Every adapter of this module implements it.
type BatchStore interface {
	Store
	// EnqueueBatch adds up to MaxBatch tasks to one queue.
	// Item errors: ErrInvalidArgument, ErrConflict, ErrQueueFull.
	EnqueueBatch(ctx context.Context, p EnqueueBatchParams) (BatchResult, error)
	// AckBatch records the success of up to MaxBatch claims of one queue
	// and, when p.Pop.N is not 0, claims up to that many Ready tasks of the
	// queue in the same atomic step, after the acks and at the same clock
	// reading, as Pop would (model.Queue.AckBatchPop); those are in
	// BatchResult.Claimed. Item errors: ErrInvalidArgument, ErrStaleClaim,
	// ErrInvalidTransition. A pop that finds nothing Ready is not an error.
	AckBatch(ctx context.Context, p AckBatchParams) (BatchResult, error)
}

// AckFlighter is implemented by a BatchStore whose AckBatch calls on one
// queue gain from being sent while an earlier one is still out: a Redis
// server runs one call's script while the next travels, where a SQL store
// would only queue the second behind the first's lock and commit. A Worker
// on such a store keeps up to AckFlights AckBatch calls out at once, each
// acknowledging its share of the tasks that finished; one that it does not
// implement gets one at a time.
type AckFlighter interface {
	// AckFlights is how many AckBatch calls of one Worker to keep out at
	// once (1 or more).
	AckFlights() int
}

// BatchSizer is implemented by a BatchStore whose calls should carry fewer
// tasks than a Worker or a Broker would otherwise put in them (a Worker's
// concurrency plus its prefetch, at most MaxBatch; a Broker's
// DefaultBrokerBatch): a Redis server runs a script to its end before any
// other client's command, so a call of hundreds of tasks holds up every
// other client of the server for milliseconds. Unless WithBatchSize sets
// its batch size, a Worker or a Broker on such a store takes at most
// DefaultBatchSize (at least 1) as its batch size.
type BatchSizer interface {
	// DefaultBatchSize is the largest batch size of a Worker or a Broker
	// on the store that does not set one.
	DefaultBatchSize() int
}

// storeBatch is the batch size of a Worker or Broker on store that sets
// none: def, or less if store asks for less (BatchSizer).
func storeBatch(store Store, def int) int {
	if bs, ok := store.(BatchSizer); ok {
		return min(def, max(bs.DefaultBatchSize(), 1))
	}
	return def
}

// Notifier is implemented by a store that can tell a waiting Worker that a
// queue may have gained a Ready task (the PostgreSQL adapter, with
// LISTEN/NOTIFY). A Worker whose store implements it waits on the channel
// beside its poll timer, and pops as soon as it receives; the poll stays as
// the fallback for a wake-up that never comes. A wake-up is a hint, never a
// promise: the Pop that follows may find nothing.
type Notifier interface {
	// Wait returns a channel that receives a value whenever queue may have
	// gained a Ready task, from the call on until ctx ends. At most one
	// value is kept pending: wake-ups that come while one is pending merge.
	Wait(ctx context.Context, queue string) <-chan struct{}
}

// EnqueueBatchParams are the arguments of BatchStore.EnqueueBatch.
type EnqueueBatchParams struct {
	Queue string
	Tasks []model.EnqueueArgs
}

// AckBatchParams are the arguments of BatchStore.AckBatch: every claim must
// be of Queue. Pop, when its N is not 0, is the pop that follows the acks in
// the same step.
type AckBatchParams struct {
	Queue string
	Acks  []AckItem
	Pop   AckPop
}

// AckPop is the pop an AckBatch performs after its acks: up to N (0..MaxBatch;
// 0: none) Ready tasks of the batch's queue claimed with Lease, exactly as
// Store.Pop claims them. An N outside 0..MaxBatch, or a lease Pop refuses when
// N is not 0, refuses the whole batch with ErrInvalidArgument
// (model.ValidateAckPop). A worker uses it to record its finished tasks and
// claim its next ones in one round trip.
type AckPop struct {
	Lease time.Duration
	N     int
}

// AckItem is one claim of an AckBatch and the result it records.
type AckItem struct {
	Claim  Claim
	Result []byte
}

// BatchResult is the answer of a batch operation: one ItemResult per item, in
// the order given, and the store's clock when the batch took effect. Claimed
// holds the tasks the pop of an AckBatch claimed (AckBatchParams.Pop), in
// Pop's order; it is empty otherwise.
type BatchResult struct {
	Now     time.Time
	Items   []ItemResult
	Claimed []Task
}

// ItemResult is the answer to one item of a batch: the task as the item left
// it, or the typed error that refused the item (which then changed nothing).
type ItemResult struct {
	Task Task
	Err  error
}

// EnqueueParams are the arguments of Store.Enqueue.
type EnqueueParams struct {
	Queue string
	model.EnqueueArgs
}

// PromoteParams are the arguments of Store.Promote. Limit 0 means no limit.
type PromoteParams struct {
	Queue string
	Limit int
}

// PopParams are the arguments of Store.Pop: claim up to N tasks (1..MaxBatch)
// with the given lease.
type PopParams struct {
	Queue string
	Lease time.Duration
	N     int
}

// ExtendParams are the arguments of Store.Extend.
type ExtendParams struct {
	Claim Claim
	Lease time.Duration
}

// AckParams are the arguments of Store.Ack.
type AckParams struct {
	Claim  Claim
	Result []byte
}

// FailParams are the arguments of Store.Fail.
type FailParams struct {
	Claim   Claim
	Message string
}

// RetryParams are the arguments of Store.Retry: the task runs again once
// Delay (0..model.MaxDuration) has passed on the store's clock, which adds
// it to its own reading (RunAfter = now + Delay): the caller's clock plays
// no part.
type RetryParams struct {
	Claim   Claim
	Delay   time.Duration
	Message string
}

// ClaimExpiredParams are the arguments of Store.ClaimExpired. Limit 0 means
// no limit.
type ClaimExpiredParams struct {
	Queue    string
	ClaimTTL time.Duration
	Limit    int
}

// RequeueParams are the arguments of Store.Requeue: as for Retry, the task
// runs again once Delay (0..model.MaxDuration) has passed on the store's
// clock.
type RequeueParams struct {
	ReapClaim ReapClaim
	Delay     time.Duration
	Message   string
}

// FinalizeParams are the arguments of Store.Finalize.
type FinalizeParams struct {
	ReapClaim ReapClaim
	Message   string
}

// RecoverExpiredParams are the arguments of Store.RecoverExpired: expired
// tasks with attempts left run again after Delay. Limit 0 means no limit.
type RecoverExpiredParams struct {
	Queue string
	Delay time.Duration
	Limit int
}

// GetParams are the arguments of Store.Get.
type GetParams struct {
	Queue string
	ID    string
}

// ListParams are the arguments of Store.List: up to Limit (1..MaxBatch) tasks
// in State with an ID greater than After.
type ListParams struct {
	Queue string
	State State
	After string
	Limit int
}

// CountsParams are the arguments of Store.Counts.
type CountsParams struct {
	Queue string
}

// InspectParams are the arguments of Store.InspectRequeue, Store.Cancel and
// Store.Remove.
// Expect, when not 0, is the Version the operator saw.
type InspectParams struct {
	Queue  string
	ID     string
	Expect uint64
}

// PruneParams are the arguments of Store.Prune. Limit 0 means no limit.
type PruneParams struct {
	Queue  string
	States []State
	Before time.Time
	Limit  int
}

// PauseParams are the arguments of Store.Pause and Store.Resume.
type PauseParams struct {
	Queue string
}

// PauseResult is the answer of Store.Pause and Store.Resume: the queue's
// paused flag as the call left it.
type PauseResult struct {
	Paused bool
}

// TaskResult is the result of an operation on one task.
type TaskResult struct {
	Now  time.Time // the store's clock when the operation took effect
	Task Task
}

// TasksResult is the result of Pop and RecoverExpired.
type TasksResult struct {
	Now   time.Time
	Tasks []Task
}

// IDsResult is the result of Promote and Prune.
type IDsResult struct {
	Now time.Time
	IDs []string
}

// ReapResult is the result of ClaimExpired.
type ReapResult struct {
	Now    time.Time
	Claims []ReapClaim
}

// ListResult is a page of List. Next is the After of the next page, "" at the
// end.
type ListResult struct {
	Tasks []Task
	Next  string
}

// MaxQueueNameLength is the longest queue name, in bytes.
const MaxQueueNameLength = model.MaxQueueNameLength

// ValidateQueueName returns ErrInvalidArgument unless name has 1 to
// MaxQueueNameLength bytes, each a letter, digit or one of "-_.:"
// (model.ValidateQueueName).
func ValidateQueueName(name string) error { return model.ValidateQueueName(name) }

// QueueLister is a Store that can name the queues it holds, for operators'
// tools (`leasehold inspect queues`, `leasehold ui`). It is optional: a
// Store need not implement it. Every adapter of this module does: the memory
// store names the queues it has created, the SQLite and PostgreSQL stores
// the rows of their queues table, the Redis store the queues whose sequence key exists under
// its prefix (found with SCAN). A queue is listed once it has had a task,
// and stays listed when its tasks are gone, since its sequence is kept so
// that versions are never reused.
type QueueLister interface {
	Store
	// Queues returns the names of the store's queues, sorted.
	// Errors: ErrClosed, or a transport error.
	Queues(ctx context.Context) ([]string, error)
}
