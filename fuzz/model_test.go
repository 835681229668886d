package fuzz

import (
	"bytes"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/model"
	"pgregory.net/rapid"
)

// TestModelStateMachine drives one model.Queue with random op sequences and
// checks every step: the state invariants, that a rejected op changes nothing,
// that versions and tokens only grow and are never reused, that a Succeeded
// task stays put until an operator acts, and that every op's outcome is the
// one the oracle in model_oracle_test.go derives from DESIGN.md. At the end
// the whole history is replayed to check that Equal and Hash agree.
func TestModelStateMachine(t *testing.T) {
	rapid.Check(t, checkModel)
}

// FuzzModel is TestModelStateMachine as a go test -fuzz target:
//
//	go test ./fuzz -run '^$' -fuzz FuzzModel -fuzztime 30s
//
// The fuzzer's bytes are the random data rapid draws from. They are padded
// with zero words: a zero draw is the smallest choice, which ends every
// repetition, so a short input ends the run early instead of being skipped.
//
// rapid logs every draw of a fuzz input, so a plain go test -v runs only the
// empty seed (a smoke test of the wiring; TestModelStateMachine is the real
// run); when fuzzing, three seeds that reach deep states are added.
func FuzzModel(f *testing.F) {
	f.Add([]byte{})
	if fz := flag.Lookup("test.fuzz"); fz != nil && fz.Value.String() != "" {
		f.Add(seedBytes(1, 1024))
		f.Add(seedBytes(2, 4096))
		f.Add(seedBytes(3, 16384))
	}
	prop := rapid.MakeFuzz(checkModel)
	f.Fuzz(func(t *testing.T, data []byte) {
		prop(t, append(data, make([]byte, 8*padWords)...))
	})
}

// padWords is more than any single action draws, so a zero-padded input
// never runs dry in the middle of a step.
const padWords = 256

// seedBytes returns n deterministic pseudo-random bytes (xorshift64).
func seedBytes(seed uint64, n int) []byte {
	out := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 | 1
	for i := range out {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		out[i] = byte(x)
	}
	return out
}

// checkModel is the property: a random prefix builds a state, then rapid's
// Repeat runs random steps from it with the invariants checked after each.
func checkModel(t *rapid.T) { runModel(t, nil) }

// runModel runs the property, counting outcomes into stats when not nil.
func runModel(t *rapid.T, stats map[string]int) {
	m := newMachine(rapid.SampledFrom([]int{0, 0, 1, 3, 6}).Draw(t, "capacity"))
	m.stats = stats
	acts := m.actions()

	// The prefix leans towards Enqueue and Pop so that Repeat starts from a
	// populated queue with claims in hand.
	total := 0
	for _, a := range acts {
		total += a.weight
	}
	for range uniform(t, "prefix", 7) {
		r := rapid.IntRange(0, total-1).Draw(t, "prefixAction")
		for _, a := range acts {
			if r < a.weight {
				a.run(t)
				break
			}
			r -= a.weight
		}
		m.check(t)
	}

	steps := map[string]func(*rapid.T){"": m.check}
	for _, a := range acts {
		steps[a.name] = a.run
	}
	t.Repeat(steps)
	m.replay(t)
}

// epoch is the fake clock's start. Time moves in whole milliseconds, the
// precision every store keeps.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// machine is the test's view of one model queue and what it has seen happen.
type machine struct {
	q   model.Queue
	now time.Time

	claims []model.Claim     // every claim Pop handed out, stale or not
	reaps  []model.ReapClaim // every claim ClaimExpired handed out

	history []model.Input // every input applied, accepted or rejected
	states  []model.Queue // states[i] is the state after history[:i]

	tokens    map[uint64]string // every token Pop handed out -> task ID
	versions  map[string]uint64 // highest Version seen per task ID, kept across Remove
	succeeded map[string]uint64 // Succeeded tasks no operator has acted on -> Version at Ack

	stats map[string]int // outcomes by op and error kind, when not nil
}

func newMachine(capacity int) *machine {
	q := model.NewQueue("q", capacity)
	return &machine{
		q:         q,
		now:       epoch,
		states:    []model.Queue{q},
		tokens:    map[uint64]string{},
		versions:  map[string]uint64{},
		succeeded: map[string]uint64{},
	}
}

