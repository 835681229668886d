package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Client serves several queues of one Store: for each queue it runs a Worker
// with the queue's handler and concurrency, and a Broker that promotes the
// queue's due tasks and reaps its lapsed leases through the same retry
// policy. It is the one value a service needs; Worker and Broker remain for
// those who want the parts.
//
// Several Clients (in one process or many) may serve the same queues of one
// store: no leader is elected and none is needed, because every decision is
// conditional on the claim that produced it, so two brokers never decide the
// same task and a worker's late decision is refused once another acted.
//
// The clock is given once, with WithClock to NewClient; the Client passes it,
// its logger and its RunnerOption values (WithRetryPolicy, WithBatchSize) to
// every worker and broker. The options of one queue (WithQueue) and of the
// maintenance (WithMaintenance) come after them and win.
//
// A Client runs once: Run, then Shutdown (or cancel Run's context).
type Client struct {
	common
	store      Store
	specs      []queueSpec
	workerOpts []WorkerOption // for every queue, before its own
	brokerOpts []BrokerOption // for every broker, before WithMaintenance's
	maintOpts  []BrokerOption
	periodic   []Periodic

	workers   []*Worker
	brokers   []*Broker
	scheduler *Scheduler // nil without WithPeriodic

	mu        sync.Mutex
	started   bool
	closed    bool
	stopMaint context.CancelFunc
	done      chan struct{}
}

type queueSpec struct {
	name    string
	handler Handler
	opts    []WorkerOption
}

// ClientOption configures a Client. Option and RunnerOption values are
// ClientOptions.
type ClientOption interface{ applyClient(*Client) }

// clientOption is a ClientOption that only a Client accepts.
type clientOption func(*Client)

func (o clientOption) applyClient(c *Client) { o(c) }

// WithQueue makes the Client serve the named queue with handler. opts
// configure the queue's worker (WithConcurrency, WithLease, WithTimeout,
// WithRetryPolicy, ...); a RunnerOption among them applies to the queue's
// broker too, so the tasks of a queue are retried by one policy whether the
// handler failed or the lease lapsed. Each queue may be named once.
func WithQueue(name string, handler Handler, opts ...WorkerOption) ClientOption {
	return clientOption(func(c *Client) {
		c.specs = append(c.specs, queueSpec{name: name, handler: handler, opts: opts})
	})
}

// WithQueueDefaults sets worker options for every queue of the Client; a
// queue's own options (WithQueue) come after them and win.
func WithQueueDefaults(opts ...WorkerOption) ClientOption {
	return clientOption(func(c *Client) { c.workerOpts = append(c.workerOpts, opts...) })
}

// WithMaintenance sets the options of the Client's brokers (WithInterval,
// WithClaimTTL, WithRecoverExpired, WithRetryPolicy). The queues are the
// Client's: WithQueues is refused here.
func WithMaintenance(opts ...BrokerOption) ClientOption {
	return clientOption(func(c *Client) { c.maintOpts = append(c.maintOpts, opts...) })
}

// WithPeriodic makes the Client keep the given schedules: it runs a
// Scheduler beside its brokers, which enqueues each occurrence once however
// many Clients keep the same schedule (see Periodic). The occurrences may go
// to any queue of the store, served by this Client or not.
func WithPeriodic(p ...Periodic) ClientOption {
	return clientOption(func(c *Client) { c.periodic = append(c.periodic, p...) })
}

// NewClient returns a Client over store serving the queues named by
// WithQueue (at least one). It does not start it: call Run.
func NewClient(store Store, opts ...ClientOption) (*Client, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidArgument)
	}
	c := &Client{store: store, done: make(chan struct{})}
	c.init()
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidArgument)
		}
		o.applyClient(c)
	}
	if c.err != nil {
		return nil, c.err
	}
	if len(c.specs) == 0 {
		return nil, fmt.Errorf("%w: a client needs at least one queue (WithQueue)", ErrInvalidArgument)
	}
	preset := c.common
	preset.fixedClock = true
	seen := map[string]bool{}
	for _, q := range c.specs {
		if seen[q.name] {
			return nil, fmt.Errorf("%w: queue %q given twice", ErrInvalidArgument, q.name)
		}
		seen[q.name] = true
		wopts := slices.Concat(c.workerOpts, q.opts)
		w, err := newWorker(store, q.name, q.handler, &preset, wopts)
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", q.name, err)
		}
		bopts := slices.Clone(c.brokerOpts)
		for _, o := range wopts {
			if ro, ok := o.(RunnerOption); ok {
				bopts = append(bopts, ro)
			}
		}
		bopts = append(bopts, c.maintOpts...)
		bopts = append(bopts, WithQueues(q.name))
		b, err := newBroker(store, &preset, bopts)
		if err != nil {
			return nil, fmt.Errorf("maintenance of queue %s: %w", q.name, err)
		}
		if len(b.queues) != 1 {
			return nil, fmt.Errorf("%w: WithQueues given to a Client: its queues are those of WithQueue", ErrInvalidArgument)
		}
		c.workers = append(c.workers, w)
		c.brokers = append(c.brokers, b)
	}
	if len(c.periodic) > 0 {
		s, err := newScheduler(store, &preset, c.periodic, nil)
		if err != nil {
			return nil, err
		}
		c.scheduler = s
	}
	return c, nil
}

