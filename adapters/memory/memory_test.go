package memory

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

var harness = spec.Harness{
	Name: "memory",
	New: func(tb testing.TB, clock core.Clock, capacity int) core.Store {
		s := New(WithClock(clock), WithCapacity(capacity))
		tb.Cleanup(func() { _ = s.Close() })
		return s
	},
	Damage: func(tb testing.TB, s core.Store, queue, id string) {
		tb.Helper()
		if err := s.(*Store).Damage(context.Background(), queue, id); err != nil {
			tb.Fatalf("Damage(%s): %v", id, err)
		}
	},
}

var ctx = context.Background()

// TestConformance runs the conformance suite of package spec: every
// transition, guard, error kind and ordering rule, and the named seed
// scenarios, each checked against the model.
func TestConformance(t *testing.T) { spec.Run(t, harness) }

// TestDifferential runs the rapid state-machine test of package spec: random
// sequences of operations on the memory store and on the model, side by side.
func TestDifferential(t *testing.T) { spec.Differential(t, harness) }

// --- differential check against the model --------------------------------------

// diff drives the memory store and a spec.ModelStore with the same random
// operations on the same fake clock and fails at the first answer or state
// that differs.
type diff struct {
	t      *testing.T
	rng    *rand.Rand
	clock  *core.FakeClock
	mem    *Store
	ref    *spec.ModelStore
	claims []core.Claim
	reaps  []core.ReapClaim
	seen   []core.Task // tasks from earlier answers, for versions
	log    []string
}

var (
	diffQueues = []string{"q1", "q2", "Bad Name"}
	diffIDs    = []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", ""}
)

func (d *diff) pick(xs []string) string { return xs[d.rng.IntN(len(xs))] }

func (d *diff) queue() string {
	if d.rng.IntN(30) == 0 {
		return diffQueues[2]
	}
	return diffQueues[d.rng.IntN(2)]
}

func (d *diff) id() string {
	if d.rng.IntN(40) == 0 {
		return ""
	}
	return diffIDs[d.rng.IntN(len(diffIDs)-1)]
}

// dur returns 0..maxMillis whole milliseconds, half the time at most 3 so
// that deadlines and times meet exactly.
func (d *diff) dur(maxMillis int) time.Duration {
	if d.oneIn(2) {
		maxMillis = min(maxMillis, 3)
	}
	return time.Duration(d.rng.IntN(maxMillis+1)) * time.Millisecond
}

func (d *diff) future() time.Time {
	switch d.rng.IntN(5) {
	case 0:
		return time.Time{}
	case 1:
		return d.clock.Now().Add(-d.dur(2000))
	case 2:
		return d.clock.Now() // the instant of the ops since the clock last moved
	default:
		return d.clock.Now().Add(d.dur(3000))
	}
}

func (d *diff) claim() core.Claim {
	if len(d.claims) == 0 || d.rng.IntN(10) == 0 {
		return core.Claim{Queue: d.queue(), TaskID: d.id(), Token: uint64(d.rng.IntN(30))}
	}
	c := d.claims[d.recent(len(d.claims))]
	if d.rng.IntN(10) == 0 {
		c.Token++
	}
	return c
}

func (d *diff) reap() core.ReapClaim {
	if len(d.reaps) == 0 || d.rng.IntN(10) == 0 {
		return core.ReapClaim{Queue: d.queue(), TaskID: d.id(), Version: uint64(d.rng.IntN(30))}
	}
	return d.reaps[d.recent(len(d.reaps))]
}

// recent returns an index below n, mostly one of the last four.
func (d *diff) recent(n int) int {
	if d.oneIn(3) {
		return d.rng.IntN(n)
	}
	return max(0, n-1-d.rng.IntN(4))
}

func (d *diff) expect() uint64 {
	switch {
	case d.rng.IntN(2) == 0 || len(d.seen) == 0:
		return 0
	case d.rng.IntN(4) == 0:
		return uint64(d.rng.IntN(30) + 1)
	}
	return d.seen[d.rng.IntN(len(d.seen))].Version
}

func (d *diff) states() []core.State {
	all := []core.State{core.Succeeded, core.Failed, core.Running, 0}
	n := d.rng.IntN(3)
	var out []core.State
	for range n {
		out = append(out, all[d.rng.IntN(len(all))])
	}
	if d.rng.IntN(4) > 0 {
		out = []core.State{core.Succeeded, core.Failed}[:1+d.rng.IntN(2)]
	}
	return out
}

// limit returns -1 or 0 sometimes, else 1..maxLimit.
func (d *diff) limit(maxLimit int) int {
	switch d.rng.IntN(10) {
	case 0:
		return -1
	case 1:
		return 0
	}
	return 1 + d.rng.IntN(maxLimit)
}

// lease returns a positive duration of whole milliseconds, or rarely 0 or a
// negative one.
// delay is a retry delay: none, up to 3 s, rarely a negative one.
func (d *diff) delay() time.Duration {
	switch d.rng.IntN(5) {
	case 0:
		return 0
	case 1:
		if d.oneIn(6) {
			return -d.dur(1)
		}
	}
	return d.dur(3000)
}

func (d *diff) lease(maxMillis int) time.Duration {
	if d.rng.IntN(30) == 0 {
		return -d.dur(1)
	}
	return time.Millisecond + d.dur(maxMillis)
}

func (d *diff) oneIn(n int) bool { return d.rng.IntN(n) == 0 }

