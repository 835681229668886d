package linearizability

import (
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/model"
)

// Explanation is what a checked history shows a person, per queue: the
// order porcupine linearized its operations in and, for a queue that is not
// linearizable, the first operation the model refused.
type Explanation struct {
	Queues []QueueExplanation
}

// QueueExplanation is the explanation of one queue (one porcupine
// partition).
type QueueExplanation struct {
	Queue string
	// Order holds indexes into History.Operations in the order porcupine
	// linearized them: the whole queue if it is linearizable, else the
	// longest prefix it found (the operations not in it could not be
	// placed).
	Order []int
	// Refused, set when the queue is not linearizable, is the first
	// operation after Order that the model refuses from every state Order
	// can leave the queue in.
	Refused *Refusal
}

// Refusal is an operation the model could not accept: what the store
// answered and what the model would have answered instead, from the state
// before it.
type Refusal struct {
	// Op is the index of the operation in History.Operations.
	Op int
	// Before describes the queue's state before the operation (the first
	// of the states, when an indeterminate operation leaves several).
	Before string
	// Store is the operation as the store answered it, Model as the model
	// would have ("q0 Ack(t1 token=7) @+3ms → error stale_claim").
	Store, Model string
	// Tasks are the tasks the model's answer names (the store's may name
	// none: a ClaimExpired that found nothing).
	Tasks []string
}

// Explain explains a checked history from porcupine's partial
// linearizations (Verdict.Info): an Unknown verdict, which has none, gives
// queues with an empty Order.
func Explain(h *History, v Verdict) Explanation {
	byQueue := map[string][]int{}
	for i, op := range h.Operations {
		byQueue[op.Input.Queue] = append(byQueue[op.Input.Queue], i)
	}
	names := make([]string, 0, len(byQueue))
	for q := range byQueue {
		names = append(names, q)
	}
	slices.Sort(names) // the order of partitionByQueue
	partials := v.Info.PartialLinearizations()
	var ex Explanation
	for p, name := range names {
		ops := byQueue[name]
		qe := QueueExplanation{Queue: name}
		if p < len(partials) {
			var best []int
			for _, l := range partials[p] {
				if len(l) > len(best) {
					best = l
				}
			}
			for _, id := range best {
				if id >= 0 && id < len(ops) {
					qe.Order = append(qe.Order, ops[id])
				}
			}
		}
		if len(qe.Order) < len(ops) && v.Result == porcupine.Illegal {
			qe.Refused = refusal(h, name, ops, qe.Order)
		}
		ex.Queues = append(ex.Queues, qe)
	}
	return ex
}

// refusal replays order on the model and finds the first operation left
// over that could come next and that the model refuses.
func refusal(h *History, queue string, ops, order []int) *Refusal {
	states := []model.Queue{model.NewQueue(queue, h.Capacity)}
	for _, i := range order {
		op := &h.Operations[i]
		var next []model.Queue
		for _, q := range states {
			for _, n := range step(q, &op.Input, &op.Output, h.Capacity) {
				next = append(next, n.(model.Queue))
			}
		}
		if len(next) == 0 {
			return nil // porcupine's order does not replay: nothing to say
		}
		states = next
	}
	done := map[int]bool{}
	for _, i := range order {
		done[i] = true
	}
	var left []int
	minReturn := int64(1<<63 - 1)
	for _, i := range ops {
		if !done[i] {
			left = append(left, i)
			minReturn = min(minReturn, h.Operations[i].Return)
		}
	}
	// An operation can come next only if it was called before every other
	// one left over returned; among those, the first called that the model
	// refuses from every state.
	slices.SortStableFunc(left, func(a, b int) int { return cmpInt64(h.Operations[a].Call, h.Operations[b].Call) })
	for _, i := range left {
		op := &h.Operations[i]
		if op.Call > minReturn {
			break
		}
		if op.Output.Indeterminate || op.Input.Tx != nil {
			continue
		}
		accepted := false
		for _, q := range states {
			if len(step(q, &op.Input, &op.Output, h.Capacity)) > 0 {
				accepted = true
				break
			}
		}
		if accepted {
			continue
		}
		q := states[0]
		_, m := model.Apply(q, op.Input.modelInput(op.Output.Now))
		mo := modelOutput(op.Input.Op, m, op.Output.Now)
		var tasks []string
		add := func(id string) {
			if id != "" && !slices.Contains(tasks, id) {
				tasks = append(tasks, id)
			}
		}
		add(m.Task.ID)
		for _, t := range m.Tasks {
			add(t.ID)
		}
		for _, c := range m.ReapClaims {
			add(c.TaskID)
		}
		for _, id := range m.IDs {
			add(id)
		}
		for _, it := range m.Items {
			add(it.Task.ID)
		}
		return &Refusal{
			Tasks:  tasks,
			Op:     i,
			Before: describeQueue(q, h.Epoch),
			Store:  describeOp(&op.Input, &op.Output, h.Epoch),
			Model:  describeOp(&op.Input, &mo, h.Epoch),
		}
	}
	return nil
}

