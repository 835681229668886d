package spec

import (
	"slices"

	"github.com/leasehold/leasehold/model"
)

// TxScenarios returns the named scenarios of the application's own
// transactions, in the order SPEC.md lists them. Run plays them, on the
// store under test and on the model, on harnesses that give a TxHarness;
// those that ack in a transaction only where TxHarness.Ack is set.
func TxScenarios() []Scenario { return cloneScenarios(txScenarios) }

// needsTxAck reports whether the scenario acks inside a transaction.
func (sc Scenario) needsTxAck() bool {
	return slices.ContainsFunc(sc.Steps, func(st Step) bool { return st.InTx && st.Op == model.OpAck })
}

const transactional = "transactions: an application that enqueues a task, or acks one, inside its own database transaction"

var txScenarios = []Scenario{
	{
		Name:    "EnqueueTxCommitsWithTheApplication",
		Origin:  transactional,
		Summary: "A producer enqueues a task inside the application's transaction: until the commit nobody sees the task or the application's row; at the commit both are there, and the task runs with the versions and tokens the model gives it.",
		Steps: []Step{
			enqueue("before"),
			begin(),
			writeRow("o1"),
			enqueue("t1").inTx().then("t1 gone", "row o1 absent", "counts ready=1"),
			commit().then("t1 ready", "row o1 present", "counts ready=2"),
			pop("W", "before", "t1").then("t1 running claimed-by=W:t1"),
			ack("W:t1", "done").then("t1 succeeded result=done"),
		},
	},
	{
		Name:    "EnqueueTxRolledBackLeavesNoTaskAndNoGap",
		Origin:  transactional,
		Summary: "The application's transaction enqueues two tasks and rolls back: neither task nor the application's row is left, the IDs are free, and every version and token handed out afterwards is the model's, which never saw the rolled-back enqueues: no gap, and no version given twice.",
		Steps: []Step{
			enqueue("before"),
			begin(),
			writeRow("o1"),
			enqueue("t1").inTx(),
			enqueue("t2").delay(minute).inTx(),
			rollback().then("t1 gone", "t2 gone", "row o1 absent", "counts ready=1 scheduled=0"),
			enqueue("t1").then("t1 ready attempt=0"),
			pop("W", "before", "t1"),
			ack("W:t1", "done").then("t1 succeeded result=done"),
			enqueue("t2").then("t2 ready"),
			pop("W2", "t2").then("t2 running claimed-by=W2"),
		},
	},
	{
		Name:    "EnqueueBatchTxCommitsAndRollsBack",
		Origin:  transactional,
		Summary: "A batch enqueued inside the application's transaction is answered item by item as EnqueueBatch is (an ID taken, or given twice, is a conflict); its tasks are gone when the transaction rolls back, and there when it commits, in the order of their versions.",
		Steps: []Step{
			enqueue("x"),
			begin(),
			writeRow("o1"),
			enqueueBatch("a", "b", "a", "x").inTx().items(nil, nil, model.ErrConflict, model.ErrConflict).then("a gone", "b gone"),
			rollback().then("a gone", "b gone", "row o1 absent", "counts ready=1"),
			begin(),
			writeRow("o2"),
			enqueueBatch("b", "a").inTx().then("a gone", "row o2 absent"),
			commit().then("a ready", "b ready", "row o2 present", "counts ready=3"),
			pop("W", "x", "b", "a"),
		},
	},
	{
		Name:    "UniqueKeyTakenInARolledBackTxIsFree",
		Origin:  transactional,
		Summary: "A task enqueued under a unique key inside the application's transaction holds the key within it (a second enqueue of the key there is a duplicate naming it); once the transaction rolls back the key is free, and the next task to take it holds it.",
		Steps: []Step{
			begin(),
			writeRow("o1"),
			enqueue("t1").key("k").inTx(),
			enqueue("t2").key("k").inTx().fails(duplicate("k", "t1")),
			rollback().then("t1 gone", "t2 gone", "row o1 absent"),
			enqueue("t2").key("k").then("t2 ready"),
			enqueue("t3").key("k").fails(duplicate("k", "t2")),
			pop("W", "t2"),
			ack("W", "done"),
			enqueue("t3").key("k").then("t3 ready"),
		},
	},
	{
		Name:    "AckTxCommitsWithTheApplication",
		Origin:  transactional,
		Summary: "A worker enqueues the next task and acks its claim inside the application's transaction: until the commit the task is Running under the claim, the next task and the row absent; at the commit the task is Succeeded with its result, and the next task and the row are there.",
		Steps: []Step{
			enqueue("t1"),
			pop("W", "t1"),
			begin(),
			writeRow("o1"),
			enqueue("t2").inTx(),
			ack("W", "done").inTx().then("t1 running claimed-by=W", "t2 gone", "row o1 absent"),
			commit().then("t1 succeeded result=done", "t2 ready", "row o1 present"),
			ack("W", "again").fails(invalidTransition(model.OpAck, model.Succeeded)),
			pop("W2", "t2"),
		},
	},
	{
		Name:    "AckTxRolledBackKeepsTheClaim",
		Origin:  transactional,
		Summary: "A worker's ack inside the application's transaction, rolled back, is no ack at all: the task is still Running under the worker's claim, which extends and acks it afterwards.",
		Steps: []Step{
			enqueue("t1"),
			pop("W", "t1"),
			begin(),
			writeRow("o1"),
			ack("W", "done").inTx(),
			rollback().then("t1 running claimed-by=W result=", "row o1 absent"),
			extend("W").after(10 * second).then("t1 running claimed-by=W"),
			ack("W", "later").then("t1 succeeded result=later"),
		},
	},
	{
		Name:    "StaleAckTxIsRefusedInsideTheTransaction",
		Origin:  transactional,
		Summary: "A worker's lease lapsed and a broker requeued its task, which another worker claimed; the first worker's AckTx, in the application's transaction that recorded its work and enqueued a follow-up, is refused as a stale claim; the application rolls back, so neither its row nor the follow-up exists, and the task is the second worker's, as the model says.",
		Steps: []Step{
			enqueue("t1"),
			pop("A", "t1"),
			claimExpired("R", "t1").after(30 * second),
			requeue("R").then("t1 ready"),
			pop("B", "t1"),
			begin(),
			writeRow("o1"),
			enqueue("next").inTx(),
			ack("A", "done").inTx().fails(model.ErrStaleClaim).then("t1 running claimed-by=B", "next gone"),
			rollback().then("row o1 absent", "next gone", "t1 running claimed-by=B errors=1"),
			ack("B", "done").then("t1 succeeded result=done"),
			enqueue("next").then("next ready"),
		},
	},
}
