package linearizability

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// FaultInjector is implemented by a store whose transport the runtime mode
// can break for real (package backends: Redis through a fault proxy, SQLite
// with a second connection that holds the write lock). InjectFault arms the
// fault for the store's next request and reports whether it could; when it
// cannot, the harness simulates the fault above the store.
type FaultInjector interface {
	InjectFault(kind CallFaultKind, delay time.Duration) bool
}

// activity counts the store calls in flight across a runtime history, so
// the controller can let the components settle before it moves the clock.
type activity struct {
	inFlight atomic.Int64
	last     atomic.Int64 // time.Now().UnixNano() of the last call or return
}

func (a *activity) begin() { a.inFlight.Add(1); a.last.Store(time.Now().UnixNano()) }
func (a *activity) end()   { a.last.Store(time.Now().UnixNano()); a.inFlight.Add(-1) }

// touch notes that something happened that components will react to (the
// clock moved), so quiet waits a window from now.
func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

// quiet reports whether no call is in flight and none began or ended in the
// last window.
func (a *activity) quiet(window time.Duration) bool {
	return a.inFlight.Load() == 0 && time.Since(time.Unix(0, a.last.Load())) >= window
}

// faultLayer breaks the calls of one component that the plan names (by the
// index of the call), below the recorder, so a lost request or reply is
// recorded as the indeterminate op it is.
type faultLayer struct {
	core.Store
	stall    map[model.Op]time.Duration // every call of the op reaches the store late
	latency  time.Duration              // every call reaches the store this late
	calls    atomic.Int64
	faults   map[int]CallFault
	injector FaultInjector // nil: every fault is simulated
}

func newFaultLayer(s core.Store, faults []CallFault, stall map[model.Op]time.Duration, latency time.Duration) core.Store {
	f := &faultLayer{Store: s, faults: map[int]CallFault{}, stall: stall, latency: latency}
	f.injector, _ = s.(FaultInjector)
	for _, cf := range faults {
		if _, dup := f.faults[cf.Call]; !dup {
			f.faults[cf.Call] = cf
		}
	}
	if _, ok := s.(core.BatchStore); ok {
		return &batchFaultLayer{f}
	}
	return f
}

func faulty[R any](f *faultLayer, op model.Op, call func() (R, error)) (R, error) {
	if d := f.stall[op] + f.latency; d > 0 {
		time.Sleep(d)
	}
	cf, ok := f.faults[int(f.calls.Add(1)-1)]
	if !ok {
		return call()
	}
	if f.injector != nil && f.injector.InjectFault(cf.Kind, cf.hold()) {
		return call()
	}
	var zero R
	switch cf.Kind {
	case CallBusy:
		if cf.PastTimeout {
			// What a store that can be made busy answers: the call did
			// not run.
			return zero, fmt.Errorf("%w: the database stayed locked past the busy timeout (simulated)", core.ErrBusy)
		}
		time.Sleep(cf.Delay)
		return call()
	case CallLoseRequest:
		return zero, fmt.Errorf("%w: request lost", ErrInjected)
	case CallLoseReply:
		if _, err := call(); err != nil {
			return zero, fmt.Errorf("%w: reply lost (%v)", ErrInjected, err)
		}
		return zero, fmt.Errorf("%w: reply lost", ErrInjected)
	case CallSlowReply:
		res, err := call()
		time.Sleep(cf.Delay)
		return res, err
	default: // CallStall
		time.Sleep(cf.Delay)
		return call()
	}
}

func (f *faultLayer) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	return faulty(f, model.OpEnqueue, func() (core.TaskResult, error) { return f.Store.Enqueue(ctx, p) })
}

func (f *faultLayer) Promote(ctx context.Context, p core.PromoteParams) (core.IDsResult, error) {
	return faulty(f, model.OpPromote, func() (core.IDsResult, error) { return f.Store.Promote(ctx, p) })
}