// action is one kind of step. weight is its share in the prefix; Repeat
// draws actions uniformly.
type action struct {
	name   string
	weight int
	run    func(*rapid.T)
}

func (m *machine) actions() []action {
	return []action{
		{"Advance", 3, m.advance},
		{"Enqueue", 6, m.enqueue},
		{"Promote", 1, m.promote},
		{"Pop", 4, m.pop},
		{"Worker", 3, m.worker},
		{"ClaimExpired", 2, m.claimExpired},
		{"Broker", 2, m.broker},
		{"RecoverExpired", 1, m.recoverExpired},
		{"Inspector", 1, m.inspector},
		{"Prune", 1, m.prune},
		{"Read", 1, m.read},
	}
}

// --- actions -----------------------------------------------------------------

func (m *machine) advance(t *rapid.T) {
	m.now = m.now.Add(ms(rapid.IntRange(0, 6).Draw(t, "advanceMs")))
}

func (m *machine) enqueue(t *rapid.T) {
	prio := rapid.IntRange(-1, 1).Draw(t, "priority")
	if rare(t, "oddPriority", 3) {
		prio = rapid.SampledFrom([]int{model.MinPriority, model.MaxPriority, model.MinPriority - 1, model.MaxPriority + 1}).Draw(t, "priorityEdge")
	}
	attempts := rapid.IntRange(1, 3).Draw(t, "maxAttempts")
	if rare(t, "badMaxAttempts", 4) {
		attempts = 0
	}
	m.apply(t, model.Input{Op: model.OpEnqueue, Now: m.now, Enqueue: model.EnqueueArgs{
		ID:          m.drawID(t, "id"),
		Payload:     rapid.SliceOfN(rapid.Byte(), 0, 3).Draw(t, "payload"),
		Priority:    prio,
		RunAfter:    m.drawRunAfter(t),
		MaxAttempts: attempts,
	}})
}

func (m *machine) promote(t *rapid.T) {
	m.apply(t, model.Input{Op: model.OpPromote, Now: m.now, Limit: drawLimit(t)})
}

func (m *machine) pop(t *rapid.T) {
	n := rapid.IntRange(1, 3).Draw(t, "batch")
	if rare(t, "badBatch", 4) {
		n = rapid.SampledFrom([]int{0, model.MaxBatch + 1}).Draw(t, "badBatch")
	}
	m.apply(t, model.Input{Op: model.OpPop, Now: m.now, Lease: drawLease(t, "lease"), Limit: n})
}

func (m *machine) worker(t *rapid.T) {
	in := model.Input{
		Op:    rapid.SampledFrom([]model.Op{model.OpExtend, model.OpAck, model.OpFail, model.OpRetry}).Draw(t, "workerOp"),
		Now:   m.now,
		Claim: m.drawClaim(t),
	}
	switch in.Op {
	case model.OpExtend:
		in.Lease = drawLease(t, "lease")
	case model.OpAck:
		in.Result = rapid.SliceOfN(rapid.Byte(), 0, 3).Draw(t, "result")
	case model.OpFail:
		in.Message = drawMessage(t)
	case model.OpRetry:
		in.RunAfter, in.Message = m.drawRunAfter(t), drawMessage(t)
	}
	m.apply(t, in)
}

func (m *machine) claimExpired(t *rapid.T) {
	m.apply(t, model.Input{Op: model.OpClaimExpired, Now: m.now, Lease: drawLease(t, "claimTTL"), Limit: drawLimit(t)})
}

func (m *machine) broker(t *rapid.T) {
	in := model.Input{
		Op:        rapid.SampledFrom([]model.Op{model.OpRequeue, model.OpFinalize}).Draw(t, "brokerOp"),
		Now:       m.now,
		ReapClaim: m.drawReapClaim(t),
		Message:   drawMessage(t),
	}
	if in.Op == model.OpRequeue {
		in.RunAfter = m.drawRunAfter(t)
	}
	m.apply(t, in)
}

func (m *machine) recoverExpired(t *rapid.T) {
	delay := ms(rapid.IntRange(0, 3).Draw(t, "delayMs"))
	if rare(t, "badDelay", 4) {
		delay = -time.Millisecond // invalid
	}
	m.apply(t, model.Input{Op: model.OpRecoverExpired, Now: m.now, Lease: delay, Limit: drawLimit(t)})
}

