package linearizability

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// Backend is the adapter side of one history: the stores its clients use,
// all sharing one data set that no other history sees.
type Backend struct {
	// Client returns the store one client uses. It is called once per client
	// of the plan; an adapter with connections returns a store with its own
	// connection, so clients do not share one. The runner closes each.
	Client func() (core.Store, error)
	// Close releases the backend after the history (may be nil).
	Close func() error
	// Damage, when not nil, damages the stored record of task id of queue
	// in one atomic step, leaving its state and every field an index of
	// that state reads as they were: the event model.Queue.Damage (see
	// DamageTask). It returns an error of model.ErrNotFound when there is
	// no such record, of model.ErrInvalidTransition when it is already
	// damaged or set aside; any other error leaves the outcome open.
	Damage func(ctx context.Context, queue, id string) error
}

// Factory makes the backend of one history: empty stores that judge time by
// clock and hold at most capacity pending tasks per queue (0: unlimited).
type Factory func(clock core.Clock, capacity int) (*Backend, error)

// Shared returns a Backend whose clients all use s (for an in-process store,
// which has no connection of its own); closing the backend closes s.
func Shared(s core.Store) *Backend {
	return &Backend{
		Client: func() (core.Store, error) { return unclosable{s}, nil },
		Close:  s.Close,
	}
}

type unclosable struct{ core.Store }

func (unclosable) Close() error { return nil }

// SharedBatch is Shared for a store that also implements core.BatchStore:
// its clients keep the batch calls.
func SharedBatch(s core.BatchStore) *Backend {
	return &Backend{
		Client: func() (core.Store, error) { return unclosableBatch{s}, nil },
		Close:  s.Close,
	}
}

type unclosableBatch struct{ core.BatchStore }

func (unclosableBatch) Close() error { return nil }

// FakeEpoch is where the fake clock of a FakeTime history starts.
var FakeEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// ClockStall is how long a stalled clock reading blocks (Plan.StallEvery):
// longer than the 1ms after which a sync.Mutex hands itself to the goroutine
// that has waited longest, so the ops queued behind the stalled one get the
// lock before the stalled op's next step.
const ClockStall = 1200 * time.Microsecond

// MaxStalls bounds the stalled clock readings of one history: each costs
// ClockStall of wall time.
const MaxStalls = 10

// ErrInjected is the transport error of an injected fault.
var ErrInjected = errors.New("linearizability: injected transport fault")

