package spec

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// DifferentialSteps is the number of operations in each sequence
// Differential draws.
const DifferentialSteps = 50

// Differential drives a store from h and a ModelStore side by side with the
// same random operations (drawn by rapid: rapid's -rapid.checks sequences,
// 100 by default, of DifferentialSteps operations each) and the same fake
// clock, advanced by whole milliseconds. Every answer must be the model's
// (tasks compared with Task.Equal, errors by kind and, for a TransitionError,
// by op and state), and after every operation the store's whole state of the
// queue it named must be the model's.
//
// The operations reach the interesting states: a small pool of IDs on three
// queues, leases of milliseconds, claims and broker claims mostly taken from
// earlier answers (some stale by then), sometimes forged; now and then an
// invalid argument. A failure names the step and lists every step before it.
func Differential(t *testing.T, h Harness) {
	t.Helper()
	differential(t, t, h, nil)
}

// differential is Differential, reporting to r; the harness is handed t.
// observe, when not nil, is told every operation and its outcome (by the
// tests that measure what the generator reaches).
func differential(r rapid.TB, t testing.TB, h Harness, observe func(desc string, err error)) {
	r.Helper()
	if h.New == nil {
		t.Fatal("spec.Differential: the harness has no New function")
	}
	rapid.Check(r, func(rt *rapid.T) {
		tb := &sequenceTB{TB: t}
		defer tb.cleanup()
		capacity := rapid.SampledFrom([]int{0, 3}).Draw(rt, "capacity")
		clock := core.NewFakeClock(Epoch)
		d := &diffRun{rt: rt, clock: clock, observe: observe}
		store := h.New(tb, clock, capacity)
		_, d.batch = store.(core.BatchStore)
		d.s = newTwin(store, NewModelStore(clock, capacity), func(msg string) { d.mismatch = append(d.mismatch, msg) })
		for i := range DifferentialSteps {
			d.step(i)
		}
		d.s.checkAll("the last step")
		d.check(DifferentialSteps, "final state")
	})
}

// sequenceTB is the test as the harness sees it during one rapid sequence:
// cleanups registered by h.New run when the sequence ends, not when the
// whole test does, so stores do not pile up.
type sequenceTB struct {
	testing.TB
	cleanups []func()
}

// Cleanup registers f to run when the sequence ends.
func (s *sequenceTB) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

func (s *sequenceTB) cleanup() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
}

var (
	diffQueues  = []string{"q0", "q0", "q0", "q1", "q2"}
	diffTaskIDs = []string{"a", "b", "c", "d", "e", "f"}
	ms          = time.Millisecond
)

// diffRun is one sequence of Differential.
type diffRun struct {
	rt       *rapid.T
	clock    *core.FakeClock
	s        *twin
	claims   []core.Claim     // every worker claim handed out
	reaps    []core.ReapClaim // every broker claim handed out
	versions []uint64         // every version seen in an answer
	known    [][2]string      // queue and ID of every task seen in an answer
	history  []string
	mismatch []string
	observe  func(desc string, err error)
	// followUp, when set, is what the next step does half of the time: a
	// decision on the claims the last step handed out, before anything else
	// can make them stale.
	followUp []diffOp
	// fresh are the claims (worker or broker) the last step handed out,
	// which a follow-up decides on.
	fresh       []core.Claim
	freshReaps  []core.ReapClaim
	followingUp bool
	followOdds  int // in four
	// batch is whether the store implements core.BatchStore; when it does
	// not, a drawn batch op is performed as its single op (the conformance
	// suite's batch subtests report the missing methods).
	batch bool
}

type diffOp struct {
	weight int
	run    func(d *diffRun, ctx context.Context) (desc string, err error)
	timed  bool // a pass of the mover or a broker: let time pass first
}

var diffOps = []diffOp{
	{12, (*diffRun).enqueue, false},
	{3, (*diffRun).promote, true},
	{10, (*diffRun).pop, false},
	{2, (*diffRun).extend, false},
	{4, (*diffRun).ack, false},
	{2, (*diffRun).fail, false},
	{2, (*diffRun).retry, false},
	{8, (*diffRun).claimExpired, true},
	{2, (*diffRun).requeue, false},
	{2, (*diffRun).finalize, false},
	{3, (*diffRun).recoverExpired, true},
	{2, (*diffRun).inspectRequeue, false},
	{2, (*diffRun).remove, false},
	{3, (*diffRun).prune, true},
	{1, (*diffRun).get, false},
	{1, (*diffRun).list, false},
	{1, (*diffRun).counts, false},
	{3, (*diffRun).enqueueBatch, false},
	{4, (*diffRun).ackBatch, false},
}

