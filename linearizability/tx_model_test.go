package linearizability

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/model"
)

// tx records an application's transaction of ops for client from call to
// ret, with the outputs the model gives them; commit says whether it
// committed (the builder's queue then takes their effect) and row, when
// not "", the application's row it wrote, found afterwards if found.
func (b *builder) tx(client int, call, ret int64, commit bool, row string, found bool, ins ...Input) *Operation {
	saved := b.q
	start := len(b.h.Operations)
	var tx TxInput
	var outs []Output
	for _, in := range ins {
		op := b.do(client, call, ret, in)
		tx.Ops = append(tx.Ops, op.Input)
		outs = append(outs, op.Output)
	}
	b.h.Operations = b.h.Operations[:start]
	if !commit {
		b.q = saved
	}
	tx.Commit, tx.Row = commit, row
	out := Output{Tx: outs}
	if row != "" {
		out.RowFound = &found
	}
	b.h.Operations = append(b.h.Operations, Operation{Client: client, Call: call, Return: ret,
		Input: Input{Queue: "q", Op: ins[0].Op, Tx: &tx}, Output: out})
	return &b.h.Operations[len(b.h.Operations)-1]
}

// A rolled-back transaction takes no effect: the task it enqueued is
// nowhere, and the version it drew is drawn again. A store that kept the
// task, or used the version up, answers later what the model cannot.
func TestCheckerRejectsWhatARolledBackTransactionLeaves(t *testing.T) {
	// The store kept the task: a later Pop claims it.
	b := newBuilder(t)
	tx := b.tx(0, 0, 1, true, "", false, enqueue("a"))
	b.do(1, 2, 3, pop(time.Second))
	if got := b.check(); got != porcupine.Ok {
		t.Fatalf("a committed transaction then a Pop of its task: %v, want Ok", got)
	}
	tx.Input.Tx.Commit = false
	if got := b.check(); got != porcupine.Illegal {
		t.Errorf("a Pop claimed the task of a rolled-back transaction: %v, want Illegal", got)
	}

	// The store used up the version: the next task's is one too high.
	b = newBuilder(t)
	tx = b.tx(0, 0, 1, true, "", false, enqueue("a"), enqueue("b"))
	b.do(1, 2, 3, enqueue("c"))
	b.do(1, 4, 5, pop(time.Second))
	if got := b.check(); got != porcupine.Ok {
		t.Fatalf("a committed transaction, then another task: %v, want Ok", got)
	}
	tx.Input.Tx.Commit = false
	if got := b.check(); got != porcupine.Illegal {
		t.Errorf("the task after a rolled-back transaction has a version past a gap: %v, want Illegal", got)
	}

	// Rolled back right: the ID is free and the version drawn again.
	b = newBuilder(t)
	b.tx(0, 0, 1, false, "", false, enqueue("a"))
	b.do(1, 2, 3, enqueue("a"))
	b.do(1, 4, 5, pop(time.Second))
	if got := b.check(); got != porcupine.Ok {
		t.Errorf("a rolled-back transaction, then the same task enqueued: %v, want Ok", got)
	}
}

// A committed transaction's ops take effect together, and the
// application's row shares the transaction's fate.
func TestCheckerHoldsATransactionToOneFate(t *testing.T) {
	b := newBuilder(t)
	b.do(0, 0, 1, enqueue("a"))
	a := b.do(1, 2, 3, pop(time.Second)).Output.Tasks[0]
	tx := b.tx(1, 4, 10, true, "row", true, ack("a", a.ClaimToken), enqueue("b"))
	get := b.do(2, 5, 6, Input{Op: model.OpGet, ID: "a"}) // concurrent with the transaction
	if got := b.check(); got != porcupine.Ok {
		t.Fatalf("a Get of the task before the transaction's ack: %v, want Ok", got)
	}
	// A Get saw the transaction's ack, and a Get after it does not see its
	// enqueue: each is fine alone, not both.
	acked := *tx.Output.Tx[0].Task
	get.Output = Output{Task: &acked}
	b.do(2, 7, 8, Input{Op: model.OpGet, ID: "b"}).Output = Output{Err: "not_found"}
	if got := b.check(); got != porcupine.Illegal {
		t.Errorf("a transaction's ack seen before its enqueue: %v, want Illegal", got)
	}

	for _, c := range []struct {
		commit, found bool
	}{{true, false}, {false, true}} {
		b := newBuilder(t)
		b.tx(0, 0, 1, c.commit, "row", c.found, enqueue("a"))
		if got := b.check(); got != porcupine.Illegal {
			t.Errorf("commit %v, the application's row found %v: %v, want Illegal", c.commit, c.found, got)
		}
	}
}