// Execute runs a plan against a fresh backend from f and returns the
// recorded history. Each client runs in its own goroutine; the rounds are
// barriers. It returns an error when the backend cannot be made, when ctx
// ends, or when a store panics.
func Execute(ctx context.Context, p *Plan, f Factory) (*History, error) {
	rec := NewRecorder()
	var clock core.Clock = core.SystemClock{}
	var fake *core.FakeClock
	if p.Mode == FakeTime {
		fake = core.NewFakeClock(FakeEpoch)
		clock = fake
	}
	epoch := clock.Now()
	be, err := f(newSubMicroClock(&recordingClock{Clock: clock, r: rec, every: p.StallEvery, from: p.StallFrom, stall: ClockStall}, p.SubMicro), p.Capacity)
	if err != nil {
		return nil, fmt.Errorf("linearizability: backend: %w", err)
	}
	if be.Close != nil {
		defer be.Close()
	}
	actors := make([]*actor, len(p.Clients))
	for i, cp := range p.Clients {
		s, err := be.Client()
		if err != nil {
			return nil, fmt.Errorf("linearizability: backend client: %w", err)
		}
		defer s.Close()
		fs := &faultStore{Store: s}
		var recorded core.Store = fs
		_, batch := s.(core.BatchStore)
		if batch {
			recorded = &batchFaultStore{fs}
		}
		name := fmt.Sprintf("%s %d", cp.Role, i)
		client := rec.Client(name, recorded)
		actors[i] = &actor{
			name: name, index: i, plan: p, clock: clock, fake: fake, rec: rec, batch: batch,
			faults: fs, client: client, store: newScribbler(client, p.Scribble), seen: map[taskKey]uint64{},
			damage: be.Damage, pending: map[taskKey]bool{},
		}
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	starts := make([]chan struct{}, p.Rounds())
	for r := range starts {
		starts[r] = make(chan struct{})
	}
	var round, all sync.WaitGroup
	for i, a := range actors {
		all.Add(1)
		go func() {
			defer all.Done()
			for r := range starts {
				<-starts[r]
				for _, s := range p.Clients[i].Rounds[r] {
					if ctx.Err() != nil {
						break
					}
					a.safeDo(ctx, s, cancel)
				}
				round.Done()
			}
		}()
	}
	for r, gap := range p.Gaps {
		round.Add(len(actors))
		rec.Event(fmt.Sprintf("round %d", r))
		close(starts[r])
		round.Wait()
		if gap > 0 && ctx.Err() == nil {
			pass(ctx, rec, fake, gap, "between rounds")
		}
	}
	all.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return &History{
		Format: HistoryFormat, Mode: p.Mode, Capacity: p.Capacity, Epoch: epoch,
		Operations: rec.Operations(), Events: rec.Events(),
	}, nil
}

// pass lets d of time pass: the fake clock advances, or the caller sleeps.
func pass(ctx context.Context, rec *Recorder, fake *core.FakeClock, d time.Duration, who string) {
	if fake != nil {
		fake.Advance(d)
		rec.Event(fmt.Sprintf("clock +%s (%s): now +%s", ms(d), who, ms(fake.Now().Sub(FakeEpoch))))
		return
	}
	rec.Event(fmt.Sprintf("%s: %s pass", who, ms(d)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

type taskKey struct{ queue, id string }

// actor is the state of one client while it runs its steps.
type actor struct {
	name   string
	plan   *Plan
	clock  core.Clock
	fake   *core.FakeClock
	rec    *Recorder
	faults *faultStore
	client *Client // the recording store under store
	store  core.Store
	batch  bool // the backend's store is a core.BatchStore (so is store then)

	pending map[taskKey]bool // whether a task was pending when the client last saw it (for DamageTask)

	damage func(ctx context.Context, queue, id string) error // Backend.Damage

	index     int               // the client's index in the plan
	enqueued  int               // Enqueue steps done
	txs       int               // application rows written
	claims    []model.Claim     // worker claims from Pop not yet decided, oldest first
	oldClaims []model.Claim     // decided ones
	reaps     []model.ReapClaim // broker claims from ClaimExpired not yet decided
	oldReaps  []model.ReapClaim
	seen      map[taskKey]uint64
}

// at returns the client's reading of the clock plus d, to the microsecond.
// at is the client's reading of the clock plus d, not rounded: a store
// rounds the times it is given (model.Round).
func (a *actor) at(d time.Duration) time.Time {
	return a.clock.Now().Add(d)
}

func (a *actor) see(ts ...model.Task) {
	for _, t := range ts {
		a.seen[taskKey{t.Queue, t.ID}] = t.Version
		if a.pending != nil {
			a.pending[taskKey{t.Queue, t.ID}] = t.State.Valid() && !t.State.Terminal()
		}
	}
}

// claim chooses the worker claim a decision step uses (see Step.Pick), and
// ok false when the step should claim instead: the client holds no claim.
func (a *actor) claim(s Step) (c model.Claim, ok bool) {
	switch {
	case s.Pick < 0:
		return model.Claim{Queue: a.plan.Queues[s.Queue], TaskID: a.plan.Tasks[s.Task], Token: max(s.Forged, 1)}, true
	case s.Pick == 2 && len(a.oldClaims) > 0:
		return a.oldClaims[len(a.oldClaims)-1], true
	case len(a.claims) == 0:
		return c, false
	}
	return a.claims[max(len(a.claims)-1-s.Pick, 0)], true
}

// decided moves claim c from the held claims to the old ones once the store
// has answered a decision with it (whatever the answer: the client is done
// with that claim, though a later step may still use it as a stale one).
func (a *actor) decided(c model.Claim, err error) {
	if err != nil && ErrorKind(err) == "" {
		return // indeterminate: the client may try again
	}
	if i := slices.Index(a.claims, c); i >= 0 {
		a.claims = slices.Delete(a.claims, i, i+1)
		a.oldClaims = append(a.oldClaims, c)
	}
}

// reap is claim for a broker.
func (a *actor) reap(s Step) (rc model.ReapClaim, ok bool) {
	switch {
	case s.Pick < 0:
		return model.ReapClaim{Queue: a.plan.Queues[s.Queue], TaskID: a.plan.Tasks[s.Task], Version: max(s.Forged, 1)}, true
	case s.Pick == 2 && len(a.oldReaps) > 0:
		return a.oldReaps[len(a.oldReaps)-1], true
	case len(a.reaps) == 0:
		return rc, false
	}
	return a.reaps[max(len(a.reaps)-1-s.Pick, 0)], true
}

// reaped is decided for a broker.
func (a *actor) reaped(rc model.ReapClaim, err error) {
	if err != nil && ErrorKind(err) == "" {
		return
	}
	if i := slices.IndexFunc(a.reaps, func(r model.ReapClaim) bool {
		return r.TaskID == rc.TaskID && r.Version == rc.Version && r.Queue == rc.Queue
	}); i >= 0 {
		a.reaps = slices.Delete(a.reaps, i, i+1)
		a.oldReaps = append(a.oldReaps, rc)
	}
}

func (a *actor) expect(s Step) uint64 {
	seen := a.seen[taskKey{a.plan.Queues[s.Queue], a.plan.Tasks[s.Task]}]
	switch s.Expect {
	case 1:
		return seen
	case 2:
		return seen + 1 + uint64(s.Task)
	}
	return 0
}

// safeDo performs one step; a panic in the store ends the history with an
// error (cancel's cause) instead of the process.
func (a *actor) safeDo(ctx context.Context, s Step, cancel context.CancelCauseFunc) {
	defer func() {
		if v := recover(); v != nil {
			cancel(fmt.Errorf("linearizability: %s: %v panicked: %v\n%s", a.name, s.Kind, v, debug.Stack()))
		}
	}()
	a.do(ctx, s)
}

// do performs one step. Errors are the history's to judge, not the runner's.
func (a *actor) do(ctx context.Context, s Step) {
	if s.Kind == Pause {
		pass(ctx, a.rec, a.fake, s.Delay, a.name+" pauses")
		return
	}
	if s.Kind == DamageTask {
		a.damageTask(ctx, s)
		return
	}
	a.faults.next = s.Fault
	q, id := a.plan.Queues[s.Queue], a.plan.Tasks[s.Task]
	st := a.store
	switch s.Kind {
	case Enqueue:
		if s.N > 1 {
			a.fill(ctx, s)
			return
		}
		args := a.enqueueArgs(s)
		args.UniqueKey, args.UniqueFor = s.Key, s.KeyFor
		r, err := st.Enqueue(ctx, core.EnqueueParams{Queue: q, EnqueueArgs: args})
		if err == nil {
			a.see(r.Task)
		}
	case Promote:
		_, _ = st.Promote(ctx, core.PromoteParams{Queue: q, Limit: s.N})
	case Pop:
		a.pop(ctx, q, s.Lease, s.N)
	case Extend, Ack, Fail, Retry:
		c, ok := a.claim(s)
		if !ok {
			a.pop(ctx, q, max(s.Lease, 2*time.Millisecond), 1)
			return
		}
		switch s.Kind {
		case Extend:
			_, _ = st.Extend(ctx, core.ExtendParams{Claim: c, Lease: s.Lease})
		case Ack:
			_, err := st.Ack(ctx, core.AckParams{Claim: c, Result: []byte("done by " + a.name)})
			a.decided(c, err)
		case Fail:
			_, err := st.Fail(ctx, core.FailParams{Claim: c, Message: "failed by " + a.name})
			a.decided(c, err)
		case Retry:
			_, err := st.Retry(ctx, core.RetryParams{Claim: c, Delay: s.Delay, Message: "retried by " + a.name})
			a.decided(c, err)
		}
	case AckPop:
		c, ok := a.claim(s)
		if !ok {
			a.pop(ctx, q, max(s.Lease, 2*time.Millisecond), 1)
			return
		}
		acks := []core.AckItem{{Claim: c, Result: []byte("done by " + a.name)}}
		if prev, ok := a.claim(Step{Pick: 1}); s.More && ok && prev != c {
			acks = append(acks, core.AckItem{Claim: prev, Result: []byte("done too by " + a.name)})
		}
		// With More, a late ack rides along too: the last claim this
		// client decided, whose task may be another's claim by now.
		if n := len(a.oldClaims); s.More && n > 0 && !slices.ContainsFunc(acks, func(it core.AckItem) bool { return it.Claim == a.oldClaims[n-1] }) {
			acks = append(acks, core.AckItem{Claim: a.oldClaims[n-1], Result: []byte("late by " + a.name)})
		}
		if !a.batch {
			_, err := st.Ack(ctx, core.AckParams{Claim: c, Result: acks[0].Result})
			a.decided(c, err)
			return
		}
		r, err := st.(ackBatcher).AckBatch(ctx, core.AckBatchParams{Queue: c.Queue, Acks: acks, Pop: core.AckPop{Lease: s.Lease, N: s.N}})
		for _, it := range acks {
			a.decided(it.Claim, err)
		}
		if err == nil {
			for _, t := range r.Claimed {
				a.claims = append(a.claims, t.Claim())
			}
			a.see(r.Claimed...)
		}
	case ClaimExpired:
		a.claimExpired(ctx, q, s.Lease, s.N)
	case Requeue, Finalize:
		rc, ok := a.reap(s)
		if !ok {
			a.claimExpired(ctx, q, 2*time.Millisecond, 0)
			return
		}
		var err error
		if s.Kind == Requeue {
			_, err = st.Requeue(ctx, core.RequeueParams{ReapClaim: rc, Delay: s.Delay})
		} else {
			_, err = st.Finalize(ctx, core.FinalizeParams{ReapClaim: rc, Message: "given up by " + a.name})
		}
		a.reaped(rc, err)
	case RecoverExpired:
		_, _ = st.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: q, Delay: s.Lease, Limit: s.N})
	case InspectRequeue:
		if r, err := st.InspectRequeue(ctx, core.InspectParams{Queue: q, ID: id, Expect: a.expect(s)}); err == nil {
			a.see(r.Task)
		}
	case Remove:
		_, _ = st.Remove(ctx, core.InspectParams{Queue: q, ID: id, Expect: a.expect(s)})
	case CancelTask:
		if r, err := st.Cancel(ctx, core.InspectParams{Queue: q, ID: id, Expect: a.expect(s)}); err == nil {
			a.see(r.Task)
		}
	case Get:
		if t, err := st.Get(ctx, core.GetParams{Queue: q, ID: id}); err == nil {
			a.see(t)
		}
	case List:
		after := ""
		if s.Cursor {
			after = id
		}
		if r, err := st.List(ctx, core.ListParams{Queue: q, State: s.State, After: after, Limit: s.N}); err == nil {
			a.see(r.Tasks...)
		}
	case Counts:
		_, _ = st.Counts(ctx, core.CountsParams{Queue: q})
	case Prune:
		_, _ = st.Prune(ctx, core.PruneParams{Queue: q, States: s.Prune, Before: a.at(s.Delay), Limit: s.N})
	case Tx:
		a.tx(ctx, s)
	case PauseQueue:
		_, _ = st.Pause(ctx, core.PauseParams{Queue: q})
	case ResumeQueue:
		_, _ = st.Resume(ctx, core.PauseParams{Queue: q})
	}
}

func (a *actor) pop(ctx context.Context, q string, lease time.Duration, n int) {
	r, err := a.store.Pop(ctx, core.PopParams{Queue: q, Lease: lease, N: n})
	if err == nil {
		for _, t := range r.Tasks {
			a.claims = append(a.claims, t.Claim())
		}
		a.see(r.Tasks...)
	}
}

func (a *actor) claimExpired(ctx context.Context, q string, ttl time.Duration, limit int) {
	r, err := a.store.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: q, ClaimTTL: ttl, Limit: limit})
	if err == nil {
		a.reaps = append(a.reaps, r.Claims...)
	}
}