// step performs one random operation on both stores and compares answers.
func (d *diff) step() {
	var desc string
	var got, want any
	var gerr, werr error
	op := ""
	both := func(name string, f func(s core.Store) (any, error)) {
		desc, op = name, name
		got, gerr = f(d.mem)
		want, werr = f(d.ref)
	}
	switch d.rng.IntN(26) {
	case 0, 1:
		d.clock.Advance(d.dur(2500))
		desc = "advance clock to " + d.clock.Now().Format(time.StampMicro)
	case 2, 3, 24, 25:
		p := core.EnqueueParams{Queue: d.queue(), EnqueueArgs: model.EnqueueArgs{
			ID: d.id(), Payload: []byte(d.pick([]string{"", "x", "payload"})),
			Priority: []int{0, 0, 1, -1, 5, model.MaxPriority, model.MinPriority}[d.rng.IntN(7)],
			RunAfter: d.future(), MaxAttempts: 1 + d.rng.IntN(3),
		}}
		if d.oneIn(20) {
			p.MaxAttempts = 0
		}
		if d.oneIn(20) {
			p.Priority = model.MaxPriority + 1
		}
		both(fmt.Sprintf("Enqueue(%+v)", p), func(s core.Store) (any, error) { return s.Enqueue(ctx, p) })
	case 4:
		p := core.PromoteParams{Queue: d.queue(), Limit: d.limit(3)}
		both(fmt.Sprintf("Promote(%+v)", p), func(s core.Store) (any, error) { return s.Promote(ctx, p) })
	case 5, 6, 7:
		p := core.PopParams{Queue: d.queue(), Lease: d.lease(2000), N: 1 + d.rng.IntN(3)}
		if d.oneIn(15) {
			p.N = []int{0, model.MaxBatch + 1}[d.rng.IntN(2)]
		}
		both(fmt.Sprintf("Pop(%+v)", p), func(s core.Store) (any, error) { return s.Pop(ctx, p) })
	case 8:
		p := core.ExtendParams{Claim: d.claim(), Lease: d.lease(3000)}
		both(fmt.Sprintf("Extend(%+v)", p), func(s core.Store) (any, error) { return s.Extend(ctx, p) })
	case 9:
		p := core.AckParams{Claim: d.claim(), Result: []byte(d.pick([]string{"", "ok"}))}
		both(fmt.Sprintf("Ack(%+v)", p), func(s core.Store) (any, error) { return s.Ack(ctx, p) })
	case 10:
		p := core.FailParams{Claim: d.claim(), Message: d.pick([]string{"", "boom"})}
		both(fmt.Sprintf("Fail(%+v)", p), func(s core.Store) (any, error) { return s.Fail(ctx, p) })
	case 11:
		p := core.RetryParams{Claim: d.claim(), Delay: d.delay(), Message: "again"}
		both(fmt.Sprintf("Retry(%+v)", p), func(s core.Store) (any, error) { return s.Retry(ctx, p) })
	case 12, 20:
		p := core.ClaimExpiredParams{Queue: d.queue(), ClaimTTL: d.lease(2000), Limit: d.limit(3)}
		both(fmt.Sprintf("ClaimExpired(%+v)", p), func(s core.Store) (any, error) { return s.ClaimExpired(ctx, p) })
	case 13, 21:
		p := core.RequeueParams{ReapClaim: d.reap(), Delay: d.delay(), Message: d.pick([]string{"", "late"})}
		both(fmt.Sprintf("Requeue(%s v%d)", p.ReapClaim.TaskID, p.ReapClaim.Version), func(s core.Store) (any, error) { return s.Requeue(ctx, p) })
	case 14, 22:
		p := core.FinalizeParams{ReapClaim: d.reap(), Message: d.pick([]string{"", "gone"})}
		both(fmt.Sprintf("Finalize(%s v%d)", p.ReapClaim.TaskID, p.ReapClaim.Version), func(s core.Store) (any, error) { return s.Finalize(ctx, p) })
	case 15:
		p := core.RecoverExpiredParams{Queue: d.queue(), Delay: d.dur(2000) - time.Millisecond, Limit: d.limit(3)}
		both(fmt.Sprintf("RecoverExpired(%+v)", p), func(s core.Store) (any, error) { return s.RecoverExpired(ctx, p) })
	case 16:
		p := core.InspectParams{Queue: d.queue(), ID: d.id(), Expect: d.expect()}
		if d.rng.IntN(2) == 0 {
			both(fmt.Sprintf("InspectRequeue(%+v)", p), func(s core.Store) (any, error) { return s.InspectRequeue(ctx, p) })
		} else {
			both(fmt.Sprintf("Remove(%+v)", p), func(s core.Store) (any, error) { return s.Remove(ctx, p) })
		}
	case 17, 23:
		p := core.PruneParams{Queue: d.queue(), States: d.states(), Before: d.future(), Limit: d.limit(2)}
		both(fmt.Sprintf("Prune(%+v)", p), func(s core.Store) (any, error) { return s.Prune(ctx, p) })
	case 18:
		p := core.ListParams{Queue: d.queue(), State: core.State(1 + d.rng.IntN(5)), After: d.pick(diffIDs), Limit: d.limit(3)}
		if d.oneIn(15) {
			p.State = core.State(d.rng.IntN(2) * 6)
		}
		both(fmt.Sprintf("List(%+v)", p), func(s core.Store) (any, error) { return s.List(ctx, p) })
	default:
		p := core.GetParams{Queue: d.queue(), ID: d.id()}
		both(fmt.Sprintf("Get(%+v)", p), func(s core.Store) (any, error) { return s.Get(ctx, p) })
	}
	switch {
	case op == "":
	case werr == nil:
		desc += " -> ok"
	default:
		desc += " -> " + werr.Error()
	}
	d.log = append(d.log, desc)
	if !sameError(gerr, werr) {
		d.fail("error: memory %v, model %v", gerr, werr)
	}
	if werr == nil && got != nil {
		if why := sameAnswer(got, want); why != "" {
			d.fail("answer: %s", why)
		}
		d.collect(want)
	}
	d.compareState()
}

