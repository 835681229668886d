package linearizability

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/model"
)

// itemOutputs is what a store records for a batch's items.
func itemOutputs(items []model.ItemResult) []ItemOutput {
	if items == nil {
		return nil
	}
	out := make([]ItemOutput, len(items))
	for i, it := range items {
		if it.Err != nil {
			var o Output
			o.setError(it.Err)
			out[i] = ItemOutput{Err: o.Err, ErrOp: o.ErrOp, ErrState: o.ErrState, ErrHolder: o.ErrHolder}
			continue
		}
		t := it.Task
		out[i].Task = &t
	}
	return out
}

func ackBatch(queue string, claims ...model.Task) Input {
	in := Input{Op: model.OpAckBatch}
	for _, t := range claims {
		in.Acks = append(in.Acks, AckRef{ClaimRef: ClaimRef{TaskID: t.ID, Token: t.ClaimToken}, Queue: queue, Result: []byte("ok")})
	}
	return in
}

func TestBatchOpsStepItemByItem(t *testing.T) {
	b := newBuilder(t)
	enq := b.do(0, 0, 1, Input{Op: model.OpEnqueueBatch, Batch: []model.EnqueueArgs{
		{ID: "a", MaxAttempts: 1}, {ID: "a", MaxAttempts: 1}, {ID: "b", MaxAttempts: 1},
	}})
	if len(enq.Output.Items) != 3 || enq.Output.Items[1].Err != "conflict" {
		t.Fatalf("enqueue batch: %+v", enq.Output)
	}
	p := b.do(0, 2, 3, Input{Op: model.OpPop, Lease: 1e9, Limit: 2})
	a, bb := p.Output.Tasks[0], p.Output.Tasks[1]
	ack := b.do(1, 4, 5, ackBatch("q", a, bb, a))
	if it := ack.Output.Items; len(it) != 3 || it[0].Task == nil || it[1].Task == nil || it[2].ErrOp != model.OpAck || it[2].ErrState != model.Succeeded {
		t.Fatalf("ack batch: %+v", ack.Output)
	}
	if r := b.check(); r != porcupine.Ok {
		t.Fatalf("a history of batches the model answered: %v", r)
	}
	// The duplicate item claimed to succeed: impossible.
	dup := *ack.Output.Items[0].Task
	ack.Output.Items[2] = ItemOutput{Task: &dup}
	if r := b.check(); r != porcupine.Illegal {
		t.Fatalf("a duplicate ack answered twice: %v, want illegal", r)
	}
}

func TestAckBatchRacingASingleAckLinearizesOneWinner(t *testing.T) {
	b := newBuilder(t)
	b.do(0, 0, 1, enqueue("a"))
	p := b.do(0, 2, 3, pop(1e9))
	claim := p.Output.Tasks[0]
	single := b.do(1, 4, 10, ack("a", claim.ClaimToken))
	batch := b.do(2, 5, 9, ackBatch("q", claim))
	// As recorded, the single ack won and the batch's item was refused; the
	// two overlap, so that is a legal history.
	if batch.Output.Items[0].Err != "invalid_transition" {
		t.Fatalf("batch item: %+v", batch.Output.Items[0])
	}
	if r := b.check(); r != porcupine.Ok {
		t.Fatalf("one winner: %v", r)
	}
	// Both winning is not.
	won := *single.Output.Task
	batch.Output.Items[0] = ItemOutput{Task: &won}
	if r := b.check(); r != porcupine.Illegal {
		t.Fatalf("two winners: %v, want illegal", r)
	}
	// A batch naming a claim of another queue is refused as a whole.
	b2 := newBuilder(t)
	b2.do(0, 0, 1, enqueue("a"))
	c := b2.do(0, 2, 3, pop(1e9)).Output.Tasks[0]
	other := b2.do(0, 4, 5, ackBatch("elsewhere", c))
	if other.Output.Err != "invalid_argument" || other.Output.Items != nil {
		t.Fatalf("another queue's claim: %+v", other.Output)
	}
	if r := b2.check(); r != porcupine.Ok {
		t.Fatalf("refused batch: %v", r)
	}
}