// modelOutput is the model's answer in the form of a store's Output.
func modelOutput(kind model.Op, m model.Output, now time.Time) Output {
	o := Output{Now: now}
	if kind == model.OpCounts {
		c := m.Counts
		o.Counts = &c
	}
	if kind == model.OpPause || kind == model.OpResume {
		paused := m.Paused
		o.Paused = &paused
	}
	if m.Err != nil {
		o.setError(m.Err)
		return o
	}
	if m.Task.ID != "" {
		t := m.Task
		o.Task = &t
	}
	o.Tasks, o.IDs, o.Claims, o.Next = m.Tasks, m.IDs, m.ReapClaims, m.Next
	for _, it := range m.Items {
		if it.Err != nil {
			var eo Output
			eo.setError(it.Err)
			o.Items = append(o.Items, ItemOutput{Err: eo.Err, ErrOp: eo.ErrOp, ErrState: eo.ErrState})
			continue
		}
		t := it.Task
		o.Items = append(o.Items, ItemOutput{Task: &t})
	}
	return o
}

// DescribeOperation shows an operation as the checker's visualization does:
// the call, the store's clock and the answer.
func (h *History) DescribeOperation(i int) string {
	op := &h.Operations[i]
	return describeOp(&op.Input, &op.Output, h.Epoch)
}

// DescribeCall shows an operation's call alone ("q0 Ack(t1 token=7)").
func (h *History) DescribeCall(i int) string {
	return describeCall(&h.Operations[i].Input, h.Epoch)
}

// At shows t relative to the history's epoch ("+12ms"), "-" for the zero
// time.
func (h *History) At(t time.Time) string { return at(t, h.Epoch) }

// Guards counts how often a history's guards fired: the calls the store
// refused because the caller's claim or view was out of date, and the calls
// whose outcome is unknown.
type Guards struct {
	StaleAcks        int // Acks (and AckBatch items) refused with stale_claim
	StaleWorkerCalls int // Extends, Fails and Retries refused with stale_claim
	StaleDecisions   int // broker Requeues and Finalizes refused with stale_claim
	Conflicts        int // operator InspectRequeues and Removes refused with conflict
	Indeterminate    int // calls that failed in transport
}

// CountGuards counts the guards that fired in h.
func CountGuards(h *History) Guards {
	var g Guards
	for _, op := range h.Operations {
		o := &op.Output
		if o.Indeterminate {
			g.Indeterminate++
			continue
		}
		switch op.Input.Op {
		case model.OpAck:
			if o.Err == "stale_claim" || o.Err == "cancelled" {
				g.StaleAcks++
			}
		case model.OpAckBatch:
			for _, it := range o.Items {
				if it.Err == "stale_claim" || it.Err == "cancelled" {
					g.StaleAcks++
				}
			}
		case model.OpExtend, model.OpFail, model.OpRetry:
			if o.Err == "stale_claim" || o.Err == "cancelled" {
				g.StaleWorkerCalls++
			}
		case model.OpRequeue, model.OpFinalize:
			if o.Err == "stale_claim" || o.Err == "cancelled" {
				g.StaleDecisions++
			}
		case model.OpInspectRequeue, model.OpRemove:
			if o.Err == "conflict" {
				g.Conflicts++
			}
		}
	}
	return g
}

// Add adds o's counts to g's.
func (g *Guards) Add(o Guards) {
	g.StaleAcks += o.StaleAcks
	g.StaleWorkerCalls += o.StaleWorkerCalls
	g.StaleDecisions += o.StaleDecisions
	g.Conflicts += o.Conflicts
	g.Indeterminate += o.Indeterminate
}
