package linearizability

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// RuntimeHistory is what the runtime mode records of one plan: the store
// history porcupine checks (History, which `leasehold check --replay`
// reads), and what the runtime properties need besides: every handler
// invocation, every reading of the stores' clock, and how the run ended.
type RuntimeHistory struct {
	History     *History     `json:"history"`
	Invocations []Invocation `json:"invocations"`
	// Readings are the stores' clock readings (recorder time, reading).
	Readings []Reading `json:"readings"`
	// StopAt is when the controller began to stop the components
	// (recorder time); ops after it may be cut short by cancellation.
	StopAt int64 `json:"stopAt"`
	// Drained: once the producer was done, every task left became terminal
	// within the drain budget. Stopped: every worker and broker returned
	// when told to stop.
	Drained bool `json:"drained"`
	Stopped bool `json:"stopped"`
	// Final is every task of the queue once all had stopped, as a recorded
	// inspector listed them.
	Final []model.Task `json:"final"`
	// Left describes what was not terminal when the drain budget ran out.
	Left string `json:"left,omitempty"`
	// Held are the claims a *core.ShutdownError named left to lapse: a
	// Client's Shutdown whose deadline passed, or a worker's Run that could
	// not settle a task while it stopped. Their outcomes may not be recorded.
	Held []model.Claim `json:"held,omitempty"`
}

// Reading is one reading of the stores' clock.
type Reading struct {
	At  int64     `json:"at"`
	Now time.Time `json:"now"`
}

// readingsCopy returns the recorder's clock readings.
func (r *Recorder) readingsCopy() []Reading {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Reading, len(r.readings))
	for i, rd := range r.readings {
		out[i] = Reading{At: rd.at, Now: rd.now}
	}
	return out
}

// Budgets of a runtime history.
const (
	// settleWindow is how long no store call must have started or ended
	// before the controller moves the fake clock; settleMax bounds the
	// wait, so a stalled call sees time pass.
	settleWindow = 300 * time.Microsecond
	settleMax    = 3 * time.Millisecond
	// drainBudget bounds the time (fake or real) the components get to
	// finish every task once the producer is done; stopBudget the time
	// they get to return once told to stop.
	drainBudget = 3 * time.Second
	stopBudget  = 2 * time.Second
	// stopWait is the real time the components then get before the
	// history is reported as not stopping. A call in flight ends when
	// cancelled, even with its server stalled (312 runtime histories with
	// the PostgreSQL server stopped for 2 to 7 s every few seconds all
	// stopped in time), so a history that takes longer waits for something
	// that is not its own: a PostgreSQL call cut mid-message once left its
	// queue locked for 15 s (see TestACallCutMidMessageFreesItsQueue).
	stopWait = 5 * time.Second
)

