package spec

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// env is one conformance test's world: a fresh store from the harness, a
// fake clock at Epoch, and the same store wrapped in a twin so that every
// operation the test performs is also compared with the model.
type env struct {
	t     *testing.T
	ctx   context.Context
	clock *core.FakeClock
	raw   core.Store // the store under test
	s     *twin      // raw, checked against the model after every operation
	q     string     // the queue most tests use
	h     Harness
}

func newEnv(t *testing.T, h Harness, capacity int) *env {
	t.Helper()
	clock := core.NewFakeClock(Epoch)
	raw := h.New(t, clock, capacity)
	if raw == nil {
		t.Fatalf("harness %s returned a nil store", h.Name)
	}
	e := &env{t: t, ctx: context.Background(), clock: clock, raw: raw, q: DefaultQueue, h: h}
	e.s = newTwin(raw, NewModelStore(clock, capacity), func(msg string) {
		t.Fatalf("the store does not answer as the model does (the test stops at the first difference):\n%s", msg)
	})
	return e
}

func (e *env) now() time.Time { return e.clock.Now() }

// enqueue enqueues a Ready task (or as mod changes it) and requires success.
func (e *env) enqueue(id string, mods ...func(*model.EnqueueArgs)) core.Task {
	e.t.Helper()
	return e.enqueueIn(e.q, id, mods...)
}

func (e *env) enqueueIn(queue, id string, mods ...func(*model.EnqueueArgs)) core.Task {
	e.t.Helper()
	a := model.EnqueueArgs{ID: id, Payload: []byte("payload " + id), MaxAttempts: 3}
	for _, m := range mods {
		m(&a)
	}
	res, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: queue, EnqueueArgs: a})
	if err != nil {
		e.t.Fatalf("Enqueue(%s/%s): %v", queue, id, err)
	}
	return res.Task
}

func priority(p int) func(*model.EnqueueArgs) { return func(a *model.EnqueueArgs) { a.Priority = p } }
func runAfter(t time.Time) func(*model.EnqueueArgs) {
	return func(a *model.EnqueueArgs) { a.RunAfter = t }
}
func timeout(d time.Duration) func(*model.EnqueueArgs) {
	return func(a *model.EnqueueArgs) { a.Timeout = d }
}
func maxAttempts(n int) func(*model.EnqueueArgs) {
	return func(a *model.EnqueueArgs) { a.MaxAttempts = n }
}

// pop pops up to n tasks with lease and requires success.
func (e *env) pop(n int, lease time.Duration) []core.Task {
	e.t.Helper()
	res, err := e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: lease, N: n})
	if err != nil {
		e.t.Fatalf("Pop: %v", err)
	}
	return res.Tasks
}

// popID pops one task with a 30s lease and requires it to be id.
func (e *env) popID(id string) core.Task {
	e.t.Helper()
	ts := e.pop(1, 30*time.Second)
	if len(ts) != 1 || ts[0].ID != id {
		e.t.Fatalf("Pop returned %v, want [%s]", taskIDs(ts), id)
	}
	return ts[0]
}

// running enqueues id and pops it: a Running task and its claim.
func (e *env) running(id string) (core.Task, core.Claim) {
	e.t.Helper()
	e.enqueue(id)
	t := e.popID(id)
	return t, t.Claim()
}

// reaped makes id Running, lets its lease lapse and claims it for a broker.
func (e *env) reaped(id string) (core.Claim, core.ReapClaim) {
	e.t.Helper()
	_, c := e.running(id)
	e.clock.Advance(30 * time.Second)
	res, err := e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: 10 * time.Second})
	if err != nil || len(res.Claims) != 1 || res.Claims[0].TaskID != id {
		e.t.Fatalf("ClaimExpired = %v, %v; want a claim on %s", reapIDs(res.Claims), err, id)
	}
	return c, res.Claims[0]
}

// get reads a task and requires success.
func (e *env) get(id string) core.Task {
	e.t.Helper()
	t, err := e.s.Get(e.ctx, core.GetParams{Queue: e.q, ID: id})
	if err != nil {
		e.t.Fatalf("Get(%s): %v", id, err)
	}
	return t
}

// ok fails the test unless err is nil.
func (e *env) ok(what string, err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

// rejects runs op, which must fail with want (by kind; a
// *model.TransitionError also by op and state), and checks, by reading every
// queue named before and after, that it changed nothing.
func (e *env) rejects(want error, op func() error, queues ...string) {
	e.t.Helper()
	if len(queues) == 0 {
		queues = []string{e.q}
	}
	before := make([]queueState, len(queues))
	for i, q := range queues {
		st, err := readQueue(e.ctx, e.raw, q)
		e.ok("reading the store", err)
		before[i] = st
	}
	err := op()
	if !sameError(err, want) {
		e.t.Errorf("got %s (%v), want %s", describeError(err), err, describeError(want))
	}
	for i, q := range queues {
		after, rerr := readQueue(e.ctx, e.raw, q)
		e.ok("reading the store", rerr)
		if d := diffQueueState(q, after, before[i]); d != "" {
			e.t.Errorf("a rejected op (%s) changed the store (\"store\" is after, \"model\" before):\n%s", describeError(err), d)
		}
	}
}

// wantTask fails unless got is want in every field.
func (e *env) wantTask(what string, got, want core.Task) {
	e.t.Helper()
	if !got.Equal(want) {
		e.t.Errorf("%s:\n\tgot  %s\n\twant %s", what, formatTask(got), formatTask(want))
	}
}

// wantIDs fails unless got lists exactly want.
func (e *env) wantIDs(what string, got []string, want ...string) {
	e.t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) || len(got) != len(want) {
		e.t.Errorf("%s returned %q, want %q", what, got, want)
	}
}

// wantErr fails unless err is want by kind (and op and state for a
// TransitionError).
func (e *env) wantErr(what string, err, want error) {
	e.t.Helper()
	if !sameError(err, want) {
		e.t.Errorf("%s: got %s (%v), want %s", what, describeError(err), err, describeError(want))
	}
}

// damage damages the record of task id in the store (the harness's Damage)
// and in the model (model.Queue.Damage), then compares the two states.
func (e *env) damage(id string) {
	e.t.Helper()
	e.h.Damage(e.t, e.raw, e.q, id)
	if err := e.s.model.Damage(e.q, id); err != nil {
		e.t.Fatalf("model Damage(%s): %v", id, err)
	}
	e.s.checkAll("Damage(" + id + ")")
}
