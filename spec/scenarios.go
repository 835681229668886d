package spec

import (
	"slices"
	"time"

	"github.com/leasehold/leasehold/model"
)

// Scenarios returns the named scenarios of the specification, in the order
// SPEC.md lists them. Each comes from a race one of the seed reports
// describes; Run plays every one on the store under test and on the model.
func Scenarios() []Scenario { return cloneScenarios(scenarios) }

// cloneScenarios returns copies of scs that share no slice with them.
func cloneScenarios(scs []Scenario) []Scenario {
	out := make([]Scenario, len(scs))
	for i, sc := range scs {
		sc.Steps = slices.Clone(sc.Steps)
		for j := range sc.Steps {
			sc.Steps[j].Got = slices.Clone(sc.Steps[j].Got)
			sc.Steps[j].Then = slices.Clone(sc.Steps[j].Then)
			sc.Steps[j].States = slices.Clone(sc.Steps[j].States)
			sc.Steps[j].Batch = slices.Clone(sc.Steps[j].Batch)
			sc.Steps[j].Items = slices.Clone(sc.Steps[j].Items)
		}
		out[i] = sc
	}
	return out
}

const (
	seedRedis  = "seed 000: the Redis-backed queue whose reaper decisions were not fenced"
	seedSQLite = "seed 001: the SQLite-backed queue whose acknowledgements had no claim identity"
	periodic   = "periodic tasks: schedulers on several instances that each enqueue the same occurrence"
)

// tick is the ID of an occurrence of schedule "tick" (model.OccurrenceID).
var tick = model.OccurrenceID("tick", time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC))

var (
	second = time.Second
	minute = time.Minute
)

