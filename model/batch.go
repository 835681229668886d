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
//
// AckBatch is AckBatchPop with no pop.
func (q Queue) AckBatch(now time.Time, items []AckItem) (Queue, []ItemResult, error) {
	next, out, _, err := q.AckBatchPop(now, items, 0, 0)
	return next, out, err
}

// AckBatchPop is AckBatch followed, in the same atomic step and at the same
// now, by Pop(now, lease, n) when n is not 0: a worker records the tasks it
// finished and claims the next ones in one call. The acks come first, each
// answered as AckBatch answers it; then the pop claims up to n Ready tasks
// exactly as Pop does, from the queue the acks left (its order, its tokens,
// its treatment of damaged records). An acknowledged task is Succeeded, so
// the pop can never hand back a task an item of the same step decided, and a
// refused item leaves its task as it was: a stale item's task stays with
// whoever holds it now. The claimed tasks are returned apart from the items.
//
// It is AckBatch's step with an optional pop rather than an operation of its
// own: the acks are AckBatch's to the letter (same guards, same answers, same
// batch errors), the pop is Pop's to the letter, and with n = 0 it is
// AckBatch, so every reader of an AckBatch (its one answer per item, its
// place in the transition table) stays true of it.
//
// Errors of the batch itself (nothing is applied): those of AckBatch, and
// ErrInvalidArgument for n outside 0..MaxBatch or, when n is not 0, a lease
// Pop would refuse (ValidateAckPop).
func (q Queue) AckBatchPop(now time.Time, items []AckItem, lease time.Duration, n int) (Queue, []ItemResult, []Task, error) {
	if err := CheckBatchSize(len(items)); err != nil {
		return q, nil, nil, err
	}
	for i, a := range items {
		if err := ValidateAckBatchItem(q.name, i, a.Claim); err != nil {
			return q, nil, nil, err
		}
	}
	if err := ValidateAckPop(lease, n); err != nil {
		return q, nil, nil, err
	}
	out := make([]ItemResult, len(items))
	for i, a := range items {
		next, t, err := q.Ack(now, a.Claim, a.Result)
		out[i] = ItemResult{Task: t, Err: err}
		if err == nil {
			q = next
		}
	}
	if n == 0 {
		return q, out, nil, nil
	}
	q, claimed, err := q.Pop(now, lease, n)
	if err != nil { // not reached: the arguments were checked above
		return q, nil, nil, err
	}
	return q, out, claimed, nil
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
