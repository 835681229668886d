package core

import (
	"fmt"
	"log/slog"
	"time"
)

// The options of the consumer API are functional options, one style for every
// constructor: a variadic list of values, each a small interface that the
// components it makes sense for implement, so the compiler rejects an option
// given where it means nothing. A struct of settings (River's Config) would
// need zero values to mean "default" and could not refuse a field given to
// the wrong component; options keep the defaults in one place and every
// check in the constructor.
//
//	Option        (WithClock, WithLogger,            Queue, Worker, Broker, Client
//	               WithMeterProvider, WithTracerProvider)
//	RunnerOption  (WithRetryPolicy, WithBatchSize)   Worker, Broker, Client
//	WorkerOption  (WithConcurrency, WithLease, ...)  Worker; a Client's WithQueue
//	BrokerOption  (WithQueues, WithInterval, ...)    Broker; a Client's WithMaintenance
//	ClientOption  (WithQueue, WithMaintenance, ...)  Client
//
// A Client passes its Option and RunnerOption values (the clock, the logger,
// the telemetry providers) to every worker and broker it builds; the options
// of one queue (WithQueue) come after them and win. The Client's clock is
// given once, to NewClient: WithClock inside WithQueue or WithMaintenance is
// refused.
//
// An out-of-range value makes the constructor return ErrInvalidArgument.

// common holds the settings shared by every component.
type common struct {
	clock     Clock
	logger    *slog.Logger
	telemetry telemetry // the OpenTelemetry providers (telemetry.go)
	err       error     // the first invalid option
	// fixedClock: the clock is a Client's and WithClock is refused.
	fixedClock bool
}

func (c *common) init() {
	c.clock = SystemClock{}
	c.logger = slog.New(slog.DiscardHandler)
}

func (c *common) invalid(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
	}
}

// runner holds the settings shared by the Worker and the Broker.
type runner struct {
	retry RetryPolicy
	batch int // 0: the component's default
}

// QueueOption configures a Queue. Option values are QueueOptions.
type QueueOption interface{ applyQueue(*Queue) }

// WorkerOption configures a Worker. Option and RunnerOption values are
// WorkerOptions.
type WorkerOption interface{ applyWorker(*Worker) }

// BrokerOption configures a Broker. Option and RunnerOption values are
// BrokerOptions.
type BrokerOption interface{ applyBroker(*Broker) }

// Option configures any of Queue, Worker and Broker.
type Option func(*common)

func (o Option) applyQueue(q *Queue)   { o(&q.common) }
func (o Option) applyWorker(w *Worker) { o(&w.common) }
func (o Option) applyBroker(b *Broker) { o(&b.common) }
func (o Option) applyClient(c *Client) { o(&c.common) }

// WithClock sets the clock the component reads the time from and waits on
// (default SystemClock). In tests, pass the FakeClock the store judges leases
// by, so that advancing it drives heartbeats, polls and broker passes.
func WithClock(c Clock) Option {
	return func(s *common) {
		if c == nil {
			s.invalid("nil clock")
			return
		}
		if s.fixedClock {
			s.invalid("WithClock given to one queue or to the maintenance of a Client: give the clock once, to NewClient")
			return
		}
		s.clock = c
	}
}

// WithLogger sets the structured logger (default: discard everything).
// Stale decisions are logged at debug level, lost leases at info, store
// errors at warn or error.
func WithLogger(l *slog.Logger) Option {
	return func(s *common) {
		if l == nil {
			s.invalid("nil logger")
			return
		}
		s.logger = l
	}
}

// RunnerOption configures a Worker or a Broker.
type RunnerOption func(*common, *runner)

func (o RunnerOption) applyWorker(w *Worker) { o(&w.common, &w.runner) }
func (o RunnerOption) applyBroker(b *Broker) { o(&b.common, &b.runner) }
func (o RunnerOption) applyClient(c *Client) {
	c.workerOpts = append(c.workerOpts, o)
	c.brokerOpts = append(c.brokerOpts, o)
}

