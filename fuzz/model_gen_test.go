package fuzz

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"pgregory.net/rapid"
)

// The generators of the model state machine. Each step's input is drawn as
// one value (rapid.Custom), so a failing run reads as a list of ops and a
// fuzz input costs one log line per step, not one per coin.
//
// IDs come from a small pool, so ops keep meeting the same tasks; times move
// in whole milliseconds and leases are a few of them, so leases lapse all the
// time; claims are mostly real ones from earlier Pop and ClaimExpired
// results, some stale, a few forged; invalid arguments are rare.

// action is one kind of step. weight is its share in the prefix; Repeat
// draws actions uniformly.
type action struct {
	name   string
	weight int
	run    func(*rapid.T)
}

func (m *machine) actions() []action {
	op := func(name string, weight int, gen func(*rapid.T) model.Input) action {
		return action{name, weight, func(t *rapid.T) {
			in := rapid.Custom(func(t *rapid.T) step { return step(gen(t)) }).Draw(t, name)
			m.apply(t, model.Input(in))
		}}
	}
	return []action{
		{"Advance", 3, func(t *rapid.T) { m.now = m.now.Add(ms(rapid.IntRange(0, 6).Draw(t, "advanceMs"))) }},
		op("Enqueue", 6, m.genEnqueue),
		op("Promote", 1, m.genPromote),
		op("Pop", 4, m.genPop),
		op("Worker", 3, m.genWorker),
		op("ClaimExpired", 2, m.genClaimExpired),
		op("Broker", 2, m.genBroker),
		op("RecoverExpired", 1, m.genRecoverExpired),
		op("Inspector", 1, m.genInspector),
		op("Prune", 1, m.genPrune),
		op("Read", 1, m.genRead),
	}
}

func (m *machine) genEnqueue(t *rapid.T) model.Input {
	prio := rapid.IntRange(-1, 1).Draw(t, "priority")
	if rare(t, 3) {
		prio = rapid.SampledFrom([]int{model.MinPriority, model.MaxPriority, model.MinPriority - 1, model.MaxPriority + 1}).Draw(t, "priorityEdge")
	}
	attempts := rapid.IntRange(1, 3).Draw(t, "maxAttempts")
	if rare(t, 4) {
		attempts = 0
	}
	return model.Input{Op: model.OpEnqueue, Now: m.now, Enqueue: model.EnqueueArgs{
		ID:          m.drawID(t),
		Payload:     rapid.SliceOfN(rapid.Byte(), 0, 3).Draw(t, "payload"),
		Priority:    prio,
		RunAfter:    m.drawRunAfter(t),
		MaxAttempts: attempts,
	}}
}

func (m *machine) genPromote(t *rapid.T) model.Input {
	return model.Input{Op: model.OpPromote, Now: m.now, Limit: drawLimit(t)}
}

func (m *machine) genPop(t *rapid.T) model.Input {
	n := rapid.IntRange(1, 3).Draw(t, "batch")
	if rare(t, 4) {
		n = rapid.SampledFrom([]int{0, model.MaxBatch + 1}).Draw(t, "badBatch")
	}
	return model.Input{Op: model.OpPop, Now: m.now, Lease: drawLease(t), Limit: n}
}

func (m *machine) genWorker(t *rapid.T) model.Input {
	in := model.Input{
		Op:    rapid.SampledFrom([]model.Op{model.OpExtend, model.OpAck, model.OpFail, model.OpRetry}).Draw(t, "op"),
		Now:   m.now,
		Claim: m.drawClaim(t),
	}
	switch in.Op {
	case model.OpExtend:
		in.Lease = drawLease(t)
	case model.OpAck:
		in.Result = rapid.SliceOfN(rapid.Byte(), 0, 3).Draw(t, "result")
	case model.OpFail:
		in.Message = drawMessage(t)
	case model.OpRetry:
		in.Delay, in.Message = drawDelay(t), drawMessage(t)
	}
	return in
}