func (d *diff) fail(format string, args ...any) {
	d.t.Helper()
	d.t.Fatalf("after %d steps:\n  %s\n%s", len(d.log), strings.Join(d.log[max(0, len(d.log)-15):], "\n  "), fmt.Sprintf(format, args...))
}

// collect keeps the claims, reap claims and tasks of a model answer.
func (d *diff) collect(ans any) {
	add := func(ts ...core.Task) {
		for _, t := range ts {
			d.seen = append(d.seen, t)
			if t.State == core.Running {
				d.claims = append(d.claims, t.Claim())
			}
		}
	}
	switch a := ans.(type) {
	case core.TaskResult:
		add(a.Task)
	case core.TasksResult:
		add(a.Tasks...)
	case core.ReapResult:
		d.reaps = append(d.reaps, a.Claims...)
	case core.ListResult:
		add(a.Tasks...)
	case core.Task:
		add(a)
	}
}

// compareState compares every task and the counts of both real queues.
func (d *diff) compareState() {
	d.t.Helper()
	for _, q := range diffQueues[:2] {
		gc, err1 := d.mem.Counts(ctx, core.CountsParams{Queue: q})
		wc, err2 := d.ref.Counts(ctx, core.CountsParams{Queue: q})
		if err1 != nil || err2 != nil || gc != wc {
			d.fail("queue %s: counts memory %+v (%v), model %+v (%v)", q, gc, err1, wc, err2)
		}
		for _, s := range model.States {
			got, want := listAll(d.t, d.mem, q, s), listAll(d.t, d.ref, q, s)
			if why := sameTasks(got, want); why != "" {
				d.fail("queue %s, %v tasks: %s", q, s, why)
			}
		}
	}
}

func listAll(t testing.TB, s core.Store, queue string, state core.State) []core.Task {
	t.Helper()
	var out []core.Task
	after := ""
	for {
		page, err := s.List(ctx, core.ListParams{Queue: queue, State: state, After: after, Limit: model.MaxBatch})
		if err != nil {
			t.Fatalf("List(%s, %v): %v", queue, state, err)
		}
		out = append(out, page.Tasks...)
		if page.Next == "" {
			return out
		}
		after = page.Next
	}
}

// sameError reports whether two errors are the same answer: the same kind,
// and for a transition error the same op and state.
func sameError(got, want error) bool {
	if (got == nil) != (want == nil) {
		return false
	}
	if got == nil {
		return true
	}
	if model.Kind(got) != model.Kind(want) {
		return false
	}
	var gt, wt *model.TransitionError
	if errors.As(want, &wt) {
		return errors.As(got, &gt) && *gt == *wt
	}
	return model.Kind(want) != nil || errors.Is(got, want)
}

func sameTasks(got, want []core.Task) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d tasks, model %d", len(got), len(want))
	}
	for i := range got {
		if !got[i].Equal(want[i]) {
			return fmt.Sprintf("task %d:\n  memory %+v\n  model  %+v", i, got[i], want[i])
		}
	}
	return ""
}

func sameAnswer(got, want any) string {
	switch w := want.(type) {
	case core.TaskResult:
		g := got.(core.TaskResult)
		if !g.Now.Equal(w.Now) {
			return fmt.Sprintf("Now %v, model %v", g.Now, w.Now)
		}
		return sameTasks([]core.Task{g.Task}, []core.Task{w.Task})
	case core.TasksResult:
		g := got.(core.TasksResult)
		if !g.Now.Equal(w.Now) {
			return fmt.Sprintf("Now %v, model %v", g.Now, w.Now)
		}
		return sameTasks(g.Tasks, w.Tasks)
	case core.IDsResult:
		g := got.(core.IDsResult)
		if !g.Now.Equal(w.Now) || !slices.Equal(g.IDs, w.IDs) {
			return fmt.Sprintf("%v %v, model %v %v", g.Now, g.IDs, w.Now, w.IDs)
		}
	case core.ReapResult:
		g := got.(core.ReapResult)
		if !g.Now.Equal(w.Now) || len(g.Claims) != len(w.Claims) {
			return fmt.Sprintf("%v %d claims, model %v %d", g.Now, len(g.Claims), w.Now, len(w.Claims))
		}
		for i := range g.Claims {
			gc, wc := g.Claims[i], w.Claims[i]
			if gc.Queue != wc.Queue || gc.TaskID != wc.TaskID || gc.Version != wc.Version || !gc.Deadline.Equal(wc.Deadline) || !gc.Task.Equal(wc.Task) {
				return fmt.Sprintf("claim %d: %+v, model %+v", i, gc, wc)
			}
		}
	case core.ListResult:
		g := got.(core.ListResult)
		if g.Next != w.Next {
			return fmt.Sprintf("next %q, model %q", g.Next, w.Next)
		}
		return sameTasks(g.Tasks, w.Tasks)
	case core.Task:
		return sameTasks([]core.Task{got.(core.Task)}, []core.Task{w})
	default:
		return fmt.Sprintf("unexpected answer type %T", want)
	}
	return ""
}

// TestMatchesTheModelOnRandomOperations runs 120 random sequences of 150
// operations (with and without a capacity) on the memory store and the model
// side by side, comparing every answer and the whole state after each step.
func TestMatchesTheModelOnRandomOperations(t *testing.T) {
	for seed := range uint64(120) {
		clock := core.NewFakeClock(epoch)
		capacity := []int{0, 0, 3}[seed%3]
		d := &diff{
			t:     t,
			rng:   rand.New(rand.NewPCG(seed, 99)),
			clock: clock,
			mem:   New(WithClock(clock), WithCapacity(capacity)),
			ref:   spec.NewModelStore(clock, capacity),
		}
		for range 150 {
			d.step()
		}
	}
}