// ExecuteRuntime runs a runtime plan against a fresh backend from f: the
// plan's workers, brokers, producer and operator, each a real core
// component over a store of its own from the backend, every call recorded
// under the component's name. After the plan's ticks it drains (time
// passes until every task is terminal), stops every component, and lists
// the queue's tasks through a recorded inspector. It returns an error when
// the backend cannot be made, a component cannot be built, or ctx ends.
func ExecuteRuntime(ctx context.Context, p *RuntimePlan, f Factory) (*RuntimeHistory, error) {
	rec := NewRecorder()
	var base core.Clock = core.SystemClock{}
	var fake *core.FakeClock
	if p.Mode == FakeTime {
		fake = core.NewFakeClock(FakeEpoch)
		base = fake
	}
	epoch := base.Now()
	be, err := f(&recordingClock{Clock: base, r: rec, every: p.StallEvery, from: p.StallFrom, stall: ClockStall}, 0)
	if err != nil {
		return nil, fmt.Errorf("linearizability: backend: %w", err)
	}
	if be.Close != nil {
		defer be.Close()
	}
	faults := map[string][]CallFault{}
	for _, cf := range p.Faults {
		faults[cf.Component] = append(faults[cf.Component], cf)
	}
	act := &activity{}
	var closers []core.Store
	defer func() {
		for _, s := range closers {
			_ = s.Close()
		}
	}()
	open := func(name string, stall map[model.Op]time.Duration, latency time.Duration, unbatched bool) (core.Store, error) {
		s, err := be.Client()
		if err != nil {
			return nil, fmt.Errorf("linearizability: backend client: %w", err)
		}
		if unbatched {
			s = unbatchedStore{s}
		}
		cs := newComponentStore(rec, name, newFaultLayer(s, faults[name], stall, latency), act)
		closers = append(closers, cs)
		return cs, nil
	}
	peek, err := be.Client() // unrecorded: the controller's view of the counts
	if err != nil {
		return nil, fmt.Errorf("linearizability: backend client: %w", err)
	}
	closers = append(closers, peek)

	h := newHandlers(p, base, rec)
	x := &runtimeRun{plan: p, rec: rec, fake: fake, act: act, h: h, schedulers: &gate{}}
	workerStores := make([]core.Store, len(p.Workers))
	brokerStores := make([]core.Store, len(p.Brokers))
	workerOpts := make([][]core.WorkerOption, len(p.Workers))
	for i, ws := range p.Workers {
		s, err := open(workerName(i), map[model.Op]time.Duration{model.OpExtend: ws.BeatStall}, ws.Latency, ws.Unbatched)
		if err != nil {
			return nil, err
		}
		workerStores[i] = s
		opts := []core.WorkerOption{
			core.WithConcurrency(ws.Concurrency), core.WithLease(ws.Lease),
			core.WithPollInterval(ws.PollMin, ws.PollMax), core.WithShutdownTimeout(ws.Shutdown),
			core.WithRetryPolicy(ws.Policy.Policy()),
		}
		if ws.Heartbeat > 0 {
			opts = append(opts, core.WithHeartbeat(ws.Heartbeat))
		}
		if ws.Batch > 0 {
			opts = append(opts, core.WithBatchSize(ws.Batch))
		}
		workerOpts[i] = opts
		var w *core.Worker
		if p.clientOf(true, i) < 0 {
			w, err = core.NewWorker(s, p.Queue, h.handler(workerName(i)), append(opts, core.WithClock(skewClock{base, ws.Skew}))...)
			if err != nil {
				return nil, fmt.Errorf("linearizability: %s: %w", workerName(i), err)
			}
		}
		x.workers = append(x.workers, w) // nil: part of a Client
	}
	brokerOpts := make([][]core.BrokerOption, len(p.Brokers))
	for i, bs := range p.Brokers {
		s, err := open(brokerName(i), map[model.Op]time.Duration{model.OpRequeue: bs.DecideStall, model.OpFinalize: bs.DecideStall}, 0, false)
		if err != nil {
			return nil, err
		}
		brokerStores[i] = s
		brokerOpts[i] = []core.BrokerOption{core.WithBatchSize(bs.Batch),
			core.WithClaimTTL(bs.ClaimTTL), core.WithInterval(bs.Interval),
			core.WithRetryPolicy(bs.Policy.Policy())}
		var b *core.Broker
		if p.clientOf(false, i) < 0 {
			b, err = core.NewBroker(s, append(brokerOpts[i], core.WithQueues(p.Queue), core.WithClock(skewClock{base, bs.Skew}))...)
			if err != nil {
				return nil, fmt.Errorf("linearizability: %s: %w", brokerName(i), err)
			}
		}
		x.brokers = append(x.brokers, b) // nil: part of a Client
		x.passing = append(x.passing, new(atomic.Bool))
	}
	for i, cs := range p.Clients {
		opts := []core.ClientOption{
			core.WithClock(skewClock{base, p.Workers[cs.Worker].Skew}),
			core.WithQueue(p.Queue, h.handler(workerName(cs.Worker)), workerOpts[cs.Worker]...),
			core.WithMaintenance(brokerOpts[cs.Broker]...),
		}
		var ss core.Store
		if cs.Every > 0 {
			if ss, err = open(schedulerName(i), nil, 0, false); err != nil {
				return nil, err
			}
			every, err := core.Every(cs.Every)
			if err != nil {
				return nil, fmt.Errorf("linearizability: %s: %w", clientName(i), err)
			}
			opts = append(opts, core.WithPeriodic(core.Periodic{
				Name: PeriodicName, Queue: p.Queue, Payload: []byte("occurrence"),
				Schedule: untilSchedule{every, epoch.Add(p.Duration())},
				Options:  []core.EnqueueOption{core.WithMaxAttempts(2)},
			}))
		}
		c, err := core.NewClient(newRouteStore(workerStores[cs.Worker], brokerStores[cs.Broker], ss, x.schedulers), opts...)
		if err != nil {
			return nil, fmt.Errorf("linearizability: %s: %w", clientName(i), err)
		}
		x.clients = append(x.clients, c)
	}
	ps, err := open(producerName, nil, 0, false)
	if err != nil {
		return nil, err
	}
	queue, err := core.NewQueue(ps, p.Queue, core.WithClock(base))
	if err != nil {
		return nil, err
	}
	var inspectors []*core.Inspector
	for i := range 2 {
		is, err := open(inspectorName(i), nil, 0, false)
		if err != nil {
			return nil, err
		}
		in, err := core.NewInspector(is, p.Queue)
		if err != nil {
			return nil, err
		}
		inspectors = append(inspectors, in)
	}
	fs, err := open(finalName, nil, 0, false)
	if err != nil {
		return nil, err
	}
	final, err := core.NewInspector(fs, p.Queue)
	if err != nil {
		return nil, err
	}

	rh, err := x.run(ctx, queue, inspectors, final, peek)
	if err != nil {
		return nil, err
	}
	rh.History = &History{
		Format: HistoryFormat, Mode: p.Mode, Epoch: epoch,
		Operations: rec.Operations(), Events: rec.Events(),
	}
	rh.Invocations = h.invocations()
	rh.Readings = rec.readingsCopy()
	return rh, nil
}

