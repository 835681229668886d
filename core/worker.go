package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// Handler runs one attempt of a task. The claim identifies the attempt:
// c.Token is larger for every later claim of the same task, so a handler can
// fence its own side effects with it (a downstream store that refuses a write
// carrying a smaller token than the last one it accepted can never be written
// by a worker whose claim was superseded).
//
// Returning a nil error acknowledges the task with result. Any other error is
// a failed attempt, which the retry policy decides, unless it is wrapped with
// Permanent, which fails the task at once. A panic is a failed attempt too
// (a *PanicError).
//
// ctx is cancelled when the attempt can no longer decide the task, with a
// cause telling why: context.Cause(ctx) is an error for which
// errors.Is(cause, ErrClaimSuperseded) holds when the claim was superseded
// (the lease lapsed and a broker or an operator acted), or ErrWorkerStopped
// when the worker shut down before the handler finished. A handler must
// return soon after ctx is done; what it returns then is discarded.
type Handler func(ctx context.Context, c Claim, t Task) (result []byte, err error)

// The causes a Worker cancels a handler's context with.
var (
	// ErrClaimSuperseded: the handler's claim no longer holds its task; a
	// heartbeat or decision was answered ErrStaleClaim or an
	// ErrInvalidTransition. The cause wraps that answer too.
	ErrClaimSuperseded = errors.New("leasehold: claim superseded")
	// ErrWorkerStopped: the worker shut down and gave the task back before
	// the handler finished.
	ErrWorkerStopped = errors.New("leasehold: worker shut down before the handler finished")
)

// Defaults of a Worker.
const (
	DefaultConcurrency     = 10
	DefaultLease           = 30 * time.Second
	DefaultPollMin         = 100 * time.Millisecond
	DefaultPollMax         = 5 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
)

// Worker runs a Handler on the tasks of one queue, with a fixed number of
// concurrent slots.
//
// It pops tasks in batches of up to the number of free slots (WithBatchSize
// caps it), each under a lease (WithLease). While a handler runs, the worker
// renews the lease by heartbeat (WithHeartbeat, default a third of the lease),
// so only a worker that stalls or loses the store loses its lease. When the
// handler returns, the worker records the outcome through the claim: Ack on
// success; Fail for a Permanent error or when the retry policy gives up; Retry
// otherwise. When the store answers a heartbeat or a decision with
// ErrStaleClaim (or an ErrInvalidTransition: the claim no longer decides the
// task), the claim was superseded: the worker cancels the handler's context
// with a cause wrapping ErrClaimSuperseded, counts a lost lease and records
// nothing for that attempt.
//
// When the queue is empty it polls with exponential backoff (WithPollInterval)
// through its Clock. It never promotes Scheduled tasks: run a Broker for that.
//
// A store error other than those is logged and counted: a failed heartbeat is
// tried again at the next beat, a failed decision is not repeated, and the
// lease lapses so that a Broker decides the task.
//
// The delay a retry policy returns is measured from the worker's Clock: the
// task's run-after time is the worker's now plus the delay. (Only the lease,
// which the store judges by its own clock, must not depend on the worker's
// clock; a skewed worker clock shifts a retry by the skew.)
//
// A Worker runs once: Run, then Shutdown (or cancel Run's context).
type Worker struct {
	common
	runner
	store   Store
	queue   string
	handler Handler

	concurrency     int
	lease           time.Duration
	heartbeat       time.Duration
	pollMin         time.Duration
	pollMax         time.Duration
	shutdownTimeout time.Duration

	stats workerCounters

	mu      sync.Mutex
	started bool
	closed  bool

	slots       chan struct{} // one token per running task
	jobs        sync.WaitGroup
	stopping    chan struct{} // closed: stop popping
	abandon     chan struct{} // closed: cancel running handlers, give their tasks back
	drained     chan struct{} // closed: the fetch loop exited and every task is settled
	done        chan struct{} // closed: Run returned
	stopOnce    sync.Once
	abandonOnce sync.Once
	runErr      error // set by the fetch loop before it returns
}

