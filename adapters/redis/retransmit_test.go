package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/faultproxy"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/model"
)

// typed reports whether err is one of the store's refusals, which promise
// that the call changed nothing.
func typed(err error) bool {
	return model.Kind(err) != nil || errors.Is(err, core.ErrCorrupt)
}

// faultyStores returns a store built by redis.Open (the client a user gets,
// with go-redis's default retries) whose connections go through a fault
// proxy, and a second store on the same keys that talks to the server
// directly, for reading what really happened.
func faultyStores(t *testing.T, clock core.Clock) (*faultproxy.Proxy, *redis.Store, *redis.Store) {
	t.Helper()
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	via, err := redis.Open("redis://"+p.Addr()+"/0", redis.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { via.Close() })
	direct, err := redis.Open("redis://"+srv.Addr+"/0", redis.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	return p, via, direct
}

// retransmitEnv drives one queue through the faulty store, one call at a
// time, and after each call compares what the store says happened with
// what the call answered.
type retransmitEnv struct {
	t      *testing.T
	ctx    context.Context
	rng    *rand.Rand
	clock  *core.FakeClock
	proxy  *faultproxy.Proxy
	via    *redis.Store
	direct *redis.Store
	q      string

	ids     []string // IDs enqueued, most of them still there
	claims  []core.Claim
	reaps   []core.ReapClaim
	nextID  int
	n       int // calls made
	faults  int // faults armed
	typedN  int // calls refused with a typed error
	transpN int // calls that failed in transport
	bad     []string
}

// snapshot is what the direct store reads: the queue's sequence and its
// task count.
type snapshot struct {
	seq   uint64
	tasks int
}

func (e *retransmitEnv) snap() snapshot {
	e.t.Helper()
	v, err := e.direct.Client().Get(e.ctx, e.direct.QueueKeys(e.q)["seq"]).Result()
	var seq uint64
	if err == nil {
		seq, _ = strconv.ParseUint(v, 10, 64)
	}
	c, err := e.direct.Counts(e.ctx, core.CountsParams{Queue: e.q})
	if err != nil {
		e.t.Fatalf("counts: %v", err)
	}
	return snapshot{seq: seq, tasks: c.Scheduled + c.Ready + c.Running + c.Succeeded + c.Failed}
}

// get reads a task directly (ok false when there is none).
func (e *retransmitEnv) get(id string) (core.Task, bool) {
	t, err := e.direct.Get(e.ctx, core.GetParams{Queue: e.q, ID: id})
	if errors.Is(err, core.ErrNotFound) {
		return core.Task{}, false
	}
	if err != nil {
		e.t.Fatalf("get %s: %v", id, err)
	}
	return t, true
}

// arm injects a fault before a call, often.
func (e *retransmitEnv) arm() {
	e.proxy.Disarm()
	switch r := e.rng.IntN(100); {
	case r < 11:
		e.proxy.CutAfterReply()
	case r < 15:
		e.proxy.CutBeforeRequest()
	case r < 16:
		e.proxy.CutAll()
	default:
		return
	}
	e.faults++
}

// check compares a call's answer with the change the store shows: versions
// drawn (bumps) and tasks added or removed (delta). A typed error must come
// with no change at all; a success with exactly the change its answer
// reports. A transport error may or may not have taken effect.
func (e *retransmitEnv) check(what string, before snapshot, err error, bumps, delta int) {
	after := e.snap()
	gotBumps, gotDelta := int(after.seq-before.seq), after.tasks-before.tasks
	switch {
	case err != nil && typed(err):
		e.typedN++
		if gotBumps != 0 || gotDelta != 0 {
			e.violation("%s answered %v, yet took effect (%d versions drawn, %+d tasks)", what, err, gotBumps, gotDelta)
		}
	case err != nil:
		e.transpN++
	default:
		if gotBumps != bumps || gotDelta != delta {
			e.violation("%s answered %d versions and %+d tasks, the store shows %d and %+d", what, bumps, delta, gotBumps, gotDelta)
		}
	}
}

func (e *retransmitEnv) violation(format string, args ...any) {
	if len(e.bad) < 20 {
		e.bad = append(e.bad, fmt.Sprintf("call %d: ", e.n)+fmt.Sprintf(format, args...))
	}
}

func (e *retransmitEnv) pickID() string {
	if len(e.ids) == 0 {
		return "none"
	}
	return e.ids[e.rng.IntN(len(e.ids))]
}

func (e *retransmitEnv) pickClaim() (core.Claim, bool) {
	if len(e.claims) == 0 {
		return core.Claim{}, false
	}
	return e.claims[e.rng.IntN(len(e.claims))], true
}

func (e *retransmitEnv) addClaims(ts []core.Task) {
	for _, t := range ts {
		e.claims = append(e.claims, core.Claim{Queue: e.q, TaskID: t.ID, Token: t.ClaimToken})
	}
	if len(e.claims) > 40 {
		e.claims = e.claims[len(e.claims)-40:]
	}
}

func (e *retransmitEnv) newArgs() model.EnqueueArgs {
	e.nextID++
	id := fmt.Sprintf("t%d", e.nextID)
	return model.EnqueueArgs{ID: id, Payload: []byte("p" + id), Priority: e.rng.IntN(3), MaxAttempts: 1 + e.rng.IntN(3)}
}

func versionsOf[T any](items []T, ok func(T) bool) int {
	n := 0
	for _, it := range items {
		if ok(it) {
			n++
		}
	}
	return n
}

// step makes one random call through the faulty store and checks it.
func (e *retransmitEnv) step() {
	e.n++
	ctx, q := e.ctx, e.q
	before := e.snap()
	e.arm()
	lease := 30 * time.Second
	switch r := e.rng.IntN(100); {
	case r < 22: // a new task, or now and then an ID taken
		a := e.newArgs()
		if r < 3 && len(e.ids) > 0 {
			a.ID = e.pickID()
		}
		res, err := e.via.Enqueue(ctx, core.EnqueueParams{Queue: q, EnqueueArgs: a})
		e.check("Enqueue "+a.ID, before, err, 1, 1)
		if err == nil {
			e.ids = append(e.ids, res.Task.ID)
		}
	case r < 40:
		res, err := e.via.Pop(ctx, core.PopParams{Queue: q, Lease: lease, N: 1 + e.rng.IntN(3)})
		e.check("Pop", before, err, len(res.Tasks), 0)
		e.addClaims(res.Tasks)
	case r < 48:
		c, ok := e.pickClaim()
		if !ok {
			return
		}
		_, err := e.via.Extend(ctx, core.ExtendParams{Claim: c, Lease: lease})
		e.check("Extend "+c.TaskID, before, err, 1, 0)
	case r < 60:
		c, ok := e.pickClaim()
		if !ok {
			return
		}
		_, err := e.via.Ack(ctx, core.AckParams{Claim: c, Result: []byte("ok")})
		e.check("Ack "+c.TaskID, before, err, 1, 0)
	case r < 65:
		c, ok := e.pickClaim()
		if !ok {
			return
		}
		_, err := e.via.Fail(ctx, core.FailParams{Claim: c, Message: "boom"})
		e.check("Fail "+c.TaskID, before, err, 1, 0)
	case r < 70:
		c, ok := e.pickClaim()
		if !ok {
			return
		}
		var delay time.Duration
		if e.rng.IntN(2) == 0 {
			delay = time.Second
		}
		_, err := e.via.Retry(ctx, core.RetryParams{Claim: c, Delay: delay, Message: "again"})
		e.check("Retry "+c.TaskID, before, err, 1, 0)
	case r < 74: // leases lapse; a broker claims them
		e.clock.Advance(lease + time.Second)
		res, err := e.via.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: q, ClaimTTL: lease, Limit: 5})
		e.check("ClaimExpired", before, err, len(res.Claims), 0)
		e.reaps = append(e.reaps, res.Claims...)
	case r < 80:
		if len(e.reaps) == 0 {
			return
		}
		rc := e.reaps[e.rng.IntN(len(e.reaps))]
		var err error
		if e.rng.IntN(2) == 0 {
			_, err = e.via.Requeue(ctx, core.RequeueParams{ReapClaim: rc, Message: "lapsed"})
			e.check("Requeue "+rc.TaskID, before, err, 1, 0)
		} else {
			_, err = e.via.Finalize(ctx, core.FinalizeParams{ReapClaim: rc, Message: "lapsed"})
			e.check("Finalize "+rc.TaskID, before, err, 1, 0)
		}
	case r < 84:
		id := e.pickID()
		expect := uint64(0)
		if t, ok := e.get(id); ok && e.rng.IntN(2) == 0 {
			expect = t.Version
		}
		_, err := e.via.InspectRequeue(ctx, core.InspectParams{Queue: q, ID: id, Expect: expect})
		e.check("InspectRequeue "+id, before, err, 1, 0)
	case r < 87:
		id := e.pickID()
		_, err := e.via.Remove(ctx, core.InspectParams{Queue: q, ID: id})
		e.check("Remove "+id, before, err, 0, -1)
	case r < 90:
		e.clock.Advance(2 * time.Second)
		res, err := e.via.Promote(ctx, core.PromoteParams{Queue: q})
		e.check("Promote", before, err, len(res.IDs), 0)
	case r < 92:
		res, err := e.via.Prune(ctx, core.PruneParams{Queue: q, States: []model.State{model.Succeeded, model.Failed}, Before: e.clock.Now()})
		e.check("Prune", before, err, 0, -len(res.IDs))
	case r < 96:
		tasks := []model.EnqueueArgs{e.newArgs(), e.newArgs()}
		if len(e.ids) > 0 && e.rng.IntN(2) == 0 {
			tasks = append(tasks, model.EnqueueArgs{ID: e.pickID(), MaxAttempts: 1})
		}
		res, err := e.via.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: q, Tasks: tasks})
		ok := versionsOf(res.Items, func(it core.ItemResult) bool { return it.Err == nil })
		e.check("EnqueueBatch", before, err, ok, ok)
		for _, it := range res.Items {
			if it.Err == nil {
				e.ids = append(e.ids, it.Task.ID)
			}
		}
	default:
		var acks []core.AckItem
		for range 1 + e.rng.IntN(3) {
			if c, ok := e.pickClaim(); ok {
				acks = append(acks, core.AckItem{Claim: c, Result: []byte("batch")})
			}
		}
		if len(acks) == 0 {
			return
		}
		// Half the batches claim the next tasks in the same call, as a
		// Worker's do: a resent one must not claim twice.
		var pop core.AckPop
		if e.rng.IntN(2) == 0 {
			pop = core.AckPop{Lease: lease, N: 1 + e.rng.IntN(2)}
		}
		res, err := e.via.AckBatch(ctx, core.AckBatchParams{Queue: q, Acks: acks, Pop: pop})
		ok := versionsOf(res.Items, func(it core.ItemResult) bool { return it.Err == nil })
		e.check("AckBatch", before, err, ok+len(res.Claimed), 0)
		e.addClaims(res.Claimed)
	}
}