// Queues returns the names of the Client's queues, in the order given.
func (c *Client) Queues() []string {
	out := make([]string, len(c.specs))
	for i, q := range c.specs {
		out[i] = q.name
	}
	return out
}

// Queue returns a producer's handle on the named queue of the Client's
// store, with the Client's clock, logger and telemetry providers. The queue need not be one the
// Client serves.
func (c *Client) Queue(name string) (*Queue, error) {
	return NewQueue(c.store, name, Option(func(s *common) {
		s.clock, s.logger, s.telemetry = c.clock, c.logger, c.telemetry
	}))
}

// Run serves the Client's queues until ctx is done or Shutdown is called:
// every worker pops and handles its queue's tasks, and every broker makes a
// pass over its queue each interval. When ctx is done each worker shuts down
// as Worker.Run describes (within its WithShutdownTimeout, giving unfinished
// tasks back), the brokers stop, and Run returns. It returns the workers' and
// brokers' errors joined (ErrClosed for a store that was closed; a worker's
// *ShutdownError for tasks it stopped without settling), nil after a clean
// stop; ErrClosed if the Client was shut down before, ErrRunning if it
// is already running.
func (c *Client) Run(ctx context.Context) error {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrClosed
	case c.started:
		c.mu.Unlock()
		return fmt.Errorf("%w: client of %v", ErrRunning, c.Queues())
	}
	c.started = true
	mctx, stopMaint := context.WithCancel(ctx)
	c.stopMaint = stopMaint
	c.mu.Unlock()
	defer close(c.done)
	defer stopMaint()

	c.logger.InfoContext(ctx, "client started", "queues", c.Queues())
	errs := make([]error, len(c.workers)+len(c.brokers))
	var workers, brokers sync.WaitGroup
	for i, w := range c.workers {
		workers.Go(func() {
			// A worker that Shutdown reached before it started returns
			// ErrClosed itself: that is a clean stop.
			if err := w.Run(ctx); err != ErrClosed { //nolint:errorlint // the worker's own sentinel, unwrapped
				errs[i] = err
			}
		})
	}
	for i, b := range c.brokers {
		brokers.Go(func() { errs[len(c.workers)+i] = b.Run(mctx) })
	}
	if c.scheduler != nil {
		brokers.Go(func() { _ = c.scheduler.Run(mctx) }) // nil at its end; ran before is impossible
	}
	workers.Wait()
	stopMaint()
	brokers.Wait()
	c.logger.InfoContext(context.WithoutCancel(ctx), "client stopped")
	return errors.Join(errs...)
}

// Shutdown stops the Client: its brokers and its scheduler stop at once, and its workers stop
// popping and wait for their running handlers until ctx is done, as
// Worker.Shutdown describes. It returns nil once every task is settled and
// Run has returned; a worker that stopped with tasks it could not settle
// makes it a *ShutdownError naming them.
//
// If ctx ends first, Shutdown returns then, even if a handler ignores its
// context, with a *ShutdownError naming the tasks still held in every queue.
// Nothing is lost: their leases lapse and a broker (of this process or
// another) decides them by the retry policy. A handler still running keeps
// its goroutine until it returns; nothing else of the Client outlives
// Shutdown.
//
// It is safe to call more than once and from any goroutine; on a Client that
// never ran it only prevents Run.
func (c *Client) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	started := c.started
	c.closed = true
	stopMaint := c.stopMaint
	c.mu.Unlock()
	if !started {
		for _, w := range c.workers {
			_ = w.Shutdown(ctx)
		}
		return nil
	}
	stopMaint()
	errs := make([]error, len(c.workers))
	var wg sync.WaitGroup
	for i, w := range c.workers {
		wg.Go(func() { errs[i] = w.Shutdown(ctx) })
	}
	wg.Wait()
	<-c.done
	var held []Claim
	var cause error
	unsettled := false
	for _, err := range errs {
		if se, ok := err.(*ShutdownError); ok {
			held = append(held, se.Held...)
			unsettled = true
			if cause == nil {
				cause = se.Err
			}
		}
	}
	if !unsettled {
		return nil
	}
	if ctx.Err() != nil {
		cause = ctx.Err()
	}
	return &ShutdownError{Held: held, Err: cause}
}

// ClientStats is a snapshot of a Client's counters: its workers' by queue,
// and its brokers' summed.
type ClientStats struct {
	Queues map[string]WorkerStats
	Broker BrokerStats
	// Scheduler counts the occurrences of the WithPeriodic schedules.
	Scheduler SchedulerStats
}

// Stats returns a snapshot of the Client's counters.
func (c *Client) Stats() ClientStats {
	st := ClientStats{Queues: make(map[string]WorkerStats, len(c.workers))}
	for i, w := range c.workers {
		st.Queues[c.specs[i].name] = w.Stats()
	}
	for _, b := range c.brokers {
		s := b.Stats()
		st.Broker.Passes += s.Passes
		st.Broker.Promoted += s.Promoted
		st.Broker.Claimed += s.Claimed
		st.Broker.Requeued += s.Requeued
		st.Broker.Finalized += s.Finalized
		st.Broker.Recovered += s.Recovered
		st.Broker.StaleDropped += s.StaleDropped
		st.Broker.StoreErrors += s.StoreErrors
	}
	if c.scheduler != nil {
		st.Scheduler = c.scheduler.Stats()
	}
	return st
}
