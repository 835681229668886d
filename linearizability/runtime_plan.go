package linearizability

import (
	"fmt"
	"strings"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/core"
)

// A RuntimePlan is one run of the runtime mode: real core.Worker,
// core.Broker and core.Inspector values over recorded stores, a producer
// enqueueing the plan's tasks through core.Queue, and a schedule of ticks
// (clock advances, broker passes, operator actions). Like a Plan it is drawn
// whole before any goroutine starts; unlike a Plan it does not fix the
// store calls: the components choose them, as they would in production.
type RuntimePlan struct {
	Mode     TimeMode        `json:"mode"`
	Queue    string          `json:"queue"`
	Tasks    []RuntimeTask   `json:"tasks"`
	Workers  []WorkerSpec    `json:"workers"`
	Brokers  []BrokerSpec    `json:"brokers"`
	Ticks    []Tick          `json:"ticks"`
	Faults   []CallFault     `json:"faults,omitempty"`
	Inspects []InspectAction `json:"inspects,omitempty"`
	// Clients builds pairs of a worker and a broker of the plan as one
	// core.Client each instead of a Worker and a Broker.
	Clients []ClientSpec `json:"clients,omitempty"`
	// StallEvery and StallFrom stall readings of the stores' clock as in
	// Plan.
	StallEvery int `json:"stallEvery,omitempty"`
	StallFrom  int `json:"stallFrom,omitempty"`
}

// RuntimeTask is one task the producer enqueues, and what the handler does
// on each of its attempts.
type RuntimeTask struct {
	ID          string        `json:"id"`
	Tick        int           `json:"tick"` // enqueued at the start of this tick
	Priority    int           `json:"priority,omitempty"`
	MaxAttempts int           `json:"maxAttempts"`
	Delay       time.Duration `json:"delay,omitempty"` // WithDelay
	// Timeout is the attempt timeout stored with the task
	// (core.WithAttemptTimeout); 0: none.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Attempts is the handler's behaviour on attempt 1, 2, ...; the last
	// one repeats.
	Attempts []Behaviour `json:"attempts"`
}

// Behaviour returns what the handler does on the given attempt (1 for the
// first).
func (t RuntimeTask) Behaviour(attempt int) Behaviour {
	if len(t.Attempts) == 0 {
		return Behaviour{}
	}
	return t.Attempts[min(max(attempt, 1), len(t.Attempts))-1]
}

// HandlerKind is what a generated handler does.
type HandlerKind uint8

// The handler kinds.
const (
	// Succeed returns a result and a nil error.
	Succeed HandlerKind = iota
	// Error returns a nil result and an error.
	Error
	// ResultAndError returns a result together with an error: a failed
	// attempt all the same.
	ResultAndError
	// PermanentError returns an error wrapped with core.Permanent.
	PermanentError
	// Panic panics.
	Panic
	// IgnoreCtx sleeps for Sleep without watching its context, then
	// succeeds.
	IgnoreCtx
	// Outlive sleeps for Sleep, longer than the lease, and succeeds; it
	// returns early with its context's cause if the context is done.
	Outlive
)

var handlerKindNames = [...]string{"succeed", "error", "result+error", "permanent", "panic", "ignore-ctx", "outlive"}

// String returns the kind's name.
func (k HandlerKind) String() string {
	if int(k) < len(handlerKindNames) {
		return handlerKindNames[k]
	}
	return fmt.Sprintf("handler(%d)", uint8(k))
}

