package model

import (
	"fmt"
	"strings"
	"time"
)

// Input is one operation with all its arguments, for callers that drive the
// model generically (the property tests, the linearizability checker). Only
// the fields the op reads are used; see Apply.
type Input struct {
	Op  Op
	Now time.Time

	Enqueue   EnqueueArgs   // Enqueue
	Batch     []EnqueueArgs // EnqueueBatch
	Acks      []AckItem     // AckBatch (with Lease and Limit: the pop that follows, none for Limit 0)
	Claim     Claim         // Extend, Ack, Fail, Retry
	ReapClaim ReapClaim     // Requeue, Finalize
	ID        string        // InspectRequeue, Remove, Cancel, Get
	Expect    uint64        // InspectRequeue, Remove, Cancel
	Lease     time.Duration // Pop, Extend, AckBatch's pop; the claim TTL of ClaimExpired; the delay of RecoverExpired
	Limit     int           // Promote, Pop and AckBatch's pop (batch size), ClaimExpired, RecoverExpired, Prune, List
	Delay     time.Duration // Retry, Requeue: RunAfter = now + Delay
	Message   string        // Fail, Retry, Requeue, Finalize
	Result    []byte        // Ack
	State     State         // List
	After     string        // List cursor
	States    []State       // Prune
	Before    time.Time     // Prune
}

// Output is the result of Apply. Only the fields the op returns are set.
type Output struct {
	Task       Task         // Enqueue, Extend, Ack, Fail, Retry, Requeue, Finalize, InspectRequeue, Remove, Get
	Tasks      []Task       // Pop, RecoverExpired, List; the tasks AckBatch's pop claimed
	IDs        []string     // Promote, Prune
	ReapClaims []ReapClaim  // ClaimExpired
	Counts     Counts       // Counts
	Items      []ItemResult // EnqueueBatch, AckBatch: one answer per item
	Paused     bool         // Pause, Resume: the flag as the op left it
	Next       string       // List
	Err        error
}

// Apply performs in on q and returns the next state and the output. It is the
// single dispatch from an Input to the methods of Queue.
func Apply(q Queue, in Input) (Queue, Output) {
	var out Output
	next := q
	switch in.Op {
	case OpEnqueue:
		next, out.Task, out.Err = q.Enqueue(in.Now, in.Enqueue)
	case OpPromote:
		next, out.IDs, out.Err = q.Promote(in.Now, in.Limit)
	case OpPop:
		next, out.Tasks, out.Err = q.Pop(in.Now, in.Lease, in.Limit)
	case OpExtend:
		next, out.Task, out.Err = q.Extend(in.Now, in.Claim, in.Lease)
	case OpAck:
		next, out.Task, out.Err = q.Ack(in.Now, in.Claim, in.Result)
	case OpFail:
		next, out.Task, out.Err = q.Fail(in.Now, in.Claim, in.Message)
	case OpRetry:
		next, out.Task, out.Err = q.Retry(in.Now, in.Claim, in.Delay, in.Message)
	case OpClaimExpired:
		next, out.ReapClaims, out.Err = q.ClaimExpired(in.Now, in.Lease, in.Limit)
	case OpRequeue:
		next, out.Task, out.Err = q.Requeue(in.Now, in.ReapClaim, in.Delay, in.Message)
	case OpFinalize:
		next, out.Task, out.Err = q.Finalize(in.Now, in.ReapClaim, in.Message)
	case OpRecoverExpired:
		next, out.Tasks, out.Err = q.RecoverExpired(in.Now, in.Lease, in.Limit)
	case OpInspectRequeue:
		next, out.Task, out.Err = q.InspectRequeue(in.ID, in.Expect)
	case OpRemove:
		next, out.Task, out.Err = q.Remove(in.ID, in.Expect)
	case OpPrune:
		next, out.IDs, out.Err = q.Prune(in.States, in.Before, in.Limit)
	case OpEnqueueBatch:
		next, out.Items, out.Err = q.EnqueueBatch(in.Now, in.Batch)
	case OpAckBatch:
		next, out.Items, out.Tasks, out.Err = q.AckBatchPop(in.Now, in.Acks, in.Lease, in.Limit)
	case OpPause:
		next, out.Paused = q.Pause()
	case OpResume:
		next, out.Paused = q.Resume()
	case OpCancel:
		next, out.Task, out.Err = q.Cancel(in.Now, in.ID, in.Expect)
	case OpGet:
		out.Task, out.Err = q.Get(in.ID)
	case OpList:
		out.Tasks, out.Next, out.Err = q.List(in.State, in.After, in.Limit)
	case OpCounts:
		out.Counts = q.Counts()
	default:
		out.Err = invalid("unknown op %v", in.Op)
	}
	if out.Err != nil {
		return q, out // a rejected op changes nothing
	}
	return next, out
}

// String describes the input briefly, for logs and visualizations.
func (in Input) String() string {
	switch in.Op {
	case OpEnqueue:
		return fmt.Sprintf("Enqueue(%s prio=%d)", in.Enqueue.ID, in.Enqueue.Priority)
	case OpExtend, OpAck, OpFail, OpRetry:
		return fmt.Sprintf("%v(%s token=%d)", in.Op, in.Claim.TaskID, in.Claim.Token)
	case OpRequeue, OpFinalize:
		return fmt.Sprintf("%v(%s version=%d)", in.Op, in.ReapClaim.TaskID, in.ReapClaim.Version)
	case OpInspectRequeue, OpRemove, OpCancel:
		return fmt.Sprintf("%v(%s expect=%d)", in.Op, in.ID, in.Expect)
	case OpGet:
		return fmt.Sprintf("Get(%s)", in.ID)
	case OpPop:
		return fmt.Sprintf("Pop(n=%d)", in.Limit)
	case OpEnqueueBatch:
		ids := make([]string, len(in.Batch))
		for i, a := range in.Batch {
			ids[i] = a.ID
		}
		return fmt.Sprintf("EnqueueBatch(%s)", strings.Join(ids, " "))
	case OpAckBatch:
		items := make([]string, len(in.Acks))
		for i, a := range in.Acks {
			items[i] = fmt.Sprintf("%s token=%d", a.Claim.TaskID, a.Claim.Token)
		}
		if in.Limit > 0 {
			return fmt.Sprintf("AckBatch(%s; pop n=%d)", strings.Join(items, ", "), in.Limit)
		}
		return fmt.Sprintf("AckBatch(%s)", strings.Join(items, ", "))
	}
	return in.Op.String()
}
