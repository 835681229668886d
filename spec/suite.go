package spec

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// Run is the conformance suite: every adapter's test calls it with a Harness
// and must pass it. It plays every named scenario (subtests
// Scenarios/<Name>), then checks each transition, guard, error kind and
// ordering rule in a subtest named as a sentence, and finally runs a few
// operations from concurrent goroutines. With Harness.Tx it plays the
// transaction scenarios too (TxScenarios), in the application's own
// transactions on the store's database, and with Harness.Busy the busy
// suite: every write of a busy store is answered core.ErrBusy and changes
// nothing.
//
// Every operation of every sequential subtest is also performed on a
// ModelStore reading the same fake clock, and the store's answer and its
// whole state afterwards (read back through List and Counts) must equal the
// model's; so besides what each subtest asserts, a store passes only if it
// answers exactly as the model does.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("spec.Run: the harness has no New function")
	}
	t.Run("Scenarios", func(t *testing.T) {
		for _, sc := range scenarios {
			t.Run(sc.Name, func(t *testing.T) { PlayScenario(t, h, sc) })
		}
		if h.Tx == nil {
			return // no transaction of the application to join
		}
		for _, sc := range txScenarios {
			if sc.needsTxAck() && !h.Tx.Ack {
				continue // the adapter acks in no transaction
			}
			t.Run(sc.Name, func(t *testing.T) { PlayScenario(t, h, sc) })
		}
	})
	for _, cases := range [][]suiteCase{suite, inspectorSuite, contractSuite, batchSuite, rangeSuite, uniqueSuite} {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) { c.run(newEnv(t, h, c.capacity)) })
		}
	}
	if h.Damage != nil {
		for _, c := range append(damageSuite[:len(damageSuite):len(damageSuite)], uniqueDamageSuite...) {
			t.Run(c.name, func(t *testing.T) { c.run(newEnv(t, h, c.capacity)) })
		}
	}
	if h.Busy != nil {
		hb := h
		hb.New = h.Busy.New
		for _, c := range busySuite {
			t.Run(c.name, func(t *testing.T) { c.run(newEnv(t, hb, c.capacity)) })
		}
	}
	for _, c := range append(append(concurrentSuite[:len(concurrentSuite):len(concurrentSuite)], concurrentBatchSuite...), uniqueConcurrentSuite...) {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
}

// PlayScenario plays one scenario on a new store from h and on a ModelStore
// with the same fake clock; it fails t when an outcome differs from the
// scenario's, when a fact does not hold, or when any answer or the final
// state differs from the model's.
func PlayScenario(t *testing.T, h Harness, sc Scenario) {
	t.Helper()
	clock := core.NewFakeClock(Epoch)
	store := h.New(t, clock, 0)
	r := newScenarioRun(store, NewModelStore(clock, 0), clock, t.Errorf)
	if h.Tx != nil {
		if h.Tx.Open == nil {
			t.Fatal("spec: the harness's TxHarness has no Open function")
		}
		r.db, r.txAck = h.Tx.Open(t, store), h.Tx.Ack
	}
	r.play(sc)
}

type suiteCase struct {
	name     string
	capacity int
	run      func(e *env)
}

const lease = 30 * time.Second

