package main

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// queueName is the queue every system uses.
const queueName = "bench"

// shutdownLimit bounds a worker's graceful stop after a measurement.
const shutdownLimit = 30 * time.Second

// leaseholdTarget is leasehold through its public API over any store:
// core.Queue to enqueue, core.Worker to process, core.BatchStore's
// EnqueueBatch when the store has it.
type leaseholdTarget struct {
	store core.Store
	queue *core.Queue
}

func newLeasehold(store core.Store) (*leaseholdTarget, error) {
	q, err := core.NewQueue(store, queueName)
	if err != nil {
		store.Close()
		return nil, err
	}
	return &leaseholdTarget{store: store, queue: q}, nil
}

func (l *leaseholdTarget) enqueue(ctx context.Context) error {
	_, err := l.queue.Enqueue(ctx, payload)
	return err
}

func (l *leaseholdTarget) enqueueBatch(ctx context.Context, k int) error {
	bs, ok := l.store.(core.BatchStore)
	if !ok {
		return fmt.Errorf("%T has no EnqueueBatch: %w", l.store, errUnsupported)
	}
	p := core.EnqueueBatchParams{Queue: queueName, Tasks: make([]model.EnqueueArgs, k)}
	for i := range p.Tasks {
		id, err := core.NewID()
		if err != nil {
			return err
		}
		p.Tasks[i] = model.EnqueueArgs{ID: id, Payload: payload, MaxAttempts: core.DefaultMaxAttempts}
	}
	res, err := bs.EnqueueBatch(ctx, p)
	if err != nil {
		return err
	}
	for _, it := range res.Items {
		if it.Err != nil {
			return it.Err
		}
	}
	return nil
}

func (l *leaseholdTarget) fill(ctx context.Context, n int) error {
	if _, ok := l.store.(core.BatchStore); ok {
		_, err := produce(ctx, 1, n, core.MaxBatch, l.enqueueBatch)
		return err
	}
	_, err := produce(ctx, 8, n, 1, func(ctx context.Context, _ int) error { return l.enqueue(ctx) })
	return err
}

func (l *leaseholdTarget) process(ctx context.Context, workers, n int, finished func()) (int, error) {
	w, err := core.NewWorker(l.store, queueName,
		func(context.Context, core.Claim, core.Task) ([]byte, error) { return nil, nil },
		core.WithConcurrency(workers))
	if err != nil {
		return 0, err
	}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.WithoutCancel(ctx)) }()
	err = waitFor(ctx, time.Millisecond, func() bool { return w.Stats().Acked >= int64(n) })
	finished()
	done := int(w.Stats().Acked)
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownLimit)
	defer cancel()
	if serr := w.Shutdown(stop); serr != nil && err == nil {
		err = serr
	}
	if rerr := <-ran; rerr != nil && err == nil {
		err = rerr
	}
	if st := w.Stats(); st.StoreErrors > 0 && err == nil {
		err = fmt.Errorf("worker counted %d store errors", st.StoreErrors)
	}
	// What the worker counted as acknowledged must be stored as succeeded.
	if c, cerr := l.store.Counts(stop, core.CountsParams{Queue: queueName}); cerr != nil {
		err = cmpOr(err, cerr)
	} else if c.Succeeded < done && err == nil {
		err = fmt.Errorf("the worker counted %d acks but the store has %d tasks succeeded", done, c.Succeeded)
	}
	return done, err
}

func (l *leaseholdTarget) close() error { return l.store.Close() }
