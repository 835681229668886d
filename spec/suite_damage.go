package spec

import (
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// damageSuite checks what follows when a stored record is damaged (the
// event model.Queue.Damage, made real by the harness's Damage hook): the
// scan that meets the record sets it aside as Quarantined and goes on with
// the sound tasks; decisions on it are ErrCorrupt and change nothing; the
// operator sees and removes it. Every step is compared with the model by
// the twin, the whole queue included.
var damageSuite = []suiteCase{
	{name: "PopSetsADamagedReadyTaskAsideAndClaimsTheNext", run: func(e *env) {
		e.enqueue("poison", priority(5))
		e.enqueue("sound")
		e.damage("poison")
		_, err := e.s.Get(e.ctx, core.GetParams{Queue: e.q, ID: "poison"})
		e.ok("Get of the damaged record", err)
		res, err := e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: lease, N: 1})
		e.ok("Pop", err)
		e.wantIDs("Pop past the damaged record", taskIDs(res.Tasks), "sound")
		_, err = e.s.InspectRequeue(e.ctx, core.InspectParams{Queue: e.q, ID: "poison"})
		e.wantErr("InspectRequeue of a quarantined record", err, core.ErrInvalidTransition)
		_, err = e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "poison", MaxAttempts: 1}})
		e.wantErr("Enqueue of a quarantined record's ID", err, core.ErrConflict)
		_, err = e.s.Remove(e.ctx, core.InspectParams{Queue: e.q, ID: "poison", Expect: 1})
		e.wantErr("Remove of a quarantined record with a version", err, core.ErrConflict)
		got, err := e.s.Remove(e.ctx, core.InspectParams{Queue: e.q, ID: "poison"})
		e.ok("Remove of a quarantined record", err)
		if got.Task.State != core.Quarantined || got.Task.Quarantine == "" {
			e.t.Errorf("Remove returned %s, want the quarantined record with its reason", formatTask(got.Task))
		}
	}},
	{name: "AckBatchsPopSetsADamagedReadyTaskAsideAndClaimsTheNext", run: func(e *env) {
		bs := e.batch()
		_, c := e.running("done")
		e.enqueue("poison", priority(5))
		e.enqueue("sound")
		e.damage("poison")
		res, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: []core.AckItem{{Claim: c}}, Pop: core.AckPop{Lease: lease, N: 1}})
		e.ok("AckBatch", err)
		e.wantItems("AckBatch", res, nil)
		e.wantIDs("AckBatch's pop past the damaged record", taskIDs(res.Claimed), "sound")
		if got := e.get("poison"); got.State != core.Quarantined {
			e.t.Errorf("poison: %s, want set aside", formatTask(got))
		}
	}},
	{name: "AckBatchAnswersADamagedItemCorruptAndAcksTheOthers", run: func(e *env) {
		// The damage is reported whatever the item's token: an item on a
		// damaged record is ErrCorrupt and leaves it as it is; the sound
		// items are decided as if it were not there.
		bs := e.batch()
		_, a := e.running("a")
		_, poison := e.running("poison")
		_, b := e.running("b")
		e.damage("poison")
		wrong := poison
		wrong.Token += 100
		res, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: []core.AckItem{{Claim: a}, {Claim: poison}, {Claim: wrong}, {Claim: b}}})
		e.ok("AckBatch with a damaged item", err)
		e.wantItems("AckBatch with a damaged item", res, nil, core.ErrCorrupt, core.ErrCorrupt, nil)
		// Named once each, so a store that acks distinct tasks together
		// meets it there too.
		_, c := e.running("c")
		res, err = bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: []core.AckItem{{Claim: wrong}, {Claim: c}}})
		e.ok("AckBatch with a damaged item", err)
		e.wantItems("AckBatch with a damaged item", res, core.ErrCorrupt, nil)
		_, d := e.running("d")
		res, err = bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: []core.AckItem{{Claim: d}, {Claim: poison}}, Pop: core.AckPop{Lease: lease, N: 1}})
		e.ok("AckBatch with a damaged item and a pop", err)
		e.wantItems("AckBatch with a damaged item and a pop", res, nil, core.ErrCorrupt)
	}},
	{name: "AnAckBatchItemOnADamagedRecordItsOwnPopSetsAsideIsCorrupt", run: func(e *env) {
		// The items are judged before the pop: the stale item meets the
		// record still damaged (ErrCorrupt), and only then does the pop
		// reach it and set it aside. A store that judges the item after
		// its pop, or reads the record again once it committed, finds it
		// set aside and answers ErrStaleClaim.
		bs := e.batch()
		_, stale := e.running("poison")
		_, err := e.s.Retry(e.ctx, core.RetryParams{Claim: stale})
		e.ok("Retry", err)
		e.enqueue("sound")
		e.damage("poison")
		res, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: []core.AckItem{{Claim: stale}}, Pop: core.AckPop{Lease: lease, N: 1}})
		e.ok("AckBatch", err)
		e.wantItems("AckBatch with a stale item on a damaged record", res, core.ErrCorrupt)
		e.wantIDs("AckBatch's pop past the damaged record", taskIDs(res.Claimed), "sound")
		if got := e.get("poison"); got.State != core.Quarantined {
			e.t.Errorf("poison: %s, want set aside", formatTask(got))
		}
	}},
	{name: "ADecisionWithAWrongTokenOnADamagedTaskIsCorrupt", run: func(e *env) {
		// The damage is reported first: the store cannot read the record,
		// so it cannot tell that the token is not the task's.
		_, rc := e.reaped("reaped")
		_, c := e.running("poison")
		e.damage("poison")
		e.damage("reaped")
		wrong := c
		wrong.Token += 100
		_, err := e.s.Ack(e.ctx, core.AckParams{Claim: wrong})
		e.wantErr("Ack with a wrong token of a damaged task", err, core.ErrCorrupt)
		_, err = e.s.Extend(e.ctx, core.ExtendParams{Claim: wrong, Lease: lease})
		e.wantErr("Extend with a wrong token of a damaged task", err, core.ErrCorrupt)
		_, err = e.s.Fail(e.ctx, core.FailParams{Claim: wrong, Message: "m"})
		e.wantErr("Fail with a wrong token of a damaged task", err, core.ErrCorrupt)
		_, err = e.s.Retry(e.ctx, core.RetryParams{Claim: wrong})
		e.wantErr("Retry with a wrong token of a damaged task", err, core.ErrCorrupt)
		stale := rc
		stale.Version += 100
		_, err = e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: stale})
		e.wantErr("Requeue with a wrong version of a damaged task", err, core.ErrCorrupt)
		_, err = e.s.Finalize(e.ctx, core.FinalizeParams{ReapClaim: stale, Message: "m"})
		e.wantErr("Finalize with a wrong version of a damaged task", err, core.ErrCorrupt)
	}},
	{name: "ADamagedTaskSetAsideNoLongerCountsAgainstTheCapacity", capacity: 2, run: func(e *env) {
		// Pending until a scan sets it aside, then Quarantined: no longer
		// pending, so its place is free again.
		e.enqueue("poison")
		e.damage("poison")
		_, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1}})
		e.ok("Enqueue beside the damaged pending task", err)
		_, err = e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "b", MaxAttempts: 1}})
		e.wantErr("Enqueue past the capacity, the damaged task pending", err, core.ErrQueueFull)
		res, err := e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: lease, N: 1})
		e.ok("Pop", err)
		e.wantIDs("Pop past the damaged record", taskIDs(res.Tasks), "a")
		_, err = e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "b", MaxAttempts: 1}})
		e.ok("Enqueue once the damaged task is set aside", err)
		_, err = e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "c", MaxAttempts: 1}})
		e.wantErr("Enqueue past the capacity, a running and b ready", err, core.ErrQueueFull)
	}},
	{name: "AnOperatorsActionOnADamagedTaskIsCorruptWhateverItsVersionOrState", run: func(e *env) {
		// The damage is reported before the expected version and the
		// state are judged: neither can be read from the record. A Ready
		// task (InspectRequeue is illegal from Ready) and a Running one
		// (Cancel is legal), each named at a version it is not at.
		_, c := e.running("poison-run")
		e.enqueue("poison-ready")
		e.damage("poison-ready")
		e.damage("poison-run")
		_, err := e.s.InspectRequeue(e.ctx, core.InspectParams{Queue: e.q, ID: "poison-ready"})
		e.wantErr("InspectRequeue of a damaged Ready task", err, core.ErrCorrupt)
		_, err = e.s.InspectRequeue(e.ctx, core.InspectParams{Queue: e.q, ID: "poison-ready", Expect: 100})
		e.wantErr("InspectRequeue of a damaged task at a wrong version", err, core.ErrCorrupt)
		_, err = e.s.Cancel(e.ctx, core.InspectParams{Queue: e.q, ID: "poison-ready", Expect: 100})
		e.wantErr("Cancel of a damaged Ready task at a wrong version", err, core.ErrCorrupt)
		_, err = e.s.Cancel(e.ctx, core.InspectParams{Queue: e.q, ID: "poison-run", Expect: c.Token + 100})
		e.wantErr("Cancel of a damaged Running task at a wrong version", err, core.ErrCorrupt)
		_, err = e.s.Cancel(e.ctx, core.InspectParams{Queue: e.q, ID: "poison-run"})
		e.wantErr("Cancel of a damaged Running task", err, core.ErrCorrupt)
	}},
	{name: "DecisionsOnADamagedRunningTaskAreCorruptUntilTheBrokerSetsItAside", run: func(e *env) {
		_, c := e.running("poison")
		_, sound := e.running("sound")
		e.damage("poison")
		_, err := e.s.Ack(e.ctx, core.AckParams{Claim: c})
		e.wantErr("Ack of a damaged task", err, core.ErrCorrupt)
		_, err = e.s.Extend(e.ctx, core.ExtendParams{Claim: c, Lease: lease})
		e.wantErr("Extend of a damaged task", err, core.ErrCorrupt)
		_, err = e.s.Fail(e.ctx, core.FailParams{Claim: c, Message: "m"})
		e.wantErr("Fail of a damaged task", err, core.ErrCorrupt)
		_, err = e.s.Retry(e.ctx, core.RetryParams{Claim: c})
		e.wantErr("Retry of a damaged task", err, core.ErrCorrupt)
		_, err = e.s.InspectRequeue(e.ctx, core.InspectParams{Queue: e.q, ID: "poison"})
		e.wantErr("InspectRequeue of a damaged task", err, core.ErrCorrupt)
		e.clock.Advance(2 * lease)
		res, err := e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: lease})
		e.ok("ClaimExpired", err)
		if len(res.Claims) != 1 || res.Claims[0].TaskID != "sound" {
			e.t.Fatalf("ClaimExpired claimed %v, want the sound task only", reapIDs(res.Claims))
		}
		_, err = e.s.Ack(e.ctx, core.AckParams{Claim: c})
		e.wantErr("Ack of a quarantined record", err, core.ErrStaleClaim)
		_, err = e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: core.ReapClaim{Queue: e.q, TaskID: "poison", Version: c.Token}})
		e.wantErr("Requeue of a quarantined record", err, core.ErrStaleClaim)
		_, err = e.s.Ack(e.ctx, core.AckParams{Claim: sound})
		e.ok("the sound task's late Ack", err)
	}},
	{name: "RecoverExpiredAndPromoteSetDamagedTasksAside", run: func(e *env) {
		e.running("poison-run")
		e.running("sound-run")
		e.enqueue("poison-sched", runAfter(e.now().Add(time.Second)))
		e.enqueue("sound-sched", runAfter(e.now().Add(time.Second)))
		e.damage("poison-run")
		e.damage("poison-sched")
		e.clock.Advance(2 * lease)
		res, err := e.s.RecoverExpired(e.ctx, core.RecoverExpiredParams{Queue: e.q, Limit: 1})
		e.ok("RecoverExpired", err)
		e.wantIDs("RecoverExpired", taskIDs(res.Tasks), "sound-run")
		ids, err := e.s.Promote(e.ctx, core.PromoteParams{Queue: e.q, Limit: 1})
		e.ok("Promote", err)
		e.wantIDs("Promote", ids.IDs, "sound-sched")
		list, err := e.s.List(e.ctx, core.ListParams{Queue: e.q, State: core.Quarantined, Limit: 10})
		e.ok("List(quarantined)", err)
		e.wantIDs("List(quarantined)", taskIDs(list.Tasks), "poison-run", "poison-sched")
	}},
	{name: "DamagedFinishedTasksArePrunedOrRemoved", run: func(e *env) {
		_, a := e.running("a")
		_, b := e.running("b")
		_, err := e.s.Ack(e.ctx, core.AckParams{Claim: a})
		e.ok("Ack", err)
		_, err = e.s.Fail(e.ctx, core.FailParams{Claim: b, Message: "m"})
		e.ok("Fail", err)
		e.damage("a")
		e.damage("b")
		_, err = e.s.Remove(e.ctx, core.InspectParams{Queue: e.q, ID: "a", Expect: a.Token + 1})
		e.wantErr("Remove of a damaged task with a version", err, core.ErrConflict)
		_, err = e.s.Remove(e.ctx, core.InspectParams{Queue: e.q, ID: "a"})
		e.ok("Remove of a damaged task", err)
		e.clock.Advance(time.Second)
		ids, err := e.s.Prune(e.ctx, core.PruneParams{Queue: e.q, States: []core.State{core.Failed}, Before: e.now()})
		e.ok("Prune", err)
		e.wantIDs("Prune", ids.IDs, "b")
	}},
}
