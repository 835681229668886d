package linearizability

import (
	"fmt"
	"strings"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/model"
)

// TimeMode says which clock the stores of a history judge leases by.
type TimeMode uint8

const (
	// FakeTime: a core.FakeClock that only the plan advances, between rounds
	// and in clients' pauses, in whole milliseconds. Every Now a store
	// reports is one the plan chose, so leases end exactly on a deadline as
	// often as not: the mode for off-by-one expiry bugs, and reproducible
	// in everything but the interleaving inside a round.
	FakeTime TimeMode = iota
	// RealTime: the system clock, leases of a few milliseconds and real
	// pauses. Catches bugs that need real time to pass during an op.
	RealTime
	// MixedTime lets each plan choose: three in four fake, one in four real.
	// It is a setting of Config and PlanOptions, never of a plan.
	MixedTime
)

var timeModeNames = [...]string{"fake", "real", "mixed"}

// String returns "fake", "real" or "mixed".
func (m TimeMode) String() string {
	if int(m) < len(timeModeNames) {
		return timeModeNames[m]
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// MarshalText encodes the mode as its name.
func (m TimeMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText decodes a mode name.
func (m *TimeMode) UnmarshalText(b []byte) error {
	v, err := ParseTimeMode(string(b))
	*m = v
	return err
}

// ParseTimeMode returns the mode named "fake", "real" or "mixed".
func ParseTimeMode(s string) (TimeMode, error) {
	for i, n := range timeModeNames {
		if n == s {
			return TimeMode(i), nil
		}
	}
	return 0, fmt.Errorf("linearizability: unknown time mode %q (want fake, real or mixed)", s)
}

// Role is what a client of a plan does.
type Role uint8

// The roles.
const (
	// Worker pops tasks and decides them: Ack, Fail, Retry, Extend.
	Worker Role = iota
	// Broker claims expired tasks and decides them (Requeue, Finalize),
	// now and then recovers expired tasks in one step, and promotes due
	// ones.
	Broker
	// Producer enqueues tasks (and promotes due ones).
	Producer
	// Inspector reads (Get, List, Counts) and acts as an operator
	// (InspectRequeue, Remove, Prune, often with the version it saw; and
	// Pause and Resume of a queue).
	Inspector
	// Recoverer decides expired tasks in one step (RecoverExpired), the
	// way a broker without a retry callback does, and promotes due ones.
	Recoverer
)

var roleNames = [...]string{"worker", "broker", "producer", "inspector", "recoverer"}

// String returns the role's name.
func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// MarshalText encodes the role as its name.
func (r Role) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText decodes a role name.
func (r *Role) UnmarshalText(b []byte) error {
	for i, n := range roleNames {
		if n == string(b) {
			*r = Role(i)
			return nil
		}
	}
	return fmt.Errorf("linearizability: unknown role %q", b)
}

// Kind is what one step of a client does: a store op, or a pause.
type Kind uint8

// The kinds of step. Each store op is named after the model op it calls.
const (
	Enqueue Kind = iota
	Promote
	Pop
	Extend
	Ack
	Fail
	Retry
	ClaimExpired
	Requeue
	Finalize
	RecoverExpired
	InspectRequeue
	Remove
	Prune
	Get
	List
	Counts
	// Pause: the client stops for Delay. In FakeTime the clock advances by
	// Delay (time passes for everyone); in RealTime the client sleeps. A
	// pause between a claim and its decision is the stalled broker, the
	// slow worker.
	Pause
	// AckPop: a worker's AckBatch of the claim Pick chooses (and, with
	// More, the one before it and the last one the client decided, a late
	// ack beside fresh ones) that claims up to N tasks of its queue with
	// Lease after the acks (N 0: none), as a Worker's acknowledgements do.
	// On a store that is no core.BatchStore it is an Ack.
	AckPop
	// PauseQueue and ResumeQueue: the inspector pauses or resumes Queue
	// (the store ops Pause and Resume).
	PauseQueue
	ResumeQueue
	// CancelTask: the inspector cancels Task (the store op Cancel), with
	// the version it saw as Expect says.
	CancelTask
	// Tx: the client opens the application's own transaction on the
	// store's database (a TxStore), acks in it the claim Pick chooses
	// (Ack, a worker's, where the adapter has AckTx; the transaction is
	// then on the claim's queue), enqueues N tasks in it as Enqueue
	// would, writes an application row (Row), and commits or rolls back
	// (Rollback). Drawn only with PlanOptions.Tx.
	Tx
	// DamageTask damages the stored record of Task of Queue mid-history
	// (Backend.Damage; skipped on a backend without it): the event
	// model.Queue.Damage, checked as one more step of the model. See
	// damage.go.
	DamageTask
)

var kindNames = [...]string{"Enqueue", "Promote", "Pop", "Extend", "Ack", "Fail", "Retry",
	"ClaimExpired", "Requeue", "Finalize", "RecoverExpired", "InspectRequeue", "Remove",
	"Prune", "Get", "List", "Counts", "Pause", "AckPop", "PauseQueue", "ResumeQueue", "CancelTask", "Tx", "DamageTask"}

// String returns the kind's name.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MarshalText encodes the kind as its name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText decodes a kind name.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, n := range kindNames {
		if n == string(b) {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("linearizability: unknown step kind %q", b)
}

// Fault is a failure injected into one step: a transport failure, after
// which the store call returns an error of no contract kind, so the op is
// indeterminate, or a busy database.
type Fault uint8

// The faults.
const (
	NoFault Fault = iota
	// LoseRequest: the call never reaches the store.
	LoseRequest
	// LoseReply: the store performs the op; its answer is lost.
	LoseReply
	// Busy: another connection holds the database's write lock past the
	// store's busy timeout (BusyHold), so the call is answered
	// core.ErrBusy and does not run (SQLite). A store that cannot be made
	// busy runs the call as it is.
	Busy
)

// Step is one action of a client. Its arguments are abstract where they
// depend on earlier results: Pick chooses among the claims the client holds.
type Step struct {
	Kind  Kind `json:"kind"`
	Queue int  `json:"queue,omitempty"` // index into Plan.Queues
	// Task indexes Plan.Tasks. An Enqueue takes the ID Task places after
	// the producer's previous one, so producers mostly add new tasks.
	Task     int           `json:"task,omitempty"`
	Priority int           `json:"priority,omitempty"` // Enqueue
	Attempts int           `json:"attempts,omitempty"` // Enqueue: MaxAttempts
	Timeout  time.Duration `json:"timeout,omitempty"`  // Enqueue: the attempt timeout stored with the task
	// Key is an Enqueue's unique key ("" none; its bulk tasks have none)
	// and KeyFor its hold period (0: while pending).
	Key    string        `json:"key,omitempty"`
	KeyFor time.Duration `json:"keyFor,omitempty"`
	Lease  time.Duration `json:"lease,omitempty"` // Pop, Extend; ClaimExpired's TTL; RecoverExpired's delay
	// Delay is the RunAfter of Enqueue and Prune's before, relative to the
	// client's reading of the clock; the delay of Retry and Requeue, which
	// the store adds to its own (rarely a negative one, refused); a Pause's
	// length.
	Delay time.Duration `json:"delay,omitempty"`
	// N is Pop's batch; the limit of Promote, ClaimExpired, RecoverExpired,
	// Prune and List; for an Enqueue above 1, the number of tasks it adds
	// in bulk (one call each, IDs apart from Tasks; see BulkSizes).
	N int `json:"n,omitempty"`
	// Batched makes an Enqueue of N above 1 one EnqueueBatch call of all N
	// tasks on a store that is a core.BatchStore (one call each on another).
	Batched bool `json:"batched,omitempty"`
	// Taken makes a Batched fill's batch also name IDs that may be taken:
	// every ID of Plan.Tasks, among its own, and its first item again in
	// the middle and at the end, so that some of its items are refused
	// (ErrConflict) and the others still added, each answered on its own.
	Taken bool `json:"taken,omitempty"`
	// Pick chooses the claim a decision (Extend, Ack, Fail, Retry; Requeue,
	// Finalize) uses: 0 the newest claim the client holds and has not
	// decided yet, 1 the one before; 2 the last claim it already decided
	// (a stale one); -1 a forged claim on Task with token or version
	// Forged. A client that holds no claim claims instead: a worker Pops
	// one task from Queue, a broker runs ClaimExpired on Queue.
	Pick   int    `json:"pick,omitempty"`
	Forged uint64 `json:"forged,omitempty"`
	// Expect is an inspector action's expected version: 0 none, 1 the
	// version the inspector last saw of the task, 2 a version it never saw.
	Expect int           `json:"expect,omitempty"`
	State  model.State   `json:"state,omitempty"`  // List
	Cursor bool          `json:"cursor,omitempty"` // List: after = Task
	Prune  []model.State `json:"prune,omitempty"`  // Prune's states
	More   bool          `json:"more,omitempty"`   // AckPop: also the claim before the picked one
	// Ack, Row, Rollback and Immediate shape a Tx: ack a held claim in
	// it, write an application row, roll back instead of committing, and
	// (SQLite) begin it IMMEDIATE rather than deferred.
	Ack       bool  `json:"ack,omitempty"`
	Row       bool  `json:"row,omitempty"`
	Rollback  bool  `json:"rollback,omitempty"`
	Immediate bool  `json:"immediate,omitempty"`
	Fault     Fault `json:"fault,omitempty"`
}

// ClientPlan is what one client does, round by round.
type ClientPlan struct {
	Role   Role     `json:"role"`
	Rounds [][]Step `json:"rounds"`
	// TwinOf, when not 0, is the index of the client whose steps this one
	// repeats (its Rounds are the same, without faults); a twin holds its
	// own claims.
	TwinOf int `json:"twinOf,omitempty"`
}

// Plan is a whole concurrent run, drawn before any goroutine starts. All
// clients run round 0 concurrently; when every client has finished it, Gaps[0]
// of time passes (FakeTime: the clock advances; RealTime: the runner
// sleeps); then round 1, and so on.
type Plan struct {
	Mode     TimeMode        `json:"mode"`
	Queues   []string        `json:"queues"`
	Tasks    []string        `json:"tasks"` // the task IDs steps draw from
	Capacity int             `json:"capacity"`
	Gaps     []time.Duration `json:"gaps"` // one per round
	Clients  []ClientPlan    `json:"clients"`
	// StallEvery, when not 0, makes every StallEvery-th reading of the
	// stores' clock (counting from 0 in the order they are taken, from the
	// reading StallFrom on, at most MaxStalls of them) block for
	// ClockStall before returning the time.
	// A store reads its clock inside an op, often holding a lock: a stall
	// there lets the other clients pile up behind it, and widens the gap
	// between two steps of an op that should have been one (a read, then a
	// separate write) until another client's op falls into it. The time
	// read is not changed.
	StallEvery int `json:"stallEvery,omitempty"`
	StallFrom  int `json:"stallFrom,omitempty"`
	// SubMicro, when not 0, adds a fraction of a microsecond to the stores'
	// readings of the clock: the k-th reading gets (k*SubMicro mod 1000)ns
	// more. The recorder keeps the whole-microsecond reading, the instant a
	// store must use: every time a store reports must be whole
	// microseconds.
	SubMicro int `json:"subMicro,omitempty"`
	// Scribble makes every client a careless caller: once it has used an
	// answer it writes over the payloads, results, error histories and the
	// Tasks, IDs and Claims slices the store returned, and after each call
	// over the byte slices it passed in. A store that shares its own slices
	// with a caller then answers later calls with the scribbles.
	Scribble bool `json:"scribble,omitempty"`
}

// Rounds returns the number of rounds.
func (p *Plan) Rounds() int { return len(p.Gaps) }

// Steps returns the number of steps of all clients.
func (p *Plan) Steps() int {
	n := 0
	for _, c := range p.Clients {
		for _, r := range c.Rounds {
			n += len(r)
		}
	}
	return n
}

// Compact returns the same run in fewer words: without the rounds in which
// no client has a step (a round's gap then adds up the gaps of the empty
// rounds after it; leading empty rounds only shift every time, which changes
// no verdict). rapid's shrinking leaves such rounds behind.
func (p *Plan) Compact() *Plan {
	var keep []int
	var gaps []time.Duration
	for r, gap := range p.Gaps {
		empty := true
		for _, c := range p.Clients {
			empty = empty && len(c.Rounds[r]) == 0
		}
		switch {
		case !empty:
			keep = append(keep, r)
			gaps = append(gaps, gap)
		case len(gaps) > 0:
			gaps[len(gaps)-1] += gap
		}
	}
	if len(keep) == 0 { // no step at all: one empty round
		keep, gaps = []int{0}, []time.Duration{0}
	}
	q := *p
	q.Gaps = gaps
	q.Clients = make([]ClientPlan, len(p.Clients))
	for i, c := range p.Clients {
		c.Rounds = make([][]Step, len(keep))
		for j, r := range keep {
			c.Rounds[j] = p.Clients[i].Rounds[r]
		}
		q.Clients[i] = c
	}
	return &q
}

// String shows the plan one client per line, rounds separated by "|".
func (p *Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan: %s time, queues %v, tasks %v, capacity %d, gaps %v",
		p.Mode, p.Queues, p.Tasks, p.Capacity, p.Gaps)
	if p.StallEvery > 0 {
		fmt.Fprintf(&b, ", clock stalls every %d readings from %d", p.StallEvery, p.StallFrom)
	}
	if p.SubMicro > 0 {
		fmt.Fprintf(&b, ", readings +k*%dns", p.SubMicro)
	}
	if p.Scribble {
		b.WriteString(", callers scribble over answers")
	}
	b.WriteString("\n")
	for i, c := range p.Clients {
		fmt.Fprintf(&b, "  %s %d:", c.Role, i)
		if c.TwinOf > 0 {
			fmt.Fprintf(&b, " (twin of %d)", c.TwinOf)
		}
		for r, steps := range c.Rounds {
			if r > 0 {
				b.WriteString(" |")
			}
			for _, s := range steps {
				b.WriteString(" ")
				b.WriteString(p.describeStep(s))
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func (p *Plan) describeStep(s Step) string {
	q, id := "", ""
	if s.Queue < len(p.Queues) {
		q = p.Queues[s.Queue]
	}
	if s.Task < len(p.Tasks) {
		id = p.Tasks[s.Task]
	}
	pick := func() string {
		if s.Pick < 0 {
			return fmt.Sprintf("forged %s/%s #%d", q, id, s.Forged)
		}
		return fmt.Sprintf("claim -%d", s.Pick)
	}
	var d string
	switch s.Kind {
	case Enqueue:
		if s.N > 1 {
			id = fmt.Sprintf("%d in bulk", s.N)
			if s.Batched {
				id += ", one batch"
			}
			if s.Taken {
				id += " naming taken IDs"
			}
		}
		d = fmt.Sprintf("%s/%s p%d a%d +%s", q, id, s.Priority, s.Attempts, ms(s.Delay))
		if s.Timeout > 0 {
			d += " timeout " + s.Timeout.String()
		}
		if s.Key != "" {
			d += " key " + s.Key
			if s.KeyFor > 0 {
				d += " for " + ms(s.KeyFor)
			}
		}
	case Pop:
		d = fmt.Sprintf("%s n%d %s", q, s.N, ms(s.Lease))
	case Extend:
		d = pick() + " " + ms(s.Lease)
	case Ack, Fail, Finalize:
		d = pick()
	case Retry, Requeue:
		d = pick() + " +" + ms(s.Delay)
	case ClaimExpired:
		d = fmt.Sprintf("%s ttl %s limit %d", q, ms(s.Lease), s.N)
	case RecoverExpired:
		d = fmt.Sprintf("%s delay %s limit %d", q, ms(s.Lease), s.N)
	case Promote:
		d = fmt.Sprintf("%s limit %d", q, s.N)
	case InspectRequeue, Remove, CancelTask:
		d = fmt.Sprintf("%s/%s expect %d", q, id, s.Expect)
	case Get, DamageTask:
		d = q + "/" + id
	case List:
		d = fmt.Sprintf("%s %v n%d", q, s.State, s.N)
		if s.Cursor {
			d += " after " + id
		}
	case Counts, PauseQueue, ResumeQueue:
		d = q
	case Prune:
		d = fmt.Sprintf("%s %v %s limit %d", q, s.Prune, ms(s.Delay), s.N)
	case Pause:
		d = ms(s.Delay)
	case Tx:
		var parts []string
		if s.Ack {
			parts = append(parts, "ack "+pick())
		}
		if s.N > 0 {
			parts = append(parts, fmt.Sprintf("enqueue %d on %s from %s p%d a%d +%s", s.N, q, id, s.Priority, s.Attempts, ms(s.Delay)))
		}
		if s.Row {
			parts = append(parts, "row")
		}
		end := "commit"
		if s.Rollback {
			end = "rollback"
		}
		if s.Immediate {
			end += ", immediate"
		}
		d = strings.Join(append(parts, end), "; ")
	case AckPop:
		d = pick()
		if s.More {
			d += " and the one before and the last decided"
		}
		d += fmt.Sprintf(", pop n%d %s", s.N, ms(s.Lease))
	}
	out := s.Kind.String() + "(" + d + ")"
	switch s.Fault {
	case LoseRequest:
		out += "!req"
	case LoseReply:
		out += "!reply"
	case Busy:
		out += "!busy"
	}
	return out
}

// PlanOptions bound the plans Plans draws.
type PlanOptions struct {
	// Mode is FakeTime, RealTime, or MixedTime (each plan chooses).
	Mode TimeMode
	// MaxClients bounds the number of clients (default 6). The first three
	// are a producer, a worker and a broker; the others draw their roles.
	MaxClients int
	// MinClients is the least number of clients (default and at least 3).
	MinClients int
	// MaxRounds bounds the number of rounds (default 8).
	MaxRounds int
	// MinRounds is the least number of rounds (default 1).
	MinRounds int
	// MaxSteps bounds a client's steps in one round (default 4).
	MaxSteps int
	// Faults injects transport faults into about one step in 60, at most
	// two in a plan, making those ops indeterminate (in RealTime one step in
	// 120 and at most one fault: each indeterminate op there multiplies the
	// states the checker carries by the number of clock readings after it,
	// one per op, where FakeTime has a handful of distinct readings). A twin
	// repeats its original's steps without their faults.
	Faults bool
	// ProducerTwins adds this many twins of the first client, a producer,
	// to every plan (beyond MaxClients): the same Enqueues racing at the same
	// moments, which is how a store that sends concurrent Enqueue calls
	// together is made to do it.
	ProducerTwins int
	// WithoutContests draws no contest (drawContest), whose clients come
	// beyond MaxClients: for a run that must keep its plans to a few
	// clients (the checks of histories full of indeterminate calls grow
	// fast with the clients that may have made them).
	WithoutContests bool
	// UnbatchedFills makes every bulk fill one Enqueue call per task, never
	// one EnqueueBatch: for a run whose calls are often indeterminate (an
	// indeterminate batch of many tasks leaves the checker a number of
	// states it cannot search in time).
	UnbatchedFills bool
	// Tx draws Tx steps too (about one step in eight of producers and
	// workers): for stores that are TxStores. Without it the plans are
	// those drawn before Tx steps existed.
	Tx bool
}

func (o PlanOptions) withDefaults() PlanOptions {
	if o.MaxClients == 0 {
		o.MaxClients = 6
	}
	o.MaxClients = max(o.MaxClients, 3)
	if o.MaxRounds <= 0 {
		o.MaxRounds = 8
	}
	o.MinClients = min(max(o.MinClients, 3), o.MaxClients)
	o.MinRounds = min(max(o.MinRounds, 1), o.MaxRounds)
	if o.MaxSteps <= 0 {
		o.MaxSteps = 4
	}
	return o
}

// Plans returns a rapid generator of plans. Every choice shrinks toward a
// simpler plan: fewer rounds, clients and steps, fake time, one queue, no
// capacity, no fault, the newest claim rather than an older or forged one.
func Plans(o PlanOptions) *rapid.Generator[*Plan] {
	o = o.withDefaults()
	return rapid.Custom(func(t *rapid.T) *Plan {
		p := &Plan{Mode: o.Mode}
		if o.Mode == MixedTime {
			p.Mode = FakeTime
			if rapid.IntRange(0, 3).Draw(t, "real") == 3 {
				p.Mode = RealTime
			}
		}
		p.Queues = []string{"q0"}
		if rapid.IntRange(0, 3).Draw(t, "queues") == 3 {
			p.Queues = append(p.Queues, "q1")
		}
		for i := range rapid.IntRange(3, 8).Draw(t, "tasks") {
			p.Tasks = append(p.Tasks, fmt.Sprintf("t%d", i))
		}
		if c := rapid.IntRange(0, 9).Draw(t, "capacity"); c >= 7 {
			p.Capacity = c - 5
		}
		rounds := rapid.IntRange(o.MinRounds, o.MaxRounds).Draw(t, "rounds")
		for range rounds {
			p.Gaps = append(p.Gaps, msDur(rapid.IntRange(0, 3).Draw(t, "gap")))
		}
		if rapid.IntRange(0, 1).Draw(t, "stall clock") == 1 {
			p.StallEvery = rapid.IntRange(2, 5).Draw(t, "stall every")
			p.StallFrom = rapid.IntRange(0, 7).Draw(t, "stall from")
		}
		if rapid.IntRange(0, 3).Draw(t, "sub-microsecond clock") == 3 {
			p.SubMicro = []int{999, 1, 500, 337}[rapid.IntRange(0, 3).Draw(t, "sub-microsecond step")]
		}
		p.Scribble = rapid.IntRange(0, 3).Draw(t, "scribble") > 0
		// One plan in six enqueues hundreds of tasks in one step (drawBulk).
		bulk := rapid.IntRange(0, 5).Draw(t, "bulk") == 5
		g := stepGen{p: p, faults: new(int), tx: o.Tx}
		if o.Faults && !(bulk && p.Mode == RealTime) {
			g.faultOdds, g.maxFaults = 64, 2
			if p.Mode == RealTime {
				g.faultOdds, g.maxFaults = 128, 1
			}
		}
		clients := rapid.IntRange(o.MinClients, o.MaxClients).Draw(t, "clients")
		for i := range clients {
			role := Producer
			switch {
			case i == 1:
				role = Worker
			case i == 2:
				role = Broker
			case i > 2:
				// A twin repeats an earlier client's steps at the same
				// moments: identical ops racing each other are how a
				// read-then-write inside one op shows (two recoveries of
				// one task, two pops of one task).
				if rapid.IntRange(0, 3).Draw(t, "twin") == 3 {
					of := rapid.IntRange(1, i-1).Draw(t, "twin of")
					p.Clients = append(p.Clients, ClientPlan{Role: p.Clients[of].Role, Rounds: withoutFaults(p.Clients[of].Rounds), TwinOf: of})
					continue
				}
				role = []Role{Worker, Broker, Recoverer, Inspector, Producer, Worker}[rapid.IntRange(0, 5).Draw(t, "role")]
			}
			c := ClientPlan{Role: role}
			for range rounds {
				steps := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Step { return g.draw(t, role) }), 0, o.MaxSteps).Draw(t, "steps")
				c.Rounds = append(c.Rounds, steps)
			}
			p.Clients = append(p.Clients, c)
		}
		for range o.ProducerTwins {
			p.Clients = append(p.Clients, ClientPlan{Role: Producer, Rounds: withoutFaults(p.Clients[0].Rounds), TwinOf: 0})
		}
		if bulk {
			c := &p.Clients[rapid.IntRange(0, len(p.Clients)-1).Draw(t, "bulk client")]
			r := rapid.IntRange(0, rounds-1).Draw(t, "bulk round")
			fill := drawBulk(t, p)
			if o.UnbatchedFills {
				for i := range fill {
					fill[i].Batched = false
				}
			}
			c.Rounds[r] = append(fill, c.Rounds[r]...)
		}
		drawDamage(t, p)
		if !o.WithoutContests {
			drawContest(t, p)
		}
		return p
	})
}

// withoutFaults returns a copy of rounds with no fault injected.
func withoutFaults(rounds [][]Step) [][]Step {
	out := make([][]Step, len(rounds))
	for r, steps := range rounds {
		out[r] = make([]Step, len(steps))
		for i, s := range steps {
			s.Fault = NoFault
			out[r][i] = s
		}
	}
	return out
}

func msDur(n int) time.Duration { return time.Duration(n) * time.Millisecond }

type stepGen struct {
	p         *Plan
	faultOdds int  // one step in faultOdds gets a fault; 0: never
	maxFaults int  // the most faults in a plan
	faults    *int // faults drawn so far
	tx        bool // draw Tx steps (PlanOptions.Tx)
}

// oneOf draws one of the kinds. rapid favours the ends of a range, the
// first entries most: list the commonest kinds first, and repeat a kind to
// make it commoner.
func oneOf(t *rapid.T, label string, kinds ...Kind) Kind {
	return kinds[rapid.IntRange(0, len(kinds)-1).Draw(t, label)]
}

func (g stepGen) draw(t *rapid.T, role Role) Step {
	var kind Kind
	switch role {
	case Worker: // about Pop 27%, Ack 14%, AckPop 10%, Retry 10%, Extend 16%, Fail 8%, Pause 17%
		kind = oneOf(t, "kind", Pop, Ack, Extend, Retry, Pop, Extend, Fail, AckPop, Pause, Pause)
	case Broker: // about ClaimExpired 35%, Requeue 22%, Finalize 10%, RecoverExpired 8%, Promote 8%, Pause 17%
		kind = oneOf(t, "kind", ClaimExpired, Requeue, ClaimExpired, Finalize, RecoverExpired, ClaimExpired, Promote, Requeue, Pause, Pause)
	case Producer: // about Enqueue 75%, Promote 10%, Pause 15%
		kind = oneOf(t, "kind", Enqueue, Enqueue, Enqueue, Enqueue, Promote, Enqueue, Enqueue, Enqueue, Enqueue, Pause)
	case Inspector:
		kind = oneOf(t, "kind", Get, InspectRequeue, Remove, List, PauseQueue, CancelTask, InspectRequeue, Counts, ResumeQueue, Prune, Get, CancelTask, Remove, ResumeQueue, Pause)
	case Recoverer: // about RecoverExpired 65%, Promote 15%, Pause 20%
		kind = oneOf(t, "kind", RecoverExpired, RecoverExpired, RecoverExpired, Promote, RecoverExpired, RecoverExpired, Promote, RecoverExpired, Pause, Pause)
	}
	if g.tx && (role == Producer || role == Worker) && rapid.IntRange(0, 7).Draw(t, "tx?") == 7 {
		kind = Tx
	}
	s := Step{Kind: kind}
	queue := func() { s.Queue = rapid.IntRange(0, len(g.p.Queues)-1).Draw(t, "queue") }
	task := func() { s.Task = rapid.IntRange(0, len(g.p.Tasks)-1).Draw(t, "task") }
	// A fraction of a microsecond, now and then, so that the stores' one
	// rounding rule (model.Round) is exercised on leases, times and delays.
	subMicro := func(label string) time.Duration {
		return []time.Duration{0, 0, 0, 0, 0, 500 * time.Nanosecond, 999 * time.Nanosecond}[rapid.IntRange(0, 6).Draw(t, label)]
	}
	lease := func() { s.Lease = msDur(rapid.IntRange(1, 4).Draw(t, "lease")) + subMicro("leaseNs") }
	runAfter := func() {
		if d := rapid.IntRange(0, 5).Draw(t, "runAfter"); d >= 4 {
			s.Delay = msDur(d-3) + subMicro("delayNs")
		}
	}
	limit := func() { s.N = rapid.IntRange(0, 2).Draw(t, "limit") }
	pick := func() {
		switch rapid.IntRange(0, 9).Draw(t, "pick") {
		case 0, 1, 2, 3, 4, 5:
		case 6, 7:
			s.Pick = 1
		case 8:
			s.Pick = 2
		case 9:
			s.Pick = -1
			queue()
			task()
			s.Forged = uint64(rapid.IntRange(1, 30).Draw(t, "forged"))
		}
	}
	switch s.Kind {
	case Enqueue:
		queue()
		task()
		s.Priority = rapid.IntRange(-1, 1).Draw(t, "priority")
		s.Attempts = rapid.IntRange(1, 3).Draw(t, "attempts")
		runAfter()
		if rapid.IntRange(0, 3).Draw(t, "timeout?") == 3 {
			s.Timeout = time.Duration(rapid.IntRange(1, 1<<20).Draw(t, "timeout")) * time.Microsecond
		}
		// About half the enqueues name one of two unique keys, a quarter
		// of those held for a period (of a few ms, which the plans' gaps
		// outlast) rather than while pending.
		switch k := rapid.IntRange(0, 7).Draw(t, "key"); {
		case k >= 4:
			s.Key = []string{"k0", "k1"}[k%2]
			if k == 7 {
				s.KeyFor = msDur(rapid.IntRange(1, 3).Draw(t, "keyFor")) + subMicro("keyForNs")
			}
		}
	case Pop:
		queue()
		lease()
		s.N = rapid.IntRange(1, 2).Draw(t, "batch")
	case Extend:
		pick()
		lease()
	case Ack, Fail, Finalize:
		pick()
	case AckPop:
		pick()
		s.More = rapid.IntRange(0, 1).Draw(t, "more") == 1
		s.N = rapid.IntRange(0, 2).Draw(t, "pop")
		lease()
	case Retry, Requeue:
		pick()
		runAfter()
		if rapid.IntRange(0, 15).Draw(t, "badDelay") == 0 {
			s.Delay = -time.Microsecond
		}
	case ClaimExpired:
		queue()
		lease()
		limit()
	case RecoverExpired:
		queue()
		s.Lease = msDur(rapid.IntRange(0, 2).Draw(t, "delay"))
		limit()
	case Promote:
		queue()
		limit()
	case InspectRequeue, Remove, CancelTask:
		queue()
		task()
		s.Expect = []int{1, 0, 1, 0, 2}[rapid.IntRange(0, 4).Draw(t, "expect")]
	case Get:
		queue()
		task()
	case List:
		queue()
		s.State = model.States[rapid.IntRange(0, len(model.States)-1).Draw(t, "state")]
		s.N = rapid.IntRange(1, 3).Draw(t, "page")
		if s.Cursor = rapid.IntRange(0, 3).Draw(t, "cursor") == 3; s.Cursor {
			task()
		}
	case Counts, PauseQueue, ResumeQueue:
		queue()
	case Prune:
		queue()
		s.Prune = [][]model.State{{model.Succeeded}, {model.Failed}, {model.Succeeded, model.Failed}}[rapid.IntRange(0, 2).Draw(t, "prune")]
		s.Delay = msDur(rapid.IntRange(-1, 2).Draw(t, "before"))
		limit()
	case Pause:
		s.Delay = msDur(rapid.IntRange(1, 3).Draw(t, "pause"))
	case Tx:
		queue()
		task()
		s.Priority = rapid.IntRange(-1, 1).Draw(t, "priority")
		s.Attempts = rapid.IntRange(1, 3).Draw(t, "attempts")
		runAfter()
		s.N = rapid.IntRange(1, 2).Draw(t, "tx enqueues")
		if role == Worker {
			// A worker acks its task and enqueues what follows from it, or
			// only acks.
			s.Ack = true
			pick()
			s.N = rapid.IntRange(0, 1).Draw(t, "tx enqueues")
		}
		s.Row = rapid.IntRange(0, 2).Draw(t, "tx row") > 0
		s.Rollback = rapid.IntRange(0, 1).Draw(t, "tx rollback") == 1
		s.Immediate = rapid.IntRange(0, 3).Draw(t, "tx immediate") == 3
	}
	if g.faultOdds > 0 && s.Kind != Pause && s.Kind != Tx && *g.faults < g.maxFaults {
		// rapid favours the ends of a range: pick two values from the middle.
		switch rapid.IntRange(0, g.faultOdds-1).Draw(t, "fault") {
		case g.faultOdds / 2:
			s.Fault = LoseRequest
		case g.faultOdds/2 + 1:
			s.Fault = LoseReply
		case g.faultOdds/2 + 2:
			s.Fault = Busy
		}
		if s.Fault != NoFault {
			*g.faults++
		}
	}
	return s
}