func (m *machine) inspector(t *rapid.T) {
	id := m.drawTaskID(t)
	m.apply(t, model.Input{
		Op:     rapid.SampledFrom([]model.Op{model.OpInspectRequeue, model.OpRemove}).Draw(t, "inspectorOp"),
		Now:    m.now,
		ID:     id,
		Expect: m.drawExpect(t, id),
	})
}

func (m *machine) prune(t *rapid.T) {
	states := rapid.SliceOfNDistinct(rapid.SampledFrom([]model.State{model.Succeeded, model.Failed}), 1, 2,
		func(s model.State) model.State { return s }).Draw(t, "states")
	if rare(t, "badStates", 4) {
		states = rapid.SampledFrom([][]model.State{nil, {model.Scheduled}, {model.Succeeded, model.Running}, {model.Failed, 0}}).Draw(t, "badStates")
	}
	m.apply(t, model.Input{
		Op:     model.OpPrune,
		Now:    m.now,
		States: states,
		Before: m.now.Add(ms(rapid.IntRange(-12, 1).Draw(t, "beforeMs"))),
		Limit:  drawLimit(t),
	})
}

func (m *machine) read(t *rapid.T) {
	in := model.Input{Op: rapid.SampledFrom([]model.Op{model.OpGet, model.OpList, model.OpCounts}).Draw(t, "readOp"), Now: m.now}
	switch in.Op {
	case model.OpGet:
		in.ID = m.drawTaskID(t)
	case model.OpList:
		in.State = rapid.SampledFrom(model.States).Draw(t, "state")
		in.After = rapid.SampledFrom([]string{"", "a", "b", "c", "cc", "e"}).Draw(t, "after")
		in.Limit = rapid.SampledFrom([]int{1, 2, 3, model.MaxBatch}).Draw(t, "limit")
		if rare(t, "badList", 3) {
			in.State, in.Limit = rapid.SampledFrom([]model.State{0, model.Failed + 1, model.Ready}).Draw(t, "badState"), rapid.SampledFrom([]int{0, 1, model.MaxBatch + 1}).Draw(t, "badLimit")
		}
	}
	m.apply(t, in)
}

// --- generators --------------------------------------------------------------

// idPool is the small set of task IDs, so ops keep meeting the same tasks.
var idPool = []string{"a", "b", "c", "d", "e"}

// drawID returns an ID from the pool, rarely an invalid one.
func (m *machine) drawID(t *rapid.T, label string) string {
	if rare(t, label+"Bad", 5) {
		return rapid.SampledFrom([]string{"", strings.Repeat("x", model.MaxIDLength+1)}).Draw(t, label+"Invalid")
	}
	return rapid.SampledFrom(idPool).Draw(t, label)
}

// drawTaskID returns, more often than not, the ID of a task the queue holds.
func (m *machine) drawTaskID(t *rapid.T) string {
	if tasks := m.q.Tasks(); len(tasks) > 0 && rapid.Bool().Draw(t, "existing") {
		return tasks[rapid.IntRange(0, len(tasks)-1).Draw(t, "task")].ID
	}
	return m.drawID(t, "id")
}

// uniform returns a number in 0..2^bits-1, each as likely, drawn as fair
// coins; it shrinks towards 0.
func uniform(t *rapid.T, label string, bits int) int {
	n := 0
	for range bits {
		n <<= 1
		if rapid.Bool().Draw(t, label) {
			n |= 1
		}
	}
	return n
}

// rare reports true with probability 1/2^bits. It draws fair coins, so the
// odds are what they say (rapid's integer draws lean to the ends of their
// range), and shrinking, which prefers false, removes rare choices first.
func rare(t *rapid.T, label string, bits int) bool {
	for range bits {
		if !rapid.Bool().Draw(t, label) {
			return false
		}
	}
	return true
}

// drawClaim returns a claim Pop handed out, mostly one that still holds its
// task, else a recent one that may be stale; sometimes a forged one.
func (m *machine) drawClaim(t *rapid.T) model.Claim {
	if rare(t, "forgeClaim", 2) {
		return model.Claim{Queue: m.q.Name(), TaskID: m.drawID(t, "forgedID"), Token: m.drawSeqValue(t, "forgedToken")}
	}
	live := func(c model.Claim) bool {
		task, err := m.q.Get(c.TaskID)
		return err == nil && task.ClaimToken == c.Token
	}
	return pick(t, "claim", m, m.claims, func(c model.Claim) string { return c.TaskID }, live, model.Claim{Queue: m.q.Name(), TaskID: "a", Token: 1})
}

