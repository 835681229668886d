package spec

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// contractSuite checks the rules every store keeps besides the transitions:
// the clock and times, copies, queue isolation, argument validation on every
// operation, and Close.
var contractSuite = []suiteCase{
	{name: "ReportsTheStoreClockAsNowInEveryMutatingResult", run: func(e *env) {
		wantNow := func(op string, got time.Time) {
			e.t.Helper()
			if !got.Equal(e.now()) || got.IsZero() {
				e.t.Errorf("%s: Now = %s, want the clock's %s", op, formatTime(got), formatTime(e.now()))
			}
		}
		step := func() { e.clock.Advance(1234 * time.Microsecond) }
		enq, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "t1", MaxAttempts: 2}})
		e.ok("Enqueue", err)
		wantNow("Enqueue", enq.Now)
		step()
		pop, err := e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: time.Second, N: 1})
		e.ok("Pop", err)
		wantNow("Pop", pop.Now)
		c := pop.Tasks[0].Claim()
		step()
		ext, err := e.s.Extend(e.ctx, core.ExtendParams{Claim: c, Lease: time.Second})
		e.ok("Extend", err)
		wantNow("Extend", ext.Now)
		step()
		ret, err := e.s.Retry(e.ctx, core.RetryParams{Claim: c, Delay: time.Millisecond})
		e.ok("Retry", err)
		wantNow("Retry", ret.Now)
		step()
		pro, err := e.s.Promote(e.ctx, core.PromoteParams{Queue: e.q})
		e.ok("Promote", err)
		wantNow("Promote", pro.Now)
		step()
		pop, err = e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: time.Second, N: 1})
		e.ok("Pop", err)
		e.clock.Advance(time.Second)
		ce, err := e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: time.Second})
		e.ok("ClaimExpired", err)
		wantNow("ClaimExpired", ce.Now)
		step()
		req, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: ce.Claims[0]})
		e.ok("Requeue", err)
		wantNow("Requeue", req.Now)
		step()
		pop, err = e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: time.Second, N: 1})
		e.ok("Pop", err)
		e.clock.Advance(time.Second)
		ce, err = e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: time.Second})
		e.ok("ClaimExpired", err)
		step()
		fin, err := e.s.Finalize(e.ctx, core.FinalizeParams{ReapClaim: ce.Claims[0]})
		e.ok("Finalize", err)
		wantNow("Finalize", fin.Now)
		step()
		ir, err := e.s.InspectRequeue(e.ctx, core.InspectParams{Queue: e.q, ID: "t1"})
		e.ok("InspectRequeue", err)
		wantNow("InspectRequeue", ir.Now)
		pop, err = e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: time.Second, N: 1})
		e.ok("Pop", err)
		e.clock.Advance(time.Second)
		rec, err := e.s.RecoverExpired(e.ctx, core.RecoverExpiredParams{Queue: e.q})
		e.ok("RecoverExpired", err)
		wantNow("RecoverExpired", rec.Now)
		pop, err = e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: time.Second, N: 1})
		e.ok("Pop", err)
		step()
		ack, err := e.s.Ack(e.ctx, core.AckParams{Claim: pop.Tasks[0].Claim()})
		e.ok("Ack", err)
		wantNow("Ack", ack.Now)
		step()
		pr, err := e.s.Prune(e.ctx, core.PruneParams{Queue: e.q, States: []core.State{core.Succeeded}, Before: e.now()})
		e.ok("Prune", err)
		wantNow("Prune", pr.Now)
		e.enqueue("t2")
		fl := e.popID("t2")
		step()
		fr, err := e.s.Fail(e.ctx, core.FailParams{Claim: fl.Claim()})
		e.ok("Fail", err)
		wantNow("Fail", fr.Now)
		step()
		rm, err := e.s.Remove(e.ctx, core.InspectParams{Queue: e.q, ID: "t2"})
		e.ok("Remove", err)
		wantNow("Remove", rm.Now)
	}},
	{name: "KeepsMicrosecondsAndReturnsTimesInUTC", run: func(e *env) {
		e.clock.Advance(time.Microsecond)
		runAt := e.now().Add(1500*time.Millisecond + time.Microsecond)
		e.enqueue("t1", runAfter(runAt))
		e.clock.Set(runAt)
		_, err := e.s.Promote(e.ctx, core.PromoteParams{Queue: e.q})
		e.ok("Promote", err)
		e.clock.Advance(3 * time.Microsecond)
		t := e.popLease("t1", 7*time.Microsecond)
		e.clock.Advance(7 * time.Microsecond)
		res, err := e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: time.Microsecond})
		e.ok("ClaimExpired", err)
		e.wantIDs("ClaimExpired at exactly a deadline with microseconds", reapIDs(res.Claims), "t1")
		got := e.get("t1")
		if !got.RunAfter.Equal(runAt) || !got.ClaimedAt.Equal(t.ClaimedAt) || !got.Deadline.Equal(e.now().Add(time.Microsecond)) {
			e.t.Errorf("times lost precision: %s", formatTask(got))
		}
		for name, tm := range map[string]time.Time{"EnqueuedAt": got.EnqueuedAt, "RunAfter": got.RunAfter, "ClaimedAt": got.ClaimedAt, "Deadline": got.Deadline} {
			if tm.Location() != time.UTC {
				e.t.Errorf("%s is in %v, want UTC", name, tm.Location())
			}
		}
	}},
	{name: "TruncatesSubMicrosecondTimesLeasesAndDelaysByTheModelsRule", run: func(e *env) {
		const us = time.Microsecond
		at := func(what string, got, want time.Time) {
			e.t.Helper()
			if !got.Equal(want) {
				e.t.Errorf("%s = %s, want %s (truncated to the microsecond)", what, formatTime(got), formatTime(want))
			}
		}
		now := e.now()
		half := e.enqueue("half", runAfter(now.Add(999*time.Nanosecond)), maxAttempts(10))
		if half.State != core.Ready {
			e.t.Errorf("RunAfter now + 999ns: %s, want Ready (the RunAfter is now)", formatTask(half))
		}
		at("RunAfter of now + 999ns", half.RunAfter, now)
		later := e.enqueue("later", runAfter(now.Add(1500*time.Nanosecond)))
		at("RunAfter of now + 1.5µs", later.RunAfter, now.Add(us))
		_, err := e.s.Remove(e.ctx, core.InspectParams{Queue: e.q, ID: "later"})
		e.ok("Remove", err)

		// Leases.
		t := e.popLease("half", 1500*time.Nanosecond)
		at("Deadline of a 1.5µs lease", t.Deadline, now.Add(us))
		ext, err := e.s.Extend(e.ctx, core.ExtendParams{Claim: t.Claim(), Lease: 2999 * time.Nanosecond})
		e.ok("Extend", err)
		at("Deadline of a 2.999µs lease", ext.Task.Deadline, now.Add(2*us))

		// Delays.
		ret, err := e.s.Retry(e.ctx, core.RetryParams{Claim: t.Claim(), Delay: 1999 * time.Nanosecond})
		e.ok("Retry", err)
		at("RunAfter of a 1.999µs delay", ret.Task.RunAfter, now.Add(us))
		if ret.Task.State != core.Scheduled {
			e.t.Errorf("Retry after 1.999µs: %s, want Scheduled", formatTask(ret.Task))
		}
		e.clock.Advance(us)
		_, err = e.s.Promote(e.ctx, core.PromoteParams{Queue: e.q})
		e.ok("Promote", err)
		t = e.popID("half")
		ret, err = e.s.Retry(e.ctx, core.RetryParams{Claim: t.Claim(), Delay: 999 * time.Nanosecond})
		e.ok("Retry", err)
		if ret.Task.State != core.Ready || !ret.Task.RunAfter.IsZero() {
			e.t.Errorf("Retry after 999ns: %s, want Ready with no RunAfter (no whole microsecond of delay)", formatTask(ret.Task))
		}
		t = e.popLease("half", us)
		e.clock.Advance(us)
		res, err := e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: 2500 * time.Nanosecond})
		e.ok("ClaimExpired", err)
		if len(res.Claims) != 1 {
			e.t.Fatalf("ClaimExpired claimed %v, want half", reapIDs(res.Claims))
		}
		at("Deadline of a 2.5µs claim TTL", res.Claims[0].Deadline, e.now().Add(2*us))
		req, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: res.Claims[0], Delay: 1500 * time.Nanosecond})
		e.ok("Requeue", err)
		at("RunAfter of a 1.5µs requeue delay", req.Task.RunAfter, e.now().Add(us))
		e.clock.Advance(us)
		_, err = e.s.Promote(e.ctx, core.PromoteParams{Queue: e.q})
		e.ok("Promote", err)
		e.popLease("half", us)
		e.clock.Advance(us)
		rec, err := e.s.RecoverExpired(e.ctx, core.RecoverExpiredParams{Queue: e.q, Delay: 2500 * time.Nanosecond})
		e.ok("RecoverExpired", err)
		if len(rec.Tasks) != 1 {
			e.t.Fatalf("RecoverExpired recovered %v, want half", taskIDs(rec.Tasks))
		}
		at("RunAfter of a 2.5µs recovery delay", rec.Tasks[0].RunAfter, e.now().Add(2*us))

		// A Prune bound: a task finished at f is pruned by a bound of f + 1µs,
		// not by one of f + 999ns (which is f).
		_, c := e.running("done")
		ack, err := e.s.Ack(e.ctx, core.AckParams{Claim: c})
		e.ok("Ack", err)
		f := ack.Task.FinishedAt
		e.clock.Advance(time.Second)
		pr, err := e.s.Prune(e.ctx, core.PruneParams{Queue: e.q, States: []core.State{core.Succeeded}, Before: f.Add(999 * time.Nanosecond)})
		e.ok("Prune", err)
		e.wantIDs("Prune before f + 999ns", pr.IDs)
		pr, err = e.s.Prune(e.ctx, core.PruneParams{Queue: e.q, States: []core.State{core.Succeeded}, Before: f.Add(us)})
		e.ok("Prune", err)
		e.wantIDs("Prune before f + 1µs", pr.IDs, "done")
	}},
	{name: "RoundTripsTheZeroTimeAsZero", run: func(e *env) {
		_, c := e.running("t2")
		_, err := e.s.Retry(e.ctx, core.RetryParams{Claim: c})
		e.ok("Retry", err)
		e.enqueue("t1")
		for _, t := range []core.Task{e.get("t1"), e.listed(core.Ready, "t1")} {
			if !t.RunAfter.IsZero() || !t.ClaimedAt.IsZero() || !t.Deadline.IsZero() || !t.FinishedAt.IsZero() {
				e.t.Errorf("unset times of a new task are not zero: %s", formatTask(t))
			}
		}
		for _, t := range []core.Task{e.get("t2"), e.listed(core.Ready, "t2")} {
			if !t.RunAfter.IsZero() || !t.ClaimedAt.IsZero() || !t.Deadline.IsZero() || !t.FinishedAt.IsZero() || t.EnqueuedAt.IsZero() {
				e.t.Errorf("times cleared by Retry are not zero: %s", formatTask(t))
			}
		}
	}},
	{name: "ReturnsSlicesTheCallerOwns", run: func(e *env) {
		payload := []byte("payload")
		_, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "t1", Payload: payload, MaxAttempts: 3}})
		e.ok("Enqueue", err)
		payload[0] = 'X' // the caller reuses its buffer
		t := e.popID("t1")
		result := []byte("result")
		_, err = e.s.Retry(e.ctx, core.RetryParams{Claim: t.Claim(), Message: "m"})
		e.ok("Retry", err)
		t = e.popID("t1")
		ack, err := e.s.Ack(e.ctx, core.AckParams{Claim: t.Claim(), Result: result})
		e.ok("Ack", err)
		result[0] = 'X'
		want := e.get("t1")
		if string(want.Payload) != "payload" || string(want.Result) != "result" {
			e.t.Fatalf("the store kept the caller's buffers: %s", formatTask(want))
		}
		// Scribble over everything a read hands out, then read again.
		scribble := func(t core.Task) {
			for i := range t.Payload {
				t.Payload[i] = '#'
			}
			for i := range t.Result {
				t.Result[i] = '#'
			}
			for i := range t.Errors {
				t.Errors[i].Message = "scribbled"
			}
		}
		scribble(ack.Task)
		scribble(e.get("t1"))
		scribble(e.listed(core.Succeeded, "t1"))
		res, err := e.s.Prune(e.ctx, core.PruneParams{Queue: e.q, States: []core.State{core.Failed}, Before: e.now()})
		e.ok("Prune", err)
		_ = append(res.IDs, "scribbled")
		if got := e.get("t1"); !got.Equal(want) {
			e.t.Errorf("a returned slice aliases the store:\n\tnow  %s\n\twant %s", formatTask(got), formatTask(want))
		}
		// Returned tasks do not share backing arrays with each other.
		a, b := e.get("t1"), e.get("t1")
		if len(a.Payload) > 0 && &a.Payload[0] == &b.Payload[0] {
			e.t.Errorf("two reads share a payload array")
		}
		if len(a.Errors) > 0 && &a.Errors[0] == &b.Errors[0] {
			e.t.Errorf("two reads share an error history array")
		}
	}},
	{name: "KeepsQueuesApartAndRoutesClaimsByTheirQueue", run: func(e *env) {
		e.enqueueIn("alpha", "t1")
		e.enqueueIn("beta", "t1", priority(3))
		e.q = "alpha"
		a := e.popID("t1")
		if a.Queue != "alpha" || a.Priority != 0 {
			e.t.Errorf("Pop of alpha returned %s", formatTask(a))
		}
		e.q = "beta"
		b := e.popID("t1")
		// Each queue has its own sequence: both claims may carry the same
		// token; only Claim.Queue tells them apart.
		if a.ClaimToken != b.ClaimToken {
			e.t.Logf("tokens %d and %d", a.ClaimToken, b.ClaimToken)
		}
		crossed := a.Claim()
		crossed.Queue = "gamma"
		e.rejects(core.ErrStaleClaim, func() error {
			_, err := e.s.Ack(e.ctx, core.AckParams{Claim: crossed})
			return err
		}, "alpha", "beta", "gamma")
		_, err := e.s.Ack(e.ctx, core.AckParams{Claim: a.Claim()})
		e.ok("Ack in alpha", err)
		if got, _ := e.s.Get(e.ctx, core.GetParams{Queue: "beta", ID: "t1"}); got.State != core.Running {
			e.t.Errorf("acking alpha/t1 changed beta/t1: %s", formatTask(got))
		}
		for _, q := range []string{"alpha", "beta"} {
			counts, err := e.s.Counts(e.ctx, core.CountsParams{Queue: q})
			e.ok("Counts", err)
			if counts.Total() != 1 {
				e.t.Errorf("queue %s counts %+v", q, counts)
			}
		}
	}},
	{name: "RejectsEveryOperationOnAnInvalidQueueName", run: func(e *env) {
		_, c := e.running("t1")
		e.clock.Advance(time.Minute)
		for _, q := range badQueueNames {
			bc := c
			bc.Queue = q
			rc := core.ReapClaim{Queue: q, TaskID: "t1", Version: c.Token}
			ops := map[string]func() error{
				"Enqueue": func() error {
					_, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: q, EnqueueArgs: model.EnqueueArgs{ID: "x", MaxAttempts: 1}})
					return err
				},
				"Promote": func() error { _, err := e.s.Promote(e.ctx, core.PromoteParams{Queue: q}); return err },
				"Pop":     func() error { _, err := e.s.Pop(e.ctx, core.PopParams{Queue: q, Lease: lease, N: 1}); return err },
				"Extend":  func() error { _, err := e.s.Extend(e.ctx, core.ExtendParams{Claim: bc, Lease: lease}); return err },
				"Ack":     func() error { _, err := e.s.Ack(e.ctx, core.AckParams{Claim: bc}); return err },
				"Fail":    func() error { _, err := e.s.Fail(e.ctx, core.FailParams{Claim: bc}); return err },
				"Retry":   func() error { _, err := e.s.Retry(e.ctx, core.RetryParams{Claim: bc}); return err },
				"ClaimExpired": func() error {
					_, err := e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: q, ClaimTTL: lease})
					return err
				},
				"Requeue":  func() error { _, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: rc}); return err },
				"Finalize": func() error { _, err := e.s.Finalize(e.ctx, core.FinalizeParams{ReapClaim: rc}); return err },
				"RecoverExpired": func() error {
					_, err := e.s.RecoverExpired(e.ctx, core.RecoverExpiredParams{Queue: q})
					return err
				},
				"Get": func() error { _, err := e.s.Get(e.ctx, core.GetParams{Queue: q, ID: "t1"}); return err },
				"List": func() error {
					_, err := e.s.List(e.ctx, core.ListParams{Queue: q, State: core.Running, Limit: 1})
					return err
				},
				"Counts":         func() error { _, err := e.s.Counts(e.ctx, core.CountsParams{Queue: q}); return err },
				"InspectRequeue": func() error { _, err := e.s.InspectRequeue(e.ctx, core.InspectParams{Queue: q, ID: "t1"}); return err },
				"Remove":         func() error { _, err := e.s.Remove(e.ctx, core.InspectParams{Queue: q, ID: "t1"}); return err },
				"Prune": func() error {
					_, err := e.s.Prune(e.ctx, core.PruneParams{Queue: q, States: []core.State{core.Succeeded}, Before: e.now()})
					return err
				},
			}
			for _, name := range sortedKeys(ops) {
				e.rejects(core.ErrInvalidArgument, ops[name])
			}
		}
	}},
	{name: "ReturnsErrClosedAfterClose", run: func(e *env) {
		_, c := e.running("t1")
		if err := e.raw.Close(); err != nil {
			e.t.Fatalf("Close: %v", err)
		}
		ctx := context.Background()
		checks := map[string]error{}
		_, checks["Enqueue"] = e.raw.Enqueue(ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "t2", MaxAttempts: 1}})
		_, checks["Pop"] = e.raw.Pop(ctx, core.PopParams{Queue: e.q, Lease: lease, N: 1})
		_, checks["Ack"] = e.raw.Ack(ctx, core.AckParams{Claim: c})
		_, checks["Get"] = e.raw.Get(ctx, core.GetParams{Queue: e.q, ID: "t1"})
		_, checks["Counts"] = e.raw.Counts(ctx, core.CountsParams{Queue: e.q})
		for _, op := range sortedKeys(checks) {
			if !errors.Is(checks[op], core.ErrClosed) {
				e.t.Errorf("%s after Close: %v, want ErrClosed", op, checks[op])
			}
		}
	}},
}

// listed returns task id as List shows it in state s.
func (e *env) listed(s core.State, id string) core.Task {
	e.t.Helper()
	res, err := e.s.List(e.ctx, core.ListParams{Queue: e.q, State: s, Limit: model.MaxBatch})
	e.ok("List", err)
	for _, t := range res.Tasks {
		if t.ID == id {
			return t
		}
	}
	e.t.Fatalf("List(%v) does not show %s", s, id)
	return core.Task{}
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