// NewWorker returns a Worker that runs handler on the tasks of the named
// queue. It does not start it: call Run.
func NewWorker(store Store, queue string, handler Handler, opts ...WorkerOption) (*Worker, error) {
	if store == nil || handler == nil {
		return nil, fmt.Errorf("%w: nil store or handler", ErrInvalidArgument)
	}
	if err := ValidateQueueName(queue); err != nil {
		return nil, err
	}
	w := &Worker{
		store:           store,
		queue:           queue,
		handler:         handler,
		concurrency:     DefaultConcurrency,
		lease:           DefaultLease,
		pollMin:         DefaultPollMin,
		pollMax:         DefaultPollMax,
		shutdownTimeout: DefaultShutdownTimeout,
		runner:          runner{retry: DefaultRetryPolicy},
		stopping:        make(chan struct{}),
		abandon:         make(chan struct{}),
		drained:         make(chan struct{}),
		done:            make(chan struct{}),
	}
	w.init()
	for _, o := range opts {
		o.applyWorker(w)
	}
	if w.err != nil {
		return nil, w.err
	}
	if w.heartbeat == 0 {
		w.heartbeat = w.lease / 3
	}
	if w.heartbeat <= 0 || w.heartbeat >= w.lease {
		return nil, fmt.Errorf("%w: heartbeat %v must be shorter than the lease %v", ErrInvalidArgument, w.heartbeat, w.lease)
	}
	if w.batch == 0 {
		w.batch = min(w.concurrency, MaxBatch)
	}
	w.batch = min(w.batch, w.concurrency)
	w.slots = make(chan struct{}, w.concurrency)
	w.logger = w.logger.With("queue", queue)
	return w, nil
}

// Run pops and handles tasks until ctx is done or Shutdown is called, and
// returns nil once every task it claimed is settled and every goroutine it
// started has returned. If the store answers a Pop with ErrClosed, Run stops
// the same way and returns that error.
//
// When ctx is done, Run stops popping and waits for running handlers to
// finish, recording their outcomes, for at most the shutdown timeout
// (WithShutdownTimeout, measured on the Clock). Then it cancels the handlers
// still running (cause ErrWorkerStopped), gives their tasks back and waits for
// the handlers to return. A task is given back with Retry through its claim
// and run-after = now: it is Ready at once for another worker, the attempt it
// used is counted and the entry "leasehold: worker shut down before the
// handler finished" joins its error history. Work that did not finish is
// never acknowledged.
//
// Handler contexts carry the values of ctx but are not cancelled with it.
// Run returns ErrClosed if the worker was shut down before, and
// ErrInvalidArgument if it is already running.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	switch {
	case w.closed:
		w.mu.Unlock()
		return ErrClosed
	case w.started:
		w.mu.Unlock()
		return fmt.Errorf("%w: worker is already running", ErrInvalidArgument)
	}
	w.started = true
	w.mu.Unlock()
	defer close(w.done)

	w.logger.InfoContext(ctx, "worker started", "concurrency", w.concurrency, "lease", w.lease)
	base := context.WithoutCancel(ctx)
	var watcher sync.WaitGroup
	watcher.Go(func() { w.watch(ctx) })
	w.fetch(base)
	w.jobs.Wait()
	close(w.drained)
	watcher.Wait()

	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.logger.InfoContext(base, "worker stopped", "err", w.runErr)
	return w.runErr
}

// Shutdown stops the worker: it stops popping at once and waits for running
// handlers to finish, recording their outcomes, until ctx is done. Then it
// cancels the handlers still running (cause ErrWorkerStopped), gives their
// tasks back as Run describes, and waits for Run to return. It returns nil if
// every handler finished in time, else ctx.Err(). It is safe to call more
// than once and from any goroutine; on a worker that never ran it only
// prevents Run.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.mu.Lock()
	started := w.started
	w.closed = true
	w.mu.Unlock()
	w.stop()
	if !started {
		return nil
	}
	select {
	case <-w.drained:
	case <-ctx.Done():
		w.abandonRunning()
		<-w.done
		return ctx.Err()
	}
	<-w.done
	return nil
}

// Stats returns a snapshot of the worker's counters.
func (w *Worker) Stats() WorkerStats { return w.stats.snapshot() }

func (w *Worker) stop()           { w.stopOnce.Do(func() { close(w.stopping) }) }
func (w *Worker) abandonRunning() { w.abandonOnce.Do(func() { close(w.abandon) }) }