// --- focused behaviour ----------------------------------------------------------

func mustEnqueue(t *testing.T, s core.Store, queue, id string, args model.EnqueueArgs) core.Task {
	t.Helper()
	args.ID = id
	if args.MaxAttempts == 0 {
		args.MaxAttempts = 3
	}
	r, err := s.Enqueue(ctx, core.EnqueueParams{Queue: queue, EnqueueArgs: args})
	if err != nil {
		t.Fatalf("Enqueue(%s): %v", id, err)
	}
	return r.Task
}

// TestReturnedTasksAreTheCallersToChange changes every slice of every kind
// of answer and checks the store did not see it.
func TestReturnedTasksAreTheCallersToChange(t *testing.T) {
	clock := core.NewFakeClock(epoch)
	s := New(WithClock(clock))
	payload := []byte("payload")
	enq := mustEnqueue(t, s, "q", "a", model.EnqueueArgs{Payload: payload})
	payload[0] = 'X'
	enq.Payload[1] = 'X'
	pop, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Second, N: 1})
	if err != nil || len(pop.Tasks) != 1 {
		t.Fatalf("Pop: %v %v", pop, err)
	}
	pop.Tasks[0].Payload[2] = 'X'
	r, err := s.Retry(ctx, core.RetryParams{Claim: pop.Tasks[0].Claim(), Message: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	r.Task.Errors[0].Message = "changed"
	r.Task.Errors = append(r.Task.Errors[:1], core.TaskError{Message: "appended"})
	pop, _ = s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Second, N: 1})
	result := []byte("result")
	ack, err := s.Ack(ctx, core.AckParams{Claim: pop.Tasks[0].Claim(), Result: result})
	if err != nil {
		t.Fatal(err)
	}
	result[0] = 'X'
	ack.Task.Result[1] = 'X'
	list, _ := s.List(ctx, core.ListParams{Queue: "q", State: core.Succeeded, Limit: 10})
	list.Tasks[0].Payload[3] = 'X'
	list.Tasks[0].Errors[0].Message = "changed again"

	got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Payload) != "payload" || string(got.Result) != "result" || len(got.Errors) != 1 || got.Errors[0].Message != "m1" {
		t.Fatalf("store changed through returned slices: payload %q result %q errors %+v", got.Payload, got.Result, got.Errors)
	}
}

// TestBatchAnswersDoNotShareTheirBytes appends to and writes into each task
// of a Pop and an AckBatch of several tasks (whose payloads and results share
// one allocation) and checks that neither the other tasks of the answer nor
// the store see it.
func TestBatchAnswersDoNotShareTheirBytes(t *testing.T) {
	s := New(WithClock(core.NewFakeClock(epoch)))
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		mustEnqueue(t, s, "q", id, model.EnqueueArgs{Payload: []byte("payload-" + id)})
	}
	pop, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Second, N: len(ids)})
	if err != nil || len(pop.Tasks) != len(ids) {
		t.Fatalf("Pop: %v %v", pop, err)
	}
	var acks []core.AckItem
	for _, task := range pop.Tasks {
		acks = append(acks, core.AckItem{Claim: task.Claim(), Result: []byte("result-" + task.ID)})
	}
	for i := range pop.Tasks {
		pop.Tasks[i].Payload = append(pop.Tasks[i].Payload, "-appended"...)
		pop.Tasks[i].Payload[0] = 'X'
	}
	for _, task := range pop.Tasks {
		if want := "Xayload-" + task.ID + "-appended"; string(task.Payload) != want {
			t.Errorf("popped %s: payload %q, want %q", task.ID, task.Payload, want)
		}
	}
	ack, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q", Acks: acks})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range ack.Items {
		if it.Err != nil {
			t.Fatal(it.Err)
		}
	}
	for i := range ack.Items {
		tk := &ack.Items[i].Task
		tk.Payload = append(tk.Payload, '!')
		tk.Result = append(tk.Result, '!')
		tk.Payload[1], tk.Result[1] = 'X', 'X'
	}
	for _, it := range ack.Items {
		if want := "pXyload-" + it.Task.ID + "!"; string(it.Task.Payload) != want {
			t.Errorf("acked %s: payload %q, want %q", it.Task.ID, it.Task.Payload, want)
		}
		if want := "rXsult-" + it.Task.ID + "!"; string(it.Task.Result) != want {
			t.Errorf("acked %s: result %q, want %q", it.Task.ID, it.Task.Result, want)
		}
	}
	for _, id := range ids {
		got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Payload) != "payload-"+id || string(got.Result) != "result-"+id {
			t.Errorf("store's %s changed through an answer: payload %q result %q", id, got.Payload, got.Result)
		}
	}
}

// TestTimesAreUTCMicrosecondsAndZeroStaysZero uses a clock that reads a
// non-UTC time with nanoseconds and checks what the store keeps.
func TestTimesAreUTCMicrosecondsAndZeroStaysZero(t *testing.T) {
	zone := time.FixedZone("east", 5*3600)
	s := New(WithClock(rawClock{time.Date(2025, 6, 1, 12, 0, 0, 123456789, zone)}))
	r, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2025, 6, 1, 7, 0, 0, 123456000, time.UTC)
	if r.Now != want || r.Task.EnqueuedAt != want {
		t.Fatalf("Now %v, EnqueuedAt %v; want %v (== in UTC)", r.Now, r.Task.EnqueuedAt, want)
	}
	if !r.Task.RunAfter.IsZero() || !r.Task.ClaimedAt.IsZero() || !r.Task.Deadline.IsZero() || !r.Task.FinishedAt.IsZero() {
		t.Fatalf("unset times not zero: %+v", r.Task)
	}
	later := time.Date(2030, 1, 1, 0, 0, 0, 999, zone)
	r, err = s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "b", MaxAttempts: 1, RunAfter: later}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Task.RunAfter != later.UTC().Truncate(time.Microsecond) || r.Task.State != core.Scheduled {
		t.Fatalf("RunAfter %v (%v), want %v", r.Task.RunAfter, r.Task.State, later.UTC().Truncate(time.Microsecond))
	}
	pop, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: 1500 * time.Nanosecond, N: 1})
	if err != nil || len(pop.Tasks) != 1 {
		t.Fatalf("Pop: %v %v", pop, err)
	}
	if d := pop.Tasks[0].Deadline; d != want.Add(time.Microsecond) {
		t.Fatalf("Deadline %v, want %v", d, want.Add(time.Microsecond))
	}
}