// faultStore injects the fault set in next into the next call.
type faultStore struct {
	core.Store
	next Fault
}

func inject[R any](f *faultStore, call func() (R, error)) (R, error) {
	fault := f.next
	f.next = NoFault
	if fi, ok := f.Store.(FaultInjector); ok && fault != NoFault && fi.InjectFault(fault.callFault(), fault.hold()) {
		return call() // the store's transport loses it, or its database is busy, for real
	}
	var zero R
	switch fault {
	case LoseRequest:
		return zero, fmt.Errorf("%w: request lost", ErrInjected)
	case LoseReply:
		if _, err := call(); err != nil {
			return zero, fmt.Errorf("%w: reply lost (%v)", ErrInjected, err)
		}
		return zero, fmt.Errorf("%w: reply lost", ErrInjected)
	}
	return call()
}

func (f *faultStore) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	return inject(f, func() (core.TaskResult, error) { return f.Store.Enqueue(ctx, p) })
}

func (f *faultStore) Promote(ctx context.Context, p core.PromoteParams) (core.IDsResult, error) {
	return inject(f, func() (core.IDsResult, error) { return f.Store.Promote(ctx, p) })
}

func (f *faultStore) Pop(ctx context.Context, p core.PopParams) (core.TasksResult, error) {
	return inject(f, func() (core.TasksResult, error) { return f.Store.Pop(ctx, p) })
}