// Every Store call takes effect at most once, and a call the client sends
// again after a dropped connection (go-redis retries at its defaults) is
// answered with the call's own answer: never a typed refusal for a call
// that took effect, never a second claim or a second version.
func TestRetransmittedCallsAreAnsweredWithTheirOwnAnswer(t *testing.T) {
	clock := core.NewFakeClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	p, via, direct := faultyStores(t, clock)
	e := &retransmitEnv{t: t, ctx: context.Background(), rng: rand.New(rand.NewPCG(1, 2)), clock: clock,
		proxy: p, via: via, direct: direct, q: "rt"}
	calls := 5000
	if testing.Short() {
		calls = 1000
	}
	for e.n < calls {
		e.step()
	}
	p.Disarm()
	s := p.Stats()
	t.Logf("%d calls, %d faults armed (%d cut before request, %d cut after reply, %d connections cut), %d typed refusals, %d transport errors",
		e.n, e.faults, s.CutsBeforeRequest, s.CutsAfterReply, s.CutAllConns, e.typedN, e.transpN)
	if s.CutsAfterReply < int64(calls/20) {
		t.Errorf("only %d replies cut: the test did not exercise retransmission", s.CutsAfterReply)
	}
	if e.typedN < calls/20 {
		t.Errorf("only %d typed refusals: the test did not exercise refusals", e.typedN)
	}
	for _, b := range e.bad {
		t.Error(b)
	}
}

// A call whose every attempt is cut before it reaches the server comes
// back as a transport error, never a typed one, and changes nothing.
func TestCallThatNeverReachedTheServerIsATransportError(t *testing.T) {
	clock := core.NewFakeClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	p, via, direct := faultyStores(t, clock)
	ctx := context.Background()
	e := &retransmitEnv{t: t, ctx: ctx, direct: direct, q: "tr"}
	if _, err := via.Enqueue(ctx, core.EnqueueParams{Queue: "tr", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	before := e.snap()
	for range 10 { // more than go-redis's attempts (1 + MaxRetries)
		p.CutBeforeRequest()
	}
	_, err := via.Enqueue(ctx, core.EnqueueParams{Queue: "tr", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1}})
	if err == nil || typed(err) {
		t.Fatalf("Enqueue cut before every attempt answered %v, want a transport error", err)
	}
	p.Disarm()
	if after := e.snap(); after != before {
		t.Fatalf("store changed from %+v to %+v", before, after)
	}
	if s := p.Stats(); s.CutsBeforeRequest < 2 {
		t.Fatalf("%d requests cut: the client did not retry", s.CutsBeforeRequest)
	}
}
