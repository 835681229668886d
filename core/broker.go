package core

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/model"
)

// Defaults of a Broker.
const (
	DefaultBrokerInterval = time.Second
	DefaultBrokerBatch    = 100
	DefaultClaimTTL       = 30 * time.Second
)

// Broker tends queues on behalf of every worker: its mover makes due
// Scheduled tasks Ready (Store.Promote), and its reaper decides the tasks
// whose lease lapsed.
//
// The reaper decides in two steps, the second conditional on the first. It
// claims expired tasks (Store.ClaimExpired): the claim renews each task's
// deadline for the claim TTL and stamps a new Version, which the ReapClaim
// carries. For each claim it consults the retry policy with ErrLeaseExpired,
// then decides through the claim: Requeue (retry, after the policy's delay)
// or Finalize (give up). The store accepts the decision only if nothing
// touched the task since the claim. If something did — the worker acked or
// renewed its lease late, an operator acted, another broker took over after
// this claim lapsed — the decision is stale: the broker drops it, logs it at
// debug level and counts it (BrokerStats.StaleDropped). Nothing is lost: the
// task is where the other actor left it, and if it is still Running its next
// expiry brings it back to a later pass.
//
// With WithRecoverExpired, the reaper instead decides expired tasks in one
// atomic step (Store.RecoverExpired), without a retry policy.
//
// Every store call has a deadline of the claim TTL, in real time, with
// SystemClock (with another Clock, only ctx bounds it).
//
// Several brokers may tend the same queues; their claims keep them from
// deciding the same task twice. A Broker is safe for concurrent use.
type Broker struct {
	common
	runner
	store        Store
	queues       []string
	interval     time.Duration
	claimTTL     time.Duration
	oneStep      bool
	recoverDelay time.Duration

	stats   brokerCounters
	tel     brokerTelemetry
	running atomic.Bool
}

// NewBroker returns a Broker over the queues named by WithQueues (required).
// It does not start it: call Run, or RunOnce for a single pass.
func NewBroker(store Store, opts ...BrokerOption) (*Broker, error) {
	return newBroker(store, nil, opts)
}

// newBroker is NewBroker with the common settings of a Client (nil: the
// defaults).
func newBroker(store Store, preset *common, opts []BrokerOption) (*Broker, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidArgument)
	}
	b := &Broker{
		store:    store,
		interval: DefaultBrokerInterval,
		claimTTL: DefaultClaimTTL,
		runner:   runner{retry: DefaultRetryPolicy},
	}
	b.init()
	if preset != nil {
		b.common = *preset
	}
	for _, o := range opts {
		o.applyBroker(b)
	}
	if b.err != nil {
		return nil, b.err
	}
	if b.batch == 0 { // WithBatchSize not given
		b.batch = storeBatch(store, DefaultBrokerBatch)
	}
	if len(b.queues) == 0 {
		return nil, fmt.Errorf("%w: a broker needs at least one queue (WithQueues)", ErrInvalidArgument)
	}
	b.tel = newBrokerTelemetry(&b.common, b.queues)
	return b, nil
}

// Pass counts what one pass of the broker did.
type Pass struct {
	Promoted  int // Scheduled tasks made Ready
	Claimed   int // expired tasks claimed
	Requeued  int // claimed tasks sent back to the queue
	Finalized int // claimed tasks failed
	Dropped   int // stale decisions dropped
	Recovered int // tasks decided by one-step recovery
}

// Run makes a pass over the broker's queues, then one every interval
// (WithInterval, measured on the Clock), until ctx is done; then it returns
// nil. Errors of a pass are logged and counted, not returned, except
// ErrClosed: once the store is closed Run returns the pass's error. It
// returns ErrRunning if the broker is already running.
func (b *Broker) Run(ctx context.Context) error {
	if !b.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: broker of %v", ErrRunning, b.queues)
	}
	defer b.running.Store(false)
	b.logger.InfoContext(ctx, "broker started", "queues", b.queues, "interval", b.interval)
	for {
		if _, err := b.RunOnce(ctx); err != nil && ctx.Err() == nil {
			if errors.Is(err, ErrClosed) {
				b.logger.ErrorContext(ctx, "the store is closed; the broker stops", "err", err)
				return err
			}
			b.logger.WarnContext(ctx, "broker pass failed", "err", err)
		}
		t := b.clock.NewTimer(b.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			b.logger.InfoContext(context.WithoutCancel(ctx), "broker stopped")
			return nil
		case <-t.C():
		}
	}
}

// RunOnce makes one pass over every queue of the broker: it promotes every
// due Scheduled task, then claims and decides every expired Running task, a
// batch (WithBatchSize) per store call. It returns what it did and the store
// errors it met, joined; a queue's error does not stop the pass over the
// others. Stale decisions are not errors: they are counted in Pass.Dropped.
func (b *Broker) RunOnce(ctx context.Context) (Pass, error) {
	var p Pass
	var errs []error
	for _, q := range b.queues {
		if err := b.promote(ctx, q, &p); err != nil {
			errs = append(errs, fmt.Errorf("promote %s: %w", q, err))
		}
		reap := b.reap
		if b.oneStep {
			reap = b.recover
		}
		if err := reap(ctx, q, &p); err != nil {
			errs = append(errs, fmt.Errorf("reap %s: %w", q, err))
		}
	}
	b.stats.passes.Add(1)
	return p, errors.Join(errs...)
}