// watch turns the end of Run's context into a shutdown with the configured
// timeout.
func (w *Worker) watch(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-w.drained:
		return
	}
	w.stop()
	if w.shutdownTimeout == 0 {
		w.abandonRunning()
		return
	}
	t := w.clock.NewTimer(w.shutdownTimeout)
	select {
	case <-t.C():
		w.abandonRunning()
	case <-w.drained:
		t.Stop()
	}
}

// fetch pops tasks while slots are free, until the worker stops.
func (w *Worker) fetch(base context.Context) {
	wait := w.pollMin
	for {
		if closed(w.stopping) {
			return
		}
		select {
		case w.slots <- struct{}{}:
		case <-w.stopping:
			return
		}
		n := 1
		for n < w.batch && tryAcquire(w.slots) {
			n++
		}
		res, err := w.store.Pop(base, PopParams{Queue: w.queue, Lease: w.lease, N: n})
		for range n - len(res.Tasks) {
			<-w.slots
		}
		if err != nil {
			w.stats.storeErrors.Add(1)
			if errors.Is(err, ErrClosed) {
				w.logger.ErrorContext(base, "the store is closed; the worker stops", "err", err)
				w.runErr = fmt.Errorf("leasehold: worker of queue %s: %w", w.queue, err)
				w.stop()
				return
			}
			w.logger.WarnContext(base, "pop failed", "err", err)
		}
		w.stats.popped.Add(int64(len(res.Tasks)))
		for _, t := range res.Tasks {
			w.jobs.Add(1)
			go w.process(base, t)
		}
		if len(res.Tasks) > 0 {
			wait = w.pollMin
			continue
		}
		t := w.clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-w.stopping:
			t.Stop()
			return
		}
		wait = min(2*wait, w.pollMax)
	}
}

// outcome is what a handler returned.
type outcome struct {
	result []byte
	err    error
}

// process runs one claimed task: the handler in its own goroutine, the
// heartbeat and the shutdown signal here. It returns once the handler has
// returned and the task is settled.
func (w *Worker) process(base context.Context, t Task) {
	defer w.jobs.Done()
	defer func() { <-w.slots }()
	c := t.Claim()
	log := w.logger.With("task", t.ID, "token", c.Token, "attempt", c.Attempt)
	if closed(w.stopping) {
		// Popped while the worker was stopping: give it back unstarted.
		w.giveBack(base, c, log)
		return
	}

	ctx, cancel := context.WithCancelCause(base)
	defer cancel(nil)
	out := make(chan outcome, 1)
	go w.call(ctx, c, t, out)

	beat := w.clock.NewTimer(w.heartbeat)
	beatC := beat.C()
	stopBeat := func() {
		if beatC != nil {
			beat.Stop()
			beatC = nil
		}
	}
	abandon := w.abandon
	settled := false // the claim was given back or superseded: record nothing
	finish := func(o outcome) {
		stopBeat()
		if !settled {
			w.decide(base, cancel, c, t, o, log)
		} else {
			log.DebugContext(base, "handler outcome discarded", "err", o.err)
		}
	}
	for {
		select {
		case o := <-out:
			finish(o)
			return
		case <-beatC:
			beatC = nil
			if w.extend(base, c, cancel, log) {
				beat = w.clock.NewTimer(w.heartbeat)
				beatC = beat.C()
			} else {
				settled = true
			}
		case <-abandon:
			abandon = nil
			select {
			case o := <-out: // finished just now: record it
				finish(o)
				return
			default:
			}
			stopBeat()
			if !settled {
				settled = true
				cancel(ErrWorkerStopped)
				w.giveBack(base, c, log)
			}
		}
	}
}

// call runs the handler, turning a panic (or runtime.Goexit) into an error.
func (w *Worker) call(ctx context.Context, c Claim, t Task, out chan<- outcome) {
	var o outcome
	returned := false
	defer func() {
		if !returned {
			r := recover()
			if r == nil {
				r = "handler exited without returning (runtime.Goexit)"
			}
			o = outcome{err: &PanicError{Value: r, Stack: debug.Stack()}}
			w.stats.panics.Add(1)
		}
		out <- o
	}()
	o.result, o.err = w.handler(ctx, c, t)
	returned = true
}