// WithRetryPolicy sets the policy that decides whether a failed attempt runs
// again, and when (default DefaultRetryPolicy). A Worker consults it when a
// handler returns an error or panics; a Broker when a lease lapsed.
func WithRetryPolicy(p RetryPolicy) RunnerOption {
	return func(c *common, r *runner) {
		if p == nil {
			c.invalid("nil retry policy")
			return
		}
		r.retry = p
	}
}

// WithBatchSize sets how many tasks one store call may handle, 1..MaxBatch.
// A Worker pops, and on a BatchStore acknowledges, up to this many tasks at
// once (default: its concurrency plus its prefetch, at most MaxBatch, and
// at most what a BatchSizer store asks for: 64 on Redis); a
// Broker promotes and claims up to this many per call (default 100, and at
// most what a BatchSizer store asks for).
func WithBatchSize(n int) RunnerOption {
	return func(c *common, r *runner) {
		if n < 1 || n > MaxBatch {
			c.invalid("batch size %d outside 1..%d", n, MaxBatch)
			return
		}
		r.batch = n
	}
}

// workerOption is a WorkerOption that only a Worker accepts.
type workerOption func(*Worker)

func (o workerOption) applyWorker(w *Worker) { o(w) }

// WithConcurrency sets how many handlers a Worker runs at once (default
// DefaultConcurrency).
func WithConcurrency(n int) WorkerOption {
	return workerOption(func(w *Worker) {
		if n < 1 {
			w.invalid("concurrency %d < 1", n)
			return
		}
		w.concurrency = n
	})
}

// WithPrefetch sets the most tasks a Worker may hold claimed beyond its
// concurrency, 0..MaxBatch (default: DefaultPrefetchFactor times its
// concurrency, at least MinDefaultPrefetch and at most MaxBatch; 0 turns
// prefetching off). A task claimed ahead waits, its lease renewed by
// heartbeats like a running task's, until one of the worker's handlers
// returns, and then runs: the store call that records a handler's outcome
// and claims the next task travels while another handler runs, instead of
// between them. Those calls are the ones that claim ahead; the Pop of an
// idle worker claims no more than its concurrency.
//
// The worker claims ahead only while its handlers run, on recent evidence,
// no longer than such a call takes, and then only as many tasks as its
// slots finish while one call travels: its concurrency times the call's
// time over a handler's (rounded up), up to n. A task claimed ahead so
// waits about as long as a call takes, and with slower handlers the worker
// holds no more claims than its concurrency, so a task is never kept
// waiting behind a long handler while another worker could run it. A
// graceful shutdown runs the tasks claimed ahead; a hard one leaves their
// leases to lapse, as it does the running tasks'.
//
// The quicker the handlers against the calls, the more tasks the worker
// holds ahead, and the more of their acknowledgements and claims one call
// carries: with handlers that return at once, the default took a task's
// time at concurrency 1 to a third of what eight ahead took over
// PostgreSQL, and to about half over Redis. A handler that turns slow
// without warning keeps the tasks claimed ahead waiting until it returns
// (their leases renewed); for handlers of very uneven length,
// WithPrefetch(0) or a small prefetch bounds that.
func WithPrefetch(n int) WorkerOption {
	return workerOption(func(w *Worker) {
		if n < 0 || n > MaxBatch {
			w.invalid("prefetch %d outside 0..%d", n, MaxBatch)
			return
		}
		w.prefetch, w.prefetchSet = n, true
	})
}

// WithLease sets the lease a Worker claims each task for (default
// DefaultLease). While the handler runs, heartbeats renew it.
func WithLease(d time.Duration) WorkerOption {
	return workerOption(func(w *Worker) {
		if d <= 0 {
			w.invalid("lease %v <= 0", d)
			return
		}
		w.lease = d
	})
}