func (m *machine) genClaimExpired(t *rapid.T) model.Input {
	return model.Input{Op: model.OpClaimExpired, Now: m.now, Lease: drawLease(t), Limit: drawLimit(t)}
}

func (m *machine) genBroker(t *rapid.T) model.Input {
	in := model.Input{
		Op:        rapid.SampledFrom([]model.Op{model.OpRequeue, model.OpFinalize}).Draw(t, "op"),
		Now:       m.now,
		ReapClaim: m.drawReapClaim(t),
		Message:   drawMessage(t),
	}
	if in.Op == model.OpRequeue {
		in.Delay = drawDelay(t)
	}
	return in
}

func (m *machine) genRecoverExpired(t *rapid.T) model.Input {
	delay := ms(rapid.IntRange(0, 3).Draw(t, "delayMs"))
	if rare(t, 4) {
		delay = -time.Millisecond
	}
	return model.Input{Op: model.OpRecoverExpired, Now: m.now, Lease: delay, Limit: drawLimit(t)}
}

func (m *machine) genInspector(t *rapid.T) model.Input {
	id := m.drawTaskID(t)
	return model.Input{
		Op:     rapid.SampledFrom([]model.Op{model.OpInspectRequeue, model.OpRemove}).Draw(t, "op"),
		Now:    m.now,
		ID:     id,
		Expect: m.drawExpect(t, id),
	}
}

func (m *machine) genPrune(t *rapid.T) model.Input {
	states := rapid.SampledFrom([][]model.State{{model.Succeeded}, {model.Failed}, {model.Succeeded, model.Failed}}).Draw(t, "states")
	if rare(t, 4) {
		states = rapid.SampledFrom([][]model.State{nil, {model.Scheduled}, {model.Succeeded, model.Running}, {model.Failed, 0}}).Draw(t, "badStates")
	}
	return model.Input{
		Op:     model.OpPrune,
		Now:    m.now,
		States: states,
		Before: m.now.Add(ms(rapid.IntRange(-12, 1).Draw(t, "beforeMs"))),
		Limit:  drawLimit(t),
	}
}

func (m *machine) genRead(t *rapid.T) model.Input {
	in := model.Input{Op: rapid.SampledFrom([]model.Op{model.OpGet, model.OpList, model.OpCounts}).Draw(t, "op"), Now: m.now}
	switch in.Op {
	case model.OpGet:
		in.ID = m.drawTaskID(t)
	case model.OpList:
		in.State = rapid.SampledFrom(model.States).Draw(t, "state")
		in.After = rapid.SampledFrom([]string{"", "a", "b", "c", "cc", "e"}).Draw(t, "after")
		in.Limit = rapid.SampledFrom([]int{1, 2, 3, model.MaxBatch}).Draw(t, "limit")
		if rare(t, 3) {
			in.State = rapid.SampledFrom([]model.State{0, model.Quarantined + 1, model.Ready}).Draw(t, "badState")
			in.Limit = rapid.SampledFrom([]int{0, 1, model.MaxBatch + 1}).Draw(t, "badLimit")
		}
	}
	return in
}

// --- drawing arguments -------------------------------------------------------

// idPool is the small set of task IDs.
var idPool = []string{"a", "b", "c", "d", "e"}

// drawID returns an ID from the pool, rarely an invalid one.
func (m *machine) drawID(t *rapid.T) string {
	if rare(t, 5) {
		return rapid.SampledFrom([]string{"", strings.Repeat("x", model.MaxIDLength+1)}).Draw(t, "badID")
	}
	return rapid.SampledFrom(idPool).Draw(t, "id")
}

// drawTaskID returns, more often than not, the ID of a task the queue holds.
func (m *machine) drawTaskID(t *rapid.T) string {
	if tasks := m.q.Tasks(); len(tasks) > 0 && rapid.Bool().Draw(t, "existing") {
		return tasks[rapid.IntRange(0, len(tasks)-1).Draw(t, "task")].ID
	}
	return m.drawID(t)
}

