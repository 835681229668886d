package model

import "time"

// AckItem is one claim of an AckBatch and the result it records.
type AckItem struct {
	Claim  Claim
	Result []byte
}

// ItemResult is the answer to one item of a batch: the task as the item left
// it, or the typed error that refused the item (which then changed nothing).
type ItemResult struct {
	Task Task
	Err  error
}

// EnqueueBatch adds up to MaxBatch tasks in one atomic step. The items are
// applied in order, each by the rules of Enqueue against the queue the items
// before it left, and each is answered on its own: a refused item (an invalid
// argument, an ID that exists — also one added by an earlier item — or a full
// queue) changes nothing and does not stop the others.
//
// Errors of the batch itself (nothing is applied): ErrInvalidArgument for no
// items or more than MaxBatch.
func (q Queue) EnqueueBatch(now time.Time, items []EnqueueArgs) (Queue, []ItemResult, error) {
	if err := CheckBatchSize(len(items)); err != nil {
		return q, nil, err
	}
	out := make([]ItemResult, len(items))
	for i, a := range items {
		next, t, err := q.Enqueue(now, a)
		out[i] = ItemResult{Task: t, Err: err}
		if err == nil {
			q = next
		}
	}
	return q, out, nil
}

// AckBatch records the success of up to MaxBatch claims in one atomic step.
// The items are applied in order, each by the rules of Ack (its own guards:
// the token, then the state) against the queue the items before it left, and
// each is answered on its own: a refused item changes nothing and does not
// stop the others. A claim named twice is acknowledged once; the second item
// is refused as an invalid transition from Succeeded.
//
// Errors of the batch itself (nothing is applied): ErrInvalidArgument for no
// items, more than MaxBatch, or a claim of another queue.
func (q Queue) AckBatch(now time.Time, items []AckItem) (Queue, []ItemResult, error) {
	if err := CheckBatchSize(len(items)); err != nil {
		return q, nil, err
	}
	for i, a := range items {
		if err := ValidateAckBatchItem(q.name, i, a.Claim); err != nil {
			return q, nil, err
		}
	}
	out := make([]ItemResult, len(items))
	for i, a := range items {
		next, t, err := q.Ack(now, a.Claim, a.Result)
		out[i] = ItemResult{Task: t, Err: err}
		if err == nil {
			q = next
		}
	}
	return q, out, nil
}

// BatchItemOp returns the single operation whose rules each item of a batch
// operation follows (OpEnqueue for OpEnqueueBatch, OpAck for OpAckBatch), and
// false for an operation that is not a batch.
func BatchItemOp(op Op) (Op, bool) {
	switch op {
	case OpEnqueueBatch:
		return OpEnqueue, true
	case OpAckBatch:
		return OpAck, true
	}
	return 0, false
}
