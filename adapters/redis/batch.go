package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

var _ core.BatchStore = (*Store)(nil)

// validEnqueue is Enqueue's check of its arguments; it returns the run_after
// argument of the script.
func validEnqueue(a model.EnqueueArgs) (string, error) {
	if err := model.ValidateEnqueue(a); err != nil {
		return "", err
	}
	return micros("run after", a.RunAfter)
}

// EnqueueBatch implements core.BatchStore: one script adds the tasks in
// order, each by the rules of Enqueue (an ID already taken, also by an
// earlier item, is core.ErrConflict; a full queue core.ErrQueueFull), and
// answers each on its own. An item whose arguments are invalid is answered
// here and not sent.
func (s *Store) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	if err := s.begin(ctx, p.Queue); err != nil {
		return core.BatchResult{}, err
	}
	if err := model.CheckBatchSize(len(p.Tasks)); err != nil {
		return core.BatchResult{}, err
	}
	now, _, err := s.now()
	if err != nil {
		return core.BatchResult{}, err
	}
	items := make([]core.ItemResult, len(p.Tasks))
	sent := make([]int, 0, len(p.Tasks)) // the indexes of the items sent
	args := make([]any, 0, 2+8*len(p.Tasks)+1)
	args = append(args, now, s.capacity)
	for i, a := range p.Tasks {
		runAfter, err := validEnqueue(a)
		if err != nil {
			items[i].Err = err
			continue
		}
		sent = append(sent, i)
		args = append(args, enqueueArgs(a, runAfter)...)
	}
	return s.batch(ctx, enqueueBatchScript, p.Queue, items, sent, func(i int) string { return p.Tasks[i].ID }, args)
}

// AckBatch implements core.BatchStore: one script acknowledges the claims in
// order, each by the rules of Ack, and answers each on its own; with a pop
// (p.Pop.N not 0) the same script then claims the next Ready tasks as Pop
// does (lua/ack_pop.lua), so the acks and the pop are one round trip. A
// claim that is invalid (no ID, token 0) is answered here and not sent.
func (s *Store) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	if err := s.begin(ctx, p.Queue); err != nil {
		return core.BatchResult{}, err
	}
	if err := model.CheckBatchSize(len(p.Acks)); err != nil {
		return core.BatchResult{}, err
	}
	for i, a := range p.Acks {
		if err := model.ValidateAckBatchItem(p.Queue, i, a.Claim); err != nil {
			return core.BatchResult{}, err
		}
	}
	if err := model.ValidateAckPop(p.Pop.Lease, p.Pop.N); err != nil {
		return core.BatchResult{}, err
	}
	now, _, err := s.now()
	if err != nil {
		return core.BatchResult{}, err
	}
	sc := ackBatchScript
	args := make([]any, 0, 3+3*len(p.Acks)+1)
	args = append(args, now)
	if p.Pop.N > 0 {
		lease, err := duration("lease", p.Pop.Lease)
		if err != nil {
			return core.BatchResult{}, err
		}
		sc = ackPopScript
		args = append(args, lease, p.Pop.N)
	}
	items := make([]core.ItemResult, len(p.Acks))
	sent := make([]int, 0, len(p.Acks))
	for i, a := range p.Acks {
		if err := validClaim(a.Claim); err != nil {
			items[i].Err = err
			continue
		}
		sent = append(sent, i)
		args = append(args, a.Claim.TaskID, u64(a.Claim.Token), a.Result)
	}
	return s.batch(ctx, sc, p.Queue, items, sent, func(i int) string { return p.Acks[i].Claim.TaskID }, args)
}

// batch runs a batch script and fills items[sent[k]] with the answer to the
// k-th item sent: per item a code, the number of strings that follow, then
// the task (code 0) or the refusal's detail. After the items, the reply of
// ack_pop.lua holds the tasks its pop claimed; any other script's ends there.
func (s *Store) batch(ctx context.Context, sc *script, queue string, items []core.ItemResult, sent []int, id func(int) string, args []any) (core.BatchResult, error) {
	keys := s.queueKeys(queue)
	if sc == ackPopScript {
		keys = s.pausedKeys(queue) // its pop reads the paused flag
	}
	r, err := s.eval(ctx, sc, keys, "", args...)
	if err != nil {
		return core.BatchResult{}, err
	}
	return batchItems(sc, queue, items, sent, id, r)
}

// batchItems decodes a batch script's answer r into items (see batch).
func batchItems(sc *script, queue string, items []core.ItemResult, sent []int, id func(int) string, r reply) (core.BatchResult, error) {
	now, err := parseNow(r.head)
	if err != nil {
		return core.BatchResult{}, err
	}
	itemOp, _ := model.BatchItemOp(sc.op)
	item := &script{name: sc.name, op: itemOp}
	rest := r.rest
	for _, i := range sent {
		if len(rest) < 2 {
			return core.BatchResult{}, fmt.Errorf("leasehold/redis: %v: reply of %d items for %d", sc.op, i, len(sent))
		}
		code, e1 := strconv.ParseInt(rest[0], 10, 64)
		n, e2 := strconv.Atoi(rest[1])
		if e1 != nil || e2 != nil || n < 0 || n > len(rest)-2 {
			return core.BatchResult{}, fmt.Errorf("leasehold/redis: %v: item %d of the reply does not parse", sc.op, i)
		}
		f := rest[2 : 2+n]
		rest = rest[2+n:]
		if code != codeOK {
			items[i].Err = codeError(item, code, id(i), f)
			continue
		}
		t, err := decodeTask(queue, f)
		if err != nil {
			return core.BatchResult{}, err
		}
		items[i].Task = t
	}
	var claimed []core.Task
	if sc == ackPopScript {
		if claimed, err = decodeTasks(queue, rest); err != nil {
			return core.BatchResult{}, err
		}
	} else if len(rest) != 0 {
		return core.BatchResult{}, fmt.Errorf("leasehold/redis: %v: %d strings after the last item", sc.op, len(rest))
	}
	return core.BatchResult{Now: now, Items: items, Claimed: claimed}, nil
}