var (
	workerFollowUps = []diffOp{{run: (*diffRun).ack}, {run: (*diffRun).fail}, {run: (*diffRun).retry}, {run: (*diffRun).extend}, {run: (*diffRun).ackBatch}}
	brokerFollowUps = []diffOp{{run: (*diffRun).requeue}, {run: (*diffRun).finalize}}
)

// follow sets the follow-up of the next step, taken with odds in four, when
// the last one handed out n claims.
func (d *diffRun) follow(n int, ops []diffOp, odds int) {
	if n > 0 {
		d.followUp, d.followOdds = ops, odds
	}
}

var diffOpWeight = func() (n int) {
	for _, o := range diffOps {
		n += o.weight
	}
	return n
}()

func (d *diffRun) step(i int) {
	var op diffOp
	d.followingUp = len(d.followUp) > 0 && d.uniform(4, "follow up?") < d.followOdds
	if d.followingUp {
		op = pick(d, "follow-up op", d.followUp...)
	} else {
		n := d.uniform(diffOpWeight, "op")
		for _, op = range diffOps {
			if n < op.weight {
				break
			}
			n -= op.weight
		}
	}
	// Time passes mostly in small steps; before a broker's or the mover's
	// pass it tends to pass enough for leases and delays to lapse.
	adv := pick(d, "advance", 0, 0, 0, ms, 2*ms, 5*ms, 10*ms, 20*ms, 50*ms)
	if op.timed {
		adv = pick(d, "advance", 0, 10*ms, 30*ms, 50*ms, 100*ms, -1)
		if adv < 0 { // exactly to the next deadline handed out: expiry is "deadline <= now"
			adv = d.toNextDeadline()
		}
	}
	d.clock.Advance(adv)
	d.followUp, d.fresh, d.freshReaps = nil, nil, nil
	desc, err := op.run(d, context.Background())
	if d.observe != nil {
		d.observe(desc, err)
	}
	if adv > 0 {
		desc = fmt.Sprintf("+%v %s", adv, desc)
	}
	d.history = append(d.history, fmt.Sprintf("%2d. %s → %s", i+1, desc, describeError(err)))
	d.check(i, desc)
}

// toNextDeadline returns how far the clock must move to reach, exactly, the
// earliest deadline of a claim or broker claim handed out that is still
// ahead (0 if none is), so the boundary of "Deadline <= now" is exercised
// often rather than by chance.
func (d *diffRun) toNextDeadline() time.Duration {
	now := d.clock.Now()
	var next time.Time
	consider := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, c := range d.claims {
		consider(c.Deadline)
	}
	for _, r := range d.reaps {
		consider(r.Deadline)
	}
	if next.IsZero() {
		return 0
	}
	return next.Sub(now)
}

// check fails the sequence if the twin saw a difference.
func (d *diffRun) check(i int, desc string) {
	if len(d.mismatch) == 0 {
		return
	}
	d.rt.Fatalf("step %d (%s): the store does not answer as the model does:\n%s\n\nthe steps so far (each with the store's answer):\n%s",
		i+1, desc, strings.Join(d.mismatch, "\n"), strings.Join(d.history, "\n"))
}

func (d *diffRun) seen(ts ...core.Task) {
	for _, t := range ts {
		if t.Version != 0 {
			d.versions = append(d.versions, t.Version)
			d.known = append(d.known, [2]string{t.Queue, t.ID})
		}
	}
}

// --- argument generators -----------------------------------------------------

// uniform draws 0..n-1 with (nearly) equal chances. rapid's integer
// generators favour the ends of their range, which would make the first
// operation of a weighted list, or a "rare" choice, far too common.
func uniform(n int) *rapid.Generator[int] {
	bits := 4 // extra bits keep the rounding bias under 1/16
	for 1<<bits < 16*n {
		bits++
	}
	return rapid.Custom(func(t *rapid.T) int {
		v := 0
		for range bits {
			v <<= 1
			if rapid.Bool().Draw(t, "bit") {
				v |= 1
			}
		}
		return v * n >> bits
	})
}

