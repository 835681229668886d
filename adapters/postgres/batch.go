package postgres

import (
	"context"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// EnqueueBatch implements core.BatchStore: the tasks are added in one
// transaction, in order, each with the checks and the statement of Enqueue
// (an ID already taken, also by an earlier item, is ErrConflict; a full
// queue ErrQueueFull), and each is answered on its own. A refused item
// writes nothing. An error that is not an item's own (a damaged row, the
// transport) fails the whole batch, which then changes nothing.
func (s *Store) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	items := make([]core.ItemResult, len(p.Tasks))
	now, err := s.write(ctx, p.Queue, lockNotify, func() error { return model.CheckBatchSize(len(p.Tasks)) }, func(o *opTx) error {
		for i, a := range p.Tasks {
			if err := validEnqueue(a); err != nil {
				items[i].Err = err
				continue
			}
			task, err := o.enqueue(a)
			if err != nil && !isItemError(err) {
				return err
			}
			items[i] = core.ItemResult{Task: task, Err: err}
		}
		return nil
	})
	if err != nil {
		return core.BatchResult{}, err
	}
	return core.BatchResult{Now: now, Items: items}, nil
}

// AckBatch implements core.BatchStore: the claims are acknowledged in one
// transaction, in order, each by the guarded statement of Ack and, when it
// matches no row, the diagnosis of Ack; each is answered on its own. An
// error that is not an item's own (a damaged row, the transport) fails the
// whole batch, which then changes nothing.
func (s *Store) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	validate := func() error {
		if err := model.CheckBatchSize(len(p.Acks)); err != nil {
			return err
		}
		for i, a := range p.Acks {
			if a.Claim.Queue != p.Queue {
				return invalid("ack batch of queue %q: item %d claims a task of queue %q", p.Queue, i, a.Claim.Queue)
			}
		}
		return nil
	}
	items := make([]core.ItemResult, len(p.Acks))
	now, err := s.write(ctx, p.Queue, 0, validate, func(o *opTx) error {
		for i, a := range p.Acks {
			if err := validClaim(a.Claim); err != nil {
				items[i].Err = err
				continue
			}
			task, err := o.workerOp(model.OpAck, a.Claim, s.q.ack, []any{micros(o.now), clone(a.Result)})
			if err != nil && !isItemError(err) {
				return err
			}
			items[i] = core.ItemResult{Task: task, Err: err}
		}
		return nil
	})
	if err != nil {
		return core.BatchResult{}, err
	}
	return core.BatchResult{Now: now, Items: items}, nil
}

// isItemError reports whether err is one of the model's refusals, which
// refuse one item of a batch and change nothing.
func isItemError(err error) bool { return model.Kind(err) != nil }