func (f *faultLayer) Pop(ctx context.Context, p core.PopParams) (core.TasksResult, error) {
	return faulty(f, model.OpPop, func() (core.TasksResult, error) { return f.Store.Pop(ctx, p) })
}

func (f *faultLayer) Extend(ctx context.Context, p core.ExtendParams) (core.TaskResult, error) {
	return faulty(f, model.OpExtend, func() (core.TaskResult, error) { return f.Store.Extend(ctx, p) })
}

func (f *faultLayer) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	return faulty(f, model.OpAck, func() (core.TaskResult, error) { return f.Store.Ack(ctx, p) })
}

func (f *faultLayer) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	return faulty(f, model.OpFail, func() (core.TaskResult, error) { return f.Store.Fail(ctx, p) })
}

func (f *faultLayer) Retry(ctx context.Context, p core.RetryParams) (core.TaskResult, error) {
	return faulty(f, model.OpRetry, func() (core.TaskResult, error) { return f.Store.Retry(ctx, p) })
}

func (f *faultLayer) ClaimExpired(ctx context.Context, p core.ClaimExpiredParams) (core.ReapResult, error) {
	return faulty(f, model.OpClaimExpired, func() (core.ReapResult, error) { return f.Store.ClaimExpired(ctx, p) })
}

func (f *faultLayer) Requeue(ctx context.Context, p core.RequeueParams) (core.TaskResult, error) {
	return faulty(f, model.OpRequeue, func() (core.TaskResult, error) { return f.Store.Requeue(ctx, p) })
}

func (f *faultLayer) Finalize(ctx context.Context, p core.FinalizeParams) (core.TaskResult, error) {
	return faulty(f, model.OpFinalize, func() (core.TaskResult, error) { return f.Store.Finalize(ctx, p) })
}

func (f *faultLayer) RecoverExpired(ctx context.Context, p core.RecoverExpiredParams) (core.TasksResult, error) {
	return faulty(f, model.OpRecoverExpired, func() (core.TasksResult, error) { return f.Store.RecoverExpired(ctx, p) })
}

func (f *faultLayer) Get(ctx context.Context, p core.GetParams) (core.Task, error) {
	return faulty(f, model.OpGet, func() (core.Task, error) { return f.Store.Get(ctx, p) })
}

func (f *faultLayer) List(ctx context.Context, p core.ListParams) (core.ListResult, error) {
	return faulty(f, model.OpList, func() (core.ListResult, error) { return f.Store.List(ctx, p) })
}

func (f *faultLayer) Counts(ctx context.Context, p core.CountsParams) (core.Counts, error) {
	return faulty(f, model.OpCounts, func() (core.Counts, error) { return f.Store.Counts(ctx, p) })
}

func (f *faultLayer) InspectRequeue(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return faulty(f, model.OpInspectRequeue, func() (core.TaskResult, error) { return f.Store.InspectRequeue(ctx, p) })
}

func (f *faultLayer) Cancel(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return faulty(f, model.OpCancel, func() (core.TaskResult, error) { return f.Store.Cancel(ctx, p) })
}

func (f *faultLayer) Remove(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return faulty(f, model.OpRemove, func() (core.TaskResult, error) { return f.Store.Remove(ctx, p) })
}

func (f *faultLayer) Prune(ctx context.Context, p core.PruneParams) (core.IDsResult, error) {
	return faulty(f, model.OpPrune, func() (core.IDsResult, error) { return f.Store.Prune(ctx, p) })
}

func (f *faultLayer) Pause(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	return faulty(f, model.OpPause, func() (core.PauseResult, error) { return f.Store.Pause(ctx, p) })
}

func (f *faultLayer) Resume(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	return faulty(f, model.OpResume, func() (core.PauseResult, error) { return f.Store.Resume(ctx, p) })
}

// batchFaultLayer is a faultLayer over a core.BatchStore.
type batchFaultLayer struct{ *faultLayer }