// rawClock reads a fixed time as it is, without the truncation and the UTC
// conversion of core's clocks.
type rawClock struct{ t time.Time }

func (c rawClock) Now() time.Time                      { return c.t }
func (c rawClock) NewTimer(d time.Duration) core.Timer { return core.SystemClock{}.NewTimer(d) }

// TestCapacityBoundsPendingTasksOfEachQueue fills one queue, checks the next
// Enqueue is ErrQueueFull there but not in another queue, and that a finished
// task frees a place.
func TestCapacityBoundsPendingTasksOfEachQueue(t *testing.T) {
	s := New(WithCapacity(2), WithClock(core.NewFakeClock(epoch)))
	mustEnqueue(t, s, "q", "a", model.EnqueueArgs{})
	mustEnqueue(t, s, "q", "b", model.EnqueueArgs{})
	_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "c", MaxAttempts: 1}})
	if !errors.Is(err, core.ErrQueueFull) {
		t.Fatalf("third Enqueue: %v, want ErrQueueFull", err)
	}
	mustEnqueue(t, s, "other", "c", model.EnqueueArgs{})
	pop, _ := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Second, N: 1})
	if _, err := s.Ack(ctx, core.AckParams{Claim: pop.Tasks[0].Claim()}); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, s, "q", "c", model.EnqueueArgs{})
}

// TestClosedStoreRejectsEveryOperation closes a store with queues and checks
// every method returns ErrClosed, also on a queue that never existed.
func TestClosedStoreRejectsEveryOperation(t *testing.T) {
	s := New(WithClock(core.NewFakeClock(epoch)))
	mustEnqueue(t, s, "q", "a", model.EnqueueArgs{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, q := range []string{"q", "never"} {
		c := core.Claim{Queue: q, TaskID: "a", Token: 1}
		rc := core.ReapClaim{Queue: q, TaskID: "a", Version: 1}
		errs := map[string]error{}
		_, errs["Enqueue"] = s.Enqueue(ctx, core.EnqueueParams{Queue: q, EnqueueArgs: model.EnqueueArgs{ID: "b", MaxAttempts: 1}})
		_, errs["Promote"] = s.Promote(ctx, core.PromoteParams{Queue: q})
		_, errs["Pop"] = s.Pop(ctx, core.PopParams{Queue: q, Lease: time.Second, N: 1})
		_, errs["Extend"] = s.Extend(ctx, core.ExtendParams{Claim: c, Lease: time.Second})
		_, errs["Ack"] = s.Ack(ctx, core.AckParams{Claim: c})
		_, errs["Fail"] = s.Fail(ctx, core.FailParams{Claim: c})
		_, errs["Retry"] = s.Retry(ctx, core.RetryParams{Claim: c})
		_, errs["ClaimExpired"] = s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: q, ClaimTTL: time.Second})
		_, errs["Requeue"] = s.Requeue(ctx, core.RequeueParams{ReapClaim: rc})
		_, errs["Finalize"] = s.Finalize(ctx, core.FinalizeParams{ReapClaim: rc})
		_, errs["RecoverExpired"] = s.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: q})
		_, errs["Get"] = s.Get(ctx, core.GetParams{Queue: q, ID: "a"})
		_, errs["List"] = s.List(ctx, core.ListParams{Queue: q, State: core.Ready, Limit: 1})
		_, errs["Counts"] = s.Counts(ctx, core.CountsParams{Queue: q})
		_, errs["InspectRequeue"] = s.InspectRequeue(ctx, core.InspectParams{Queue: q, ID: "a"})
		_, errs["Remove"] = s.Remove(ctx, core.InspectParams{Queue: q, ID: "a"})
		_, errs["Prune"] = s.Prune(ctx, core.PruneParams{Queue: q, States: []core.State{core.Failed}})
		if len(errs) != 17 {
			t.Fatalf("checked %d methods, want 17", len(errs))
		}
		for name, err := range errs {
			if !errors.Is(err, core.ErrClosed) {
				t.Errorf("%s on queue %s after Close: %v, want ErrClosed", name, q, err)
			}
		}
	}
}

// TestCloseWaitsForOperationsInProgress holds a queue's lock as an
// operation would, closes the store from another goroutine, and checks Close
// returns only after the lock is released and that the queue then refuses.
func TestCloseWaitsForOperationsInProgress(t *testing.T) {
	s := New(WithClock(core.NewFakeClock(epoch)))
	mustEnqueue(t, s, "q", "a", model.EnqueueArgs{})
	q, err := s.queue(ctx, "q", false)
	if err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	closed := make(chan struct{})
	go func() {
		_ = s.Close()
		close(closed)
	}()
	// Close marks the store before it takes each queue's lock: wait for that.
	for {
		s.mu.RLock()
		marked := s.closed
		s.mu.RUnlock()
		if marked {
			break
		}
		select {
		case <-closed:
			t.Fatal("Close returned while an operation held the queue")
		default:
		}
	}
	select {
	case <-closed:
		t.Fatal("Close returned while an operation held the queue")
	default:
	}
	q.mu.Unlock()
	<-closed
	if _, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "a"}); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	if !q.closed || q.tasks != nil {
		t.Fatalf("queue after Close: closed %v, %d tasks", q.closed, len(q.tasks))
	}
}