func (f *faultStore) Extend(ctx context.Context, p core.ExtendParams) (core.TaskResult, error) {
	return inject(f, func() (core.TaskResult, error) { return f.Store.Extend(ctx, p) })
}

func (f *faultStore) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	return inject(f, func() (core.TaskResult, error) { return f.Store.Ack(ctx, p) })
}

func (f *faultStore) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	return inject(f, func() (core.TaskResult, error) { return f.Store.Fail(ctx, p) })
}

func (f *faultStore) Retry(ctx context.Context, p core.RetryParams) (core.TaskResult, error) {
	return inject(f, func() (core.TaskResult, error) { return f.Store.Retry(ctx, p) })
}

func (f *faultStore) ClaimExpired(ctx context.Context, p core.ClaimExpiredParams) (core.ReapResult, error) {
	return inject(f, func() (core.ReapResult, error) { return f.Store.ClaimExpired(ctx, p) })
}

func (f *faultStore) Requeue(ctx context.Context, p core.RequeueParams) (core.TaskResult, error) {
	return inject(f, func() (core.TaskResult, error) { return f.Store.Requeue(ctx, p) })
}

func (f *faultStore) Finalize(ctx context.Context, p core.FinalizeParams) (core.TaskResult, error) {
	return inject(f, func() (core.TaskResult, error) { return f.Store.Finalize(ctx, p) })
}