// uniform draws 0..n-1 with equal chances (n = 1 draws nothing).
func (d *diffRun) uniform(n int, label string) int {
	if n <= 1 {
		return 0
	}
	return uniform(n).Draw(d.rt, label)
}

// pick draws one of the values with equal chances.
func pick[E any](d *diffRun, label string, values ...E) E {
	return values[uniform(len(values)).Draw(d.rt, label)]
}

// rare is true one time in fifty: an invalid argument among valid ones.
func (d *diffRun) rare(label string) bool { return d.uniform(50, label) == 0 }

func (d *diffRun) queue() string {
	if d.rare("bad queue?") {
		return pick(d, "bad queue", badQueueNames...)
	}
	return pick(d, "queue", diffQueues...)
}

func (d *diffRun) id() string {
	if d.rare("empty id?") {
		return ""
	}
	return pick(d, "id", diffTaskIDs...)
}

func (d *diffRun) limit() int { return pick(d, "limit", 0, 0, 1, 2) }

func (d *diffRun) leaseArg() time.Duration {
	if d.rare("invalid lease?") {
		return pick(d, "invalid lease", 0, -ms, model.MaxDuration+time.Microsecond)
	}
	return pick(d, "lease", ms, 5*ms, 10*ms, 10*ms, 30*ms, 100*ms)
}

// runAfter is zero most of the time, else now plus (or minus) a few
// milliseconds.
func (d *diffRun) runAfter() time.Time {
	const none = -100
	k := pick(d, "runAfter ms", none, none, none, -2, 0, 1, 5, 20)
	if k == none {
		return time.Time{}
	}
	return d.clock.Now().Add(time.Duration(k) * ms)
}

// delay is a retry delay: mostly none or a few ms, rarely an invalid one
// (negative, or beyond model.MaxDuration).
func (d *diffRun) delay() time.Duration {
	if d.rare("invalid delay?") {
		return pick(d, "invalid delay", -ms, -time.Nanosecond, model.MaxDuration+time.Microsecond)
	}
	return time.Duration(pick(d, "delay ms", 0, 0, 0, 1, 5, 20)) * ms
}

// claim is mostly a claim an earlier Pop handed out (so often stale by now),
// sometimes forged.
func (d *diffRun) claim() core.Claim {
	c := d.someClaim()
	if d.rare("invalid claim?") {
		c.Token = 0
	}
	return c
}

func (d *diffRun) someClaim() core.Claim {
	if d.followingUp && len(d.fresh) > 0 {
		return pick(d, "fresh claim", d.fresh...)
	}
	if n := len(d.claims); n > 0 && d.uniform(10, "forge claim?") > 0 {
		// Favour recent claims: they are the ones still holding tasks.
		back := d.uniform(min(n, 4), "recent claim")
		if d.uniform(4, "any claim?") == 0 {
			back = d.uniform(n, "claim")
		}
		return d.claims[n-1-back]
	}
	return core.Claim{Queue: d.queue(), TaskID: d.id(), Token: d.version()}
}

// reap is mostly a broker claim an earlier ClaimExpired handed out,
// sometimes forged from a version seen in an answer, or from nothing.
func (d *diffRun) reap() core.ReapClaim {
	rc := d.someReap()
	if d.rare("invalid reap claim?") {
		rc.Version = 0
	}
	return rc
}

func (d *diffRun) someReap() core.ReapClaim {
	if d.followingUp && len(d.freshReaps) > 0 {
		return pick(d, "fresh reap claim", d.freshReaps...)
	}
	if n := len(d.reaps); n > 0 && d.uniform(10, "forge reap claim?") > 0 {
		back := d.uniform(min(n, 4), "recent reap claim")
		return d.reaps[n-1-back]
	}
	return core.ReapClaim{Queue: d.queue(), TaskID: d.id(), Version: d.version()}
}

// version is mostly a version seen recently in an answer, else a number.
func (d *diffRun) version() uint64 {
	if n := len(d.versions); n > 0 && d.uniform(4, "seen version?") > 0 {
		return d.versions[n-1-d.uniform(min(n, 8), "recent version")]
	}
	if d.rare("version 0?") {
		return 0
	}
	return uint64(1 + d.uniform(20, "version"))
}