func (f *batchFaultLayer) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	return faulty(f.faultLayer, model.OpEnqueueBatch, func() (core.BatchResult, error) {
		return f.Store.(core.BatchStore).EnqueueBatch(ctx, p)
	})
}

func (f *batchFaultLayer) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	return faulty(f.faultLayer, model.OpAckBatch, func() (core.BatchResult, error) {
		return f.Store.(core.BatchStore).AckBatch(ctx, p)
	})
}

// AckFlights passes the store's core.AckFlighter on: a Worker over the
// layer keeps as many AckBatch calls out as over the store itself.
func (f *batchFaultLayer) AckFlights() int { return ackFlights(f.Store) }

// ackFlights is s's AckFlights, or 1 when s does not implement
// core.AckFlighter (as a Worker reads it).
func ackFlights(s core.Store) int {
	if f, ok := s.(core.AckFlighter); ok {
		return f.AckFlights()
	}
	return 1
}

// DefaultBatchSize passes the store's core.BatchSizer on: a Worker over the
// layer makes calls as large as over the store itself.
func (f *batchFaultLayer) DefaultBatchSize() int { return batchSize(f.Store) }

// batchSize is s's DefaultBatchSize, or core.MaxBatch when s does not
// implement core.BatchSizer (no cap, as a Worker reads it).
func batchSize(s core.Store) int {
	if b, ok := s.(core.BatchSizer); ok {
		return b.DefaultBatchSize()
	}
	return core.MaxBatch
}

// componentStore records the calls of one component (a worker, a broker, a
// producer, an inspector), all under the component's name. A component may
// call from many goroutines at once (a worker's handlers, heartbeats and
// fetch loop), while a recorder Client is one porcupine client, whose calls
// must not overlap: each call takes a Client of the component's pool that
// no other call is using.
type componentStore struct {
	rec   *Recorder
	actor string
	inner core.Store
	act   *activity

	mu   sync.Mutex
	free []*Client
}

func newComponentStore(rec *Recorder, actor string, inner core.Store, act *activity) core.Store {
	s := &componentStore{rec: rec, actor: actor, inner: inner, act: act}
	_, innerBatch := inner.(core.BatchStore)
	_, recorded := any((*Client)(nil)).(core.BatchStore)
	if innerBatch && recorded {
		return &batchComponentStore{s}
	}
	return s
}

func useClient[R any](s *componentStore, call func(c *Client) (R, error)) (R, error) {
	s.mu.Lock()
	var c *Client
	if n := len(s.free); n > 0 {
		c, s.free = s.free[n-1], s.free[:n-1]
	} else {
		c = s.rec.Client(s.actor, s.inner)
	}
	s.mu.Unlock()
	s.act.begin()
	defer func() {
		s.act.end()
		s.mu.Lock()
		s.free = append(s.free, c)
		s.mu.Unlock()
	}()
	return call(c)
}

func (s *componentStore) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	return useClient(s, func(c *Client) (core.TaskResult, error) { return c.Enqueue(ctx, p) })
}

func (s *componentStore) Promote(ctx context.Context, p core.PromoteParams) (core.IDsResult, error) {
	return useClient(s, func(c *Client) (core.IDsResult, error) { return c.Promote(ctx, p) })
}

func (s *componentStore) Pop(ctx context.Context, p core.PopParams) (core.TasksResult, error) {
	return useClient(s, func(c *Client) (core.TasksResult, error) { return c.Pop(ctx, p) })
}

func (s *componentStore) Extend(ctx context.Context, p core.ExtendParams) (core.TaskResult, error) {
	return useClient(s, func(c *Client) (core.TaskResult, error) { return c.Extend(ctx, p) })
}

func (s *componentStore) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	return useClient(s, func(c *Client) (core.TaskResult, error) { return c.Ack(ctx, p) })
}