var scenarios = []Scenario{
	{
		Name:    "WorkerAckRace",
		Origin:  seedRedis,
		Summary: "The lease lapses and a broker claims the task, then the slow worker acks: the ack wins, the broker's requeue is stale, and the task stays Succeeded with its result instead of running again.",
		Steps: []Step{
			enqueue("t1"),
			pop("A", "t1"),
			claimExpired("R", "t1").after(30 * second).then("t1 running claimed-by=A version=R"),
			ack("A", "done").then("t1 succeeded result=done errors=0"),
			requeue("R").fails(model.ErrStaleClaim).then("t1 succeeded result=done errors=0"),
			finalize("R").fails(model.ErrStaleClaim).then("t1 succeeded result=done errors=0"),
			claimExpired("R2").after(minute),
			promote(),
			pop("B").then("t1 succeeded result=done attempt=1", "counts succeeded=1 ready=0 scheduled=0 running=0"),
		},
	},
	{
		Name:    "ClaimTakeover",
		Origin:  seedRedis,
		Summary: "Broker A claims an expired task and stalls past the claim TTL; broker B claims it again and requeues it; A's decision is stale, and the task is scheduled once.",
		Steps: []Step{
			enqueue("t1"),
			pop("W", "t1"),
			claimExpired("A", "t1").after(30 * second),
			claimExpired("B", "t1").after(10 * second).then("t1 running version=B claimed-by=W"),
			requeue("B").delay(minute).then("t1 scheduled unclaimed errors=1 leaselosses=1"),
			get("t1", "S"),
			requeue("A").fails(model.ErrStaleClaim).then("t1 scheduled version=S errors=1"),
			finalize("A").fails(model.ErrStaleClaim).then("t1 scheduled version=S errors=1"),
			promote("t1").after(minute),
			pop("W2", "t1").then("t1 running attempt=2 errors=1"),
			pop("W3"),
		},
	},
	{
		Name:    "InspectorRemoveRace",
		Origin:  seedRedis,
		Summary: "A broker claims an expired task, then the operator removes it: the broker's decision is stale and the removal stands.",
		Steps: []Step{
			enqueue("t1"),
			pop("W", "t1"),
			claimExpired("R", "t1").after(30 * second),
			remove("t1").then("t1 gone"),
			requeue("R").fails(model.ErrStaleClaim).then("t1 gone"),
			finalize("R").fails(model.ErrStaleClaim).then("t1 gone"),
			ack("W", "late").fails(model.ErrStaleClaim).then("t1 gone", "counts scheduled=0 ready=0 running=0 succeeded=0 failed=0"),
		},
	},
	{
		Name:    "InspectorRequeueRace",
		Origin:  seedRedis,
		Summary: "A broker claims an expired task, then the operator requeues it: the broker's decision is stale and the operator's requeue stands.",
		Steps: []Step{
			enqueue("t1"),
			pop("W", "t1"),
			claimExpired("R", "t1").after(30 * second),
			inspectRequeue("t1").then("t1 ready unclaimed attempt=0 errors=0"),
			get("t1", "S"),
			requeue("R").delay(minute).fails(model.ErrStaleClaim).then("t1 ready version=S"),
			finalize("R").fails(model.ErrStaleClaim).then("t1 ready version=S"),
			ack("W", "late").fails(model.ErrStaleClaim).then("t1 ready version=S"),
			pop("W2", "t1").then("t1 running attempt=1"),
		},
	},
	{
		Name:    "MatchingClaimAck",
		Origin:  seedRedis,
		Summary: "Nobody intervenes between a broker's claim and its acknowledgement (Finalize): the decision applies, the task is Failed with the lease-expired error, and the superseded worker's late ack is refused.",
		Steps: []Step{
			enqueue("t1"),
			pop("W", "t1"),
			claimExpired("R", "t1").after(30 * second),
			finalize("R").after(second).then("t1 failed claimed-by=W errors=1 leaselosses=1"),
			ack("W", "late").fails(invalidTransition(model.OpAck, model.Failed)).then("t1 failed result="),
			finalize("R").fails(model.ErrStaleClaim),
		},
	},
	{
		Name:    "MatchingClaimRequeue",
		Origin:  seedRedis,
		Summary: "Nobody intervenes between a broker's claim and its requeue: the requeue applies, the old worker's claim is void, and the next worker's claim completes the task.",
		Steps: []Step{
			enqueue("t1"),
			pop("W", "t1"),
			claimExpired("R", "t1").after(30 * second),
			requeue("R").text("worker vanished").after(second).then("t1 ready unclaimed errors=1 leaselosses=1"),
			ack("W", "late").fails(model.ErrStaleClaim).then("t1 ready"),
			pop("W2", "t1").then("t1 running attempt=2"),
			ack("W2", "done").then("t1 succeeded result=done"),
		},
	},
	{
		Name:    "StaleWorkerAck",
		Origin:  seedSQLite,
		Summary: "Worker A pops, recovery returns the task to the queue, worker B pops it: A's ack is stale, B's claim is untouched, and B's ack succeeds.",
		Steps: []Step{
			enqueue("t1"),
			pop("A", "t1"),
			recoverExpired("t1").after(30 * second).then("t1 ready unclaimed errors=1 leaselosses=1"),
			pop("B", "t1").then("t1 running attempt=2 claimed-by=B"),
			ack("A", "stale result").fails(model.ErrStaleClaim).then("t1 running claimed-by=B version=B"),
			extend("A").fails(model.ErrStaleClaim).then("t1 running version=B"),
			ack("B", "done").then("t1 succeeded result=done"),
			ack("A", "stale result").fails(model.ErrStaleClaim).then("t1 succeeded result=done"),
		},
	},
	{
		Name:    "StaleWorkerFail",
		Origin:  seedSQLite,
		Summary: "Worker A pops, recovery returns the task to the queue, worker B pops it: A's fail (or retry) is stale, B's claim is untouched, and B's ack succeeds.",
		Steps: []Step{
			enqueue("t1"),
			pop("A", "t1"),
			recoverExpired("t1").after(30 * second),
			pop("B", "t1"),
			fail("A", "boom").fails(model.ErrStaleClaim).then("t1 running claimed-by=B version=B errors=1"),
			retry("A", "boom").fails(model.ErrStaleClaim).then("t1 running version=B errors=1"),
			ack("B", "done").then("t1 succeeded result=done errors=1"),
		},
	},
	{
		Name:    "InvalidTransitions",
		Origin:  seedSQLite,
		Summary: "Every operation that is illegal from a task's state is refused with the documented error (a stale claim where no claim can hold the task, an invalid transition naming the op and the state otherwise) and changes nothing.",
		Steps: []Step{
			enqueue("k"),
			pop("K", "k"),
			ack("K", "done"),
			enqueue("f"),
			pop("F", "f"),
			fail("F", "boom"),
			enqueue("u"),
			pop("U", "u"),
			enqueue("r"),
			enqueue("s").delay(time.Hour),
			get("s", "S"), get("r", "R"), get("k", "K2"), get("f", "F2"),
			// Scheduled: no claim can hold it; the broker's version reaches the state check.
			ack("@s", "x").fails(model.ErrStaleClaim),
			requeue("@s").fails(invalidTransition(model.OpRequeue, model.Scheduled)),
			finalize("@s").fails(invalidTransition(model.OpFinalize, model.Scheduled)),
			prune([]model.State{model.Scheduled}).fails(model.ErrInvalidArgument),
			promote().then("s scheduled version=S"),
			// Ready.
			ack("@r", "x").fails(model.ErrStaleClaim),
			requeue("@r").fails(invalidTransition(model.OpRequeue, model.Ready)),
			finalize("@r").fails(invalidTransition(model.OpFinalize, model.Ready)),
			inspectRequeue("r").fails(invalidTransition(model.OpInspectRequeue, model.Ready)),
			prune([]model.State{model.Ready}).fails(model.ErrInvalidArgument).then("r ready version=R"),
			// Running: only pruning is refused.
			prune([]model.State{model.Running}).fails(model.ErrInvalidArgument).then("u running claimed-by=U"),
			// Succeeded: the claim that acked still names the task, but the state refuses.
			extend("K").fails(invalidTransition(model.OpExtend, model.Succeeded)),
			ack("K", "again").fails(invalidTransition(model.OpAck, model.Succeeded)),
			fail("K", "late").fails(invalidTransition(model.OpFail, model.Succeeded)),
			retry("K", "late").fails(invalidTransition(model.OpRetry, model.Succeeded)),
			requeue("@k").fails(invalidTransition(model.OpRequeue, model.Succeeded)),
			finalize("@k").fails(invalidTransition(model.OpFinalize, model.Succeeded)).then("k succeeded result=done version=K2"),
			// Failed.
			extend("F").fails(invalidTransition(model.OpExtend, model.Failed)),
			ack("F", "late").fails(invalidTransition(model.OpAck, model.Failed)),
			fail("F", "again").fails(invalidTransition(model.OpFail, model.Failed)),
			retry("F", "late").fails(invalidTransition(model.OpRetry, model.Failed)),
			requeue("@f").fails(invalidTransition(model.OpRequeue, model.Failed)),
			finalize("@f").fails(invalidTransition(model.OpFinalize, model.Failed)).then("f failed errors=1 version=F2"),
			// An existing ID cannot be enqueued again, whatever its state.
			enqueue("s").fails(model.ErrConflict),
			enqueue("r").fails(model.ErrConflict),
			enqueue("u").fails(model.ErrConflict),
			enqueue("k").fails(model.ErrConflict),
			enqueue("f").fails(model.ErrConflict).then("counts scheduled=1 ready=1 running=1 succeeded=1 failed=1"),
		},
	},
	{
		Name:    "RetryClearsTimestamps",
		Origin:  seedSQLite,
		Summary: "Every way back to Ready or Scheduled (worker retry, broker requeue, recovery, operator requeue) clears the claim token, ClaimedAt, Deadline and FinishedAt, so no obsolete lock time survives.",
		Steps: []Step{
			enqueue("t1").attempts(10),
			pop("A", "t1"),
			retry("A", "flaky").after(second).then("t1 ready unclaimed errors=1 leaselosses=0"),
			pop("B", "t1"),
			retry("B", "flaky").delay(minute).after(second).then("t1 scheduled unclaimed errors=2"),
			promote("t1").after(minute).then("t1 ready unclaimed"),
			pop("C", "t1"),
			claimExpired("R", "t1").after(30 * second),
			requeue("R").then("t1 ready unclaimed errors=3 leaselosses=1"),
			pop("D", "t1").then("t1 running attempt=4"),
			recoverExpired("t1").delay(minute).after(30 * second).then("t1 scheduled unclaimed errors=4 leaselosses=2"),
			promote("t1").after(minute),
			pop("E", "t1"),
			ack("E", "done").then("t1 succeeded result=done attempt=5"),
			inspectRequeue("t1").then("t1 ready unclaimed attempt=0 result= errors=4"),
			pop("G", "t1"),
			fail("G", "fatal").then("t1 failed errors=5"),
			inspectRequeue("t1").then("t1 ready unclaimed attempt=0 errors=5"),
		},
	},
	{
		Name:    "AtomicRecovery",
		Origin:  seedSQLite,
		Summary: "RecoverExpired decides every expired task in one step, in order of deadline then ID: tasks with attempts left return to the queue, exhausted ones fail, live leases are untouched, and a second call finds nothing to recover.",
		Steps: []Step{
			enqueue("b").attempts(3),
			enqueue("a").attempts(1),
			enqueue("c").attempts(3),
			pop("B", "b"),
			pop("A", "a"),
			pop("C", "c").after(10 * second),
			recoverExpired().after(19*second).then("a running", "b running"),
			recoverExpired("a", "b").delay(5*second).after(second).then(
				"a failed leaselosses=1", "b scheduled unclaimed leaselosses=1", "c running claimed-by=C version=C"),
			recoverExpired(),
			ack("A", "late").fails(invalidTransition(model.OpAck, model.Failed)),
			ack("B", "late").fails(model.ErrStaleClaim),
			ack("C", "done").then("c succeeded", "counts scheduled=1 running=0 succeeded=1 failed=1"),
		},
	},
	{
		Name:    "PeriodicOccurrenceOnce",
		Origin:  periodic,
		Summary: "Two schedulers enqueue the same occurrence under its ID (the schedule's name and the occurrence time): the second is refused as a conflict, and so is a late one after the occurrence ran, for as long as its task is kept; once it is pruned the ID is free again.",
		Steps: []Step{
			enqueue(tick).then(tick+" ready", "counts ready=1"),
			enqueue(tick).fails(model.ErrConflict).then(tick+" ready", "counts ready=1"),
			pop("W", tick),
			ack("W", "done"),
			enqueue(tick).fails(model.ErrConflict).after(minute).then(tick+" succeeded result=done", "counts ready=0 succeeded=1"),
			prune([]model.State{model.Succeeded}, tick).after(minute),
			enqueue(tick).then(tick+" ready attempt=0", "counts ready=1 succeeded=0"),
		},
	},
	{
		Name:    "PauseStopsPops",
		Summary: "The operator pauses a queue while a worker holds one of its tasks: from then on no Pop claims anything, while the held claim is extended and acked as before and producers and the mover go on; after the Resume the next Pop claims the first task in line.",
		Steps: []Step{
			enqueue("t1"),
			enqueue("t2"),
			pop("A", "t1"),
			pause().then("counts paused ready=1 running=1"),
			pop("B").then("t2 ready", "counts paused ready=1"),
			extend("A").after(10 * second).then("t1 running claimed-by=A"),
			ack("A", "done").then("t1 succeeded result=done"),
			enqueue("t3").delay(minute),
			promote("t3").after(minute),
			pop("B").then("t2 ready", "t3 ready", "counts paused ready=2 succeeded=1"),
			resume().then("counts unpaused ready=2"),
			pop("C", "t2").then("t2 running claimed-by=C attempt=1", "t3 ready"),
		},
	},
	{
		Name:    "PausedQueueReaps",
		Summary: "A task's lease lapses while its queue is paused: brokers still claim and decide it, and it waits Ready until the Resume; a queue paused before its first task holds its tasks the same way, and Pause and Resume may be repeated.",
		Steps: []Step{
			enqueue("t1"),
			pop("W", "t1"),
			pause(),
			pause().then("counts paused running=1"),
			claimExpired("R", "t1").after(30 * second).then("t1 running version=R"),
			requeue("R").then("t1 ready unclaimed errors=1 leaselosses=1"),
			pop("W2").then("t1 ready"),
			{Op: model.OpPause, Queue: "fresh"},
			{Op: model.OpEnqueue, Queue: "fresh", ID: "f1", Then: []string{"fresh/counts paused ready=1"}},
			{Op: model.OpPop, Queue: "fresh", Label: "F", Lease: scenarioLease, N: 1, Then: []string{"fresh/f1 ready"}},
			resume(),
			resume().then("counts unpaused ready=1"),
			pop("W3", "t1").then("t1 running attempt=2 errors=1"),
			{Op: model.OpPop, Queue: "fresh", Label: "F", Lease: scenarioLease, N: 1, Then: []string{"fresh/f1 ready"}},
			{Op: model.OpResume, Queue: "fresh"},
			{Op: model.OpPop, Queue: "fresh", Label: "F", Lease: scenarioLease, N: 1, Got: []string{"f1"}, Then: []string{"fresh/f1 running claimed-by=F"}},
		},
	},
	{
		Name:    "CancelRunningTask",
		Summary: "The operator cancels a task a worker holds: it is failed at once; the worker's heartbeat and its ack are refused as cancelled, a broker's claim from before is stale, and nobody runs it again until the operator requeues it.",
		Steps: []Step{
			enqueue("t1"),
			pop("W", "t1"),
			claimExpired("R", "t1").after(30 * second),
			cancel("t1").then("t1 failed cancelled errors=1 claimed-by=W", "counts failed=1 running=0"),
			extend("W").fails(model.ErrCancelled).then("t1 failed cancelled errors=1"),
			ack("W", "done").fails(model.ErrCancelled).then("t1 failed cancelled result="),
			retry("W", "boom").fails(model.ErrCancelled),
			requeue("R").fails(model.ErrStaleClaim).then("t1 failed cancelled errors=1"),
			cancel("t1").fails(invalidTransition(model.OpCancel, model.Failed)),
			recoverExpired().after(minute),
			pop("W2").then("t1 failed cancelled"),
			inspectRequeue("t1").then("t1 ready attempt=0 errors=1"),
			pop("W3", "t1").then("t1 running attempt=1"),
			ack("W3", "ok").then("t1 succeeded result=ok"),
		},
	},
	{
		Name:    "CancelPendingTasks",
		Summary: "The operator cancels a scheduled and a ready task: each is failed at once and never becomes ready or runs; a cancel that names a version the task has left is a conflict and changes nothing.",
		Steps: []Step{
			enqueue("t1").delay(minute),
			enqueue("t2"),
			get("t2", "G"),
			enqueue("t3"),
			cancel("t1").then("t1 failed cancelled errors=1"),
			{Op: model.OpCancel, ID: "t2", Expect: "G", Then: []string{"t2 failed cancelled"}},
			{Op: model.OpCancel, ID: "t3", Expect: "G", Want: model.ErrConflict, Then: []string{"t3 ready errors=0"}},
			promote().after(2 * minute).then("t1 failed cancelled"),
			pop("W", "t3").then("counts failed=2 running=1 ready=0 scheduled=0"),
		},
	},
	{
		Name:    "UniqueKeyWhilePending",
		Summary: "A task enqueued with a unique key holds it while it is pending: a second task with the key is refused, naming the holder, and nothing is enqueued; the holder's failure, its cancellation or its removal frees the key for the next task; a task an operator requeues after another took its key holds nothing.",
		Steps: []Step{
			enqueue("t1").key("k"),
			enqueue("t2").key("k").fails(duplicate("k", "t1")).then("t2 gone", "counts ready=1"),
			enqueue("t3").key("other"),
			pop("W", "t1"),
			enqueue("t2").key("k").fails(duplicate("k", "t1")).then("t2 gone"),
			fail("W", "boom").then("t1 failed"),
			enqueue("t2").key("k").then("t2 ready"),
			enqueue("t3").key("new").fails(model.ErrConflict),
			cancel("t2"),
			enqueue("t4").key("k"),
			remove("t4"),
			enqueue("t5").key("k"),
			inspectRequeue("t1").then("t1 ready"),
			enqueue("t6").key("k").fails(duplicate("k", "t5")).then("t6 gone"),
			remove("t5"),
			enqueue("t6").key("k").then("t6 ready"),
			enqueue("t7").key("k").fails(duplicate("k", "t6")),
		},
	},
	{
		Name:    "UniqueKeyForPeriod",
		Summary: "A task enqueued with a unique key held for a period holds it from its enqueue time on the store's clock for that long, whatever its state: after it succeeds the key is still held until the period ends; a pruned holder frees it at once.",
		Steps: []Step{
			enqueue("t1").keyFor("k", minute),
			pop("W", "t1"),
			ack("W", "done").then("t1 succeeded"),
			enqueue("t2").key("k").after(30 * second).fails(duplicate("k", "t1")).then("t2 gone"),
			enqueue("t2").key("k").after(30 * second).then("t2 ready"),
			enqueue("t3").keyFor("p", time.Hour),
			cancel("t3"),
			enqueue("t4").key("p").after(second).fails(duplicate("p", "t3")),
			prune([]model.State{model.Failed}, "t3"),
			enqueue("t4").key("p").then("t4 ready"),
		},
	},
}