// TestOperationsOnAMissingQueueCreateNothing checks that only Enqueue adds
// a queue: reads and claims on unknown queues answer as an empty queue does.
func TestOperationsOnAMissingQueueCreateNothing(t *testing.T) {
	s := New(WithClock(core.NewFakeClock(epoch)))
	if _, err := s.Get(ctx, core.GetParams{Queue: "ghost", ID: "a"}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Get: %v", err)
	}
	if r, err := s.Pop(ctx, core.PopParams{Queue: "ghost", Lease: time.Second, N: 5}); err != nil || len(r.Tasks) != 0 || r.Now.IsZero() {
		t.Fatalf("Pop: %+v %v", r, err)
	}
	if _, err := s.Pop(ctx, core.PopParams{Queue: "ghost", N: 5}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("Pop without lease: %v", err)
	}
	if _, err := s.Ack(ctx, core.AckParams{Claim: core.Claim{Queue: "ghost", TaskID: "a", Token: 3}}); !errors.Is(err, core.ErrStaleClaim) {
		t.Fatalf("Ack: %v", err)
	}
	if c, err := s.Counts(ctx, core.CountsParams{Queue: "ghost"}); err != nil || c != (core.Counts{}) {
		t.Fatalf("Counts: %+v %v", c, err)
	}
	if _, err := s.Counts(ctx, core.CountsParams{Queue: "no spaces"}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("Counts with a bad queue name: %v", err)
	}
	if len(s.queues) != 0 {
		t.Fatalf("%d queues created", len(s.queues))
	}
}

// TestCancelledContextIsRefused checks a done context stops an operation
// before it changes anything.
func TestCancelledContextIsRefused(t *testing.T) {
	s := New(WithClock(core.NewFakeClock(epoch)))
	c, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Enqueue(c, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Enqueue: %v", err)
	}
	if n, _ := s.Counts(ctx, core.CountsParams{Queue: "q"}); n.Total() != 0 {
		t.Fatalf("counts %+v after a cancelled Enqueue", n)
	}
}

// TestLargeQueueKeepsPopOrderAndIndexes enqueues many tasks with mixed
// priorities and schedules, drives them through every index and checks the
// order of Pop, Promote and ClaimExpired and the internal indexes.
func TestLargeQueueKeepsPopOrderAndIndexes(t *testing.T) {
	clock := core.NewFakeClock(epoch)
	s := New(WithClock(clock))
	const n = 5000
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range n {
		args := model.EnqueueArgs{Priority: rng.IntN(5) - 2}
		if i%2 == 0 {
			args.RunAfter = epoch.Add(time.Duration(rng.IntN(1000)+1) * time.Millisecond)
		}
		mustEnqueue(t, s, "q", fmt.Sprintf("t%06d-%d", rng.IntN(1_000_000), i), args)
	}
	clock.Advance(time.Second)
	prom, err := s.Promote(ctx, core.PromoteParams{Queue: "q"})
	if err != nil || len(prom.IDs) != n/2 {
		t.Fatalf("Promote: %d ids, %v", len(prom.IDs), err)
	}
	readyVersion := map[string]uint64{}
	for _, tk := range listAll(t, s, "q", core.Ready) {
		readyVersion[tk.ID] = tk.Version
	}
	var popped []core.Task
	for len(popped) < n {
		r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Duration(rng.IntN(100)+1) * time.Millisecond, N: 7})
		if err != nil || len(r.Tasks) == 0 {
			t.Fatalf("Pop after %d: %v %v", len(popped), r, err)
		}
		popped = append(popped, r.Tasks...)
	}
	if !slices.IsSortedFunc(popped, func(a, b core.Task) int {
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		return cmp.Compare(readyVersion[a.ID], readyVersion[b.ID])
	}) {
		t.Fatal("Pop order is not (priority desc, version when Ready asc)")
	}
	deadline := map[string]time.Time{}
	for _, tk := range popped {
		deadline[tk.ID] = tk.Deadline
	}
	clock.Advance(50 * time.Millisecond)
	var reaped []core.ReapClaim
	for {
		r, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "q", ClaimTTL: time.Minute, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Claims) == 0 {
			break
		}
		reaped = append(reaped, r.Claims...)
	}
	for i, rc := range reaped {
		if deadline[rc.TaskID].After(epoch.Add(time.Second + 50*time.Millisecond)) {
			t.Fatalf("claimed %s with deadline %v", rc.TaskID, deadline[rc.TaskID])
		}
		if i > 0 {
			prev := reaped[i-1].TaskID
			if c := deadline[prev].Compare(deadline[rc.TaskID]); c > 0 || (c == 0 && prev >= rc.TaskID) {
				t.Fatalf("ClaimExpired order: %s (%v) before %s (%v)", prev, deadline[prev], rc.TaskID, deadline[rc.TaskID])
			}
		}
	}
	if len(reaped) == 0 || len(reaped) == n {
		t.Fatalf("%d of %d tasks expired after 50ms of leases of 1..100ms", len(reaped), n)
	}
	q, _ := s.queue(ctx, "q", false)
	checkQueueIndexes(t, q)
}