func (s *componentStore) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	return useClient(s, func(c *Client) (core.TaskResult, error) { return c.Fail(ctx, p) })
}

func (s *componentStore) Retry(ctx context.Context, p core.RetryParams) (core.TaskResult, error) {
	return useClient(s, func(c *Client) (core.TaskResult, error) { return c.Retry(ctx, p) })
}

func (s *componentStore) ClaimExpired(ctx context.Context, p core.ClaimExpiredParams) (core.ReapResult, error) {
	return useClient(s, func(c *Client) (core.ReapResult, error) { return c.ClaimExpired(ctx, p) })
}

func (s *componentStore) Requeue(ctx context.Context, p core.RequeueParams) (core.TaskResult, error) {
	return useClient(s, func(c *Client) (core.TaskResult, error) { return c.Requeue(ctx, p) })
}

func (s *componentStore) Finalize(ctx context.Context, p core.FinalizeParams) (core.TaskResult, error) {
	return useClient(s, func(c *Client) (core.TaskResult, error) { return c.Finalize(ctx, p) })
}

func (s *componentStore) RecoverExpired(ctx context.Context, p core.RecoverExpiredParams) (core.TasksResult, error) {
	return useClient(s, func(c *Client) (core.TasksResult, error) { return c.RecoverExpired(ctx, p) })
}

func (s *componentStore) Get(ctx context.Context, p core.GetParams) (core.Task, error) {
	return useClient(s, func(c *Client) (core.Task, error) { return c.Get(ctx, p) })
}

func (s *componentStore) List(ctx context.Context, p core.ListParams) (core.ListResult, error) {
	return useClient(s, func(c *Client) (core.ListResult, error) { return c.List(ctx, p) })
}

func (s *componentStore) Counts(ctx context.Context, p core.CountsParams) (core.Counts, error) {
	return useClient(s, func(c *Client) (core.Counts, error) { return c.Counts(ctx, p) })
}

func (s *componentStore) InspectRequeue(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return useClient(s, func(c *Client) (core.TaskResult, error) { return c.InspectRequeue(ctx, p) })
}

func (s *componentStore) Cancel(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return useClient(s, func(c *Client) (core.TaskResult, error) { return c.Cancel(ctx, p) })
}

func (s *componentStore) Remove(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return useClient(s, func(c *Client) (core.TaskResult, error) { return c.Remove(ctx, p) })
}

func (s *componentStore) Prune(ctx context.Context, p core.PruneParams) (core.IDsResult, error) {
	return useClient(s, func(c *Client) (core.IDsResult, error) { return c.Prune(ctx, p) })
}

func (s *componentStore) Pause(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	return useClient(s, func(c *Client) (core.PauseResult, error) { return c.Pause(ctx, p) })
}

func (s *componentStore) Resume(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	return useClient(s, func(c *Client) (core.PauseResult, error) { return c.Resume(ctx, p) })
}

// Close closes the component's store.
func (s *componentStore) Close() error { return s.inner.Close() }

// batchComponentStore is a componentStore over a core.BatchStore, whose
// batch calls the recorder records too.
type batchComponentStore struct{ *componentStore }

func (s *batchComponentStore) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	return useClient(s.componentStore, func(c *Client) (core.BatchResult, error) {
		return any(c).(core.BatchStore).EnqueueBatch(ctx, p)
	})
}

func (s *batchComponentStore) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	return useClient(s.componentStore, func(c *Client) (core.BatchResult, error) {
		return any(c).(core.BatchStore).AckBatch(ctx, p)
	})
}

// AckFlights passes the inner store's core.AckFlighter on.
func (s *batchComponentStore) AckFlights() int { return ackFlights(s.inner) }

// DefaultBatchSize passes the inner store's core.BatchSizer on.
func (s *batchComponentStore) DefaultBatchSize() int { return batchSize(s.inner) }

// skewClock is a component's own clock: the harness's, off by skew.
type skewClock struct {
	core.Clock
	skew time.Duration
}