func (f *faultStore) RecoverExpired(ctx context.Context, p core.RecoverExpiredParams) (core.TasksResult, error) {
	return inject(f, func() (core.TasksResult, error) { return f.Store.RecoverExpired(ctx, p) })
}

func (f *faultStore) Get(ctx context.Context, p core.GetParams) (core.Task, error) {
	return inject(f, func() (core.Task, error) { return f.Store.Get(ctx, p) })
}

func (f *faultStore) List(ctx context.Context, p core.ListParams) (core.ListResult, error) {
	return inject(f, func() (core.ListResult, error) { return f.Store.List(ctx, p) })
}

func (f *faultStore) Counts(ctx context.Context, p core.CountsParams) (core.Counts, error) {
	return inject(f, func() (core.Counts, error) { return f.Store.Counts(ctx, p) })
}

func (f *faultStore) InspectRequeue(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return inject(f, func() (core.TaskResult, error) { return f.Store.InspectRequeue(ctx, p) })
}

func (f *faultStore) Cancel(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return inject(f, func() (core.TaskResult, error) { return f.Store.Cancel(ctx, p) })
}

func (f *faultStore) Remove(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	return inject(f, func() (core.TaskResult, error) { return f.Store.Remove(ctx, p) })
}

// ackBatcher is the AckBatch of a core.BatchStore.
type ackBatcher interface {
	AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error)
}

// enqueueBatcher is the EnqueueBatch of a core.BatchStore.
type enqueueBatcher interface {
	EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error)
}

// batchFaultStore is a faultStore over a core.BatchStore: its AckBatch
// calls take the injected fault too.
type batchFaultStore struct{ *faultStore }

// EnqueueBatch implements core.BatchStore.
func (f *batchFaultStore) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	return inject(f.faultStore, func() (core.BatchResult, error) { return f.Store.(core.BatchStore).EnqueueBatch(ctx, p) })
}

// AckBatch implements core.BatchStore.
func (f *batchFaultStore) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	return inject(f.faultStore, func() (core.BatchResult, error) { return f.Store.(core.BatchStore).AckBatch(ctx, p) })
}

func (f *faultStore) Prune(ctx context.Context, p core.PruneParams) (core.IDsResult, error) {
	return inject(f, func() (core.IDsResult, error) { return f.Store.Prune(ctx, p) })
}

func (f *faultStore) Pause(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	return inject(f, func() (core.PauseResult, error) { return f.Store.Pause(ctx, p) })
}

func (f *faultStore) Resume(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	return inject(f, func() (core.PauseResult, error) { return f.Store.Resume(ctx, p) })
}