// MarshalText encodes the kind as its name.
func (k HandlerKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText decodes a kind name.
func (k *HandlerKind) UnmarshalText(b []byte) error {
	for i, n := range handlerKindNames {
		if n == string(b) {
			*k = HandlerKind(i)
			return nil
		}
	}
	return fmt.Errorf("linearizability: unknown handler kind %q", b)
}

// Behaviour is what the handler does on one attempt.
type Behaviour struct {
	Kind  HandlerKind   `json:"kind"`
	Sleep time.Duration `json:"sleep,omitempty"` // IgnoreCtx, Outlive; also a short delay before any other kind
}

// PolicySpec is a deterministic retry policy, so the properties can tell
// what the component should have decided.
type PolicySpec struct {
	// Delay is the delay after the first attempt.
	Delay time.Duration `json:"delay"`
	// Backoff doubles the delay after each attempt, up to 4*Delay, without
	// jitter (core.Backoff); otherwise core.FixedDelay(Delay).
	Backoff bool `json:"backoff,omitempty"`
}

// Policy returns the policy as a core.RetryPolicy.
func (p PolicySpec) Policy() core.RetryPolicy {
	if p.Backoff && p.Delay > 0 {
		return core.Backoff{Min: p.Delay, Max: 4 * p.Delay, Factor: 2, Jitter: -1}.Policy()
	}
	return core.FixedDelay(p.Delay)
}

// WorkerSpec configures one core.Worker.
type WorkerSpec struct {
	Concurrency int           `json:"concurrency"`
	Batch       int           `json:"batch,omitempty"` // WithBatchSize; 0: the default
	Lease       time.Duration `json:"lease"`
	Heartbeat   time.Duration `json:"heartbeat,omitempty"` // 0: the default (a third of the lease)
	PollMin     time.Duration `json:"pollMin"`
	PollMax     time.Duration `json:"pollMax"`
	Shutdown    time.Duration `json:"shutdown"` // WithShutdownTimeout
	Policy      PolicySpec    `json:"policy"`
	// BeatStall delays each of the worker's heartbeats (Extend) on its way
	// to the store, in real time: the worker that stalls and loses leases.
	BeatStall time.Duration `json:"beatStall,omitempty"`
	// Skew is added to every reading of the worker's own clock: the
	// store's clock, not the worker's, must measure a retry's delay.
	Skew time.Duration `json:"skew,omitempty"`
	// Latency delays every call of the worker on its way to the store, in
	// real time: a store a network away, whose calls take long enough for
	// the worker to claim ahead (core.WithPrefetch) while its handlers run.
	Latency time.Duration `json:"latency,omitempty"`
	// Unbatched hides the store's batch calls (core.BatchStore) from the
	// worker, so it acknowledges one Ack at a time, as over a store
	// without them.
	Unbatched bool `json:"unbatched,omitempty"`
}

// HeartbeatEvery is the heartbeat interval the worker uses.
func (w WorkerSpec) HeartbeatEvery() time.Duration {
	if w.Heartbeat > 0 {
		return w.Heartbeat
	}
	return w.Lease / 3
}

// ClientSpec makes worker Worker and broker Broker of the plan one
// core.Client: the worker's settings are its queue's (WithQueue), the
// broker's its maintenance (WithMaintenance; the broker runs in a loop and
// shares the worker's clock). Its store calls are recorded under the
// worker's and the broker's names, by operation, so every runtime property
// of a worker and of a broker holds of the Client's parts. At the stop the
// harness calls Client.Shutdown with a deadline of Grace (real time) instead
// of cancelling Run's context.
type ClientSpec struct {
	Worker int           `json:"worker"`
	Broker int           `json:"broker"`
	Grace  time.Duration `json:"grace"`
	// Every, when set, makes the Client keep the plan's periodic schedule
	// (PeriodicName, core.Every(Every), into the plan's queue) until the
	// ticks end: every Client with the same Every keeps the same schedule,
	// so each occurrence must be enqueued once whoever comes first.
	Every time.Duration `json:"every,omitempty"`
}

// PeriodicName is the name of the schedule the runtime plans' Clients keep.
const PeriodicName = "tick"

// Duration is the time the plan's ticks advance in all.
func (p *RuntimePlan) Duration() time.Duration {
	var d time.Duration
	for _, tk := range p.Ticks {
		d += tk.Advance
	}
	return d
}

// clientOf returns the client that owns worker or broker i, or -1.
func (p *RuntimePlan) clientOf(worker bool, i int) int {
	for c, cs := range p.Clients {
		if worker && cs.Worker == i || !worker && cs.Broker == i {
			return c
		}
	}
	return -1
}

// BrokerSpec configures one core.Broker.
type BrokerSpec struct {
	Batch    int           `json:"batch"`
	ClaimTTL time.Duration `json:"claimTTL"`
	Interval time.Duration `json:"interval"`
	Policy   PolicySpec    `json:"policy"`
	// Skew is added to every reading of the broker's own clock: the store's
	// clock, not the broker's, must measure a requeue's delay.
	Skew time.Duration `json:"skew,omitempty"`
	// Loop runs Broker.Run; otherwise the ticks call RunOnce.
	Loop bool `json:"loop,omitempty"`
	// DecideStall delays each of the broker's decisions (Requeue,
	// Finalize) on its way to the store, in real time: the stalled broker
	// whose claim a late worker or another broker overtakes.
	DecideStall time.Duration `json:"decideStall,omitempty"`
}

// Tick is one step of the schedule: the broker passes it starts, then time
// passing.
type Tick struct {
	// Advance is the time that passes after the tick's actions start (the
	// fake clock advances; in RealTime the controller sleeps).
	Advance time.Duration `json:"advance"`
	// Passes lists the brokers (without Loop) that start a RunOnce pass, if
	// their previous pass is over.
	Passes []int `json:"passes,omitempty"`
}

// InspectKind is an operator action of the runtime mode.
type InspectKind uint8

// The operator actions.
const (
	InspectGet InspectKind = iota
	InspectCounts
	InspectRequeueSeen // Requeue with the version the operator just read
	InspectRequeueAny  // Requeue with AnyVersion
	InspectRemove      // Remove with the version the operator just read
	InspectPause       // Pause the queue (the harness resumes it before the drain)
	InspectResume      // Resume the queue
	InspectCancel      // Cancel with the version the operator just read
)

var inspectKindNames = [...]string{"get", "counts", "requeue-seen", "requeue-any", "remove", "pause", "resume", "cancel"}

// String returns the action's name.
func (k InspectKind) String() string {
	if int(k) < len(inspectKindNames) {
		return inspectKindNames[k]
	}
	return fmt.Sprintf("inspect(%d)", uint8(k))
}

// MarshalText encodes the action as its name.
func (k InspectKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText decodes an action name.
func (k *InspectKind) UnmarshalText(b []byte) error {
	for i, n := range inspectKindNames {
		if n == string(b) {
			*k = InspectKind(i)
			return nil
		}
	}
	return fmt.Errorf("linearizability: unknown inspect action %q", b)
}

// InspectAction is what the operator does at one tick.
type InspectAction struct {
	// By is the operator (0 or 1) who acts: each is a core.Inspector of
	// its own, acting in plan order.
	By   int         `json:"by,omitempty"`
	Tick int         `json:"tick"`
	Kind InspectKind `json:"kind"`
	Task int         `json:"task"` // index into RuntimePlan.Tasks
}

// CallFaultKind is what goes wrong with one store call of a component.
type CallFaultKind uint8

// The store-call faults.
const (
	// CallLoseRequest: the call never reaches the store (a proxy cuts the
	// connection before the request).
	CallLoseRequest CallFaultKind = iota + 1
	// CallLoseReply: the store performs the call; the reply is lost.
	CallLoseReply
	// CallStall: the call reaches the store Delay late.
	CallStall
	// CallSlowReply: the reply reaches the component Delay late.
	CallSlowReply
	// CallBusy: another connection holds the database's write lock for
	// Delay as the call starts (SQLite); where that does not apply, a
	// stall, or with PastTimeout the answer core.ErrBusy without the call.
	CallBusy
)

var callFaultNames = [...]string{"none", "lose-request", "lose-reply", "stall", "slow-reply", "busy"}

// String returns the fault's name.
func (k CallFaultKind) String() string {
	if int(k) < len(callFaultNames) {
		return callFaultNames[k]
	}
	return fmt.Sprintf("fault(%d)", uint8(k))
}

// MarshalText encodes the fault as its name.
func (k CallFaultKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText decodes a fault name.
func (k *CallFaultKind) UnmarshalText(b []byte) error {
	for i, n := range callFaultNames {
		if n == string(b) {
			*k = CallFaultKind(i)
			return nil
		}
	}
	return fmt.Errorf("linearizability: unknown call fault %q", b)
}

// callFault is the store-call fault of a transport fault of a Plan.
func (f Fault) callFault() CallFaultKind {
	switch f {
	case LoseRequest:
		return CallLoseRequest
	case LoseReply:
		return CallLoseReply
	case Busy:
		return CallBusy
	}
	return 0
}

// hold is how long the fault makes the database busy (Busy).
func (f Fault) hold() time.Duration {
	if f == Busy {
		return BusyHold
	}
	return 0
}

// CallFault breaks the Call-th store call (from 0) of one component.
type CallFault struct {
	Component string        `json:"component"` // "worker 0", "broker 1", "producer", "inspector 0"
	Call      int           `json:"call"`
	Kind      CallFaultKind `json:"kind"`
	Delay     time.Duration `json:"delay,omitempty"` // real time, for stalls and busy databases
	// PastTimeout: a busy database (CallBusy) stays busy past the store's
	// busy timeout (BusyTimeout), for BusyHold, so that the call fails
	// with core.ErrBusy having done nothing. Where no database can be
	// made busy, the call is answered core.ErrBusy without reaching the
	// store, as such a store would answer it: so the components' handling
	// of the answer is checked on every adapter.
	PastTimeout bool `json:"pastTimeout,omitempty"`
}

// BusyTimeout is how long the SQLite stores of the harness's backends wait
// for the write lock another connection holds before they answer
// core.ErrBusy; BusyHold is how long a busy database fault with
// PastTimeout holds that lock.
const (
	BusyTimeout = 50 * time.Millisecond
	BusyHold    = 2 * BusyTimeout
)

// hold is how long the fault makes the database busy.
func (f CallFault) hold() time.Duration {
	if f.Kind == CallBusy && f.PastTimeout {
		return BusyHold
	}
	return f.Delay
}

// Component names, as the recorder's actors.
func workerName(i int) string    { return fmt.Sprintf("worker %d", i) }
func brokerName(i int) string    { return fmt.Sprintf("broker %d", i) }
func inspectorName(i int) string { return fmt.Sprintf("inspector %d", i) }
func clientName(i int) string    { return fmt.Sprintf("client %d", i) }
func schedulerName(i int) string { return fmt.Sprintf("scheduler %d", i) }

const (
	producerName = "producer"
	finalName    = "final"
)

// String shows the plan in a few lines.
func (p *RuntimePlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "runtime plan: %s time, queue %s, %d ticks", p.Mode, p.Queue, len(p.Ticks))
	if p.StallEvery > 0 {
		fmt.Fprintf(&b, ", clock stalls every %d readings from %d", p.StallEvery, p.StallFrom)
	}
	b.WriteString("\n")
	for i, w := range p.Workers {
		fmt.Fprintf(&b, "  %s: concurrency %d batch %d lease %s heartbeat %s poll %s..%s shutdown %s policy %s heartbeats stall %s unbatched %v skew %s latency %v\n",
			workerName(i), w.Concurrency, w.Batch, ms(w.Lease), ms(w.HeartbeatEvery()), ms(w.PollMin), ms(w.PollMax), ms(w.Shutdown), w.Policy, ms(w.BeatStall), w.Unbatched, ms(w.Skew), w.Latency)
	}
	for i, br := range p.Brokers {
		run := "RunOnce at ticks"
		if br.Loop {
			run = "Run every " + ms(br.Interval)
		}
		fmt.Fprintf(&b, "  %s: batch %d claim TTL %s skew %s policy %s decisions stall %s, %s\n", brokerName(i), br.Batch, ms(br.ClaimTTL), ms(br.Skew), br.Policy, ms(br.DecideStall), run)
	}
	for i, c := range p.Clients {
		fmt.Fprintf(&b, "  %s: %s and %s, shutdown grace %s\n", clientName(i), workerName(c.Worker), brokerName(c.Broker), ms(c.Grace))
	}
	for _, t := range p.Tasks {
		fmt.Fprintf(&b, "  task %s: tick %d prio %d attempts %d delay %s", t.ID, t.Tick, t.Priority, t.MaxAttempts, ms(t.Delay))
		if t.Timeout > 0 {
			fmt.Fprintf(&b, " timeout %s", ms(t.Timeout))
		}
		b.WriteString(":")
		for _, a := range t.Attempts {
			fmt.Fprintf(&b, " %s", a.Kind)
			if a.Sleep > 0 {
				fmt.Fprintf(&b, "(%s)", ms(a.Sleep))
			}
		}
		b.WriteString("\n")
	}
	for i, t := range p.Ticks {
		fmt.Fprintf(&b, "  tick %d: +%s passes %v\n", i, ms(t.Advance), t.Passes)
	}
	for _, a := range p.Inspects {
		fmt.Fprintf(&b, "  %s at tick %d: %s %s\n", inspectorName(a.By), a.Tick, a.Kind, p.Tasks[a.Task].ID)
	}
	for _, f := range p.Faults {
		fmt.Fprintf(&b, "  fault: %s call %d %s %s\n", f.Component, f.Call, f.Kind, ms(f.Delay))
	}
	return b.String()
}

// String shows the policy.
func (p PolicySpec) String() string {
	if p.Backoff {
		return "backoff " + ms(p.Delay)
	}
	return "fixed " + ms(p.Delay)
}

// RuntimeOptions bound the plans RuntimePlans draws.
type RuntimeOptions struct {
	// Mode is FakeTime, RealTime or MixedTime (one plan in four real).
	Mode TimeMode
	// Faults injects store-call faults: lost requests and replies, stalled
	// calls and replies (and busy databases where the backend can make
	// them). Without it, only stalls are drawn.
	Faults bool
	// MaxTasks bounds the tasks of a plan (default 8).
	MaxTasks int
}

// RuntimePlans returns a rapid generator of runtime plans. Choices shrink
// toward one worker, one broker, few tasks that succeed, and no fault.
func RuntimePlans(o RuntimeOptions) *rapid.Generator[*RuntimePlan] {
	if o.MaxTasks <= 0 {
		o.MaxTasks = 8
	}
	return rapid.Custom(func(t *rapid.T) *RuntimePlan {
		p := &RuntimePlan{Mode: o.Mode, Queue: "q0"}
		if o.Mode == MixedTime {
			p.Mode = FakeTime
			if rapid.IntRange(0, 3).Draw(t, "real") == 3 {
				p.Mode = RealTime
			}
		}
		// Real time runs on a scale of its own: leases long enough that a
		// busy machine's scheduling delays do not lapse every one.
		unit := time.Millisecond
		// stall is the unit of a stalled heartbeat or decision, in real
		// time: in FakeTime the clock moves on while a call is stalled past
		// settleMax; in RealTime a stall must outlast a good part of a
		// lease for the lease to lapse.
		stall := time.Millisecond
		if p.Mode == RealTime {
			unit, stall = 4*time.Millisecond, 8*time.Millisecond
		}
		d := func(lo, hi int, label string) time.Duration {
			return time.Duration(rapid.IntRange(lo, hi).Draw(t, label)) * unit
		}
		policy := func() PolicySpec {
			return PolicySpec{Delay: d(0, 4, "retry delay"), Backoff: rapid.Bool().Draw(t, "backoff")}
		}
		ticks := rapid.IntRange(4, 24).Draw(t, "ticks")
		for range ticks {
			tk := Tick{Advance: d(1, 3, "advance")}
			if rapid.IntRange(0, 7).Draw(t, "jump") == 7 {
				tk.Advance = d(8, 24, "jump") // a stall of everyone: leases lapse
			}
			p.Ticks = append(p.Ticks, tk)
		}
		for range rapid.IntRange(1, 3).Draw(t, "workers") {
			w := WorkerSpec{
				Concurrency: rapid.IntRange(1, 3).Draw(t, "concurrency"),
				Lease:       d(6, 12, "lease"),
				PollMin:     unit,
				PollMax:     4 * unit,
				Shutdown:    d(0, 4, "shutdown"),
				Policy:      policy(),
			}
			if rapid.IntRange(0, 2).Draw(t, "batch?") == 2 {
				w.Batch = rapid.IntRange(1, w.Concurrency).Draw(t, "batch")
			}
			if rapid.IntRange(0, 2).Draw(t, "heartbeat?") == 2 {
				w.Heartbeat = d(1, int(w.Lease/unit)-1, "heartbeat")
			}
			w.Unbatched = rapid.IntRange(0, 2).Draw(t, "unbatched") == 2
			w.Skew = time.Duration(rapid.IntRange(-2, 3).Draw(t, "worker skew")) * unit
			if rapid.IntRange(0, 2).Draw(t, "beat stall?") == 2 {
				w.BeatStall = time.Duration(rapid.IntRange(1, 6).Draw(t, "beat stall")) * stall
			}
			if rapid.Bool().Draw(t, "latency?") {
				w.Latency = time.Duration(rapid.IntRange(3, 20).Draw(t, "latency")) * 10 * time.Microsecond
			}
			p.Workers = append(p.Workers, w)
		}
		for range rapid.IntRange(1, 2).Draw(t, "brokers") {
			br := BrokerSpec{
				Batch:    rapid.IntRange(1, 3).Draw(t, "broker batch"),
				ClaimTTL: d(2, 8, "claim TTL"),
				Interval: d(1, 5, "interval"),
				Policy:   policy(),
				Skew:     time.Duration(rapid.IntRange(-2, 3).Draw(t, "skew")) * unit,
				Loop:     rapid.IntRange(0, 2).Draw(t, "loop") == 2,
			}
			if rapid.IntRange(0, 2).Draw(t, "decide stall?") == 2 {
				br.DecideStall = time.Duration(rapid.IntRange(1, 4).Draw(t, "decide stall")) * stall
			}
			p.Brokers = append(p.Brokers, br)
		}
		// Workers and brokers paired into Clients, from the first of each.
		for i := range min(len(p.Workers), len(p.Brokers)) {
			if rapid.IntRange(0, 2).Draw(t, "client?") != 2 {
				break
			}
			p.Brokers[i].Loop, p.Brokers[i].Skew = true, p.Workers[i].Skew
			p.Clients = append(p.Clients, ClientSpec{Worker: i, Broker: i,
				Grace: time.Duration(rapid.IntRange(0, 4).Draw(t, "client grace")) * time.Millisecond})
		}
		// Clients keep one periodic schedule: all of them, or none.
		if len(p.Clients) > 0 && rapid.Bool().Draw(t, "periodic") {
			every := d(1, 4, "every")
			for i := range p.Clients {
				p.Clients[i].Every = every
			}
		}
		for i := range p.Ticks {
			for b, br := range p.Brokers {
				if !br.Loop && rapid.IntRange(0, 2).Draw(t, "pass") > 0 {
					p.Ticks[i].Passes = append(p.Ticks[i].Passes, b)
				}
			}
		}
		kinds := []HandlerKind{Succeed, Succeed, Error, Outlive, ResultAndError, PermanentError, Panic, IgnoreCtx, Succeed, Error}
		for i := range rapid.IntRange(1, o.MaxTasks).Draw(t, "tasks") {
			rt := RuntimeTask{
				ID:          fmt.Sprintf("t%d", i),
				Tick:        rapid.IntRange(0, ticks-1).Draw(t, "enqueue tick"),
				Priority:    rapid.IntRange(-1, 1).Draw(t, "priority"),
				MaxAttempts: rapid.IntRange(1, 3).Draw(t, "max attempts"),
			}
			if rapid.IntRange(0, 3).Draw(t, "scheduled") == 3 {
				rt.Delay = d(1, 4, "enqueue delay")
			}
			for range rapid.IntRange(1, 3).Draw(t, "behaviours") {
				bh := Behaviour{Kind: kinds[rapid.IntRange(0, len(kinds)-1).Draw(t, "handler")]}
				switch bh.Kind {
				case Outlive:
					bh.Sleep = d(13, 30, "outlive")
				case IgnoreCtx:
					bh.Sleep = d(1, 20, "ignore sleep")
				default:
					bh.Sleep = d(0, 2, "work")
				}
				rt.Attempts = append(rt.Attempts, bh)
			}
			if rapid.IntRange(0, 3).Draw(t, "timeout?") == 3 {
				// Shorter than some sleeps and longer than some leases.
				rt.Timeout = d(2, 20, "attempt timeout")
			}
			p.Tasks = append(p.Tasks, rt)
		}
		for range rapid.IntRange(0, 4).Draw(t, "inspects") {
			p.Inspects = append(p.Inspects, InspectAction{
				By:   rapid.IntRange(0, 1).Draw(t, "inspector"),
				Tick: rapid.IntRange(0, ticks-1).Draw(t, "inspect tick"),
				Kind: InspectKind(rapid.IntRange(0, len(inspectKindNames)-1).Draw(t, "inspect")),
				Task: rapid.IntRange(0, len(p.Tasks)-1).Draw(t, "inspect task"),
			})
		}
		var components []string
		for i := range p.Workers {
			components = append(components, workerName(i))
		}
		for i := range p.Brokers {
			components = append(components, brokerName(i))
		}
		components = append(components, producerName)
		if len(p.Inspects) > 0 {
			components = append(components, inspectorName(0), inspectorName(1))
		}
		faultKinds := []CallFaultKind{CallStall, CallSlowReply, CallBusy}
		if o.Faults {
			faultKinds = append(faultKinds, CallLoseRequest, CallLoseReply, CallLoseRequest, CallLoseReply)
		}
		for range rapid.IntRange(0, 3).Draw(t, "faults") {
			f := CallFault{
				Component: components[rapid.IntRange(0, len(components)-1).Draw(t, "fault component")],
				Call:      rapid.IntRange(0, 40).Draw(t, "fault call"),
				Kind:      faultKinds[rapid.IntRange(0, len(faultKinds)-1).Draw(t, "fault kind")],
			}
			if (f.Kind == CallLoseRequest || f.Kind == CallLoseReply) && p.Mode == RealTime {
				// In RealTime every op reads a distinct time, and the checker
				// carries a state per reading after an indeterminate op, to
				// the end of the history: one of them made a check of a long
				// runtime history take 6s. The store-level plans lose calls
				// in real time.
				f.Kind = CallStall
			}
			switch f.Kind {
			case CallStall, CallSlowReply, CallBusy:
				f.Delay = time.Duration(rapid.IntRange(1, 8).Draw(t, "fault delay")) * time.Millisecond
			}
			// The longest busy databases outlast the store's busy
			// timeout: their calls are answered core.ErrBusy.
			f.PastTimeout = f.Kind == CallBusy && f.Delay >= 5*time.Millisecond
			p.Faults = append(p.Faults, f)
		}
		if len(p.Workers) > 0 && rapid.IntRange(0, 2).Draw(t, "busy worker") == 2 {
			// A worker's early call (its first decisions among them) meets
			// a database busy past the timeout: what a worker does with a
			// decision answered core.ErrBusy.
			p.Faults = append(p.Faults, CallFault{
				Component:   workerName(rapid.IntRange(0, len(p.Workers)-1).Draw(t, "busy worker index")),
				Call:        rapid.IntRange(1, 12).Draw(t, "busy worker call"),
				Kind:        CallBusy,
				Delay:       8 * time.Millisecond,
				PastTimeout: true,
			})
		}
		if rapid.IntRange(0, 2).Draw(t, "stall clock") == 2 {
			p.StallEvery = rapid.IntRange(3, 9).Draw(t, "stall every")
			p.StallFrom = rapid.IntRange(0, 20).Draw(t, "stall from")
		}
		return p
	})
}