func (c skewClock) Now() time.Time { return c.Clock.Now().Add(c.skew) }

// unbatchedStore hides the batch calls of a store (and nothing else: a
// FaultInjector stays one).
type unbatchedStore struct{ core.Store }

// InjectFault passes the fault to the store below when it can make it.
func (s unbatchedStore) InjectFault(kind CallFaultKind, d time.Duration) bool {
	fi, ok := s.Store.(FaultInjector)
	return ok && fi.InjectFault(kind, d)
}

// routeStore is the one store a Client is given in the runtime mode: the
// calls of its workers go to the worker's recorded store, those of its
// maintenance to the broker's, so the history shows a Client as the worker
// and the broker it is made of.
type routeStore struct {
	core.Store // the worker's: Pop, Extend, Ack, Fail, Retry, and the rest
	broker     core.Store
	scheduler  core.Store // Enqueue, of the Client's periodic schedule; nil: the worker's
	gate       *gate      // closes the scheduler's way to the store when the ticks end
}

// gate lets calls through until it is closed, and tells when the last call
// that went through has returned.
type gate struct {
	mu     sync.Mutex
	closed bool
	calls  sync.WaitGroup
}

// errGateClosed answers a scheduler's Enqueue after the ticks: its schedule
// is over, and the plan's queue drains.
var errGateClosed = errors.New("linearizability: the plan's ticks are over")

func (g *gate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.calls.Add(1)
	return true
}

// close stops new calls and waits for those under way.
func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.calls.Wait()
}

// newRouteStore returns a routeStore, a core.BatchStore when the worker's
// store is one.
func newRouteStore(worker, broker, scheduler core.Store, g *gate) core.Store {
	r := &routeStore{Store: worker, broker: broker, scheduler: scheduler, gate: g}
	if bs, ok := worker.(core.BatchStore); ok {
		return &batchRouteStore{r, bs}
	}
	return r
}

func (r *routeStore) Promote(ctx context.Context, p core.PromoteParams) (core.IDsResult, error) {
	return r.broker.Promote(ctx, p)
}

func (r *routeStore) ClaimExpired(ctx context.Context, p core.ClaimExpiredParams) (core.ReapResult, error) {
	return r.broker.ClaimExpired(ctx, p)
}

func (r *routeStore) Requeue(ctx context.Context, p core.RequeueParams) (core.TaskResult, error) {
	return r.broker.Requeue(ctx, p)
}

func (r *routeStore) Finalize(ctx context.Context, p core.FinalizeParams) (core.TaskResult, error) {
	return r.broker.Finalize(ctx, p)
}

func (r *routeStore) RecoverExpired(ctx context.Context, p core.RecoverExpiredParams) (core.TasksResult, error) {
	return r.broker.RecoverExpired(ctx, p)
}

// Enqueue goes to the scheduler's store: only a Client's periodic schedule
// enqueues.
func (r *routeStore) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	if r.scheduler == nil {
		return r.Store.Enqueue(ctx, p)
	}
	if !r.gate.enter() {
		return core.TaskResult{}, errGateClosed
	}
	defer r.gate.calls.Done()
	return r.scheduler.Enqueue(ctx, p)
}

// Close closes nothing: the harness closes the component stores.
func (r *routeStore) Close() error { return nil }

type batchRouteStore struct {
	*routeStore
	batch core.BatchStore
}

func (r *batchRouteStore) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	return r.batch.EnqueueBatch(ctx, p)
}

func (r *batchRouteStore) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	return r.batch.AckBatch(ctx, p)
}

// AckFlights passes the worker's store's core.AckFlighter on.
func (r *batchRouteStore) AckFlights() int { return ackFlights(r.batch) }

// DefaultBatchSize passes the worker's store's core.BatchSizer on.
func (r *batchRouteStore) DefaultBatchSize() int { return batchSize(r.batch) }