// --- operations ----------------------------------------------------------------

func (d *diffRun) enqueue(ctx context.Context) (string, error) {
	p := d.enqueueParams(d.queue())
	res, err := d.s.Enqueue(ctx, p)
	d.seen(res.Task)
	return describeEnqueue(p), err
}

func (d *diffRun) enqueueParams(queue string) core.EnqueueParams {
	p := core.EnqueueParams{Queue: queue, EnqueueArgs: model.EnqueueArgs{
		ID:          d.id(),
		Payload:     pick(d, "payload", nil, []byte("x"), []byte{0, 0xff}),
		Priority:    pick(d, "priority", 0, 0, 1, 2, -1),
		RunAfter:    d.runAfter(),
		MaxAttempts: pick(d, "maxAttempts", 1, 2, 3),
	}}
	if d.rare("invalid enqueue?") {
		switch d.uniform(3, "invalid enqueue") {
		case 0:
			p.Priority = pick(d, "invalid priority", model.MaxPriority+1, model.MinPriority-1)
		case 1:
			p.MaxAttempts = pick(d, "invalid maxAttempts", 0, -1)
		default:
			p.ID = strings.Repeat("x", model.MaxIDLength+1)
		}
	}
	return p
}

// enqueueBatch adds one to four tasks to one queue, often with an ID that
// exists or that an earlier item names.
func (d *diffRun) enqueueBatch(ctx context.Context) (string, error) {
	if !d.batch {
		return d.enqueue(ctx)
	}
	p := core.EnqueueBatchParams{Queue: d.queue()}
	for range pick(d, "enqueue batch size", 1, 2, 3, 4) {
		p.Tasks = append(p.Tasks, d.enqueueParams(p.Queue).EnqueueArgs)
	}
	if d.rare("empty enqueue batch?") {
		p.Tasks = nil
	}
	res, err := d.s.EnqueueBatch(ctx, p)
	for _, it := range res.Items {
		d.seen(it.Task)
	}
	return fmt.Sprintf("%s = %s", describeEnqueueBatch(p), describeItems(res)), err
}

// ackBatch acknowledges one to four claims, fresh ones when following up a
// Pop, otherwise mostly recent ones (so some are stale or repeated), now and
// then one of another queue.
func (d *diffRun) ackBatch(ctx context.Context) (string, error) {
	if !d.batch {
		return d.ack(ctx)
	}
	var p core.AckBatchParams
	for i := range pick(d, "ack batch size", 1, 2, 3, 4) {
		c := d.claim()
		if i == 0 {
			p.Queue = c.Queue
		} else if c.Queue != p.Queue && !d.rare("other queue in ack batch?") {
			c.Queue = p.Queue // a forged claim on the batch's queue
		}
		p.Acks = append(p.Acks, core.AckItem{Claim: c, Result: pick(d, "result", nil, []byte("ok"))})
	}
	if d.followingUp && len(d.fresh) > 1 && d.uniform(2, "ack every fresh claim?") == 0 {
		p.Queue, p.Acks = d.fresh[0].Queue, nil
		for _, c := range d.fresh {
			p.Acks = append(p.Acks, core.AckItem{Claim: c, Result: []byte("all")})
		}
	}
	if d.rare("empty ack batch?") {
		p.Acks = nil
	}
	// Half the batches claim the next tasks in the same step, as a Worker's
	// do; now and then with a pop the store must refuse.
	if d.uniform(2, "pop after the acks?") == 0 {
		p.Pop = core.AckPop{Lease: d.leaseArg(), N: pick(d, "pop n", 1, 1, 2, 3)}
		if d.rare("invalid pop n?") {
			p.Pop.N = pick(d, "invalid pop n", -1, model.MaxBatch+1)
		}
	}
	res, err := d.s.AckBatch(ctx, p)
	for _, it := range res.Items {
		d.seen(it.Task)
	}
	for _, t := range res.Claimed {
		d.claims = append(d.claims, t.Claim())
	}
	d.seen(res.Claimed...)
	return fmt.Sprintf("%s = %s claimed %v", describeAckBatch(p), describeItems(res), taskIDs(res.Claimed)), err
}

func describeItems(res core.BatchResult) string {
	out := make([]string, len(res.Items))
	for i, it := range res.Items {
		out[i] = describeError(it.Err)
	}
	return "[" + strings.Join(out, "|") + "]"
}