// drawClaim returns a claim Pop handed out, mostly one that still holds its
// task, else a recent one that may be stale; sometimes a forged one.
func (m *machine) drawClaim(t *rapid.T) model.Claim {
	if rare(t, 2) {
		return model.Claim{Queue: m.q.Name(), TaskID: m.drawID(t), Token: m.drawSeqValue(t)}
	}
	live := func(c model.Claim) bool {
		task, err := m.q.Get(c.TaskID)
		return err == nil && task.ClaimToken == c.Token
	}
	return pick(t, m, m.claims, func(c model.Claim) string { return c.TaskID }, live,
		model.Claim{Queue: m.q.Name(), TaskID: "a", Token: 1})
}

// drawReapClaim returns a claim ClaimExpired handed out, mostly one that
// still holds its task, else a recent one; sometimes a forged one.
func (m *machine) drawReapClaim(t *rapid.T) model.ReapClaim {
	if rare(t, 2) {
		return model.ReapClaim{Queue: m.q.Name(), TaskID: m.drawID(t), Version: m.drawSeqValue(t)}
	}
	live := func(rc model.ReapClaim) bool {
		task, err := m.q.Get(rc.TaskID)
		return err == nil && task.Version == rc.Version
	}
	return pick(t, m, m.reaps, func(rc model.ReapClaim) string { return rc.TaskID }, live,
		model.ReapClaim{Queue: m.q.Name(), TaskID: "a", Version: 1})
}

// pick returns one of the claims handed out earlier (oldest first): mostly
// one for which live holds; else, as likely, one naming a task that is
// Running now (under this claim or a later one: the stale-worker races) or
// one of the most recent, the later the likelier. With none handed out yet it
// returns none.
func pick[C any](t *rapid.T, m *machine, all []C, taskID func(C) string, live func(C) bool, none C) C {
	if len(all) == 0 {
		return none
	}
	var from []C
	switch {
	case !rare(t, 2):
		from = slices.DeleteFunc(slices.Clone(all), func(c C) bool { return !live(c) })
	case rapid.Bool().Draw(t, "onRunning"):
		from = slices.DeleteFunc(slices.Clone(all), func(c C) bool {
			task, err := m.q.Get(taskID(c))
			return err != nil || task.State != model.Running
		})
	}
	if len(from) > 0 {
		return from[rapid.IntRange(0, len(from)-1).Draw(t, "claim")]
	}
	i := len(all) - 1
	for i > 0 && rapid.Bool().Draw(t, "older") {
		i--
	}
	return all[i]
}

// drawExpect returns an inspector's expected version: none, the task's
// current one, or another.
func (m *machine) drawExpect(t *rapid.T, id string) uint64 {
	switch rapid.IntRange(0, 3).Draw(t, "expectKind") {
	case 0, 1:
		return 0
	case 2:
		if task, err := m.q.Get(id); err == nil {
			return task.Version
		}
	}
	return m.drawSeqValue(t)
}

// drawSeqValue returns a value in 1..seq+2, rarely 0: a version or token
// that may or may not exist.
func (m *machine) drawSeqValue(t *rapid.T) uint64 {
	if rare(t, 3) {
		return 0
	}
	return uint64(rapid.IntRange(1, int(m.q.Seq())+2).Draw(t, "seqValue"))
}

// drawRunAfter returns unset, past, present or future times.
func (m *machine) drawRunAfter(t *rapid.T) time.Time {
	switch rapid.IntRange(0, 3).Draw(t, "runAfterKind") {
	case 0:
		return time.Time{}
	case 1:
		return m.now.Add(-ms(rapid.IntRange(1, 3).Draw(t, "runAfterPastMs")))
	}
	return m.now.Add(ms(rapid.IntRange(0, 5).Draw(t, "runAfterMs")))
}

// drawDelay returns a retry delay: none, a few ms, rarely a negative one.
func drawDelay(t *rapid.T) time.Duration {
	if rare(t, 6) {
		return -ms(rapid.IntRange(1, 2).Draw(t, "badDelayMs"))
	}
	return ms(rapid.IntRange(0, 5).Draw(t, "delayMs"))
}