// untilSchedule is a schedule that ends: no occurrence after until, so the
// plan's queue can drain once its ticks are over.
type untilSchedule struct {
	core.Schedule
	until time.Time
}

func (u untilSchedule) Next(t time.Time) time.Time {
	n := u.Schedule.Next(t)
	if n.After(u.until) {
		return time.Time{}
	}
	return n
}

// runtimeRun is the controller of one runtime history.
type runtimeRun struct {
	plan    *RuntimePlan
	rec     *Recorder
	fake    *core.FakeClock
	act     *activity
	h       *handlers
	workers []*core.Worker // nil where a Client holds the worker
	brokers []*core.Broker // nil where a Client holds the broker
	clients []*core.Client
	passing []*atomic.Bool // a RunOnce pass of the broker is under way
	// schedulers closes the Clients' schedulers' way to the store once the
	// ticks are over, so no occurrence lands after the queue drained.
	schedulers *gate

	passes sync.WaitGroup
	panics chan error
}

// settle waits until the components' store calls have quieted (fake time
// only: in real time, time passes anyway).
func (x *runtimeRun) settle() {
	if x.fake == nil {
		return
	}
	deadline := time.Now().Add(settleMax)
	for !x.act.quiet(settleWindow) && time.Now().Before(deadline) {
		time.Sleep(settleWindow / 3)
	}
}

// advance lets d pass: the fake clock moves, or the controller sleeps.
func (x *runtimeRun) advance(d time.Duration, why string) {
	if x.fake != nil {
		x.fake.Advance(d)
		x.act.touch()
		x.rec.Event(fmt.Sprintf("clock +%s (%s): now +%s", ms(d), why, ms(x.fake.Now().Sub(FakeEpoch))))
		x.settle()
		return
	}
	time.Sleep(d)
}

// guard runs f, turning a panic (of a component or a store) into an error
// that ends the history.
func (x *runtimeRun) guard(what string, f func()) {
	defer func() {
		if v := recover(); v != nil {
			select {
			case x.panics <- fmt.Errorf("linearizability: %s panicked: %v\n%s", what, v, debug.Stack()):
			default:
			}
		}
	}()
	f()
}

// pass starts a RunOnce pass of broker i unless one is under way.
func (x *runtimeRun) pass(ctx context.Context, i int) {
	if !x.passing[i].CompareAndSwap(false, true) {
		return
	}
	x.passes.Go(func() {
		defer x.passing[i].Store(false)
		x.guard(brokerName(i), func() { _, _ = x.brokers[i].RunOnce(ctx) })
	})
}