var suite = []suiteCase{
	// --- Enqueue ---------------------------------------------------------------
	{name: "EnqueuesAReadyTaskWithEveryFieldSet", run: func(e *env) {
		now := e.now()
		res, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{
			ID: "t1", Payload: []byte("hello"), Priority: 7, MaxAttempts: 4,
		}})
		e.ok("Enqueue", err)
		want := core.Task{Queue: e.q, ID: "t1", Payload: []byte("hello"), Priority: 7, State: core.Ready,
			MaxAttempts: 4, Version: 1, EnqueuedAt: now}
		e.wantTask("Enqueue result", res.Task, want)
		if !res.Now.Equal(now) {
			e.t.Errorf("Enqueue Now = %s, want the clock's %s", formatTime(res.Now), formatTime(now))
		}
		e.wantTask("Get", e.get("t1"), want)
	}},
	{name: "EnqueuesAScheduledTaskWhenRunAfterIsInTheFuture", run: func(e *env) {
		later := e.now().Add(time.Microsecond)
		t := e.enqueue("later", runAfter(later))
		if t.State != core.Scheduled || !t.RunAfter.Equal(later) {
			e.t.Errorf("got %s, want Scheduled with RunAfter %s", formatTask(t), formatTime(later))
		}
	}},
	{name: "EnqueuesAReadyTaskWhenRunAfterIsNowOrPast", run: func(e *env) {
		now := e.now()
		if t := e.enqueue("now", runAfter(now)); t.State != core.Ready || !t.RunAfter.Equal(now) {
			e.t.Errorf("RunAfter = now: got %s, want Ready with RunAfter kept", formatTask(t))
		}
		if t := e.enqueue("past", runAfter(now.Add(-time.Hour))); t.State != core.Ready {
			e.t.Errorf("RunAfter in the past: got %s, want Ready", formatTask(t))
		}
	}},
	{name: "RejectsEnqueueOfAnIDThatExists", run: func(e *env) {
		_, c := e.running("t2")
		_, err := e.s.Ack(e.ctx, core.AckParams{Claim: c})
		e.ok("Ack", err)
		e.enqueue("t1")
		e.rejects(core.ErrConflict, func() error {
			_, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "t1", MaxAttempts: 1}})
			return err
		})
		e.rejects(core.ErrConflict, func() error {
			_, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "t2", MaxAttempts: 1}})
			return err
		})
	}},
	{name: "RejectsEnqueueWhenTheQueueIsFull", capacity: 2, run: func(e *env) {
		e.enqueue("a")
		e.enqueue("b", runAfter(e.now().Add(time.Hour)))
		full := func() error {
			_, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "c", MaxAttempts: 1}})
			return err
		}
		e.rejects(core.ErrQueueFull, full)
		e.popID("a") // Running tasks still count
		e.rejects(core.ErrQueueFull, full)
		e.enqueueIn("other", "c") // capacity is per queue
		_, err := e.s.Ack(e.ctx, core.AckParams{Claim: e.get("a").Claim()})
		e.ok("Ack", err)
		e.enqueue("c") // terminal tasks do not count
		e.rejects(core.ErrQueueFull, func() error {
			_, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "d", MaxAttempts: 1}})
			return err
		})
	}},
	{name: "RejectsInvalidEnqueueArguments", run: func(e *env) {
		e.enqueue("existing")
		bad := []core.EnqueueParams{
			{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "", MaxAttempts: 1}},
			{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: strings.Repeat("x", model.MaxIDLength+1), MaxAttempts: 1}},
			{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "p", Priority: model.MaxPriority + 1, MaxAttempts: 1}},
			{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "p", Priority: model.MinPriority - 1, MaxAttempts: 1}},
			{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "m", MaxAttempts: 0}},
			{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "m", MaxAttempts: -1}},
			{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "d", MaxAttempts: 1, Timeout: -time.Nanosecond}},
			{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "d", MaxAttempts: 1, Timeout: model.MaxDuration + 1}},
			{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "existing", MaxAttempts: 1, Timeout: -1}},
			// Validation comes before the ID check.
			{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "existing", MaxAttempts: 0}},
		}
		for _, q := range badQueueNames {
			bad = append(bad, core.EnqueueParams{Queue: q, EnqueueArgs: model.EnqueueArgs{ID: "q", MaxAttempts: 1}})
		}
		for _, p := range bad {
			e.rejects(core.ErrInvalidArgument, func() error { _, err := e.s.Enqueue(e.ctx, p); return err })
		}
	}},
	{name: "KeepsTheAttemptTimeoutThroughEveryTransition", run: func(e *env) {
		// Each timeout is stored exactly, to the nanosecond, up to the limit.
		timeouts := map[string]time.Duration{"ns": time.Nanosecond, "odd": time.Hour + 7*time.Nanosecond,
			"max": model.MaxDuration, "none": 0}
		for _, id := range []string{"max", "none", "ns", "odd"} {
			t := e.enqueue(id, timeout(timeouts[id]))
			if t.Timeout != timeouts[id] {
				e.t.Errorf("Enqueue(%s) Timeout = %v, want %v", id, t.Timeout, timeouts[id])
			}
		}
		batch := []model.EnqueueArgs{{ID: "b1", MaxAttempts: 1, Timeout: 3 * time.Second}, {ID: "b2", MaxAttempts: 1}}
		if _, ok := e.raw.(core.BatchStore); ok {
			res, err := e.s.EnqueueBatch(e.ctx, core.EnqueueBatchParams{Queue: e.q, Tasks: batch})
			e.ok("EnqueueBatch", err)
			for i, it := range res.Items {
				if it.Err != nil || it.Task.Timeout != batch[i].Timeout {
					e.t.Errorf("EnqueueBatch item %d: %s, %v; want Timeout %v", i, formatTask(it.Task), it.Err, batch[i].Timeout)
				}
			}
		} else {
			for _, a := range batch {
				_, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: a})
				e.ok("Enqueue", err)
			}
		}
		timeouts["b1"], timeouts["b2"] = 3*time.Second, 0
		check := func(step string, ts ...core.Task) {
			e.t.Helper()
			for _, t := range ts {
				if want := timeouts[t.ID]; t.Timeout != want {
					e.t.Errorf("%s: %s has Timeout %v, want %v", step, t.ID, t.Timeout, want)
				}
				if g := e.get(t.ID); g.Timeout != timeouts[t.ID] {
					e.t.Errorf("%s: Get(%s) Timeout = %v, want %v", step, t.ID, g.Timeout, timeouts[t.ID])
				}
			}
		}
		// Worker transitions: Pop, Extend, Retry, Ack, Fail.
		popped := e.pop(6, lease)
		check("Pop", popped...)
		claims := map[string]core.Claim{}
		for _, t := range popped {
			claims[t.ID] = t.Claim()
		}
		ext, err := e.s.Extend(e.ctx, core.ExtendParams{Claim: claims["odd"], Lease: lease})
		e.ok("Extend", err)
		check("Extend", ext.Task)
		ret, err := e.s.Retry(e.ctx, core.RetryParams{Claim: ext.Task.Claim(), Message: "again"})
		e.ok("Retry", err)
		check("Retry", ret.Task)
		ack, err := e.s.Ack(e.ctx, core.AckParams{Claim: claims["max"], Result: []byte("r")})
		e.ok("Ack", err)
		check("Ack", ack.Task)
		fail, err := e.s.Fail(e.ctx, core.FailParams{Claim: claims["ns"], Message: "no"})
		e.ok("Fail", err)
		check("Fail", fail.Task)
		// Operator transitions: InspectRequeue of a terminal task.
		req, err := e.s.InspectRequeue(e.ctx, core.InspectParams{Queue: e.q, ID: "ns"})
		e.ok("InspectRequeue", err)
		check("InspectRequeue", req.Task)
		// Broker transitions: ClaimExpired, Requeue, Finalize, RecoverExpired.
		e.clock.Advance(lease)
		exp, err := e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: 10 * time.Second})
		e.ok("ClaimExpired", err)
		for _, rc := range exp.Claims {
			check("ClaimExpired", rc.Task)
			if rc.TaskID == "b1" {
				r, err := e.s.Finalize(e.ctx, core.FinalizeParams{ReapClaim: rc, Message: "gone"})
				e.ok("Finalize", err)
				check("Finalize", r.Task)
			} else {
				r, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: rc, Delay: time.Second})
				e.ok("Requeue", err)
				check("Requeue", r.Task)
			}
		}
		e.clock.Advance(time.Second)
		prom, err := e.s.Promote(e.ctx, core.PromoteParams{Queue: e.q})
		e.ok("Promote", err)
		for _, id := range prom.IDs {
			check("Promote", e.get(id))
		}
		again := e.pop(6, time.Second)
		check("Pop", again...)
		e.clock.Advance(time.Second)
		_, err = e.s.RecoverExpired(e.ctx, core.RecoverExpiredParams{Queue: e.q})
		e.ok("RecoverExpired", err)
		// List shows it in every state.
		for _, st := range []core.State{core.Scheduled, core.Ready, core.Running, core.Succeeded, core.Failed} {
			res, err := e.s.List(e.ctx, core.ListParams{Queue: e.q, State: st, Limit: 10})
			e.ok("List", err)
			check("List "+st.String(), res.Tasks...)
		}
	}},
	{name: "AcceptsArgumentsAtTheirLimits", run: func(e *env) {
		longQueue := strings.Repeat("aZ9-_.:", core.MaxQueueNameLength/7) + strings.Repeat("q", core.MaxQueueNameLength%7)
		longID := strings.Repeat("i", model.MaxIDLength)
		for _, p := range []core.EnqueueParams{
			{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: longID, MaxAttempts: 1}},
			{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "max", Priority: model.MaxPriority, MaxAttempts: 1}},
			{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "min", Priority: model.MinPriority, MaxAttempts: 1}},
			{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "binary \x00\xff\n id", Payload: []byte{0, 0xff, '\n', 0}, MaxAttempts: 1}},
			{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "many", MaxAttempts: 1 << 30}},
			{Queue: longQueue, EnqueueArgs: model.EnqueueArgs{ID: "t", MaxAttempts: 1}},
		} {
			_, err := e.s.Enqueue(e.ctx, p)
			e.ok(describeEnqueue(p), err)
		}
		ts := e.pop(3, lease)
		e.wantIDs("Pop", taskIDs(ts), "max", longID, "binary \x00\xff\n id")
	}},

	// --- Promote ---------------------------------------------------------------
	{name: "PromotesDueTasksInOrderOfRunAfterThenID", run: func(e *env) {
		now := e.now()
		e.enqueue("c", runAfter(now.Add(2*time.Second)))
		e.enqueue("b", runAfter(now.Add(time.Second)))
		e.enqueue("a", runAfter(now.Add(2*time.Second)))
		e.enqueue("d", runAfter(now.Add(10*time.Second)))
		e.clock.Advance(2*time.Second - time.Microsecond)
		res, err := e.s.Promote(e.ctx, core.PromoteParams{Queue: e.q})
		e.ok("Promote", err)
		e.wantIDs("Promote before a and c are due", res.IDs, "b")
		e.clock.Advance(time.Microsecond)
		res, err = e.s.Promote(e.ctx, core.PromoteParams{Queue: e.q})
		e.ok("Promote", err)
		e.wantIDs("Promote at exactly their RunAfter", res.IDs, "a", "c")
		if !res.Now.Equal(e.now()) {
			e.t.Errorf("Promote Now = %s, want %s", formatTime(res.Now), formatTime(e.now()))
		}
		// Promotion is the order they became Ready in: b, a, c.
		e.wantIDs("Pop", taskIDs(e.pop(3, lease)), "b", "a", "c")
		if d := e.get("d"); d.State != core.Scheduled {
			e.t.Errorf("d: %v, want scheduled", d.State)
		}
	}},
	{name: "PromoteTakesAtMostItsLimit", run: func(e *env) {
		for _, id := range []string{"a", "b", "c"} {
			e.enqueue(id, runAfter(e.now().Add(time.Second)))
		}
		e.clock.Advance(time.Second)
		res, err := e.s.Promote(e.ctx, core.PromoteParams{Queue: e.q, Limit: 2})
		e.ok("Promote", err)
		e.wantIDs("Promote limit 2", res.IDs, "a", "b")
		e.rejects(core.ErrInvalidArgument, func() error {
			_, err := e.s.Promote(e.ctx, core.PromoteParams{Queue: e.q, Limit: -1})
			return err
		})
		res, err = e.s.Promote(e.ctx, core.PromoteParams{Queue: e.q})
		e.ok("Promote", err)
		e.wantIDs("Promote", res.IDs, "c")
	}},

	// --- Pop -------------------------------------------------------------------
	{name: "PopsTheHighestPriorityFirstThenInTheOrderTasksBecameReady", run: func(e *env) {
		e.enqueue("a")
		e.enqueue("b", priority(5))
		e.enqueue("c")
		e.enqueue("d", priority(5))
		e.enqueue("e", priority(-3))
		e.enqueue("f", priority(5), runAfter(e.now().Add(time.Second)))
		e.wantIDs("Pop", taskIDs(e.pop(5, lease)), "b", "d", "a", "c", "e")
	}},
	{name: "PopsARetriedTaskBehindTasksThatBecameReadyBeforeIt", run: func(e *env) {
		e.enqueue("x")
		e.enqueue("y")
		x := e.popID("x")
		_, err := e.s.Retry(e.ctx, core.RetryParams{Claim: x.Claim(), Message: "again"})
		e.ok("Retry", err)
		e.enqueue("z")
		e.wantIDs("Pop", taskIDs(e.pop(3, lease)), "y", "x", "z")
	}},
	{name: "PopStampsTheClaim", run: func(e *env) {
		e.enqueue("filler")
		enq := e.enqueue("t1", priority(1))
		e.clock.Advance(time.Second)
		now := e.now()
		res, err := e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: 7 * time.Second, N: 1})
		e.ok("Pop", err)
		if len(res.Tasks) != 1 {
			e.t.Fatalf("Pop returned %d tasks", len(res.Tasks))
		}
		want := enq
		want.State, want.Version, want.ClaimToken, want.Attempt = core.Running, 3, 3, 1
		want.ClaimedAt, want.Deadline = now, now.Add(7*time.Second)
		e.wantTask("Pop", res.Tasks[0], want)
		if !res.Now.Equal(now) {
			e.t.Errorf("Pop Now = %s, want %s", formatTime(res.Now), formatTime(now))
		}
		c := res.Tasks[0].Claim()
		if c != (core.Claim{Queue: e.q, TaskID: "t1", Token: 3, Attempt: 1, Deadline: now.Add(7 * time.Second)}) {
			e.t.Errorf("claim %+v", c)
		}
	}},
	{name: "PopsABatchOfAtMostN", run: func(e *env) {
		for _, id := range []string{"a", "b", "c"} {
			e.enqueue(id)
		}
		e.wantIDs("Pop 2", taskIDs(e.pop(2, lease)), "a", "b")
		e.wantIDs("Pop 5", taskIDs(e.pop(5, lease)), "c")
		e.wantIDs("Pop from an empty queue", taskIDs(e.pop(1, lease)))
		res, err := e.s.Pop(e.ctx, core.PopParams{Queue: "never-used", Lease: lease, N: model.MaxBatch})
		e.ok("Pop of a queue never used", err)
		e.wantIDs("Pop of a queue never used", taskIDs(res.Tasks))
	}},
	{name: "RejectsInvalidPopArguments", run: func(e *env) {
		e.enqueue("t1")
		for _, p := range []core.PopParams{
			{Queue: e.q, Lease: 0, N: 1},
			{Queue: e.q, Lease: -time.Second, N: 1},
			{Queue: e.q, Lease: lease, N: 0},
			{Queue: e.q, Lease: lease, N: -1},
			{Queue: e.q, Lease: lease, N: model.MaxBatch + 1},
			{Queue: "bad queue", Lease: lease, N: 1},
		} {
			e.rejects(core.ErrInvalidArgument, func() error { _, err := e.s.Pop(e.ctx, p); return err })
		}
	}},

	// --- Extend, Ack, Fail, Retry ---------------------------------------------
	{name: "ExtendsTheLeaseOfARunningTask", run: func(e *env) {
		t, c := e.running("t1")
		e.clock.Advance(10 * time.Second)
		res, err := e.s.Extend(e.ctx, core.ExtendParams{Claim: c, Lease: time.Minute})
		e.ok("Extend", err)
		want := t
		want.Version, want.Deadline = t.Version+1, e.now().Add(time.Minute)
		e.wantTask("Extend", res.Task, want)
		// The claim still holds: the token did not change.
		_, err = e.s.Ack(e.ctx, core.AckParams{Claim: c})
		e.ok("Ack after Extend", err)
	}},
	{name: "ExtendsALeaseThatAlreadyLapsedWhenNobodyActed", run: func(e *env) {
		_, c := e.running("t1")
		e.clock.Advance(time.Hour)
		res, err := e.s.Extend(e.ctx, core.ExtendParams{Claim: c, Lease: time.Second})
		e.ok("Extend", err)
		if !res.Task.Deadline.Equal(e.now().Add(time.Second)) {
			e.t.Errorf("deadline %s", formatTime(res.Task.Deadline))
		}
	}},
	{name: "CompletesARunningTask", run: func(e *env) {
		t, c := e.running("t1")
		e.clock.Advance(time.Second)
		res, err := e.s.Ack(e.ctx, core.AckParams{Claim: c, Result: []byte("42")})
		e.ok("Ack", err)
		want := t
		want.State, want.Version, want.Result = core.Succeeded, t.Version+1, []byte("42")
		want.FinishedAt, want.Deadline = e.now(), time.Time{}
		e.wantTask("Ack", res.Task, want)
		e.wantTask("Get", e.get("t1"), want)
	}},
	{name: "CompletesATaskWhoseLeaseLapsedWhenNobodyActed", run: func(e *env) {
		_, c := e.running("t1")
		e.clock.Advance(time.Hour)
		res, err := e.s.Ack(e.ctx, core.AckParams{Claim: c})
		e.ok("late Ack", err)
		if res.Task.State != core.Succeeded {
			e.t.Errorf("state %v", res.Task.State)
		}
	}},
	{name: "FailsARunningTaskRecordingTheHandlerError", run: func(e *env) {
		t, c := e.running("t1")
		e.clock.Advance(time.Second)
		res, err := e.s.Fail(e.ctx, core.FailParams{Claim: c, Message: "boom"})
		e.ok("Fail", err)
		want := t
		want.State, want.Version, want.FinishedAt, want.Deadline = core.Failed, t.Version+1, e.now(), time.Time{}
		want.Errors = []core.TaskError{{Attempt: 1, At: e.now(), Message: "boom"}}
		e.wantTask("Fail", res.Task, want)
		if res.Task.HandlerFailures() != 1 || res.Task.LeaseLosses() != 0 {
			e.t.Errorf("handler failures %d, lease losses %d", res.Task.HandlerFailures(), res.Task.LeaseLosses())
		}
	}},
	{name: "RetriesARunningTaskToReadyOrScheduled", run: func(e *env) {
		t, c := e.running("t1")
		e.clock.Advance(time.Second)
		res, err := e.s.Retry(e.ctx, core.RetryParams{Claim: c, Message: "flaky"})
		e.ok("Retry", err)
		want := t
		want.State, want.Version, want.ClaimToken = core.Ready, t.Version+1, 0
		want.ClaimedAt, want.Deadline = time.Time{}, time.Time{}
		want.Errors = []core.TaskError{{Attempt: 1, At: e.now(), Message: "flaky"}}
		e.wantTask("Retry to Ready", res.Task, want)

		t = e.popID("t1")
		later := e.now().Add(time.Minute)
		res, err = e.s.Retry(e.ctx, core.RetryParams{Claim: t.Claim(), Delay: time.Minute, Message: "later"})
		e.ok("Retry", err)
		if res.Task.State != core.Scheduled || !res.Task.RunAfter.Equal(later) || res.Task.ClaimToken != 0 || len(res.Task.Errors) != 2 {
			e.t.Errorf("Retry to Scheduled: %s", formatTask(res.Task))
		}
	}},
	{name: "RejectsWorkerOpsWithAForgedToken", run: func(e *env) {
		_, c := e.running("t1")
		for _, token := range []uint64{c.Token + 1, c.Token + 1000, c.Token - 1} {
			if token == 0 {
				continue
			}
			forged := c
			forged.Token = token
			for _, op := range workerOps(e, forged) {
				e.rejects(core.ErrStaleClaim, op.do)
			}
		}
		_, err := e.s.Ack(e.ctx, core.AckParams{Claim: c})
		e.ok("Ack with the real claim", err)
	}},
	{name: "RejectsWorkerOpsOnAMissingTaskAsStaleClaims", run: func(e *env) {
		_, c := e.running("t1")
		c.TaskID = "missing"
		for _, op := range workerOps(e, c) {
			e.rejects(core.ErrStaleClaim, op.do)
		}
	}},
	{name: "RejectsWorkerOpsWithInvalidArguments", run: func(e *env) {
		_, c := e.running("t1")
		zero := c
		zero.Token = 0
		missingZero := zero
		missingZero.TaskID = "missing"
		empty := c
		empty.TaskID = ""
		long := c
		long.TaskID = strings.Repeat("x", model.MaxIDLength+1)
		badQueue := c
		badQueue.Queue = "bad queue"
		noQueue := c
		noQueue.Queue = ""
		for _, bad := range []core.Claim{zero, missingZero, empty, long, badQueue, noQueue} {
			for _, op := range workerOps(e, bad) {
				e.rejects(core.ErrInvalidArgument, op.do)
			}
		}
		for _, l := range []time.Duration{0, -time.Second} {
			e.rejects(core.ErrInvalidArgument, func() error {
				_, err := e.s.Extend(e.ctx, core.ExtendParams{Claim: c, Lease: l})
				return err
			})
		}
	}},
	{name: "RetryAndRequeueRunAgainAfterTheDelayOnTheStoresClock", run: func(e *env) {
		for i, d := range []time.Duration{0, time.Microsecond, 1500 * time.Millisecond} {
			w, b := fmt.Sprint("w", i), fmt.Sprint("b", i)
			_, rc := e.reaped(b)
			_, c := e.running(w)
			e.clock.Advance(time.Second)
			ret, err := e.s.Retry(e.ctx, core.RetryParams{Claim: c, Delay: d, Message: "again"})
			e.ok("Retry", err)
			req, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: rc, Delay: d})
			e.ok("Requeue", err)
			want, runAfter := core.Ready, time.Time{}
			if d > 0 {
				want, runAfter = core.Scheduled, e.now().Add(d)
			}
			for _, r := range []core.TaskResult{ret, req} {
				if !r.Now.Equal(e.now()) || !r.Task.RunAfter.Equal(runAfter) || r.Task.State != want {
					e.t.Errorf("delay %v: now %s, task %s; want RunAfter %s and %v",
						d, formatTime(r.Now), formatTask(r.Task), formatTime(runAfter), want)
				}
			}
			for _, id := range []string{w, b} {
				_, err := e.s.Remove(e.ctx, core.InspectParams{Queue: e.q, ID: id})
				e.ok("Remove", err)
			}
		}
	}},
	{name: "RejectsADelayOutsideZeroToMaxDuration", run: func(e *env) {
		_, rc := e.reaped("b")
		_, c := e.running("w")
		for _, d := range []time.Duration{-time.Nanosecond, -time.Second, model.MaxDuration + time.Microsecond, math.MaxInt64} {
			e.rejects(core.ErrInvalidArgument, func() error {
				_, err := e.s.Retry(e.ctx, core.RetryParams{Claim: c, Delay: d})
				return err
			})
			e.rejects(core.ErrInvalidArgument, func() error {
				_, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: rc, Delay: d})
				return err
			})
			e.rejects(core.ErrInvalidArgument, func() error {
				_, err := e.s.RecoverExpired(e.ctx, core.RecoverExpiredParams{Queue: e.q, Delay: d})
				return err
			})
		}
		if _, err := e.s.Retry(e.ctx, core.RetryParams{Claim: c, Delay: model.MaxDuration}); err != nil {
			e.ok("Retry with model.MaxDuration", err)
		}
		if _, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: rc, Delay: model.MaxDuration}); err != nil {
			e.ok("Requeue with model.MaxDuration", err)
		}
	}},
	{name: "RejectsASecondDecisionOnAFinishedTaskAsAnInvalidTransition", run: func(e *env) {
		_, c := e.running("t1")
		_, err := e.s.Ack(e.ctx, core.AckParams{Claim: c})
		e.ok("Ack", err)
		for _, op := range workerOps(e, c) {
			e.rejects(&model.TransitionError{Op: op.op, State: core.Succeeded}, op.do)
		}
	}},

	// --- ClaimExpired, Requeue, Finalize, RecoverExpired ------------------------
	{name: "ClaimsExpiredTasksInOrderOfDeadlineThenID", run: func(e *env) {
		for _, id := range []string{"b", "a", "c", "d"} {
			e.enqueue(id)
		}
		e.popLease("b", 10*time.Second)
		e.popLease("a", 10*time.Second)
		e.popLease("c", 5*time.Second)
		e.popLease("d", 20*time.Second)
		e.clock.Advance(10*time.Second - time.Microsecond)
		res, err := e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: time.Minute})
		e.ok("ClaimExpired", err)
		e.wantIDs("ClaimExpired", reapIDs(res.Claims), "c")
		e.clock.Advance(time.Microsecond)
		res, err = e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: time.Minute, Limit: 1})
		e.ok("ClaimExpired", err)
		e.wantIDs("ClaimExpired at exactly the deadline, limit 1", reapIDs(res.Claims), "a")
		res, err = e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: time.Minute})
		e.ok("ClaimExpired", err)
		e.wantIDs("ClaimExpired", reapIDs(res.Claims), "b")
	}},
	{name: "ClaimExpiredRenewsTheDeadlineAndKeepsTheWorkerToken", run: func(e *env) {
		t, c := e.running("t1")
		e.clock.Advance(lease)
		res, err := e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: 10 * time.Second})
		e.ok("ClaimExpired", err)
		if len(res.Claims) != 1 {
			e.t.Fatalf("claims %v", reapIDs(res.Claims))
		}
		want := t
		want.Version, want.Deadline = t.Version+1, e.now().Add(10*time.Second)
		rc := res.Claims[0]
		e.wantTask("ReapClaim.Task", rc.Task, want)
		e.wantTask("Get", e.get("t1"), want)
		if rc.Queue != e.q || rc.TaskID != "t1" || rc.Version != want.Version || !rc.Deadline.Equal(want.Deadline) {
			e.t.Errorf("reap claim {%s %s version %d deadline %s}", rc.Queue, rc.TaskID, rc.Version, formatTime(rc.Deadline))
		}
		if !res.Now.Equal(e.now()) {
			e.t.Errorf("ClaimExpired Now = %s", formatTime(res.Now))
		}
		// The worker may still decide first.
		_, err = e.s.Ack(e.ctx, core.AckParams{Claim: c})
		e.ok("the worker's Ack after the broker's claim", err)
	}},
	{name: "ClaimsATaskAgainOnlyAfterTheClaimTTL", run: func(e *env) {
		_, first := e.reaped("t1")
		e.clock.Advance(10*time.Second - time.Microsecond)
		res, err := e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: 10 * time.Second})
		e.ok("ClaimExpired", err)
		e.wantIDs("ClaimExpired within the claim TTL", reapIDs(res.Claims))
		e.clock.Advance(time.Microsecond)
		res, err = e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: 10 * time.Second})
		e.ok("ClaimExpired", err)
		e.wantIDs("ClaimExpired after the claim TTL", reapIDs(res.Claims), "t1")
		if len(res.Claims) == 1 && res.Claims[0].Version <= first.Version {
			e.t.Errorf("second claim version %d, first %d", res.Claims[0].Version, first.Version)
		}
	}},
	{name: "RejectsInvalidClaimExpiredArguments", run: func(e *env) {
		e.reaped("t1")
		e.clock.Advance(time.Hour)
		for _, p := range []core.ClaimExpiredParams{
			{Queue: e.q, ClaimTTL: 0},
			{Queue: e.q, ClaimTTL: -time.Second},
			{Queue: e.q, ClaimTTL: time.Second, Limit: -1},
			{Queue: "", ClaimTTL: time.Second},
		} {
			e.rejects(core.ErrInvalidArgument, func() error { _, err := e.s.ClaimExpired(e.ctx, p); return err })
		}
	}},
	{name: "RequeuesAClaimedTaskWithTheLeaseExpiredError", run: func(e *env) {
		_, rc := e.reaped("t1")
		e.clock.Advance(time.Second)
		res, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: rc})
		e.ok("Requeue", err)
		want := rc.Task
		want.State, want.Version, want.ClaimToken = core.Ready, rc.Version+1, 0
		want.ClaimedAt, want.Deadline = time.Time{}, time.Time{}
		want.Errors = []core.TaskError{{Attempt: 1, At: e.now(), Message: model.LeaseExpiredMessage, LeaseExpired: true}}
		e.wantTask("Requeue", res.Task, want)

		e.popID("t1")
		e.clock.Advance(lease)
		claims, err := e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: time.Second})
		e.ok("ClaimExpired", err)
		later := e.now().Add(time.Minute)
		res, err = e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: claims.Claims[0], Delay: time.Minute, Message: "worker lost"})
		e.ok("Requeue", err)
		if res.Task.State != core.Scheduled || !res.Task.RunAfter.Equal(later) || res.Task.LeaseLosses() != 2 ||
			res.Task.Errors[1].Message != "worker lost" || res.Task.Errors[1].Attempt != 2 {
			e.t.Errorf("Requeue to Scheduled: %s", formatTask(res.Task))
		}
	}},
	{name: "FinalizesAClaimedTask", run: func(e *env) {
		_, rc := e.reaped("t1")
		res, err := e.s.Finalize(e.ctx, core.FinalizeParams{ReapClaim: rc, Message: "gave up"})
		e.ok("Finalize", err)
		want := rc.Task
		want.State, want.Version, want.FinishedAt, want.Deadline = core.Failed, rc.Version+1, e.now(), time.Time{}
		want.Errors = []core.TaskError{{Attempt: 1, At: e.now(), Message: "gave up", LeaseExpired: true}}
		e.wantTask("Finalize", res.Task, want)
	}},
	{name: "RejectsBrokerDecisionsAfterAnyChangeToTheTask", run: func(e *env) {
		type change struct {
			name string
			do   func(c core.Claim, rc core.ReapClaim)
		}
		for i, ch := range []change{
			{"worker extends", func(c core.Claim, _ core.ReapClaim) {
				_, err := e.s.Extend(e.ctx, core.ExtendParams{Claim: c, Lease: time.Minute})
				e.ok("Extend", err)
			}},
			{"worker acks", func(c core.Claim, _ core.ReapClaim) {
				_, err := e.s.Ack(e.ctx, core.AckParams{Claim: c})
				e.ok("Ack", err)
			}},
			{"another broker claims", func(core.Claim, core.ReapClaim) {
				e.clock.Advance(10 * time.Second)
				_, err := e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: time.Second})
				e.ok("ClaimExpired", err)
			}},
			{"operator requeues", func(c core.Claim, _ core.ReapClaim) {
				_, err := e.s.InspectRequeue(e.ctx, core.InspectParams{Queue: e.q, ID: c.TaskID})
				e.ok("InspectRequeue", err)
			}},
		} {
			e.q = fmt.Sprintf("q%d", i) // one queue per change, so the leases do not meet
			c, rc := e.reaped("t1")
			ch.do(c, rc)
			for _, op := range brokerOps(e, rc) {
				e.rejects(core.ErrStaleClaim, op)
			}
		}
	}},
	{name: "RejectsBrokerDecisionsWithAForgedOrInvalidClaim", run: func(e *env) {
		_, rc := e.reaped("t1")
		forged := rc
		forged.Version = rc.Version + 1
		missing := rc
		missing.TaskID = "missing"
		for _, bad := range []core.ReapClaim{forged, missing} {
			for _, op := range brokerOps(e, bad) {
				e.rejects(core.ErrStaleClaim, op)
			}
		}
		zero := rc
		zero.Version = 0
		empty := rc
		empty.TaskID = ""
		badQueue := rc
		badQueue.Queue = "no/slashes"
		for _, bad := range []core.ReapClaim{zero, empty, badQueue} {
			for _, op := range brokerOps(e, bad) {
				e.rejects(core.ErrInvalidArgument, op)
			}
		}
		_, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: rc})
		e.ok("Requeue with the real claim", err)
	}},
	{name: "RejectsBrokerDecisionsOnATaskThatIsNotRunning", run: func(e *env) {
		ready := e.enqueue("t1")
		forged := core.ReapClaim{Queue: e.q, TaskID: "t1", Version: ready.Version}
		e.rejects(&model.TransitionError{Op: model.OpRequeue, State: core.Ready}, func() error {
			_, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: forged})
			return err
		})
		e.rejects(&model.TransitionError{Op: model.OpFinalize, State: core.Ready}, func() error {
			_, err := e.s.Finalize(e.ctx, core.FinalizeParams{ReapClaim: forged})
			return err
		})
	}},
	{name: "RecoversExpiredTasksToTheQueueAndFailsExhaustedOnes", run: func(e *env) {
		e.enqueue("once", maxAttempts(1))
		e.enqueue("twice", maxAttempts(2))
		e.enqueue("live", maxAttempts(1))
		e.popLease("once", time.Second)
		e.popLease("twice", 2*time.Second)
		e.popLease("live", 10*time.Second)
		e.clock.Advance(2 * time.Second)
		res, err := e.s.RecoverExpired(e.ctx, core.RecoverExpiredParams{Queue: e.q, Delay: 5 * time.Second})
		e.ok("RecoverExpired", err)
		e.wantIDs("RecoverExpired", taskIDs(res.Tasks), "once", "twice")
		if len(res.Tasks) == 2 {
			once, twice := res.Tasks[0], res.Tasks[1]
			if once.State != core.Failed || !once.FinishedAt.Equal(e.now()) || once.LeaseLosses() != 1 {
				e.t.Errorf("exhausted task: %s", formatTask(once))
			}
			if twice.State != core.Scheduled || !twice.RunAfter.Equal(e.now().Add(5*time.Second)) || twice.ClaimToken != 0 ||
				twice.LeaseLosses() != 1 || twice.Errors[0].Message != model.LeaseExpiredMessage {
				e.t.Errorf("recovered task: %s", formatTask(twice))
			}
		}
		if !res.Now.Equal(e.now()) {
			e.t.Errorf("RecoverExpired Now = %s", formatTime(res.Now))
		}
		res, err = e.s.RecoverExpired(e.ctx, core.RecoverExpiredParams{Queue: e.q})
		e.ok("RecoverExpired", err)
		e.wantIDs("a second RecoverExpired", taskIDs(res.Tasks))
	}},
	{name: "RecoverExpiredWithoutDelayMakesTasksReadyAndRespectsItsLimit", run: func(e *env) {
		for _, id := range []string{"a", "b", "c"} {
			e.enqueue(id)
		}
		e.pop(3, time.Second)
		e.clock.Advance(time.Second)
		res, err := e.s.RecoverExpired(e.ctx, core.RecoverExpiredParams{Queue: e.q, Limit: 2})
		e.ok("RecoverExpired", err)
		e.wantIDs("RecoverExpired limit 2", taskIDs(res.Tasks), "a", "b")
		for _, t := range res.Tasks {
			if t.State != core.Ready {
				e.t.Errorf("%s: %v, want ready", t.ID, t.State)
			}
		}
		for _, p := range []core.RecoverExpiredParams{{Queue: e.q, Delay: -time.Second}, {Queue: e.q, Limit: -1}, {Queue: "x y"}} {
			e.rejects(core.ErrInvalidArgument, func() error { _, err := e.s.RecoverExpired(e.ctx, p); return err })
		}
	}},

	// --- Inspector ---------------------------------------------------------------
	{name: "GetsATaskAndReportsAMissingOneAsNotFound", run: func(e *env) {
		t := e.enqueue("t1")
		e.wantTask("Get", e.get("t1"), t)
		_, err := e.s.Get(e.ctx, core.GetParams{Queue: e.q, ID: "t2"})
		e.wantErr("Get of a missing task", err, core.ErrNotFound)
		_, err = e.s.Get(e.ctx, core.GetParams{Queue: "elsewhere", ID: "t1"})
		e.wantErr("Get in another queue", err, core.ErrNotFound)
		_, err = e.s.Get(e.ctx, core.GetParams{Queue: e.q, ID: ""})
		e.wantErr("Get with an empty ID", err, core.ErrInvalidArgument)
		_, err = e.s.Get(e.ctx, core.GetParams{Queue: "", ID: "t1"})
		e.wantErr("Get with an empty queue name", err, core.ErrInvalidArgument)
	}},
	{name: "ListsTasksInIDOrderWithACursor", run: func(e *env) {
		for _, id := range []string{"f", "b", "a", "e", "c", "d"} {
			e.enqueue(id)
		}
		e.enqueue("s", runAfter(e.now().Add(time.Hour)))
		var got []string
		var nexts []string
		after := ""
		for range 4 {
			res, err := e.s.List(e.ctx, core.ListParams{Queue: e.q, State: core.Ready, After: after, Limit: 3})
			e.ok("List", err)
			got = append(got, taskIDs(res.Tasks)...)
			nexts = append(nexts, res.Next)
			if res.Next == "" {
				break
			}
			after = res.Next
		}
		e.wantIDs("List pages", got, "a", "b", "c", "d", "e", "f")
		e.wantIDs("List cursors", nexts, "c", "")
		res, err := e.s.List(e.ctx, core.ListParams{Queue: e.q, State: core.Ready, After: "bb", Limit: 2})
		e.ok("List", err)
		e.wantIDs("List after a cursor that is no ID", taskIDs(res.Tasks), "c", "d")
		if res.Next != "d" {
			e.t.Errorf("Next = %q, want d", res.Next)
		}
		res, err = e.s.List(e.ctx, core.ListParams{Queue: e.q, State: core.Running, Limit: 10})
		e.ok("List", err)
		e.wantIDs("List of an empty state", taskIDs(res.Tasks))
	}},
	{name: "RejectsListWithAnInvalidStateOrLimit", run: func(e *env) {
		e.enqueue("t1")
		for _, p := range []core.ListParams{
			{Queue: e.q, State: 0, Limit: 1},
			{Queue: e.q, State: core.Quarantined + 1, Limit: 1},
			{Queue: e.q, State: core.Ready, Limit: 0},
			{Queue: e.q, State: core.Ready, Limit: -1},
			{Queue: e.q, State: core.Ready, Limit: model.MaxBatch + 1},
			{Queue: "", State: core.Ready, Limit: 1},
		} {
			_, err := e.s.List(e.ctx, p)
			e.wantErr("List", err, core.ErrInvalidArgument)
		}
	}},
	{name: "CountsTasksInEachState", run: func(e *env) {
		_, k := e.running("k")
		_, f := e.running("f")
		e.running("u")
		_, err := e.s.Ack(e.ctx, core.AckParams{Claim: k})
		e.ok("Ack", err)
		_, err = e.s.Fail(e.ctx, core.FailParams{Claim: f})
		e.ok("Fail", err)
		e.enqueue("s", runAfter(e.now().Add(time.Hour)))
		e.enqueue("r1")
		e.enqueue("r2")
		got, err := e.s.Counts(e.ctx, core.CountsParams{Queue: e.q})
		e.ok("Counts", err)
		if want := (core.Counts{Scheduled: 1, Ready: 2, Running: 1, Succeeded: 1, Failed: 1}); got != want {
			e.t.Errorf("Counts = %+v, want %+v", got, want)
		}
		got, err = e.s.Counts(e.ctx, core.CountsParams{Queue: "empty"})
		e.ok("Counts", err)
		if got != (core.Counts{}) {
			e.t.Errorf("Counts of an empty queue = %+v", got)
		}
		_, err = e.s.Counts(e.ctx, core.CountsParams{Queue: "bad queue"})
		e.wantErr("Counts", err, core.ErrInvalidArgument)
	}},
}