// extend renews the lease; it reports false when the claim was superseded.
func (w *Worker) extend(base context.Context, c Claim, cancel context.CancelCauseFunc, log *slog.Logger) bool {
	_, err := w.store.Extend(base, ExtendParams{Claim: c, Lease: w.lease})
	switch {
	case err == nil:
		w.stats.extended.Add(1)
		return true
	case superseded(err):
		w.lost(base, cancel, err, log)
		return false
	default:
		w.stats.storeErrors.Add(1)
		log.WarnContext(base, "heartbeat failed; trying again at the next beat", "err", err)
		return true
	}
}

// decide records the handler's outcome through the claim.
func (w *Worker) decide(base context.Context, cancel context.CancelCauseFunc, c Claim, t Task, o outcome, log *slog.Logger) {
	var err error
	var counter *counter
	var msg string
	switch {
	case o.err == nil:
		_, err = w.store.Ack(base, AckParams{Claim: c, Result: o.result})
		counter, msg = &w.stats.acked, "task acknowledged"
	case IsPermanent(o.err):
		_, err = w.store.Fail(base, FailParams{Claim: c, Message: o.err.Error()})
		counter, msg = &w.stats.failed, "task failed permanently"
	default:
		now := w.clock.Now()
		failed := t
		failed.Errors = append(failed.Errors[:len(failed.Errors):len(failed.Errors)],
			TaskError{Attempt: t.Attempt, At: now, Message: o.err.Error()})
		delay, retry := consult(w.retry, failed, o.err, w.logger)
		if retry {
			var runAfter time.Time
			if delay > 0 {
				runAfter = now.Add(delay)
			}
			_, err = w.store.Retry(base, RetryParams{Claim: c, RunAfter: runAfter, Message: o.err.Error()})
			counter, msg = &w.stats.retried, "task will be retried"
		} else {
			_, err = w.store.Fail(base, FailParams{Claim: c, Message: o.err.Error()})
			counter, msg = &w.stats.failed, "task failed: no retry left"
		}
	}
	switch {
	case err == nil:
		counter.Add(1)
		log.DebugContext(base, msg, "handler_err", o.err)
	case superseded(err):
		w.stats.staleDecisions.Add(1)
		w.lost(base, cancel, err, log)
	default:
		w.stats.storeErrors.Add(1)
		log.ErrorContext(base, "recording the outcome failed; the lease will lapse and a broker will decide the task",
			"err", err, "handler_err", o.err)
	}
}

// lost handles a superseded claim: count it and tell the handler.
func (w *Worker) lost(base context.Context, cancel context.CancelCauseFunc, err error, log *slog.Logger) {
	w.stats.leasesLost.Add(1)
	log.InfoContext(base, "claim superseded; cancelling the handler", "err", err)
	cancel(fmt.Errorf("%w: %w", ErrClaimSuperseded, err))
}

// giveBack returns an unfinished task to the queue through its claim.
func (w *Worker) giveBack(base context.Context, c Claim, log *slog.Logger) {
	_, err := w.store.Retry(base, RetryParams{Claim: c, Message: ErrWorkerStopped.Error()})
	switch {
	case err == nil:
		w.stats.released.Add(1)
		log.InfoContext(base, "unfinished task given back")
	case superseded(err):
		w.stats.leasesLost.Add(1)
		log.InfoContext(base, "unfinished task was already superseded", "err", err)
	default:
		w.stats.storeErrors.Add(1)
		log.ErrorContext(base, "giving the task back failed; the lease will lapse and a broker will decide the task", "err", err)
	}
}

// consult runs a retry policy, falling back on DefaultRetryPolicy if it
// panics.
func consult(p RetryPolicy, t Task, cause error, log *slog.Logger) (delay time.Duration, retry bool) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("retry policy panicked; using the default policy", "task", t.ID, "panic", r)
			delay, retry = DefaultRetryPolicy(t, cause)
		}
	}()
	return p(t, cause)
}

// superseded reports whether a store answer means the claim no longer
// decides its task.
func superseded(err error) bool {
	return errors.Is(err, ErrStaleClaim) || errors.Is(err, ErrInvalidTransition)
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func tryAcquire(slots chan struct{}) bool {
	select {
	case slots <- struct{}{}:
		return true
	default:
		return false
	}
}