func (x *runtimeRun) run(ctx context.Context, queue *core.Queue, inspectors []*core.Inspector, final *core.Inspector, peek core.Store) (*RuntimeHistory, error) {
	p := x.plan
	x.panics = make(chan error, 1)
	rh := &RuntimeHistory{}
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	var running sync.WaitGroup
	var left atomic.Int64
	var heldMu sync.Mutex
	holds := func(err error) { // a Run or Shutdown naming claims left to lapse
		var se *core.ShutdownError
		if errors.As(err, &se) {
			heldMu.Lock()
			rh.Held = append(rh.Held, se.Held...)
			heldMu.Unlock()
		}
	}
	for i, w := range x.workers {
		if w == nil {
			continue
		}
		left.Add(1)
		running.Go(func() {
			defer left.Add(-1)
			x.guard(workerName(i), func() { holds(w.Run(runCtx)) })
		})
	}
	for i, b := range x.brokers {
		if b != nil && p.Brokers[i].Loop {
			left.Add(1)
			running.Go(func() {
				defer left.Add(-1)
				x.guard(brokerName(i), func() { _ = b.Run(runCtx) })
			})
		}
	}
	for i, c := range x.clients {
		left.Add(1)
		running.Go(func() {
			defer left.Add(-1)
			// Run's context is not cancelled: Shutdown stops the Client.
			x.guard(clientName(i), func() { _ = c.Run(context.WithoutCancel(runCtx)) })
		})
	}
	// The producer and the operators act in goroutines of their own, in plan
	// order, so a stalled call of theirs does not stall the clock.
	enqueue := make(chan RuntimeTask, len(p.Tasks))
	inspect := make([]chan InspectAction, len(inspectors))
	var actors sync.WaitGroup
	actors.Go(func() {
		for t := range enqueue {
			x.guard(producerName, func() {
				opts := []core.EnqueueOption{core.WithID(t.ID), core.WithPriority(t.Priority), core.WithMaxAttempts(t.MaxAttempts)}
				if t.Delay > 0 {
					opts = append(opts, core.WithDelay(t.Delay))
				}
				if t.Timeout > 0 {
					opts = append(opts, core.WithAttemptTimeout(t.Timeout))
				}
				_, _ = queue.Enqueue(runCtx, []byte("payload of "+t.ID), opts...)
			})
		}
	})
	for i, in := range inspectors {
		inspect[i] = make(chan InspectAction, len(p.Inspects))
		actors.Go(func() {
			for a := range inspect[i] {
				x.guard(inspectorName(i), func() { operate(runCtx, in, a, p) })
			}
		})
	}
	stopActors := func() {
		close(enqueue)
		for _, c := range inspect {
			close(c)
		}
		actors.Wait()
	}

	for i, tk := range p.Ticks {
		if err := x.failed(ctx); err != nil {
			stopActors()
			return nil, x.abort(err, stopRun, &left)
		}
		x.rec.Event(fmt.Sprintf("tick %d", i))
		for _, t := range p.Tasks {
			if t.Tick == i {
				enqueue <- t
			}
		}
		for _, a := range p.Inspects {
			if a.Tick == i {
				inspect[min(max(a.By, 0), len(inspect)-1)] <- a
			}
		}
		for _, b := range tk.Passes {
			x.pass(runCtx, b)
		}
		x.settle()
		x.advance(tk.Advance, fmt.Sprintf("tick %d", i))
	}
	stopActors()
	x.schedulers.close()
	if slices.ContainsFunc(p.Inspects, func(a InspectAction) bool { return a.Kind == InspectPause }) {
		// An operator paused the queue: resume it, recorded, so the drain
		// can finish its tasks. The call runs beside the clock, which a
		// stalled call waits on.
		resumed := make(chan struct{})
		go x.guard(inspectorName(0), func() {
			defer close(resumed)
			// A call fault may lose a resume, and a busy database answer
			// it ErrBusy, each having done nothing; a resume is
			// idempotent, so it is sent until one is answered, up to
			// maxResumes times (a history once left the queue paused after
			// two busy answers and a lost request).
			for range maxResumes {
				if _, err := inspectors[0].Resume(runCtx); err == nil {
					return
				}
			}
		})
	wait:
		for range 1000 {
			select {
			case <-resumed:
				break wait
			default:
				x.advance(time.Millisecond, "resume")
			}
		}
	}

	// Drain: time passes until every task is terminal.
	x.rec.Event("drain")
	step := 2 * time.Millisecond
	if x.fake == nil {
		step = 4 * time.Millisecond
	}
	for spent := time.Duration(0); ; spent += step {
		if err := x.failed(ctx); err != nil {
			return nil, x.abort(err, stopRun, &left)
		}
		c, err := peek.Counts(ctx, core.CountsParams{Queue: p.Queue})
		if err == nil && c.Scheduled+c.Ready+c.Running == 0 {
			rh.Drained = true
			break
		}
		if spent >= drainBudget {
			rh.Left = fmt.Sprintf("after %s of draining: %+v (err %v)", drainBudget, c, err)
			break
		}
		for i := range x.brokers {
			if !p.Brokers[i].Loop {
				x.pass(runCtx, i)
			}
		}
		x.advance(step, "drain")
	}

	// Stop: cancel Run's context, and keep time passing (shutdown timeouts,
	// sleeping handlers) until every component has returned.
	rh.StopAt = x.rec.tick()
	x.rec.Event("stop")
	stopRun()
	for i, c := range x.clients {
		running.Go(func() {
			x.guard(clientName(i), func() {
				sctx, cancel := context.WithTimeout(context.Background(), p.Clients[i].Grace)
				defer cancel()
				holds(c.Shutdown(sctx))
			})
		})
	}
	for spent := time.Duration(0); spent < stopBudget; spent += step {
		if left.Load() == 0 && x.h.running() == 0 {
			break
		}
		x.advance(step, "stop")
	}
	done := make(chan struct{})
	go func() {
		running.Wait()
		x.passes.Wait()
		close(done)
	}()
	select {
	case <-done:
		rh.Stopped = true
	case <-time.After(stopWait):
	}
	if !rh.Stopped {
		// Leave the components to the garbage collector: a history that
		// cannot stop is reported, not waited for.
		return rh, x.failed(ctx)
	}
	if err := x.failed(ctx); err != nil {
		return nil, err
	}
	x.rec.Event("final listing")
	for _, s := range model.States {
		for t, err := range final.All(ctx, s) {
			if err != nil {
				return nil, fmt.Errorf("linearizability: final listing: %w", err)
			}
			rh.Final = append(rh.Final, t)
		}
	}
	slices.SortFunc(rh.Final, func(a, b model.Task) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return rh, nil
}

// failed returns the first panic of a component, or ctx's error.
func (x *runtimeRun) failed(ctx context.Context) error {
	select {
	case err := <-x.panics:
		x.panics <- err // keep it for later callers
		return err
	default:
	}
	return ctx.Err()
}

// abort stops the components after a harness failure and returns err.
func (x *runtimeRun) abort(err error, stop context.CancelFunc, left *atomic.Int64) error {
	stop()
	for range 200 {
		if left.Load() == 0 {
			break
		}
		x.advance(5*time.Millisecond, "abort")
	}
	return err
}

// maxResumes is how many times the harness sends its Resume after an
// operator paused the queue, until one is answered.
const maxResumes = 20

// operate performs one operator action.
func operate(ctx context.Context, in *core.Inspector, a InspectAction, p *RuntimePlan) {
	id := p.Tasks[a.Task].ID
	switch a.Kind {
	case InspectGet:
		_, _ = in.Get(ctx, id)
	case InspectCounts:
		_, _ = in.Counts(ctx)
	case InspectPause:
		_, _ = in.Pause(ctx)
	case InspectResume:
		_, _ = in.Resume(ctx)
	case InspectRequeueAny:
		_, _ = in.Requeue(ctx, id, core.AnyVersion)
	case InspectRequeueSeen, InspectRemove, InspectCancel:
		t, err := in.Get(ctx, id)
		if err != nil {
			return
		}
		switch a.Kind {
		case InspectRemove:
			_, _ = in.Remove(ctx, id, t.Version)
		case InspectCancel:
			_, _ = in.Cancel(ctx, id, t.Version)
		default:
			_, _ = in.Requeue(ctx, id, t.Version)
		}
	}
}
