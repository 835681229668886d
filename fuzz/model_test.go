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
//
// Go minimizes every new interesting input, for up to a minute by default,
// and fuzzes little meanwhile. Cutting bytes out of a rapid bit stream rarely
// keeps its meaning, so unless -fuzzminimizetime is given, FuzzModel sets it
// to a few seconds; otherwise a 30-second run minimizes its first find and
// does nothing else.
func FuzzModel(f *testing.F) {
	f.Add([]byte{})
	if fz := flag.Lookup("test.fuzz"); fz != nil && fz.Value.String() != "" {
		f.Add(seedBytes(1, 1024))
		f.Add(seedBytes(2, 4096))
		f.Add(seedBytes(3, 16384))
		given := false
		flag.Visit(func(fl *flag.Flag) { given = given || fl.Name == "test.fuzzminimizetime" })
		if !given {
			if err := flag.Set("test.fuzzminimizetime", "3s"); err != nil {
				f.Fatal(err)
			}
		}
	}
	prop := rapid.MakeFuzz(checkModel)
	f.Fuzz(func(t *testing.T, data []byte) {
		data = data[:min(len(data), maxFuzzInput)]
		prop(t, append(slices.Clip(data), make([]byte, 8*padWords)...))
	})
}

// maxFuzzInput bounds the bytes of a fuzz input that are used: enough for a
// few hundred steps, and a run stays fast.
const maxFuzzInput = 1 << 14

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
	n := rapid.Custom(func(t *rapid.T) int { return uniform(t, 7) }).Draw(t, "prefix")
	for range n {
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
		t.Fatalf("%v: Apply and the Queue method disagree:\nApply:  %+v\nmethod: %+v", step(in), out, dout)
	}
	if !before.matches(prev) {
		t.Fatalf("%v changed its receiver", step(in))
	}
	if out.Err != nil {
		if model.Kind(out.Err) == nil {
			t.Fatalf("%v: untyped error %v", step(in), out.Err)
		}
		if next != prev || direct != prev {
			t.Fatalf("%v rejected (%v) but did not return the receiver", step(in), out.Err)
		}
		if !before.matches(next) || !next.Equal(prev) || next.Hash() != prev.Hash() {
			t.Fatalf("%v rejected (%v) but changed the state", step(in), out.Err)
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
				t.Fatalf("%s differs from the run after step %d (%v)", name, i, step(in))
			}
			if got.Hash() != want.Hash() {
				t.Fatalf("%s is Equal to the run after step %d but hashes differently", name, i)
			}
		}
	}
	// Equal states have the same Seq, and Seq never goes back, so only
	// states within a run of the same Seq can be Equal.
	for i, a := range m.states {
		for _, b := range m.states[i+1:] {
			if b.Seq() != a.Seq() {
				if a.Equal(b) || b.Equal(a) {
					t.Fatalf("states of seq %d and %d are Equal", a.Seq(), b.Seq())
				}
				break
			}
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
		q, o.Task, o.Err = q.Retry(in.Now, in.Claim, in.Delay, in.Message)
	case model.OpClaimExpired:
		q, o.ReapClaims, o.Err = q.ClaimExpired(in.Now, in.Lease, in.Limit)
	case model.OpRequeue:
		q, o.Task, o.Err = q.Requeue(in.Now, in.ReapClaim, in.Delay, in.Message)
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