func (d *diffRun) promote(ctx context.Context) (string, error) {
	p := core.PromoteParams{Queue: d.queue(), Limit: d.limit()}
	if d.rare("invalid promote limit?") {
		p.Limit = -1
	}
	res, err := d.s.Promote(ctx, p)
	return fmt.Sprintf("Promote(%s limit=%d) = %v", p.Queue, p.Limit, res.IDs), err
}

func (d *diffRun) pop(ctx context.Context) (string, error) {
	p := core.PopParams{Queue: d.queue(), Lease: d.leaseArg(), N: pick(d, "n", 1, 1, 2, 3)}
	if d.rare("invalid n?") {
		p.N = pick(d, "invalid n", 0, model.MaxBatch+1)
	}
	res, err := d.s.Pop(ctx, p)
	for _, t := range res.Tasks {
		d.claims = append(d.claims, t.Claim())
	}
	defer func() {
		for _, t := range res.Tasks {
			d.fresh = append(d.fresh, t.Claim())
		}
		d.follow(len(res.Tasks), workerFollowUps, 1) // most claims should live on, to expire
	}()
	d.seen(res.Tasks...)
	return fmt.Sprintf("Pop(%s lease=%v n=%d) = %v", p.Queue, p.Lease, p.N, taskIDs(res.Tasks)), err
}

func (d *diffRun) extend(ctx context.Context) (string, error) {
	p := core.ExtendParams{Claim: d.claim(), Lease: d.leaseArg()}
	res, err := d.s.Extend(ctx, p)
	d.seen(res.Task)
	return fmt.Sprintf("Extend(%s lease=%v)", describeClaim(p.Claim), p.Lease), err
}

func (d *diffRun) ack(ctx context.Context) (string, error) {
	p := core.AckParams{Claim: d.claim(), Result: pick(d, "result", nil, []byte("ok"))}
	res, err := d.s.Ack(ctx, p)
	d.seen(res.Task)
	return fmt.Sprintf("Ack(%s)", describeClaim(p.Claim)), err
}

func (d *diffRun) fail(ctx context.Context) (string, error) {
	p := core.FailParams{Claim: d.claim(), Message: pick(d, "message", "failed", "")}
	res, err := d.s.Fail(ctx, p)
	d.seen(res.Task)
	return fmt.Sprintf("Fail(%s)", describeClaim(p.Claim)), err
}

func (d *diffRun) retry(ctx context.Context) (string, error) {
	p := core.RetryParams{Claim: d.claim(), Delay: d.delay(), Message: "retry"}
	res, err := d.s.Retry(ctx, p)
	d.seen(res.Task)
	return fmt.Sprintf("Retry(%s delay=%v)", describeClaim(p.Claim), p.Delay), err
}

func (d *diffRun) claimExpired(ctx context.Context) (string, error) {
	p := core.ClaimExpiredParams{Queue: d.queue(), ClaimTTL: pick(d, "claimTTL", 10*ms, 50*ms), Limit: d.limit()}
	if d.rare("invalid claimExpired?") {
		p.ClaimTTL, p.Limit = pick(d, "invalid claimTTL", 0, -ms, ms, model.MaxDuration+time.Microsecond), -1
	}
	res, err := d.s.ClaimExpired(ctx, p)
	d.reaps = append(d.reaps, res.Claims...)
	defer func() {
		d.freshReaps = res.Claims
		d.follow(len(res.Claims), brokerFollowUps, 3)
	}()
	for _, c := range res.Claims {
		d.seen(c.Task)
	}
	return fmt.Sprintf("ClaimExpired(%s ttl=%v limit=%d) = %v", p.Queue, p.ClaimTTL, p.Limit, reapIDs(res.Claims)), err
}

func (d *diffRun) requeue(ctx context.Context) (string, error) {
	p := core.RequeueParams{ReapClaim: d.reap(), Delay: d.delay(), Message: pick(d, "message", "", "lost")}
	res, err := d.s.Requeue(ctx, p)
	d.seen(res.Task)
	return fmt.Sprintf("Requeue(%s delay=%v)", describeReap(p.ReapClaim), p.Delay), err
}