// drawLease returns a short lease (or claim TTL), rarely zero or negative.
func drawLease(t *rapid.T) time.Duration {
	if rare(t, 4) {
		return -ms(rapid.IntRange(0, 1).Draw(t, "badLeaseMs"))
	}
	return ms(rapid.IntRange(1, 5).Draw(t, "leaseMs"))
}

// drawLimit returns a bulk-op limit (0: none), rarely a negative one.
func drawLimit(t *rapid.T) int {
	if rare(t, 4) {
		return -1
	}
	return rapid.IntRange(0, 3).Draw(t, "limit")
}

func drawMessage(t *rapid.T) string {
	return rapid.SampledFrom([]string{"", "boom", "timeout"}).Draw(t, "message")
}

// uniform returns a number in 0..2^bits-1, each as likely, drawn as fair
// coins (rapid's integer draws lean to the ends of their range); it shrinks
// towards 0.
func uniform(t *rapid.T, bits int) int {
	n := 0
	for range bits {
		n <<= 1
		if rapid.Bool().Draw(t, "bit") {
			n |= 1
		}
	}
	return n
}

// rare reports true with probability 1/2^bits. It draws fair coins, so the
// odds are what they say, and shrinking, which prefers false, removes rare
// choices first.
func rare(t *rapid.T, bits int) bool {
	for range bits {
		if !rapid.Bool().Draw(t, "rare") {
			return false
		}
	}
	return true
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// --- describing steps --------------------------------------------------------

// step is an input as rapid logs it: %#v prints it through GoString.
type step model.Input

// GoString describes the input with the arguments its op reads; times are
// offsets from epoch.
func (s step) GoString() string {
	in := model.Input(s)
	at := func(t time.Time) string {
		if t.IsZero() {
			return "unset"
		}
		return "+" + t.Sub(epoch).String()
	}
	var args []string
	arg := func(format string, v ...any) { args = append(args, fmt.Sprintf(format, v...)) }
	arg("now=%s", at(in.Now))
	switch in.Op {
	case model.OpEnqueue:
		a := in.Enqueue
		arg("id=%q prio=%d runAfter=%s maxAttempts=%d payload=%x", a.ID, a.Priority, at(a.RunAfter), a.MaxAttempts, a.Payload)
	case model.OpPromote:
		arg("limit=%d", in.Limit)
	case model.OpPop:
		arg("lease=%v n=%d", in.Lease, in.Limit)
	case model.OpExtend, model.OpAck, model.OpFail, model.OpRetry:
		arg("claim=%s/%d", in.Claim.TaskID, in.Claim.Token)
		switch in.Op {
		case model.OpExtend:
			arg("lease=%v", in.Lease)
		case model.OpAck:
			arg("result=%x", in.Result)
		case model.OpRetry:
			arg("delay=%v", in.Delay)
		}
	case model.OpClaimExpired:
		arg("claimTTL=%v limit=%d", in.Lease, in.Limit)
	case model.OpRequeue, model.OpFinalize:
		arg("reapClaim=%s/v%d", in.ReapClaim.TaskID, in.ReapClaim.Version)
		if in.Op == model.OpRequeue {
			arg("delay=%v", in.Delay)
		}
	case model.OpRecoverExpired:
		arg("delay=%v limit=%d", in.Lease, in.Limit)
	case model.OpInspectRequeue, model.OpRemove:
		arg("id=%q expect=%d", in.ID, in.Expect)
	case model.OpPrune:
		arg("states=%v before=%s limit=%d", in.States, at(in.Before), in.Limit)
	case model.OpGet:
		arg("id=%q", in.ID)
	case model.OpList:
		arg("state=%v after=%q limit=%d", in.State, in.After, in.Limit)
	}
	if in.Message != "" {
		arg("message=%q", in.Message)
	}
	return in.Op.String() + "(" + strings.Join(args, " ") + ")"
}

// String is GoString, for failure messages.
func (s step) String() string { return s.GoString() }