// drawReapClaim returns a claim ClaimExpired handed out, mostly one that
// still holds its task, else a recent one; sometimes a forged one.
func (m *machine) drawReapClaim(t *rapid.T) model.ReapClaim {
	if rare(t, "forgeReap", 2) {
		return model.ReapClaim{Queue: m.q.Name(), TaskID: m.drawID(t, "forgedID"), Version: m.drawSeqValue(t, "forgedVersion")}
	}
	live := func(rc model.ReapClaim) bool {
		task, err := m.q.Get(rc.TaskID)
		return err == nil && task.Version == rc.Version
	}
	return pick(t, "reapClaim", m, m.reaps, func(rc model.ReapClaim) string { return rc.TaskID }, live, model.ReapClaim{Queue: m.q.Name(), TaskID: "a", Version: 1})
}

// pick returns one of the claims handed out earlier (oldest first): mostly
// one for which live holds; else, as likely, one naming a task that is
// Running now (under this claim or a later one: the stale-worker races) or
// one of the most recent, the later the likelier. With none handed out yet it
// returns none.
func pick[C any](t *rapid.T, label string, m *machine, all []C, taskID func(C) string, live func(C) bool, none C) C {
	if len(all) == 0 {
		return none
	}
	var from []C
	switch {
	case !rare(t, label+"NotLive", 2):
		from = slices.DeleteFunc(slices.Clone(all), func(c C) bool { return !live(c) })
	case rapid.Bool().Draw(t, label+"OnRunning"):
		from = slices.DeleteFunc(slices.Clone(all), func(c C) bool {
			task, err := m.q.Get(taskID(c))
			return err != nil || task.State != model.Running
		})
	}
	if len(from) > 0 {
		return from[rapid.IntRange(0, len(from)-1).Draw(t, label+"Index")]
	}
	i := len(all) - 1
	for i > 0 && rapid.Bool().Draw(t, label+"Older") {
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
	return m.drawSeqValue(t, "expect")
}

// drawSeqValue returns a value in 1..seq+2, rarely 0: a version or token
// that may or may not exist.
func (m *machine) drawSeqValue(t *rapid.T, label string) uint64 {
	if rare(t, label+"Zero", 3) {
		return 0
	}
	return uint64(rapid.IntRange(1, int(m.q.Seq())+2).Draw(t, label))
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

// drawLease returns a short lease (or claim TTL), rarely zero or negative.
func drawLease(t *rapid.T, label string) time.Duration {
	if rare(t, label+"Bad", 4) {
		return -ms(rapid.IntRange(0, 1).Draw(t, label+"BadMs"))
	}
	return ms(rapid.IntRange(1, 5).Draw(t, label+"Ms"))
}

// drawLimit returns a bulk-op limit (0: none), rarely a negative one.
func drawLimit(t *rapid.T) int {
	if rare(t, "badLimit", 4) {
		return -1
	}
	return rapid.IntRange(0, 3).Draw(t, "limit")
}

func drawMessage(t *rapid.T) string {
	return rapid.SampledFrom([]string{"", "boom", "timeout"}).Draw(t, "message")
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// --- one step ----------------------------------------------------------------

// apply performs in on the current state through model.Apply and through the
// Queue method, checks the step, and makes the result the current state.
func (m *machine) apply(t *rapid.T, in model.Input) model.Output {
	t.Helper()
	prev := m.q
	before := snapshot(prev)

	next, out := model.Apply(prev, in)
	direct, dout := callMethod(prev, in)
	if !next.Equal(direct) || next.Hash() != direct.Hash() || !sameOutput(out, dout) {
		t.Fatalf("%v: Apply and the Queue method disagree:\nApply:  %+v\nmethod: %+v", in, out, dout)
	}
	if !before.matches(prev) {
		t.Fatalf("%v changed its receiver", in)
	}
	if out.Err != nil {
		if model.Kind(out.Err) == nil {
			t.Fatalf("%v: untyped error %v", in, out.Err)
		}
		if next != prev || direct != prev {
			t.Fatalf("%v rejected (%v) but did not return the receiver", in, out.Err)
		}
		if !before.matches(next) || !next.Equal(prev) || next.Hash() != prev.Hash() {
			t.Fatalf("%v rejected (%v) but changed the state", in, out.Err)
		}
	}
	checkOutcome(t, prev, next, in, out)
	if m.stats != nil {
		m.count(prev, in, out)
	}

	m.q = next
	m.history = append(m.history, in)
	m.states = append(m.states, next)
	if out.Err == nil {
		m.track(t, in, out)
	}
	return out
}

// track records what a successful op handed out and checks the properties
// that span the whole history.
func (m *machine) track(t *rapid.T, in model.Input, out model.Output) {
	t.Helper()
	switch in.Op {
	case model.OpPop:
		for _, task := range out.Tasks {
			if v, ok := m.succeeded[task.ID]; ok {
				t.Fatalf("Pop handed out %q, which Succeeded at version %d and no operator requeued", task.ID, v)
			}
			if holder, dup := m.tokens[task.ClaimToken]; dup {
				t.Fatalf("Pop handed out token %d twice (%q, then %q)", task.ClaimToken, holder, task.ID)
			}
			m.tokens[task.ClaimToken] = task.ID
			m.claims = append(m.claims, task.Claim())
		}
	case model.OpClaimExpired:
		m.reaps = append(m.reaps, out.ReapClaims...)
	case model.OpAck:
		m.succeeded[out.Task.ID] = out.Task.Version
	case model.OpInspectRequeue, model.OpRemove:
		delete(m.succeeded, in.ID)
	case model.OpPrune:
		for _, id := range out.IDs {
			delete(m.succeeded, id)
		}
	}
}

// check runs after every step.
func (m *machine) check(t *rapid.T) {
	t.Helper()
	if err := model.Invariants(m.q); err != nil {
		t.Fatalf("invariants broken after %d steps:\n%v", len(m.history), err)
	}
	if n := len(m.states); n > 1 && m.q.Seq() < m.states[n-2].Seq() {
		t.Fatalf("sequence went back from %d to %d", m.states[n-2].Seq(), m.q.Seq())
	}
	for _, task := range m.q.Tasks() {
		if seen := m.versions[task.ID]; task.Version < seen {
			t.Fatalf("task %q: version went back from %d to %d", task.ID, seen, task.Version)
		}
		m.versions[task.ID] = task.Version
	}
	for id, v := range m.succeeded {
		task, err := m.q.Get(id)
		if err != nil || task.State != model.Succeeded || task.Version != v {
			t.Fatalf("task %q Succeeded at version %d, no operator acted, now %v version %d (%v)", id, v, task.State, task.Version, err)
		}
	}
}

// replay rebuilds the run's states two ways, from fresh trees: with every
// input, and with only the accepted mutations. Both must give states Equal to
// the recorded ones with the same Hash, and no two Equal states of the run may
// hash differently.
func (m *machine) replay(t *rapid.T) {
	t.Helper()
	full := model.NewQueue(m.q.Name(), m.q.Capacity())
	short := full
	for i, in := range m.history {
		var out model.Output
		full, out = model.Apply(full, in)
		if out.Err == nil && in.Op != model.OpGet && in.Op != model.OpList && in.Op != model.OpCounts {
			short, _ = model.Apply(short, in)
		}
		want := m.states[i+1]
		for name, got := range map[string]model.Queue{"full replay": full, "accepted-only replay": short} {
			if !got.Equal(want) || !want.Equal(got) {
				t.Fatalf("%s differs from the run after step %d (%v)", name, i, in)
			}
			if got.Hash() != want.Hash() {
				t.Fatalf("%s is Equal to the run after step %d but hashes differently", name, i)
			}
		}
	}
	for i, a := range m.states {
		for _, b := range m.states[i+1:] {
			if a.Equal(b) != b.Equal(a) {
				t.Fatalf("Equal is not symmetric")
			}
			if a.Equal(b) && a.Hash() != b.Hash() {
				t.Fatalf("Equal states hash differently (seq %d)", a.Seq())
			}
		}
	}
}

// --- helpers -----------------------------------------------------------------

// callMethod performs in by calling the Queue method directly.
func callMethod(q model.Queue, in model.Input) (model.Queue, model.Output) {
	var o model.Output
	switch in.Op {
	case model.OpEnqueue:
		q, o.Task, o.Err = q.Enqueue(in.Now, in.Enqueue)
	case model.OpPromote:
		q, o.IDs, o.Err = q.Promote(in.Now, in.Limit)
	case model.OpPop:
		q, o.Tasks, o.Err = q.Pop(in.Now, in.Lease, in.Limit)
	case model.OpExtend:
		q, o.Task, o.Err = q.Extend(in.Now, in.Claim, in.Lease)
	case model.OpAck:
		q, o.Task, o.Err = q.Ack(in.Now, in.Claim, in.Result)
	case model.OpFail:
		q, o.Task, o.Err = q.Fail(in.Now, in.Claim, in.Message)
	case model.OpRetry:
		q, o.Task, o.Err = q.Retry(in.Now, in.Claim, in.RunAfter, in.Message)
	case model.OpClaimExpired:
		q, o.ReapClaims, o.Err = q.ClaimExpired(in.Now, in.Lease, in.Limit)
	case model.OpRequeue:
		q, o.Task, o.Err = q.Requeue(in.Now, in.ReapClaim, in.RunAfter, in.Message)
	case model.OpFinalize:
		q, o.Task, o.Err = q.Finalize(in.Now, in.ReapClaim, in.Message)
	case model.OpRecoverExpired:
		q, o.Tasks, o.Err = q.RecoverExpired(in.Now, in.Lease, in.Limit)
	case model.OpInspectRequeue:
		q, o.Task, o.Err = q.InspectRequeue(in.ID, in.Expect)
	case model.OpRemove:
		q, o.Task, o.Err = q.Remove(in.ID, in.Expect)
	case model.OpPrune:
		q, o.IDs, o.Err = q.Prune(in.States, in.Before, in.Limit)
	case model.OpGet:
		o.Task, o.Err = q.Get(in.ID)
	case model.OpList:
		o.Tasks, o.Next, o.Err = q.List(in.State, in.After, in.Limit)
	case model.OpCounts:
		o.Counts = q.Counts()
	}
	return q, o
}

// sameOutput compares two outputs field by field; errors by kind and text.
func sameOutput(a, b model.Output) bool {
	if (a.Err == nil) != (b.Err == nil) || (a.Err != nil && a.Err.Error() != b.Err.Error()) {
		return false
	}
	if model.Kind(a.Err) != model.Kind(b.Err) {
		return false
	}
	if !a.Task.Equal(b.Task) || !sameTasks(a.Tasks, b.Tasks) || a.Counts != b.Counts || a.Next != b.Next {
		return false
	}
	if strings.Join(a.IDs, "\x00") != strings.Join(b.IDs, "\x00") || len(a.IDs) != len(b.IDs) || len(a.ReapClaims) != len(b.ReapClaims) {
		return false
	}
	for i, r := range a.ReapClaims {
		s := b.ReapClaims[i]
		if r.Queue != s.Queue || r.TaskID != s.TaskID || r.Version != s.Version || !r.Deadline.Equal(s.Deadline) || !r.Task.Equal(s.Task) {
			return false
		}
	}
	return true
}

func sameTasks(a, b []model.Task) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// snap is a deep copy of a queue's observable state, taken so that a change
// made in place to memory the queue shares would show.
type snap struct {
	seq    uint64
	counts model.Counts
	hash   uint64
	tasks  []model.Task
}

func snapshot(q model.Queue) snap {
	tasks := q.Tasks()
	for i := range tasks {
		tasks[i].Payload = bytes.Clone(tasks[i].Payload)
		tasks[i].Result = bytes.Clone(tasks[i].Result)
		tasks[i].Errors = append([]model.TaskError(nil), tasks[i].Errors...)
	}
	return snap{seq: q.Seq(), counts: q.Counts(), hash: q.Hash(), tasks: tasks}
}

// matches reports whether q still looks exactly as when s was taken.
func (s snap) matches(q model.Queue) bool {
	return q.Seq() == s.seq && q.Counts() == s.counts && q.Hash() == s.hash && sameTasks(q.Tasks(), s.tasks)
}

// asTransition returns the *model.TransitionError in err, if any.
func asTransition(err error) (*model.TransitionError, bool) {
	var te *model.TransitionError
	ok := errors.As(err, &te)
	return te, ok
}