func (e *env) popLease(id string, l time.Duration) core.Task {
	e.t.Helper()
	ts := e.pop(1, l)
	if len(ts) != 1 || ts[0].ID != id {
		e.t.Fatalf("Pop returned %v, want [%s]", taskIDs(ts), id)
	}
	return ts[0]
}

type claimOp struct {
	op model.Op
	do func() error
}

// workerOps returns the four worker operations on claim c.
func workerOps(e *env, c core.Claim) []claimOp {
	return []claimOp{
		{model.OpExtend, func() error { _, err := e.s.Extend(e.ctx, core.ExtendParams{Claim: c, Lease: lease}); return err }},
		{model.OpAck, func() error { _, err := e.s.Ack(e.ctx, core.AckParams{Claim: c, Result: []byte("r")}); return err }},
		{model.OpFail, func() error { _, err := e.s.Fail(e.ctx, core.FailParams{Claim: c, Message: "m"}); return err }},
		{model.OpRetry, func() error { _, err := e.s.Retry(e.ctx, core.RetryParams{Claim: c, Message: "m"}); return err }},
	}
}

// brokerOps returns the two broker decisions on claim rc.
func brokerOps(e *env, rc core.ReapClaim) []func() error {
	return []func() error{
		func() error { _, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: rc}); return err },
		func() error { _, err := e.s.Finalize(e.ctx, core.FinalizeParams{ReapClaim: rc}); return err },
	}
}

// badQueueNames are names core.ValidateQueueName refuses.
var badQueueNames = []string{"", "has space", "{braces}", "slash/", "é", strings.Repeat("q", core.MaxQueueNameLength+1)}