// checkQueueIndexes checks the internal structure of a queue: every task in
// the map is in exactly the indexes of its state, with its current keys, the
// indexes hold nothing else, and the counts agree.
func checkQueueIndexes(t *testing.T, q *queue) {
	t.Helper()
	q.mu.RLock()
	defer q.mu.RUnlock()
	var counts model.Counts
	for id, tk := range q.tasks {
		if tk.ID != id {
			t.Fatalf("task under %q has ID %q", id, tk.ID)
		}
		counts = addCount(counts, tk.State)
		if tk.key != keyOf(id) {
			t.Fatalf("task %q has the key of another ID", id)
		}
		if int(tk.h) >= len(q.slab) || q.slab[tk.h] != tk {
			t.Fatalf("task %q is not at its handle %d in the slab", id, tk.h)
		}
		for _, s := range model.States {
			var found bool
			q.byState[s].AscendWhere(func(it entry) bool { return q.slab[it.h].ID < id }, func(it entry) bool {
				found = q.slab[it.h].ID == id && q.slab[it.h] == tk
				return false
			})
			if found != (s == tk.State) {
				t.Fatalf("task %q (%v) in the %v ID index: %v", id, tk.State, s, found)
			}
		}
		var found bool
		if tk.State == model.Ready {
			q.ready.AscendFrom(readyEntry(tk), func(it entry) bool { found = q.slab[it.h] == tk; return false })
		} else {
			idx, item := q.orderIndex(tk)
			idx.AscendFrom(item, func(it entry) bool { found = q.slab[it.h] == tk && it == item; return false })
		}
		if !found {
			t.Fatalf("task %q (%v) missing from its order index", id, tk.State)
		}
	}
	if counts != q.counts {
		t.Fatalf("counts %+v, tasks say %+v", q.counts, counts)
	}
	if len(q.slab)-len(q.free) != len(q.tasks) {
		t.Fatalf("%d slab entries, %d free, %d tasks", len(q.slab), len(q.free), len(q.tasks))
	}
	for _, h := range q.free {
		if q.slab[h] != nil {
			t.Fatalf("free handle %d holds task %q", h, q.slab[h].ID)
		}
	}
	order := q.ready.Len() + q.scheduled.Len() + q.running.Len() + q.finished.Len()
	byID := 0
	for _, s := range model.States {
		byID += q.byState[s].Len()
		if _, err := verify(&q.byState[s]); err != nil {
			t.Fatalf("%v ID index: %v", s, err)
		}
	}
	if order != len(q.tasks) || byID != len(q.tasks) {
		t.Fatalf("%d tasks, %d order index entries, %d ID index entries", len(q.tasks), order, byID)
	}
	for name, err := range map[string]error{"ready": verifyErr(&q.ready), "scheduled": verifyErr(&q.scheduled), "running": verifyErr(&q.running), "finished": verifyErr(&q.finished)} {
		if err != nil {
			t.Fatalf("%s index: %v", name, err)
		}
	}
}

func verifyErr(b *btree) error { _, err := verify(b); return err }

func addCount(c model.Counts, s model.State) model.Counts {
	switch s {
	case model.Scheduled:
		c.Scheduled++
	case model.Ready:
		c.Ready++
	case model.Running:
		c.Running++
	case model.Succeeded:
		c.Succeeded++
	case model.Failed:
		c.Failed++
	}
	return c
}

// --- concurrency -------------------------------------------------------------------

