package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

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
		// Every item's statement and a read of its ID go to the server in
		// one round trip; they run in order, so each read sees the queue
		// as the items before it left it.
		b := &pgx.Batch{}
		for i, a := range p.Tasks {
			if err := validEnqueue(a); err != nil {
				items[i].Err = err
				continue
			}
			task := o.newTask(a)
			items[i].Task = task
			b.Queue(s.q.enqueue, o.enqueueArgs(task)...)
			b.Queue(s.q.probe, o.queue, []byte(a.ID))
		}
		res := o.tx.SendBatch(o.ctx, b)
		defer res.Close()
		for i := range p.Tasks {
			if items[i].Err != nil {
				continue
			}
			var v int64
			err := res.QueryRow().Scan(&v)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			inserted := err == nil
			_, _, _, found, perr := probeRow(res.QueryRow(), o.queue, p.Tasks[i].ID)
			if inserted {
				items[i].Task.Version = uint64(v)
				continue
			}
			items[i] = core.ItemResult{Err: o.enqueueRefusal(p.Tasks[i].ID, found, perr)}
			if !isItemError(items[i].Err) {
				return items[i].Err
			}
		}
		return res.Close()
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
			if err := model.ValidateAckBatchItem(p.Queue, i, a.Claim); err != nil {
				return err
			}
		}
		return nil
	}
	items := make([]core.ItemResult, len(p.Acks))
	now, err := s.write(ctx, p.Queue, 0, validate, func(o *opTx) error {
		// As in EnqueueBatch: every item's statement and a read of its task
		// in one round trip, run in order.
		b := &pgx.Batch{}
		for i, a := range p.Acks {
			if err := validClaim(a.Claim); err != nil {
				items[i].Err = err
				continue
			}
			b.Queue(s.q.ack, o.queue, []byte(a.Claim.TaskID), int64(a.Claim.Token), micros(o.now), clone(a.Result))
			b.Queue(s.q.probe, o.queue, []byte(a.Claim.TaskID))
		}
		res := o.tx.SendBatch(o.ctx, b)
		defer res.Close()
		for i, a := range p.Acks {
			if items[i].Err != nil {
				continue
			}
			ts, err := scanTasks(res.Query())
			if err != nil {
				return err
			}
			state, token, _, found, perr := probeRow(res.QueryRow(), o.queue, a.Claim.TaskID)
			if len(ts) == 1 {
				items[i].Task = ts[0]
				continue
			}
			err = claimRefusal(model.OpAck, a.Claim, state, token, found, perr)
			if !isItemError(err) {
				return err
			}
			items[i].Err = err
		}
		return res.Close()
	})
	if err != nil {
		return core.BatchResult{}, err
	}
	return core.BatchResult{Now: now, Items: items}, nil
}

// isItemError reports whether err is one of the model's refusals, which
// refuse one item of a batch and change nothing.
func isItemError(err error) bool { return model.Kind(err) != nil }