func (d *diffRun) finalize(ctx context.Context) (string, error) {
	p := core.FinalizeParams{ReapClaim: d.reap(), Message: pick(d, "message", "", "gave up")}
	res, err := d.s.Finalize(ctx, p)
	d.seen(res.Task)
	return fmt.Sprintf("Finalize(%s)", describeReap(p.ReapClaim)), err
}

func (d *diffRun) recoverExpired(ctx context.Context) (string, error) {
	p := core.RecoverExpiredParams{Queue: d.queue(), Delay: pick(d, "delay", 0, 10*ms), Limit: d.limit()}
	if d.rare("invalid recoverExpired?") {
		p.Delay, p.Limit = pick(d, "invalid delay", -ms, 0), pick(d, "invalid limit", -1, 0)
	}
	res, err := d.s.RecoverExpired(ctx, p)
	d.seen(res.Tasks...)
	return fmt.Sprintf("RecoverExpired(%s delay=%v limit=%d) = %v", p.Queue, p.Delay, p.Limit, taskIDs(res.Tasks)), err
}

// task names a task: mostly one seen recently in an answer.
func (d *diffRun) task() (queue, id string) {
	if n := len(d.known); n > 0 && d.uniform(3, "known task?") > 0 {
		k := d.known[n-1-d.uniform(min(n, 8), "recent task")]
		return k[0], k[1]
	}
	return d.queue(), d.id()
}

func (d *diffRun) inspectParams() core.InspectParams {
	var p core.InspectParams
	p.Queue, p.ID = d.task()
	if d.rare("invalid inspect?") {
		p.ID = pick(d, "invalid id", "", strings.Repeat("x", model.MaxIDLength+1))
	}
	if rapid.Bool().Draw(d.rt, "expect?") {
		p.Expect = d.version()
	}
	return p
}

func (d *diffRun) inspectRequeue(ctx context.Context) (string, error) {
	p := d.inspectParams()
	res, err := d.s.InspectRequeue(ctx, p)
	d.seen(res.Task)
	return fmt.Sprintf("InspectRequeue(%s/%s expect=%d)", p.Queue, p.ID, p.Expect), err
}

func (d *diffRun) remove(ctx context.Context) (string, error) {
	p := d.inspectParams()
	_, err := d.s.Remove(ctx, p)
	return fmt.Sprintf("Remove(%s/%s expect=%d)", p.Queue, p.ID, p.Expect), err
}

func (d *diffRun) prune(ctx context.Context) (string, error) {
	states := pick(d, "states", []model.State{model.Succeeded}, []model.State{model.Failed}, []model.State{model.Succeeded, model.Failed})
	if d.rare("invalid states?") {
		states = pick(d, "invalid states", nil, []model.State{model.Ready}, []model.State{model.Failed, 0})
	}
	age := pick(d, "age", 0, 0, ms, 10*ms, 50*ms)
	p := core.PruneParams{Queue: d.queue(), States: states, Before: d.clock.Now().Add(-age), Limit: d.limit()}
	if d.rare("invalid prune limit?") {
		p.Limit = -1
	}
	res, err := d.s.Prune(ctx, p)
	return fmt.Sprintf("Prune(%s %v before=now-%v limit=%d) = %v", p.Queue, p.States, age, p.Limit, res.IDs), err
}

func (d *diffRun) get(ctx context.Context) (string, error) {
	var p core.GetParams
	p.Queue, p.ID = d.task()
	_, err := d.s.Get(ctx, p)
	return fmt.Sprintf("Get(%s/%s)", p.Queue, p.ID), err
}

func (d *diffRun) list(ctx context.Context) (string, error) {
	p := core.ListParams{
		Queue: d.queue(),
		State: pick(d, "state", model.States...),
		After: pick(d, "after", append([]string{"", ""}, diffTaskIDs...)...),
		Limit: pick(d, "list limit", 1, 2, 3),
	}
	if d.rare("invalid list?") {
		p.State = pick(d, "invalid state", 0, model.Quarantined+1)
	}
	_, err := d.s.List(ctx, p)
	return fmt.Sprintf("List(%s %v after=%q limit=%d)", p.Queue, p.State, p.After, p.Limit), err
}

func (d *diffRun) counts(ctx context.Context) (string, error) {
	p := core.CountsParams{Queue: d.queue()}
	_, err := d.s.Counts(ctx, p)
	return fmt.Sprintf("Counts(%s)", p.Queue), err
}