// TestConcurrentWorkersAndBrokersAccountForEveryTask runs workers (Pop, Extend,
// Ack, Fail, Retry or abandon), a broker that moves the clock, claims expired
// tasks and decides them, a recoverer (RecoverExpired) and a reader, all at
// once. Afterwards every task is terminal, was completed (acked or failed)
// exactly once, and the store agrees with what the goroutines saw.
func TestConcurrentWorkersAndBrokersAccountForEveryTask(t *testing.T) {
	const (
		tasks   = 400
		workers = 8
		lease   = 10 * time.Second
	)
	clock := core.NewFakeClock(epoch)
	s := New(WithClock(clock))
	for i := range tasks {
		mustEnqueue(t, s, "q", fmt.Sprintf("t%03d", i), model.EnqueueArgs{Priority: i % 3, MaxAttempts: 3, Payload: []byte{byte(i)}})
	}

	var (
		mu       sync.Mutex
		finished = map[string]string{} // task ID -> who finished it and how
		problems []string
		done     atomic.Bool
		wg       sync.WaitGroup
	)
	record := func(id, how string) {
		mu.Lock()
		defer mu.Unlock()
		if prev, dup := finished[id]; dup {
			problems = append(problems, fmt.Sprintf("task %s finished twice: %s, then %s", id, prev, how))
		}
		finished[id] = how
	}
	problem := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	// A worker's decision may be refused because a broker or a newer claim
	// acted first; nothing else may go wrong.
	workerRefusal := func(err error) bool {
		return errors.Is(err, core.ErrStaleClaim) || errors.Is(err, core.ErrInvalidTransition)
	}

	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for !done.Load() {
				r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: lease, N: 1 + rng.IntN(3)})
				if err != nil {
					problem("Pop: %v", err)
					return
				}
				for _, tk := range r.Tasks {
					if tk.State != core.Running || tk.ClaimToken != tk.Version || len(tk.Payload) != 1 {
						problem("popped %+v", tk)
					}
					c := tk.Claim()
					if rng.IntN(3) == 0 {
						if _, err := s.Extend(ctx, core.ExtendParams{Claim: c, Lease: lease}); err != nil && !workerRefusal(err) {
							problem("Extend: %v", err)
						}
					}
					switch k := rng.IntN(10); {
					case k < 5:
						if res, err := s.Ack(ctx, core.AckParams{Claim: c, Result: []byte(tk.ID)}); err == nil {
							record(tk.ID, fmt.Sprintf("acked v%d", res.Task.Version))
						} else if !workerRefusal(err) {
							problem("Ack: %v", err)
						}
					case k < 6:
						if res, err := s.Fail(ctx, core.FailParams{Claim: c, Message: "boom"}); err == nil {
							record(tk.ID, fmt.Sprintf("failed v%d", res.Task.Version))
						} else if !workerRefusal(err) {
							problem("Fail: %v", err)
						}
					case k < 8 && tk.Attempt < tk.MaxAttempts:
						if _, err := s.Retry(ctx, core.RetryParams{Claim: c, Message: "again"}); err != nil && !workerRefusal(err) {
							problem("Retry: %v", err)
						}
					default: // abandon: the lease lapses and a broker decides
					}
				}
			}
		}()
	}

	wg.Add(1)
	go func() { // the broker: moves time, claims expired tasks, decides them
		defer wg.Done()
		rng := rand.New(rand.NewPCG(77, 1))
		for !done.Load() {
			clock.Advance(lease / 4)
			if _, err := s.Promote(ctx, core.PromoteParams{Queue: "q"}); err != nil {
				problem("Promote: %v", err)
			}
			r, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "q", ClaimTTL: lease, Limit: 1 + rng.IntN(20)})
			if err != nil {
				problem("ClaimExpired: %v", err)
				return
			}
			for _, rc := range r.Claims {
				if rc.Task.Attempt >= rc.Task.MaxAttempts {
					res, err := s.Finalize(ctx, core.FinalizeParams{ReapClaim: rc})
					if err == nil {
						record(rc.TaskID, fmt.Sprintf("finalized v%d", res.Task.Version))
					} else if !errors.Is(err, core.ErrStaleClaim) {
						problem("Finalize: %v", err)
					}
				} else if _, err := s.Requeue(ctx, core.RequeueParams{ReapClaim: rc, Delay: time.Second}); err != nil && !errors.Is(err, core.ErrStaleClaim) {
					problem("Requeue: %v", err)
				}
			}
			c, err := s.Counts(ctx, core.CountsParams{Queue: "q"})
			if err != nil || c.Total() != tasks {
				problem("Counts %+v %v", c, err)
			}
			if c.Pending() == 0 {
				done.Store(true)
			}
		}
	}()

	wg.Add(1)
	go func() { // the recoverer: decides expired tasks in one step
		defer wg.Done()
		for !done.Load() {
			r, err := s.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: "q", Delay: 0, Limit: 5})
			if err != nil {
				problem("RecoverExpired: %v", err)
				return
			}
			for _, tk := range r.Tasks {
				if tk.State == core.Failed {
					record(tk.ID, fmt.Sprintf("recovered to failed v%d", tk.Version))
				}
			}
		}
	}()

	wg.Add(1)
	go func() { // a reader: pages of every state never lose or duplicate a task
		defer wg.Done()
		for !done.Load() {
			for _, st := range model.States {
				page, err := s.List(ctx, core.ListParams{Queue: "q", State: st, Limit: 50})
				if err != nil {
					problem("List: %v", err)
					return
				}
				for _, tk := range page.Tasks {
					if tk.State != st {
						problem("List(%v) returned a %v task", st, tk.State)
					}
				}
			}
		}
	}()
	wg.Wait()

	for _, p := range problems[:min(len(problems), 10)] {
		t.Error(p)
	}
	if len(finished) != tasks {
		t.Fatalf("%d tasks finished, want %d", len(finished), tasks)
	}
	for id, how := range finished {
		tk, err := s.Get(ctx, core.GetParams{Queue: "q", ID: id})
		if err != nil {
			t.Fatal(err)
		}
		acked := strings.HasPrefix(how, "acked")
		if acked != (tk.State == core.Succeeded) || !tk.State.Terminal() || !strings.HasSuffix(how, fmt.Sprintf("v%d", tk.Version)) {
			t.Errorf("task %s: %s, store says %v v%d", id, how, tk.State, tk.Version)
		}
		if acked && !bytes.Equal(tk.Result, []byte(id)) {
			t.Errorf("task %s: result %q", id, tk.Result)
		}
	}
	q, _ := s.queue(ctx, "q", false)
	checkQueueIndexes(t, q)
}

// TestListOrdersIDsBytewiseBeyondTheirKeys checks the ID order of the
// indexes where the 16-byte keys of IDs tie: long common prefixes, zero
// bytes, an ID that is a prefix of another.
func TestListOrdersIDsBytewiseBeyondTheirKeys(t *testing.T) {
	s := New(WithClock(core.NewFakeClock(epoch)))
	defer s.Close()
	ids := []string{"a", "a\x00", "a\x00\x00", "0123456789abcdef", "0123456789abcdef\x00", "0123456789abcdefZ",
		"0123456789abcdefA", "0123456789abcde", "\xff", "\xff\xff", "", "task-000000000010", "task-000000000009"}
	var want []string
	for _, id := range ids {
		if id == "" {
			continue
		}
		mustEnqueue(t, s, "q", id, model.EnqueueArgs{})
		want = append(want, id)
	}
	slices.Sort(want)
	var got []string
	for _, tk := range listAll(t, s, "q", core.Ready) {
		got = append(got, tk.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("List order %q, want %q", got, want)
	}
	q, _ := s.queue(ctx, "q", false)
	checkQueueIndexes(t, q)
}

func TestQueuesNamesTheQueuesThatHadATask(t *testing.T) {
	ctx := context.Background()
	s := New()
	for _, q := range []string{"b", "a", "b"} {
		if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: q, EnqueueArgs: model.EnqueueArgs{ID: "t" + fmt.Sprint(time.Now().UnixNano()), MaxAttempts: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	// A refused Enqueue makes no queue.
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "c", EnqueueArgs: model.EnqueueArgs{ID: "x"}}); err == nil {
		t.Fatal("an Enqueue with MaxAttempts 0 was accepted")
	}
	got, err := s.Queues(ctx)
	if err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Queues = %q, %v; want [a b]", got, err)
	}
	s.Close()
	if _, err := s.Queues(ctx); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Queues after Close: %v, want ErrClosed", err)
	}
}
