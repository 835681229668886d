package spec

import (
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// inspectorSuite checks the operator's actions: InspectRequeue, Remove and
// Prune.
var inspectorSuite = []suiteCase{
	{name: "OperatorRequeuesATaskFromEveryStateButReady", run: func(e *env) {
		now := e.now()
		e.enqueue("sched", runAfter(now.Add(time.Hour)))
		_, runC := e.running("run")
		_, okC := e.running("ok")
		_, failC := e.running("fail")
		_, err := e.s.Ack(e.ctx, core.AckParams{Claim: okC, Result: []byte("result")})
		e.ok("Ack", err)
		_, err = e.s.Fail(e.ctx, core.FailParams{Claim: failC, Message: "boom"})
		e.ok("Fail", err)
		e.clock.Advance(time.Second)
		for _, id := range []string{"sched", "run", "ok", "fail"} {
			before := e.get(id)
			res, err := e.s.InspectRequeue(e.ctx, core.InspectParams{Queue: e.q, ID: id})
			e.ok("InspectRequeue "+id, err)
			want := before
			want.State, want.Attempt, want.Result, want.RunAfter = core.Ready, 0, nil, time.Time{}
			want.ClaimToken, want.ClaimedAt, want.Deadline, want.FinishedAt = 0, time.Time{}, time.Time{}, time.Time{}
			want.Version = res.Task.Version
			if res.Task.Version <= before.Version {
				e.t.Errorf("%s: version %d after %d", id, res.Task.Version, before.Version)
			}
			e.wantTask("InspectRequeue "+id, res.Task, want)
			if !res.Now.Equal(e.now()) {
				e.t.Errorf("InspectRequeue Now = %s", formatTime(res.Now))
			}
		}
		// The claims from before cannot decide the tasks again.
		_, err = e.s.Ack(e.ctx, core.AckParams{Claim: runC})
		e.wantErr("the old claim after an operator's requeue", err, core.ErrStaleClaim)
		e.rejects(&model.TransitionError{Op: model.OpInspectRequeue, State: core.Ready}, func() error {
			_, err := e.s.InspectRequeue(e.ctx, core.InspectParams{Queue: e.q, ID: "sched"})
			return err
		})
	}},
	{name: "OperatorActionsHonourTheExpectedVersion", run: func(e *env) {
		_, c := e.running("t1")
		seen := e.get("t1").Version
		_, err := e.s.Extend(e.ctx, core.ExtendParams{Claim: c, Lease: time.Minute})
		e.ok("Extend", err)
		for _, expect := range []uint64{seen, seen + 100} {
			e.rejects(core.ErrConflict, func() error {
				_, err := e.s.InspectRequeue(e.ctx, core.InspectParams{Queue: e.q, ID: "t1", Expect: expect})
				return err
			})
			e.rejects(core.ErrConflict, func() error {
				_, err := e.s.Remove(e.ctx, core.InspectParams{Queue: e.q, ID: "t1", Expect: expect})
				return err
			})
		}
		current := e.get("t1").Version
		res, err := e.s.InspectRequeue(e.ctx, core.InspectParams{Queue: e.q, ID: "t1", Expect: current})
		e.ok("InspectRequeue with the current version", err)
		// The expected version is checked before the state: a stale view of a
		// Ready task is a conflict, not an invalid transition.
		e.rejects(core.ErrConflict, func() error {
			_, err := e.s.InspectRequeue(e.ctx, core.InspectParams{Queue: e.q, ID: "t1", Expect: current})
			return err
		})
		_, err = e.s.Remove(e.ctx, core.InspectParams{Queue: e.q, ID: "t1", Expect: res.Task.Version})
		e.ok("Remove with the current version", err)
	}},
	{name: "OperatorActionsOnAMissingTaskAreNotFound", run: func(e *env) {
		e.enqueue("t1")
		for _, p := range []core.InspectParams{{Queue: e.q, ID: "t2"}, {Queue: e.q, ID: "t2", Expect: 1}, {Queue: "other", ID: "t1"}} {
			e.rejects(core.ErrNotFound, func() error { _, err := e.s.InspectRequeue(e.ctx, p); return err }, e.q, "other")
			e.rejects(core.ErrNotFound, func() error { _, err := e.s.Remove(e.ctx, p); return err }, e.q, "other")
		}
		for _, p := range []core.InspectParams{{Queue: e.q, ID: ""}, {Queue: e.q, ID: string(make([]byte, model.MaxIDLength+1))}, {Queue: "", ID: "t1"}} {
			e.rejects(core.ErrInvalidArgument, func() error { _, err := e.s.InspectRequeue(e.ctx, p); return err })
			e.rejects(core.ErrInvalidArgument, func() error { _, err := e.s.Remove(e.ctx, p); return err })
		}
	}},
	{name: "RemovesATaskInAnyStateAndReturnsItAsItWas", run: func(e *env) {
		e.enqueue("sched", runAfter(e.now().Add(time.Hour)))
		e.running("run")
		_, c := e.running("done")
		_, err := e.s.Ack(e.ctx, core.AckParams{Claim: c, Result: []byte("r")})
		e.ok("Ack", err)
		e.enqueue("ready")
		for _, id := range []string{"sched", "run", "done", "ready"} {
			before := e.get(id)
			res, err := e.s.Remove(e.ctx, core.InspectParams{Queue: e.q, ID: id})
			e.ok("Remove "+id, err)
			e.wantTask("Remove "+id, res.Task, before)
			_, err = e.s.Get(e.ctx, core.GetParams{Queue: e.q, ID: id})
			e.wantErr("Get after Remove", err, core.ErrNotFound)
		}
		counts, err := e.s.Counts(e.ctx, core.CountsParams{Queue: e.q})
		e.ok("Counts", err)
		if counts != (core.Counts{}) {
			e.t.Errorf("Counts after removing everything = %+v", counts)
		}
	}},
	{name: "RemoveThenReenqueueNeverReusesATokenOrVersion", run: func(e *env) {
		old, c := e.running("t1")
		_, err := e.s.Remove(e.ctx, core.InspectParams{Queue: e.q, ID: "t1"})
		e.ok("Remove", err)
		e.rejects(core.ErrStaleClaim, func() error {
			_, err := e.s.Ack(e.ctx, core.AckParams{Claim: c})
			return err
		})
		again := e.enqueue("t1")
		if again.Version <= old.Version {
			e.t.Errorf("re-enqueued at version %d, the removed task had reached %d", again.Version, old.Version)
		}
		fresh := e.popID("t1")
		if fresh.ClaimToken <= c.Token {
			e.t.Errorf("new token %d, old token %d", fresh.ClaimToken, c.Token)
		}
		for _, op := range workerOps(e, c) {
			e.rejects(core.ErrStaleClaim, op.do)
		}
		_, err = e.s.Ack(e.ctx, core.AckParams{Claim: fresh.Claim()})
		e.ok("Ack with the new claim", err)
	}},
	{name: "PrunesOldTerminalTasksInOrderOfFinishedAtThenID", run: func(e *env) {
		finish := func(id string, ack bool) {
			e.t.Helper()
			_, c := e.running(id)
			var err error
			if ack {
				_, err = e.s.Ack(e.ctx, core.AckParams{Claim: c})
			} else {
				_, err = e.s.Fail(e.ctx, core.FailParams{Claim: c})
			}
			e.ok("finishing "+id, err)
		}
		finish("b", true)
		finish("a", false)
		finish("c", true)
		t0 := e.now()
		e.clock.Advance(time.Second)
		finish("d", true)
		e.running("live")
		e.enqueue("ready")
		res, err := e.s.Prune(e.ctx, core.PruneParams{Queue: e.q, States: []core.State{core.Succeeded, core.Failed}, Before: t0})
		e.ok("Prune", err)
		e.wantIDs("Prune before the first FinishedAt (strictly)", res.IDs)
		res, err = e.s.Prune(e.ctx, core.PruneParams{Queue: e.q, States: []core.State{core.Succeeded}, Before: t0.Add(time.Microsecond)})
		e.ok("Prune", err)
		e.wantIDs("Prune succeeded only", res.IDs, "b", "c")
		if !res.Now.Equal(e.now()) {
			e.t.Errorf("Prune Now = %s", formatTime(res.Now))
		}
		res, err = e.s.Prune(e.ctx, core.PruneParams{Queue: e.q, States: []core.State{core.Failed, core.Succeeded}, Before: e.now().Add(time.Hour), Limit: 1})
		e.ok("Prune", err)
		e.wantIDs("Prune limit 1", res.IDs, "a")
		res, err = e.s.Prune(e.ctx, core.PruneParams{Queue: e.q, States: []core.State{core.Failed, core.Succeeded}, Before: e.now().Add(time.Hour)})
		e.ok("Prune", err)
		e.wantIDs("Prune", res.IDs, "d")
		e.get("live")
		e.get("ready")
	}},
	{name: "RejectsPruneWithoutTerminalStates", run: func(e *env) {
		_, c := e.running("t1")
		_, err := e.s.Ack(e.ctx, core.AckParams{Claim: c})
		e.ok("Ack", err)
		later := e.now().Add(time.Hour)
		for _, p := range []core.PruneParams{
			{Queue: e.q, States: nil, Before: later},
			{Queue: e.q, States: []core.State{core.Ready}, Before: later},
			{Queue: e.q, States: []core.State{core.Succeeded, core.Running}, Before: later},
			{Queue: e.q, States: []core.State{core.Scheduled}, Before: later},
			{Queue: e.q, States: []core.State{0}, Before: later},
			{Queue: e.q, States: []core.State{core.Failed + 1}, Before: later},
			{Queue: e.q, States: []core.State{core.Succeeded}, Before: later, Limit: -1},
			{Queue: "bad queue", States: []core.State{core.Succeeded}, Before: later},
		} {
			e.rejects(core.ErrInvalidArgument, func() error { _, err := e.s.Prune(e.ctx, p); return err })
		}
	}},
}