// WithHeartbeat sets how often a Worker renews the lease of a running task
// (default: a third of the lease). It must be shorter than the lease.
func WithHeartbeat(d time.Duration) WorkerOption {
	return workerOption(func(w *Worker) {
		if d <= 0 {
			w.invalid("heartbeat %v <= 0", d)
			return
		}
		w.heartbeat = d
	})
}

// WithPollInterval sets how a Worker waits when its queue is empty: first
// min, doubling after each empty poll up to max (defaults DefaultPollMin and
// DefaultPollMax). A poll that finds work resets the wait to min.
func WithPollInterval(min, max time.Duration) WorkerOption {
	return workerOption(func(w *Worker) {
		if min <= 0 || max < min {
			w.invalid("poll interval %v..%v", min, max)
			return
		}
		w.pollMin, w.pollMax = min, max
	})
}

// WithShutdownTimeout sets how long Worker.Run, once its context is done,
// waits for running handlers to finish before it cancels them and gives their
// tasks back (default DefaultShutdownTimeout). Worker.Shutdown takes its
// deadline from its own context instead.
func WithShutdownTimeout(d time.Duration) WorkerOption {
	return workerOption(func(w *Worker) {
		if d < 0 {
			w.invalid("shutdown timeout %v < 0", d)
			return
		}
		w.shutdownTimeout = d
	})
}

// WithTimeout sets the attempt timeout of a Worker's tasks (default: none): the
// handler's context is cancelled d after the attempt starts, measured on the
// Clock, with a cause for which errors.Is(cause, ErrAttemptTimeout) holds, and
// the attempt is a failed one for the retry policy, whatever the handler
// returns after. A timeout stored with a task replaces it for that task.
// Heartbeats renew the lease until the handler returns, so a timeout may be
// longer than the lease.
func WithTimeout(d time.Duration) WorkerOption {
	return workerOption(func(w *Worker) {
		if d <= 0 {
			w.invalid("attempt timeout %v <= 0", d)
			return
		}
		w.timeout = d
	})
}

// brokerOption is a BrokerOption that only a Broker accepts.
type brokerOption func(*Broker)

func (o brokerOption) applyBroker(b *Broker) { o(b) }

// WithQueues names the queues a Broker tends. At least one is required.
func WithQueues(names ...string) BrokerOption {
	return brokerOption(func(b *Broker) {
		for _, n := range names {
			if err := ValidateQueueName(n); err != nil {
				if b.err == nil {
					b.err = err
				}
				return
			}
		}
		b.queues = append(b.queues, names...)
	})
}

// WithInterval sets the time between two passes of Broker.Run (default
// DefaultBrokerInterval).
func WithInterval(d time.Duration) BrokerOption {
	return brokerOption(func(b *Broker) {
		if d <= 0 {
			b.invalid("interval %v <= 0", d)
			return
		}
		b.interval = d
	})
}

// WithClaimTTL sets how long a Broker's claim on an expired task lasts
// (default DefaultClaimTTL). The retry policy and the decision must complete
// within it; if they do not, the claim lapses and a later pass (of this or
// another broker) claims the task again, and this broker's decision is
// dropped as stale.
func WithClaimTTL(d time.Duration) BrokerOption {
	return brokerOption(func(b *Broker) {
		if d <= 0 {
			b.invalid("claim TTL %v <= 0", d)
			return
		}
		b.claimTTL = d
	})
}

// WithRecoverExpired makes the Broker recover expired tasks in one atomic
// step (Store.RecoverExpired) instead of claiming them and consulting the
// retry policy: a task with attempts left runs again after delay, any other
// fails. Use it when a fixed delay is all the policy you need.
func WithRecoverExpired(delay time.Duration) BrokerOption {
	return brokerOption(func(b *Broker) {
		if delay < 0 {
			b.invalid("recovery delay %v < 0", delay)
			return
		}
		b.oneStep, b.recoverDelay = true, delay
	})
}