// Stats returns a snapshot of the broker's counters.
func (b *Broker) Stats() BrokerStats { return b.stats.snapshot() }

func (b *Broker) promote(ctx context.Context, queue string, p *Pass) error {
	for {
		cctx, cancel := b.call(ctx)
		res, err := b.store.Promote(cctx, PromoteParams{Queue: queue, Limit: b.batch})
		cancel()
		if err != nil {
			b.storeError(ctx, queue, err)
			return err
		}
		p.Promoted += len(res.IDs)
		b.stats.promoted.Add(int64(len(res.IDs)))
		b.tel.promotedN(ctx, queue, len(res.IDs))
		if len(res.IDs) > 0 {
			b.logger.DebugContext(ctx, "tasks promoted", "queue", queue, "count", len(res.IDs))
		}
		if len(res.IDs) < b.batch {
			return nil
		}
	}
}

func (b *Broker) reap(ctx context.Context, queue string, p *Pass) error {
	for {
		cctx, cancel := b.call(ctx)
		res, err := b.store.ClaimExpired(cctx, ClaimExpiredParams{Queue: queue, ClaimTTL: b.claimTTL, Limit: b.batch})
		cancel()
		if err != nil {
			b.storeError(ctx, queue, err)
			return err
		}
		p.Claimed += len(res.Claims)
		b.stats.claimed.Add(int64(len(res.Claims)))
		b.tel.claimedN(ctx, queue, len(res.Claims))
		var errs []error
		for _, rc := range res.Claims {
			if err := b.decide(ctx, res.Now, rc, p); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 || len(res.Claims) < b.batch {
			return errors.Join(errs...)
		}
	}
}

// decide consults the retry policy for one claimed task and records its
// decision through the claim.
func (b *Broker) decide(ctx context.Context, now time.Time, rc ReapClaim, p *Pass) error {
	ctx, span := b.tel.startDecision(ctx, rc)
	t := rc.Task
	t.Errors = append(t.Errors[:len(t.Errors):len(t.Errors)],
		TaskError{Attempt: t.Attempt, At: now, Message: model.LeaseExpiredMessage, LeaseExpired: true})
	delay, retry := consult(b.retry, t, ErrLeaseExpired, b.logger)
	log := b.logger.With("queue", rc.Queue, "task", rc.TaskID, "version", rc.Version, "attempt", t.Attempt)
	var err error
	if retry {
		var res TaskResult
		cctx, cancel := b.call(ctx)
		res, err = b.store.Requeue(cctx, RequeueParams{ReapClaim: rc, Delay: delay})
		cancel()
		if err == nil {
			p.Requeued++
			b.stats.requeued.Add(1)
			log.InfoContext(ctx, "expired task requeued", "delay", delay, "run_after", res.Task.RunAfter)
		}
	} else {
		cctx, cancel := b.call(ctx)
		_, err = b.store.Finalize(cctx, FinalizeParams{ReapClaim: rc})
		cancel()
		if err == nil {
			p.Finalized++
			b.stats.finalized.Add(1)
			log.InfoContext(ctx, "expired task failed: no retry left")
		}
	}
	b.tel.decided(ctx, span, rc.Queue, retry, err)
	switch {
	case err == nil:
		return nil
	case superseded(err):
		p.Dropped++
		b.stats.staleDropped.Add(1)
		log.DebugContext(ctx, "stale decision dropped", "retry", retry, "err", err)
		return nil
	default:
		b.storeError(ctx, rc.Queue, err)
		return fmt.Errorf("decide task %q: %w", rc.TaskID, err)
	}
}

func (b *Broker) recover(ctx context.Context, queue string, p *Pass) error {
	for {
		cctx, cancel := b.call(ctx)
		res, err := b.store.RecoverExpired(cctx, RecoverExpiredParams{Queue: queue, Delay: b.recoverDelay, Limit: b.batch})
		cancel()
		if err != nil {
			b.storeError(ctx, queue, err)
			return err
		}
		p.Recovered += len(res.Tasks)
		b.stats.recovered.Add(int64(len(res.Tasks)))
		b.tel.recoveredTasks(ctx, queue, res.Tasks)
		for _, t := range res.Tasks {
			b.logger.InfoContext(ctx, "expired task recovered", "queue", queue, "task", t.ID, "state", t.State)
		}
		if len(res.Tasks) < b.batch {
			return nil
		}
	}
}

// call returns the context of one store call: ctx with a deadline of the
// claim TTL (a call that outlasts it would decide through a claim that
// lapsed meanwhile), with SystemClock.
func (b *Broker) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return callContext(ctx, b.clock, b.claimTTL)
}

func (b *Broker) storeError(ctx context.Context, queue string, err error) {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return // the pass was cancelled
	}
	b.stats.storeErrors.Add(1)
	b.tel.storeError(ctx, queue)
}

// boundDelay keeps a retry policy's delay within what a store accepts:
// 0..model.MaxDuration.
func boundDelay(d time.Duration) time.Duration { return min(max(d, 0), model.MaxDuration) }
