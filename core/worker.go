package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	// ErrInvalidTransition. The cause wraps that answer too: when an
	// operator cancelled the task, errors.Is(cause, ErrCancelled) holds.
	ErrClaimSuperseded = errors.New("leasehold: claim superseded")
	// ErrWorkerStopped: the worker shut down and gave the task back before
	// the handler finished.
	ErrWorkerStopped = errors.New("leasehold: worker shut down before the handler finished")
	// ErrAttemptTimeout: the attempt ran past its timeout (WithTimeout, or
	// the task's own). The attempt is a failed one, for the retry policy.
	ErrAttemptTimeout = errors.New("leasehold: attempt timed out")
)

// ErrRunning is returned by Run when the Worker, Broker or Client is already
// running.
var ErrRunning = errors.New("leasehold: already running")

// ShutdownError is returned by Shutdown when its context ended before every
// task was settled, and by Run (and then by Shutdown too) when the worker
// stopped with tasks it could not settle. Held lists the claims the worker
// left to lapse: their handlers had not returned at a hard stop, or the
// store call recording their outcome or giving them back did not complete
// once the worker had begun to stop (a store down, or still busy at the
// last send after the shutdown timeout). Nothing is lost: the worker no
// longer renews their leases, so each lapses and a Broker (of any process)
// decides the task through its retry policy, as for a worker that crashed.
// A handler still running is not waited for; its goroutine ends when the
// handler returns, and what it returns is discarded.
//
// Err is what ended the worker's wait: Shutdown's context's error, or for
// Run its own context's, ErrClosed when Shutdown stopped it without a
// deadline or the store was closed. errors.Is(err, context.DeadlineExceeded)
// (or context.Canceled, ErrClosed) holds for it.
type ShutdownError struct {
	Held []Claim
	Err  error // what ended the wait
}

// Error names the held tasks.
func (e *ShutdownError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "leasehold: shutdown ended (%v) with %d task(s) still held; their leases will lapse and a broker will decide them:", e.Err, len(e.Held))
	for i, c := range e.Held {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s/%s (token %d)", c.Queue, c.TaskID, c.Token)
	}
	return b.String()
}

// Unwrap returns the context's error.
func (e *ShutdownError) Unwrap() error { return e.Err }

// Defaults of a Worker.
const (
	DefaultConcurrency     = 10
	DefaultLease           = 30 * time.Second
	DefaultPollMin         = 100 * time.Millisecond
	DefaultPollMax         = 5 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultPrefetchFactor and MinDefaultPrefetch make a Worker's default
	// prefetch (WithPrefetch): DefaultPrefetchFactor times its
	// concurrency, at least MinDefaultPrefetch, at most MaxBatch.
	DefaultPrefetchFactor = 7
	MinDefaultPrefetch    = 64
)

// Worker runs a Handler on the tasks of one queue, with a fixed number of
// concurrent slots.
//
// It pops tasks in batches of up to the number of free slots (WithBatchSize
// caps it; without it, a store that implements BatchSizer caps it: 64 on
// Redis), each under a lease (WithLease). A slot is a claim the worker
// holds: it runs at most its concurrency of handlers at once, and while
// its handlers run no longer than the store call that claims tasks takes
// (measured as it goes), it holds more claims besides, as many as its slots
// finish while one such call travels, up to WithPrefetch (default: seven
// times its concurrency, at least 64). Their tasks wait, leases renewed,
// and start in the order claimed as handlers return: the call that records
// an outcome and claims the next task then travels while another handler
// runs, not between two handlers. With slower handlers it claims no more
// than its concurrency. While a handler runs, the worker
// renews the lease by heartbeat (WithHeartbeat, default a third of the lease):
// one heartbeat loop per worker extends the claims that are due, so only a
// worker that stalls or loses the store loses its lease. When the handler
// returns, the worker records the outcome through the claim: Ack on success;
// Fail for a Permanent error or when the retry policy gives up; Retry
// otherwise. When the store answers a heartbeat or a decision with
// ErrStaleClaim (or an ErrInvalidTransition: the claim no longer decides the
// task), the claim was superseded: the worker cancels the handler's context
// with a cause wrapping ErrClaimSuperseded, counts a lost lease and records
// nothing for that attempt. A claim the worker itself decided is never
// counted lost: a heartbeat that meets the worker's own decision is ignored,
// and an Ack answered "invalid transition from succeeded" (the store saw that
// very Ack twice) counts as acknowledged.
//
// On a store that implements BatchStore, successes are acknowledged in
// batches (AckBatch): an Ack waits for the others until the batch is full,
// for at most a short linger (AckLinger, in real time), and not at all when
// no other handler runs. The batch claims the next tasks in the same call
// (AckBatchParams.Pop): one per slot its successes free and one per slot
// free besides, up to the batch size, so at concurrency 1 a task costs one
// round trip to the store, its ack and the next task's claim. When no other
// task of the worker runs or waits for its ack and no Pop is out, the
// goroutine that ran the handler sends that AckBatch itself and runs the
// task it claims next, without a hand-off to another goroutine. A success's
// slot stays taken until that call is answered (the slot the next task
// takes), and no batch claims once the worker stops popping. Each item's
// answer is handled as a single Ack's would be, and the claimed tasks as a
// Pop's. Fail and Retry are single calls. On a store that implements
// AckFlighter (the Redis adapter), up to its AckFlights such AckBatch calls
// are out at once, each with its share of the batch size: the successes
// that come while one is out go out in the next, without waiting for its
// answer.
//
// When the queue is empty it polls with exponential backoff (WithPollInterval)
// through its Clock; with a store that implements Notifier it also pops as
// soon as the store says the queue may have gained a task. It never promotes Scheduled tasks: run a Broker for that.
//
// A store error other than those is logged and counted: a failed heartbeat is
// tried again at the next beat, a failed decision is not repeated, and the
// lease lapses so that a Broker decides the task. The exception is ErrBusy,
// which says the store did not run the call (a SQLite database locked by
// another connection past its busy timeout): the worker sends that decision
// again, after a pause that doubles from 5 ms up to 1 s (real time), until
// the store answers otherwise or the worker abandons its tasks (Shutdown's
// context ends, or WithShutdownTimeout passes after Run's context ended);
// WorkerStats counts each such answer in BusyResends and in StoreErrors.
//
// A retry runs on the store's clock: the worker passes the retry policy's
// delay and the store adds it to its own reading, so a worker whose clock is
// skewed, or jumps, retries on the store's schedule. (The failure the policy
// sees is dated by the worker's estimate of the store's clock: the Now of
// the last store answer it saw plus the time elapsed since on its own
// clock.)
//
// An attempt timeout (WithTimeout for the queue, or the task's own timeout,
// which wins) puts a deadline on the handler's context, measured on the
// Clock; when it passes the context is cancelled with a cause wrapping
// ErrAttemptTimeout, and the attempt is a failed one whatever the handler
// then returns. Heartbeats go on until the handler returns, so a timeout
// longer than the lease keeps the task.
//
// Every store call has a deadline: a Pop and a decision (Ack, Fail, Retry)
// the lease (between 15/16 of a lease and a whole lease from the call's
// start: such calls share one deadline, moved on as time passes), a
// heartbeat what is left of the lease it renews (at least one heartbeat
// interval). The deadlines are real time, so they apply with
// SystemClock (the default); with another Clock, whose durations need not
// pass in real time, only Shutdown's deadline bounds a call.
//
// A Worker runs once: Run, then Shutdown (or cancel Run's context). A
// graceful stop runs the tasks claimed ahead too, as it lets running
// handlers finish.
type Worker struct {
	common
	runner
	store   Store
	batcher BatchStore // store, when it is a BatchStore
	queue   string
	handler Handler

	concurrency     int
	lease           time.Duration
	heartbeat       time.Duration
	pollMin         time.Duration
	pollMax         time.Duration
	shutdownTimeout time.Duration
	timeout         time.Duration // the attempt timeout; 0: none
	prefetch        int           // claims held beyond concurrency while handlers are quick (WithPrefetch)
	prefetchSet     bool

	// gate starts the handlers, no more than concurrency at once, in the
	// order their tasks were claimed, while up to prefetch more tasks wait,
	// claimed (nil when prefetch is 0). freed is signalled when a slot is
	// released, for a fetch loop waiting for one (see acquire).
	gate  *runGate
	freed chan struct{}
	pace  pace

	stats    workerCounters
	tel      workerTelemetry
	storeNow storeClock
	beats    beatList
	acks     chan *job // successes waiting for the acker
	work     chan *job // to an idle runner
	runners  sync.WaitGroup
	nrunners atomic.Int32

	mu      sync.Mutex
	started bool
	closed  bool

	slots       chan struct{} // one token per task claimed and not yet settled
	jobs        sync.WaitGroup
	stopping    chan struct{} // closed: stop popping
	abandon     chan struct{} // closed: cancel running handlers, give their tasks back
	drained     chan struct{} // closed: the fetch loop exited and every task is settled
	done        chan struct{} // closed: Run returned
	stopOnce    sync.Once
	abandonOnce sync.Once
	runErr      error // set by the fetch loop before it returns

	popMu     sync.RWMutex // held (read) by each AckBatch that claims, from its call to its dispatch
	fetchDone bool         // set under popMu once the fetch loop returned: no batch claims then
	flights   int          // AckBatch calls kept out at once: the ack loops (AckFlighter)
	// ackHeld counts the slots the ack loops hold: those of the jobs they
	// gathered and, while an AckBatch is out, the free ones it claims with.
	ackHeld atomic.Int64

	calls       context.Context    // every store call's parent: cancelled by a hard stop
	cancelCalls context.CancelFunc // set by Run
	// The context the store calls bounded by the lease share (see call)
	// and its deadline. Each one it replaces ends at its own deadline or
	// with calls; callCancel, the current one's, is called when Run ends.
	callMu     sync.Mutex
	callCtx    context.Context
	callEnd    time.Time
	callCancel context.CancelFunc

	hard     chan struct{} // closed: Shutdown's deadline passed
	hardOnce sync.Once
	heldMu   sync.Mutex
	held     []Claim // claims left to lapse once the worker began to stop
	hardErr  error   // Shutdown's context's error, set before the hard stop (heldMu)
	result   error   // what Run returned, set before done is closed
}

// AckLinger is the longest a Worker on a BatchStore holds a handler's
// success back to acknowledge it together with others.
const AckLinger = time.Millisecond

// NewWorker returns a Worker that runs handler on the tasks of the named
// queue. It does not start it: call Run.
func NewWorker(store Store, queue string, handler Handler, opts ...WorkerOption) (*Worker, error) {
	return newWorker(store, queue, handler, nil, opts)
}

// newWorker is NewWorker with the common settings of a Client (nil: the
// defaults).
func newWorker(store Store, queue string, handler Handler, preset *common, opts []WorkerOption) (*Worker, error) {
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
		hard:            make(chan struct{}),
	}
	w.init()
	if preset != nil {
		w.common = *preset
	}
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
	if !w.prefetchSet {
		w.prefetch = MaxBatch
		if w.concurrency < MaxBatch { // (DefaultPrefetchFactor times a larger one might overflow)
			w.prefetch = min(max(DefaultPrefetchFactor*w.concurrency, MinDefaultPrefetch), MaxBatch)
		}
	}
	claims := w.concurrency + w.prefetch
	if w.batch == 0 {
		w.batch = storeBatch(store, min(claims, MaxBatch))
	}
	w.batch = min(w.batch, claims)
	w.slots = make(chan struct{}, claims)
	w.freed = make(chan struct{}, 1)
	if w.prefetch > 0 {
		w.gate = &runGate{limit: w.concurrency}
	}
	if bs, ok := store.(BatchStore); ok {
		w.batcher = bs
		w.acks = make(chan *job, claims)
		w.flights = 1
		if f, ok := store.(AckFlighter); ok {
			w.flights = min(max(f.AckFlights(), 1), w.batch)
		}
	}
	w.beats.init()
	w.work = make(chan *job)
	w.logger = w.logger.With("queue", queue)
	w.tel = newWorkerTelemetry(&w.common, queue)
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
// A handler that has not returned when its task is given back is not waited
// for: Run returns without it, and its goroutine ends when the handler
// returns.
//
// If a task could not be settled once the worker began to stop (the store
// call giving it back or recording its outcome failed, or was still
// answered ErrBusy at its last send after the shutdown timeout), Run
// returns a *ShutdownError naming its claim, whose lease lapses for a
// Broker to decide.
//
// Handler contexts carry the values of ctx but are not cancelled with it.
// Run returns ErrClosed if the worker was shut down before, and ErrRunning
// if it is already running.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	switch {
	case w.closed:
		w.mu.Unlock()
		return ErrClosed
	case w.started:
		w.mu.Unlock()
		return fmt.Errorf("%w: worker of queue %s", ErrRunning, w.queue)
	}
	w.started = true
	w.calls, w.cancelCalls = context.WithCancel(context.WithoutCancel(ctx))
	w.mu.Unlock()
	defer close(w.done)
	defer w.cancelCalls()
	defer func() {
		w.callMu.Lock()
		defer w.callMu.Unlock()
		if w.callCancel != nil {
			w.callCancel()
		}
	}()

	w.logger.InfoContext(ctx, "worker started", "concurrency", w.concurrency, "lease", w.lease)
	base := context.WithoutCancel(ctx)
	var loops sync.WaitGroup
	loops.Go(func() { w.watch(ctx, base) })
	loops.Go(func() { w.heartbeatLoop(base) })
	for range w.flights {
		loops.Go(func() { w.ackLoop(base) })
	}
	w.fetch(base)
	w.popMu.Lock() // an AckBatch that claims has dispatched what it claimed
	w.fetchDone = true
	w.popMu.Unlock()
	close(w.work) // idle runners return
	w.jobs.Wait()
	close(w.drained)
	loops.Wait()
	w.runners.Wait()

	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.result = w.runErr
	if held := w.heldClaims(); len(held) > 0 {
		cause := w.runErr
		switch {
		case cause != nil:
		case ctx.Err() != nil:
			cause = ctx.Err()
		default:
			w.heldMu.Lock()
			cause = w.hardErr
			w.heldMu.Unlock()
			if cause == nil {
				cause = ErrClosed // a Shutdown without a deadline
			}
		}
		w.result = &ShutdownError{Held: held, Err: cause}
	}
	w.logger.InfoContext(base, "worker stopped", "err", w.result)
	return w.result
}

// Shutdown stops the worker: it stops popping at once and waits for running
// handlers to finish, recording their outcomes, until ctx is done; the tasks
// claimed ahead (WithPrefetch) run too, as handlers return. It returns nil
// once every task is settled and Run has returned, or the *ShutdownError Run
// returned naming the tasks it could not settle.
//
// If ctx ends first, Shutdown returns then, without waiting for anything it
// cannot bound: it cancels the handlers still running (cause
// ErrWorkerStopped) and every store call in flight, stops renewing leases,
// and returns a *ShutdownError naming the tasks still held. Their leases
// lapse and a Broker decides them: nothing is lost, and no unfinished work is
// acknowledged. A handler that ignores its context keeps its goroutine until
// it returns; nothing else of the worker outlives Shutdown.
//
// It is safe to call more than once and from any goroutine; on a worker that
// never ran it only prevents Run.
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
	case <-w.done:
		return w.settled()
	case <-ctx.Done():
	}
	select {
	case <-w.done: // Run returned meanwhile
		return w.settled()
	default:
	}
	w.heldMu.Lock()
	if w.hardErr == nil {
		w.hardErr = ctx.Err()
	}
	w.heldMu.Unlock()
	w.hardStop()
	<-w.done
	return &ShutdownError{Held: w.heldClaims(), Err: ctx.Err()}
}

// settled returns nil if Run, which has returned, settled every task it
// claimed, else the *ShutdownError Run returned.
func (w *Worker) settled() error {
	var se *ShutdownError
	if errors.As(w.result, &se) {
		return se
	}
	return nil
}

// hardStop cancels every store call and abandons the running handlers
// without giving their tasks back.
func (w *Worker) hardStop() {
	w.hardOnce.Do(func() {
		close(w.hard)
		w.cancelCalls()
		w.abandonRunning()
	})
}

// hold records a claim left to lapse.
func (w *Worker) hold(j *job) {
	w.heldMu.Lock()
	w.held = append(w.held, j.claim)
	w.heldMu.Unlock()
}

func (w *Worker) heldClaims() []Claim {
	w.heldMu.Lock()
	defer w.heldMu.Unlock()
	return slices.Clone(w.held)
}

// call returns the context of one store call: a child of the worker's call
// context with a deadline d from now. The calls bounded by the lease share
// one such context as long as its deadline is at most 1/callSlack of a
// lease short of a lease away, so such a call has between (1 - 1/callSlack)
// lease and one lease. A context with a deadline of its own per call costs
// a runtime timer, whose arming wakes an idle thread of the Go runtime, at
// every call (6.6% of the Worker's CPU at concurrency 1 on Redis).
func (w *Worker) call(d time.Duration) (context.Context, context.CancelFunc) {
	if _, system := w.clock.(SystemClock); !system || d != w.lease {
		return callContext(w.calls, w.clock, d)
	}
	now := time.Now()
	w.callMu.Lock()
	defer w.callMu.Unlock()
	if w.callCtx == nil || w.callEnd.Sub(now) < d-d/callSlack || w.callCtx.Err() != nil {
		// The context it replaces ends at its deadline, or with the
		// worker's call context, whichever comes first; the calls that
		// hold it keep it until then.
		w.callEnd = now.Add(d)
		w.callCtx, w.callCancel = context.WithDeadline(w.calls, w.callEnd)
	}
	return w.callCtx, func() {}
}

// callSlack: a store call bounded by the lease may get a deadline up to
// 1/callSlack of the lease short of a whole lease (see call).
const callSlack = 16

// callContext returns ctx with a deadline d from now when clock is the
// system's; another clock's durations need not pass in real time, so then
// the call is bounded only by ctx.
func callContext(ctx context.Context, clock Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if _, system := clock.(SystemClock); system {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

// Stats returns a snapshot of the worker's counters.
func (w *Worker) Stats() WorkerStats { return w.stats.snapshot() }

func (w *Worker) stop()           { w.stopOnce.Do(func() { close(w.stopping) }) }
func (w *Worker) abandonRunning() { w.abandonOnce.Do(func() { close(w.abandon) }) }

// watch turns the end of Run's context into a shutdown with the configured
// timeout, and gives the running tasks back once the worker abandons them.
func (w *Worker) watch(ctx, base context.Context) {
	select {
	case <-ctx.Done():
		w.stop()
		if w.shutdownTimeout > 0 {
			t := w.clock.NewTimer(w.shutdownTimeout)
			select {
			case <-t.C():
			case <-w.abandon: // Shutdown's own deadline came first
				t.Stop()
			case <-w.drained:
				t.Stop()
				return
			}
		}
		w.abandonRunning()
	case <-w.abandon:
	case <-w.drained:
		return
	}
	// The handlers still running are detached: their slots, jobs and
	// runners are released here, and each runner goroutine ends when its
	// handler returns.
	for _, j := range w.beats.abandonAll() {
		j.cancel(ErrWorkerStopped)
		if closed(w.hard) {
			w.hold(j)
		} else {
			w.giveBack(base, j)
		}
		w.nrunners.Add(-1)
		w.runners.Done()
		w.release(1)
		w.jobs.Done()
	}
}

// fetch pops tasks while slots are free, until the worker stops.
func (w *Worker) fetch(base context.Context) {
	wait := w.pollMin
	var wake <-chan struct{} // nil (never ready) unless the store notifies
	if n, ok := w.store.(Notifier); ok {
		ctx, cancel := context.WithCancel(base)
		defer cancel()
		wake = n.Wait(ctx, w.queue)
	}
	for {
		if closed(w.stopping) {
			return
		}
		// The fetch loop claims no more than the concurrency: it pops
		// for slots with no task, while the claims ahead ride on the
		// calls that record outcomes. (One that claimed ahead would poll
		// an empty queue while a handler runs, and sleep its backoff
		// through the moment that handler's retry or another task makes
		// work.)
		if !w.acquire() {
			return
		}
		n := 1
		for n < w.batch && w.tryClaim(w.concurrency) {
			n++
		}
		sent := w.clock.Now()
		ctx, cancel := w.call(w.lease)
		var t0 time.Time
		if w.gate != nil {
			t0 = time.Now()
		}
		res, err := w.store.Pop(ctx, PopParams{Queue: w.queue, Lease: w.lease, N: n})
		if err == nil && w.gate != nil {
			w.pace.trip.noteCapped(time.Since(t0))
		}
		cancel()
		w.release(n - len(res.Tasks))
		if err != nil {
			w.stats.storeErrors.Add(1)
			w.tel.storeError(base, nil, false)
			if errors.Is(err, ErrClosed) {
				w.logger.ErrorContext(base, "the store is closed; the worker stops", "err", err)
				w.runErr = fmt.Errorf("leasehold: worker of queue %s: %w", w.queue, err)
				w.stop()
				return
			}
			w.logger.WarnContext(base, "pop failed", "err", err)
		}
		w.storeNow.observe(w.clock, res.Now)
		w.stats.popped.Add(int64(len(res.Tasks)))
		w.tel.popped(base, res)
		for _, t := range res.Tasks {
			w.jobs.Add(1)
			nj := &job{task: t, claim: t.Claim(), leaseEnd: sent.Add(w.lease)}
			w.gate.add(nj)
			w.dispatch(base, nj)
		}
		if len(res.Tasks) > 0 {
			wait = w.pollMin
			continue
		}
		t := w.clock.NewTimer(wait)
		select {
		case <-t.C():
			wait = min(2*wait, w.pollMax)
		case <-wake:
			t.Stop()
			wait = w.pollMin
		case <-w.stopping:
			t.Stop()
			return
		}
	}
}

// dispatch hands a job to an idle runner goroutine, or starts a new one
// while there are fewer runners than slots: a worker keeps its runners
// instead of starting a goroutine per task.
func (w *Worker) dispatch(base context.Context, j *job) {
	select {
	case w.work <- j:
		return
	default:
	}
	if int(w.nrunners.Load()) >= cap(w.slots) {
		w.work <- j // a runner is finishing a job whose slot this one took
		return
	}
	w.nrunners.Add(1)
	w.runners.Add(1)
	go w.runJobs(base, j)
}

// runJobs runs j (if not nil), then the jobs handed to it until the worker
// stops popping. A runner whose job was detached by a shutdown ends when its
// handler returns; the worker released its count already.
func (w *Worker) runJobs(base context.Context, j *job) {
	defer func() {
		if j == nil || !w.beats.isDetached(j) {
			w.runners.Done()
		}
	}()
	for {
		for j != nil {
			next := w.run(base, j)
			if w.beats.isDetached(j) {
				return // a detached job's success is not recorded: next is nil
			}
			j = next
		}
		var ok bool
		if j, ok = <-w.work; !ok {
			j = nil
			return
		}
	}
}

// job is one claimed task, from its Pop until its outcome is settled.
type job struct {
	task   Task
	claim  Claim
	cancel context.CancelCauseFunc
	tel    attempt // its span (telemetry.go)

	// Guarded by the worker's beatList lock.
	state      jobState
	due        time.Time // the next heartbeat, on the worker's clock
	prev, next *job      // in the heartbeat list, while listed
	listed     bool
	result     []byte    // the handler's result, for the acker
	slotFreed  bool      // the slot was released when the result went to the acker
	detached   bool      // abandoned by a shutdown while its handler ran
	leaseEnd   time.Time // on the worker's clock, as last renewed

	// Guarded by the worker's runGate lock.
	admit    chan struct{} // closed when the job may start its handler
	admitted bool
	left     bool
}

type jobState uint8

const (
	jobRunning  jobState = iota // the handler runs: heartbeats renew the lease
	jobDeciding                 // the worker is recording the handler's outcome
	jobSettled                  // superseded or given back: record nothing
)

func (j *job) attrs(more ...any) []any {
	return append([]any{"task", j.task.ID, "token", j.claim.Token, "attempt", j.claim.Attempt}, more...)
}

// run runs one claimed task's handler and records its outcome. The handler
// runs in this goroutine; the outcome is recorded from a deferred call, so a
// handler that calls runtime.Goexit is settled too. It returns the job this
// goroutine runs next when recording the outcome claimed one for it (see
// settle), else nil.
func (w *Worker) run(wbase context.Context, j *job) (next *job) {
	base := w.tel.startAttempt(wbase, j)
	if closed(w.stopping) {
		// Popped while the worker was stopping: give it back unstarted.
		w.giveBack(base, j)
		w.finish(j)
		return nil
	}
	ctx, cancel := context.WithCancelCause(base)
	j.cancel = cancel
	if !w.beats.add(j, w.clock.Now().Add(w.heartbeat)) {
		// The worker abandoned its tasks before this one started.
		cancel(ErrWorkerStopped)
		w.giveBack(base, j)
		w.finish(j)
		return nil
	}
	// A task claimed ahead (WithPrefetch) waits here for a handler's
	// place. It is listed for heartbeats already, so its lease is renewed
	// while it waits, and a shutdown treats it as running: a graceful one
	// waits for it, a hard one abandons it.
	if !w.gate.enter(ctx, j) {
		// Superseded (a heartbeat found the claim stale) or abandoned
		// before its handler started: settled as a handler cancelled at
		// that moment would be.
		return w.settle(base, wbase, j, outcome{err: context.Cause(ctx)}, false)
	}
	var timeout time.Duration
	if d := j.task.Timeout; d > 0 {
		timeout = d
	} else {
		timeout = w.timeout
	}
	if timeout > 0 {
		var stop context.CancelFunc
		ctx, stop = w.attemptDeadline(ctx, timeout)
		defer stop()
	}
	var o outcome
	returned := false
	var started time.Time
	defer func() {
		if w.gate != nil {
			w.gate.leave(j) // the handler returned: a task waiting may start
			w.pace.handler.note(time.Since(started))
		}
		goexit := false
		if !returned {
			r := recover()
			if r == nil {
				r = "handler exited without returning (runtime.Goexit)"
				goexit = true
				// This goroutine ends with the handler: a new runner
				// takes its place, unless a shutdown detached it.
				if !w.beats.isDetached(j) {
					w.runners.Add(1)
					go w.runJobs(wbase, nil)
				}
			}
			o = outcome{err: &PanicError{Value: r, Stack: debug.Stack()}}
			w.stats.panics.Add(1)
		}
		if cause := context.Cause(ctx); timeout > 0 && errors.Is(cause, ErrAttemptTimeout) {
			// Whatever the handler returned after its deadline, the
			// attempt failed by its timeout.
			w.stats.timeouts.Add(1)
			o = outcome{err: cause}
		}
		w.tel.handlerReturned(base, w.clock, j, o.err)
		// A goroutine that exits with its handler runs nothing next.
		next = w.settle(base, wbase, j, o, !goexit)
	}()
	w.tel.handlerStarted(w.clock, j)
	if w.gate != nil {
		started = time.Now()
	}
	o.result, o.err = w.handler(ctx, j.claim, j.task)
	returned = true
	return nil // the deferred call sets next
}

// attemptDeadline returns a child of ctx that is cancelled d from now on the
// worker's clock, with a cause wrapping ErrAttemptTimeout, and the function
// that releases it.
func (w *Worker) attemptDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	cause := fmt.Errorf("%w after %v", ErrAttemptTimeout, d)
	if _, system := w.clock.(SystemClock); system {
		return context.WithTimeoutCause(ctx, d, cause)
	}
	at := w.clock.Now().Add(d)
	tctx, cancel := context.WithCancelCause(ctx)
	t := w.clock.NewTimer(d)
	go func() {
		select {
		case <-t.C():
			cancel(cause)
		case <-tctx.Done():
			t.Stop()
		}
	}()
	return deadlineContext{tctx, at}, func() { cancel(context.Canceled) }
}

// deadlineContext reports a deadline read on a Clock other than the system's.
type deadlineContext struct {
	context.Context
	at time.Time
}

func (c deadlineContext) Deadline() (time.Time, bool) { return c.at, true }

// outcome is what a handler returned.
type outcome struct {
	result []byte
	err    error
}

// settle records a handler's outcome, unless the claim was superseded or
// given back meanwhile. base is the attempt's context, wbase the worker's.
// When here is true and the outcome is a success on a BatchStore while no
// other task of the worker runs or waits for its ack and no Pop is out,
// settle records it itself, with one AckBatch that claims the next tasks,
// and returns one of those for this goroutine to run next: at concurrency 1
// a task then costs its round trip to the store and no hand-off between
// goroutines. Else it returns nil.
func (w *Worker) settle(base, wbase context.Context, j *job, o outcome, here bool) *job {
	if !w.beats.decide(j) {
		if w.logger.Enabled(base, slog.LevelDebug) {
			w.logger.DebugContext(base, "handler outcome discarded", j.attrs("err", o.err)...)
		}
		w.finish(j)
		return nil
	}
	switch {
	case o.err == nil && w.batcher != nil:
		// The acker takes the job and its slot: the batch that records
		// the success claims the next task with that slot (or frees it),
		// and the job counts until its ack is answered.
		j.result, j.slotFreed = o.result, true
		if here && len(w.slots) <= 1 {
			// Only this job holds a slot: the acker would send it alone
			// at once (nothing to wait for), so send it from here.
			return w.ackBatch(wbase, []*job{j}, true)
		}
		w.acks <- j // the acker records it and finishes the job
		return nil
	case o.err == nil:
		var res TaskResult
		err := w.untilRun(base, 1, func() (err error) {
			ctx, cancel := w.call(w.lease)
			defer cancel()
			res, err = w.store.Ack(ctx, AckParams{Claim: j.claim, Result: o.result})
			return err
		})
		w.acked(base, j, res.Now, err)
	default:
		w.decideFailure(base, j, o.err)
	}
	w.finish(j)
	return nil
}

// finish releases a job's slot once its outcome is settled.
func (w *Worker) finish(j *job) {
	w.gate.leave(j) // if it never ran
	if w.beats.remove(j) {
		// Detached by a shutdown, which released the job already.
		j.cancel(nil)
		return
	}
	if j.cancel != nil {
		j.cancel(nil)
	}
	if !j.slotFreed {
		w.release(1)
	}
	w.jobs.Done()
}

// acked handles the store's answer to one Ack (alone or in a batch).
func (w *Worker) acked(base context.Context, j *job, now time.Time, err error) {
	var te *TransitionError
	switch {
	case err == nil:
		w.storeNow.observe(w.clock, now)
		w.stats.acked.Add(1)
		w.tel.recorded(base, j, decisionAck)
		if w.logger.Enabled(base, slog.LevelDebug) {
			w.logger.DebugContext(base, "task acknowledged", j.attrs()...)
		}
	case errors.As(err, &te) && te.State == Succeeded:
		// The token check passed and the task is Succeeded: only an Ack
		// through this very claim makes it so, and the worker sends one. The
		// store saw it twice (a retransmission); the first took effect.
		w.stats.acked.Add(1)
		w.tel.recorded(base, j, decisionAck)
		w.logger.InfoContext(base, "task was already acknowledged by this claim", j.attrs("err", err)...)
	case superseded(err):
		w.stats.staleDecisions.Add(1)
		w.tel.staleDecision(base, decisionAck)
		w.lost(base, j, err)
	default:
		w.stats.storeErrors.Add(1)
		w.tel.storeError(base, j, true)
		if closed(w.stopping) {
			w.hold(j) // named by Run's (and Shutdown's) *ShutdownError
		}
		w.logger.ErrorContext(base, "recording the outcome failed; the lease will lapse and a broker will decide the task",
			j.attrs("err", err)...)
	}
}

// The pauses between the sends of a decision the store answered ErrBusy, in
// real time (a busy database is a real-time matter): the first, doubled
// after each busy answer up to the longest.
const (
	busyPause    = 5 * time.Millisecond
	busyPauseMax = time.Second
)

// untilRun sends a decision (Ack, AckBatch, Fail, Retry, or a task given
// back) of tasks tasks with send, and sends it again while the store
// answers ErrBusy: the store did not run it (a SQLite database whose write
// lock another connection held past the busy timeout), so sending it again
// cannot record it twice, and the task need not wait for its lease to
// lapse and run again. It pauses between the sends (busyPause, doubling up
// to busyPauseMax). Once the worker abandons its tasks (the shutdown
// timeout after Run's context ended) it sends the decision one last time
// without a pause; a hard stop (Shutdown's deadline) ends it at once, and
// the caller names the claim held. It returns the last answer. The claim
// keeps the task meanwhile: no broker takes it before its lease lapses, and
// a decision through it counts until another supersedes it.
func (w *Worker) untilRun(base context.Context, tasks int, send func() error) error {
	pause := busyPause
	for {
		last := closed(w.abandon) // a send begun after the abandon is the last
		err := send()
		if !errors.Is(err, ErrBusy) || last || closed(w.hard) {
			return err
		}
		w.stats.storeErrors.Add(1)
		w.stats.busyResends.Add(1)
		w.tel.storeError(base, nil, false)
		w.logger.WarnContext(base, "store busy; sending the decision again", "err", err, "tasks", tasks, "pause", pause)
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-w.hard:
			t.Stop()
			return err
		case <-w.abandon:
			t.Stop()
			if closed(w.hard) {
				return err
			}
		}
		pause = min(2*pause, busyPauseMax)
	}
}

// decideFailure records a failed attempt: Retry with the policy's delay, or
// Fail.
func (w *Worker) decideFailure(base context.Context, j *job, herr error) {
	var err error
	var res TaskResult
	var counter *counter
	var msg string
	d := decisionFail
	switch {
	case IsPermanent(herr):
		err = w.untilRun(base, 1, func() (err error) {
			ctx, cancel := w.call(w.lease)
			defer cancel()
			res, err = w.store.Fail(ctx, FailParams{Claim: j.claim, Message: herr.Error()})
			return err
		})
		counter, msg = &w.stats.failed, "task failed permanently"
	default:
		now := w.storeNow.estimate(w.clock)
		t := j.task
		failed := t
		failed.Errors = append(failed.Errors[:len(failed.Errors):len(failed.Errors)],
			TaskError{Attempt: t.Attempt, At: now, Message: herr.Error()})
		delay, retry := consult(w.retry, failed, herr, w.logger)
		if retry {
			// The store adds the delay to its own clock: the worker's
			// estimate above only dates the error the policy sees.
			err = w.untilRun(base, 1, func() (err error) {
				ctx, cancel := w.call(w.lease)
				defer cancel()
				res, err = w.store.Retry(ctx, RetryParams{Claim: j.claim, Delay: delay, Message: herr.Error()})
				return err
			})
			counter, msg, d = &w.stats.retried, "task will be retried", decisionRetry
		} else {
			err = w.untilRun(base, 1, func() (err error) {
				ctx, cancel := w.call(w.lease)
				defer cancel()
				res, err = w.store.Fail(ctx, FailParams{Claim: j.claim, Message: herr.Error()})
				return err
			})
			counter, msg = &w.stats.failed, "task failed: no retry left"
		}
	}
	switch {
	case err == nil:
		w.storeNow.observe(w.clock, res.Now)
		counter.Add(1)
		w.tel.recorded(base, j, d)
		if w.logger.Enabled(base, slog.LevelDebug) {
			w.logger.DebugContext(base, msg, j.attrs("handler_err", herr)...)
		}
	case superseded(err):
		w.stats.staleDecisions.Add(1)
		w.tel.staleDecision(base, d)
		w.lost(base, j, err)
	default:
		w.stats.storeErrors.Add(1)
		w.tel.storeError(base, j, true)
		if closed(w.stopping) {
			w.hold(j) // named by Run's (and Shutdown's) *ShutdownError
		}
		w.logger.ErrorContext(base, "recording the outcome failed; the lease will lapse and a broker will decide the task",
			j.attrs("err", err, "handler_err", herr)...)
	}
}

// ackLoop acknowledges successes in batches: it takes what is waiting, waits
// up to AckLinger for more while other tasks of the worker still run, and
// records the batch with one AckBatch. A worker runs one ack loop per
// flight (AckFlighter); each gathers up to its share of the batch size, so
// that while one loop's AckBatch is out, the next loop gathers the tasks
// that finish meanwhile and sends them.
func (w *Worker) ackLoop(base context.Context) {
	limit := max(w.batch/w.flights, 1)
	pending := make([]*job, 0, limit)
	linger := time.NewTimer(AckLinger)
	linger.Stop()
	defer linger.Stop()
	for {
		select {
		case j := <-w.acks:
			pending = append(pending, j)
			w.ackHeld.Add(1)
		case <-w.drained:
			return
		}
		lingering := false
	fill:
		for len(pending) < limit {
			select {
			case j := <-w.acks:
				pending = append(pending, j)
				w.ackHeld.Add(1)
				continue
			default:
			}
			if int64(len(w.slots)) <= w.ackHeld.Load() {
				// No handler runs and no Pop is out: every slot held is
				// an ack loop's, so nothing is coming to wait for.
				break
			}
			if !lingering {
				linger.Reset(AckLinger)
				lingering = true
			}
			select {
			case j := <-w.acks:
				pending = append(pending, j)
				w.ackHeld.Add(1)
			case <-linger.C:
				lingering = false
				break fill
			}
		}
		if lingering {
			linger.Stop()
		}
		w.ackHeld.Add(-int64(len(pending))) // ackBatch holds them now
		w.ackBatch(base, pending, false)
		clear(pending)
		pending = pending[:0]
	}
}

// ackBatch records the successes of jobs and finishes the jobs. Each job
// holds its slot: while the worker pops, one AckBatch records them and
// claims a task for each of those slots and each slot free besides (up to
// the batch size); once it stops, the slots are freed and one Ack (one job)
// or one AckBatch records them. With keep, the first task claimed is not
// dispatched but returned, for the caller to run; else it returns nil.
func (w *Worker) ackBatch(base context.Context, jobs []*job, keep bool) (kept *job) {
	w.popMu.RLock()
	if w.fetchDone || closed(w.stopping) {
		w.popMu.RUnlock()
		w.release(len(jobs))
		w.recordAcks(base, jobs)
		return nil
	}
	defer w.popMu.RUnlock()
	n := len(jobs)
	if over := len(w.slots) - w.claimCap(); over > 0 {
		// Tasks claimed ahead while handlers were quick, and handlers are
		// not quick now: claim fewer than the successes free.
		drop := min(over, n)
		n -= drop
		w.release(drop)
	}
	for n < w.batch && w.tryClaim(w.claimCap()) {
		n++
	}
	// While the call is out, its slots are an ack loop's: an ack loop that
	// sees only such slots held has nothing to wait for (see ackLoop).
	w.ackHeld.Add(int64(n))
	items := make([]AckItem, len(jobs))
	for i, j := range jobs {
		items[i] = AckItem{Claim: j.claim, Result: j.result}
	}
	var sent time.Time
	var res BatchResult
	err := w.untilRun(base, len(jobs), func() (err error) {
		sent = w.clock.Now()
		ctx, cancel := w.call(w.lease)
		defer cancel()
		var t0 time.Time
		if w.gate != nil {
			t0 = time.Now()
		}
		res, err = w.batcher.AckBatch(ctx, AckBatchParams{Queue: w.queue, Acks: items, Pop: AckPop{Lease: w.lease, N: n}})
		if err == nil && w.gate != nil {
			w.pace.trip.noteCapped(time.Since(t0))
		}
		return err
	})
	w.ackHeld.Add(-int64(n))
	if err == nil && (len(res.Items) != len(jobs) || len(res.Claimed) > n) {
		err = fmt.Errorf("leasehold: AckBatch answered %d items for %d and %d claims for %d", len(res.Items), len(jobs), len(res.Claimed), n)
	}
	if err != nil {
		res.Claimed = nil // unknown: a task it claimed lapses, and a broker decides it
	}
	w.release(n - len(res.Claimed))
	if len(res.Claimed) > 0 {
		w.storeNow.observe(w.clock, res.Now)
		w.stats.popped.Add(int64(len(res.Claimed)))
		w.tel.popped(base, TasksResult{Now: res.Now, Tasks: res.Claimed})
		for _, t := range res.Claimed {
			w.jobs.Add(1)
			nj := &job{task: t, claim: t.Claim(), leaseEnd: sent.Add(w.lease)}
			w.gate.add(nj) // in the order claimed, the one kept first
			if keep && kept == nil {
				kept = nj
				continue
			}
			w.dispatch(base, nj)
		}
	}
	w.answered(base, jobs, res, err)
	return kept
}

// recordAcks records the successes of jobs, whose slots are free, with one
// Ack for one job, else one AckBatch, and finishes the jobs.
func (w *Worker) recordAcks(base context.Context, jobs []*job) {
	if len(jobs) == 1 {
		j := jobs[0]
		var res TaskResult
		err := w.untilRun(base, 1, func() (err error) {
			ctx, cancel := w.call(w.lease)
			defer cancel()
			res, err = w.store.Ack(ctx, AckParams{Claim: j.claim, Result: j.result})
			return err
		})
		w.acked(base, j, res.Now, err)
		w.finish(j)
		return
	}
	items := make([]AckItem, len(jobs))
	for i, j := range jobs {
		items[i] = AckItem{Claim: j.claim, Result: j.result}
	}
	var res BatchResult
	err := w.untilRun(base, len(jobs), func() (err error) {
		ctx, cancel := w.call(w.lease)
		defer cancel()
		res, err = w.batcher.AckBatch(ctx, AckBatchParams{Queue: w.queue, Acks: items})
		return err
	})
	if err == nil && len(res.Items) != len(jobs) {
		err = fmt.Errorf("leasehold: AckBatch answered %d items for %d", len(res.Items), len(jobs))
	}
	w.answered(base, jobs, res, err)
}

// answered handles an AckBatch's answer to each of jobs and finishes them.
func (w *Worker) answered(base context.Context, jobs []*job, res BatchResult, err error) {
	for i, j := range jobs {
		if err != nil {
			w.acked(base, j, time.Time{}, err)
		} else {
			w.acked(base, j, res.Now, res.Items[i].Err)
		}
		w.finish(j)
	}
}

// heartbeatLoop renews the leases of the running tasks: it sleeps until the
// earliest heartbeat is due and extends every claim due by then. It is
// woken only when a job is listed with a heartbeat due before the time it
// sleeps until (or while it sleeps with nothing listed); a job that leaves
// the list does not wake it, so a task that starts and ends between two
// heartbeats costs the loop nothing, and the loop wakes at most once for
// nothing at the time the job would have been due.
func (w *Worker) heartbeatLoop(base context.Context) {
	for {
		due, ok := w.beats.arm()
		if !ok {
			select {
			case <-w.beats.wake:
				continue
			case <-w.drained:
				return
			}
		}
		if d := due.Sub(w.clock.Now()); d > 0 {
			t := w.clock.NewTimer(d)
			select {
			case <-t.C():
			case <-w.beats.wake: // a job was listed due earlier: sleep until then
				t.Stop()
				continue
			case <-w.drained:
				t.Stop()
				return
			}
		}
		for _, j := range w.beats.takeDue(w.clock.Now()) {
			w.extend(base, j)
		}
	}
}

// extend renews one claim's lease and puts it back in line for the next
// heartbeat, unless the claim was superseded.
func (w *Worker) extend(base context.Context, j *job) {
	// The heartbeat's deadline is what is left of the lease it renews (a
	// heartbeat interval at least: a lapsed lease still holds the task
	// until someone acts).
	sent := w.clock.Now()
	left := max(w.beats.leaseEnd(j).Sub(sent), w.heartbeat)
	ctx, cancel := w.call(left)
	res, err := w.store.Extend(ctx, ExtendParams{Claim: j.claim, Lease: w.lease})
	cancel()
	switch {
	case err == nil:
		w.storeNow.observe(w.clock, res.Now)
		w.stats.extended.Add(1)
		w.beats.renewed(j, sent.Add(w.lease))
		w.beats.requeue(j, w.clock.Now().Add(w.heartbeat))
	case superseded(err):
		if w.beats.supersede(j) {
			w.lost(base, j, err)
		}
		// Else the worker decided the task meanwhile: the heartbeat met
		// the worker's own decision, not a lost lease.
	default:
		w.stats.storeErrors.Add(1)
		w.tel.storeError(base, j, false)
		w.logger.WarnContext(base, "heartbeat failed; trying again at the next beat", j.attrs("err", err)...)
		w.beats.requeue(j, w.clock.Now().Add(w.heartbeat))
	}
}

// lost handles a superseded claim: count it and tell the handler.
func (w *Worker) lost(base context.Context, j *job, err error) {
	w.stats.leasesLost.Add(1)
	w.tel.leaseLost(base, j)
	w.logger.InfoContext(base, "claim superseded; cancelling the handler", j.attrs("err", err)...)
	j.cancel(fmt.Errorf("%w: %w", ErrClaimSuperseded, err))
}

// giveBack returns an unfinished task to the queue through its claim.
func (w *Worker) giveBack(base context.Context, j *job) {
	err := w.untilRun(base, 1, func() error {
		ctx, cancel := w.call(w.lease)
		defer cancel()
		_, err := w.store.Retry(ctx, RetryParams{Claim: j.claim, Message: ErrWorkerStopped.Error()})
		return err
	})
	switch {
	case err == nil:
		w.stats.released.Add(1)
		w.tel.givenBack(base, j)
		w.logger.InfoContext(base, "unfinished task given back", j.attrs()...)
	case superseded(err):
		w.stats.leasesLost.Add(1)
		w.tel.leaseLost(base, j)
		w.logger.InfoContext(base, "unfinished task was already superseded", j.attrs("err", err)...)
	default:
		w.stats.storeErrors.Add(1)
		w.tel.storeError(base, j, true)
		w.hold(j)
		w.logger.ErrorContext(base, "giving the task back failed; the lease will lapse and a broker will decide the task", j.attrs("err", err)...)
	}
}

// beatList holds the running jobs in order of their next heartbeat. The
// heartbeat interval is the same for every job, so a job added or renewed
// goes to the back and the list stays in order.
type beatList struct {
	mu         sync.Mutex
	head, tail *job
	running    map[*job]struct{} // every job whose handler runs
	abandoned  bool
	wake       chan struct{} // a job was listed due before armed (or with armed zero)
	// armed is when the heartbeat loop wakes next: the due time of the
	// first in line when it last looked (arm), zero while it waits with
	// nothing listed. listedDue is the due time of the first job listed
	// while armed was zero: the loop sleeps until then even if that job has
	// left the list meanwhile, so that a job listed after it, due later,
	// need not wake it.
	armed, listedDue time.Time
}

func (l *beatList) init() {
	l.running = map[*job]struct{}{}
	l.wake = make(chan struct{}, 1)
}

// add registers a job whose handler is about to start; false when the
// worker has abandoned its tasks.
func (l *beatList) add(j *job, due time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.abandoned {
		j.state = jobSettled
		return false
	}
	l.running[j] = struct{}{}
	l.pushLocked(j, due)
	switch {
	case l.armed.IsZero() && l.listedDue.IsZero():
		l.listedDue = due
		l.signal()
	case l.armed.IsZero():
		if due.Before(l.listedDue) {
			l.listedDue = due // the loop was woken already and will look
		}
	case due.Before(l.armed):
		l.signal()
	}
	return true
}

// signal wakes the heartbeat loop.
func (l *beatList) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// dropLocked unlinks j. It does not wake the heartbeat loop: the loop wakes
// when j would have been due, at the latest, and looks again then.
func (l *beatList) dropLocked(j *job) {
	l.unlinkLocked(j)
}

func (l *beatList) pushLocked(j *job, due time.Time) {
	j.due, j.listed = due, true
	j.prev, j.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = j
	} else {
		l.head = j
	}
	l.tail = j
}

func (l *beatList) unlinkLocked(j *job) {
	if !j.listed {
		return
	}
	if j.prev != nil {
		j.prev.next = j.next
	} else {
		l.head = j.next
	}
	if j.next != nil {
		j.next.prev = j.prev
	} else {
		l.tail = j.prev
	}
	j.prev, j.next, j.listed = nil, nil, false
}

// arm returns when the heartbeat loop wakes next, and records it: when the
// earliest heartbeat is due; with nothing listed, when the first job listed
// since the loop last looked would have been due, and else false (the loop
// waits until a job is listed).
func (l *beatList) arm() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.head != nil:
		l.armed = l.head.due
	case !l.listedDue.IsZero():
		l.armed = l.listedDue
	default:
		l.armed = time.Time{}
		return time.Time{}, false
	}
	l.listedDue = time.Time{}
	return l.armed, true
}

// takeDue takes the running jobs due at now out of the list.
func (l *beatList) takeDue(now time.Time) []*job {
	l.mu.Lock()
	defer l.mu.Unlock()
	var due []*job
	for l.head != nil && !l.head.due.After(now) {
		j := l.head
		l.unlinkLocked(j)
		if j.state == jobRunning {
			due = append(due, j)
		}
	}
	return due
}

// requeue puts a renewed job back in line, if its handler still runs.
func (l *beatList) requeue(j *job, due time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if j.state == jobRunning && !j.listed {
		l.pushLocked(j, due)
	}
}

// decide moves a job whose handler returned to deciding; false when its
// claim was superseded or given back, and nothing must be recorded.
func (l *beatList) decide(j *job) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropLocked(j)
	delete(l.running, j)
	if j.state != jobRunning {
		return false
	}
	j.state = jobDeciding
	return true
}

// supersede marks a running job's claim superseded; false when the worker
// was already deciding the task (or had given it back).
func (l *beatList) supersede(j *job) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if j.state != jobRunning {
		return false
	}
	j.state = jobSettled
	l.dropLocked(j)
	return true
}

// remove takes a finished job out of the list; it reports whether a
// shutdown detached the job.
func (l *beatList) remove(j *job) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropLocked(j)
	delete(l.running, j)
	return j.detached
}

// isDetached reports whether a shutdown detached the job.
func (l *beatList) isDetached(j *job) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return j.detached
}

// leaseEnd returns when the job's lease ends, on the worker's clock.
func (l *beatList) leaseEnd(j *job) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return j.leaseEnd
}

// renewed records the end of a renewed lease.
func (l *beatList) renewed(j *job, end time.Time) {
	l.mu.Lock()
	j.leaseEnd = end
	l.mu.Unlock()
}

// abandonAll marks every running job given back and returns them; jobs
// added later are refused.
func (l *beatList) abandonAll() []*job {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.abandoned = true
	var out []*job
	for j := range l.running {
		if j.state == jobRunning {
			j.state, j.detached = jobSettled, true
			l.dropLocked(j)
			out = append(out, j)
		}
	}
	return out
}

// storeClock estimates the store's clock from the last reading it reported:
// that reading plus the time elapsed since on the worker's own clock.
type storeClock struct {
	mu    sync.Mutex
	store time.Time // the store's Now, as last reported
	local time.Time // the worker's clock when it was reported
	mono  time.Time // time.Now() then, with its monotonic reading
}

// observe records a store's Now (the zero time is ignored).
func (c *storeClock) observe(clock Clock, now time.Time) {
	if now.IsZero() {
		return
	}
	local, mono := clock.Now(), time.Now()
	c.mu.Lock()
	if c.store.IsZero() || !now.Before(c.store) {
		c.store, c.local, c.mono = now, local, mono
	}
	c.mu.Unlock()
}

// estimate returns the store's clock now, as best the worker knows it: the
// worker's clock when no store reading was seen yet.
func (c *storeClock) estimate(clock Clock) time.Time {
	c.mu.Lock()
	store, local, mono := c.store, c.local, c.mono
	c.mu.Unlock()
	if store.IsZero() {
		return clock.Now()
	}
	var elapsed time.Duration
	if _, system := clock.(SystemClock); system {
		elapsed = time.Since(mono)
	} else {
		elapsed = clock.Now().Sub(local)
	}
	return store.Add(max(elapsed, 0)).Truncate(time.Microsecond)
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
	delay, retry = p(t, cause)
	return boundDelay(delay), retry
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

// claimCap is how many tasks the worker may hold claimed now: its
// concurrency, and besides, while its handlers are quick, as many as its
// slots finish during one claiming call, up to its prefetch (see
// pace.ahead).
func (w *Worker) claimCap() int {
	return w.concurrency + w.pace.ahead(w.concurrency, w.prefetch)
}

// tryClaim takes a slot if fewer than limit are taken.
func (w *Worker) tryClaim(limit int) bool {
	return len(w.slots) < limit && tryAcquire(w.slots)
}

// acquire takes a slot for the fetch loop, under the concurrency, waiting
// for one to be released if needed; false once the worker stops popping.
func (w *Worker) acquire() bool {
	for {
		if w.tryClaim(w.concurrency) {
			return true
		}
		select {
		case <-w.freed:
		case <-w.stopping:
			return false
		}
	}
}

// release frees k slots and wakes a fetch loop waiting for one.
func (w *Worker) release(k int) {
	if k <= 0 {
		return
	}
	for range k {
		<-w.slots
	}
	select {
	case w.freed <- struct{}{}:
	default:
	}
}

// pace keeps exponentially weighted means, in real time, of how long the
// worker's handlers run and how long its store calls that claim take
// (nanoseconds; 0 until the first reading).
type pace struct {
	handler, trip ewma
}

// ahead is how many tasks a worker of c slots claims ahead, most at the
// most. None unless its handlers are quick: they run, on recent evidence,
// no longer than a claiming call takes, and the calls take at least
// prefetchMinTrip; a worker whose handlers are slow, for which claiming
// ahead gains little, does not keep tasks from other workers. Else as many
// as the slots finish while one claiming call travels (c times the call's
// time over a handler's, rounded up: at least c), so that the slots stay
// busy for the call and a task claimed ahead waits about as long as the
// call takes. The quicker the handlers against the call, the more tasks
// each call acknowledges and claims, which is what spreads its cost.
func (p *pace) ahead(c, most int) int {
	h, t := p.handler.v.Load(), p.trip.v.Load()
	if most <= 0 || h <= 0 || t < int64(prefetchMinTrip) || h > t {
		return 0
	}
	if c >= most || t/h >= int64(most) { // (and c*t cannot overflow below)
		return most
	}
	return int(min((int64(c)*t+h-1)/h, int64(most)))
}

// prefetchMinTrip is the shortest claiming call worth overlapping with a
// handler: a task claimed ahead passes from one goroutine to another, which
// costs a few microseconds, and an in-process store (the memory adapter)
// answers in less than that.
const prefetchMinTrip = 20 * time.Microsecond

// ewma is an exponentially weighted mean of durations, weight 1/8.
type ewma struct{ v atomic.Int64 }

func (e *ewma) note(d time.Duration) { e.add(int64(d), false) }

// noteCapped is note with a reading above four times the mean counted as
// four times the mean: one call delayed by a pause of the process (a
// garbage collection) does not make a fast store look slow.
func (e *ewma) noteCapped(d time.Duration) { e.add(int64(d), true) }

func (e *ewma) add(x int64, capped bool) {
	x = max(x, 1)
	for {
		old := e.v.Load()
		next := x
		if old > 0 {
			if capped {
				x = min(x, 4*old)
			}
			next = max(old+(x-old)/8, 1)
		}
		if e.v.CompareAndSwap(old, next) {
			return
		}
	}
}

// runGate starts a worker's handlers, at most limit at once, in the order
// their tasks were claimed (add): the tasks claimed ahead (WithPrefetch)
// wait in it. A nil gate admits every job at once.
type runGate struct {
	mu      sync.Mutex
	limit   int
	running int
	waiting []*job
}

// add queues a job just claimed, behind those claimed before it.
func (g *runGate) add(j *job) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running < g.limit && len(g.waiting) == 0 {
		// Nothing to wait for: admitted without a channel of its own.
		g.running++
		j.admitted, j.admit = true, admitted
		return
	}
	j.admit = make(chan struct{})
	g.waiting = append(g.waiting, j)
	g.admitLocked()
}

// admitted is the closed channel of the jobs admitted as they were added.
var admitted = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (g *runGate) admitLocked() {
	for g.running < g.limit && len(g.waiting) > 0 {
		j := g.waiting[0]
		g.waiting[0] = nil
		g.waiting = g.waiting[1:]
		g.running++
		j.admitted = true
		close(j.admit)
	}
}

// enter waits until j may start its handler; false when ctx ends first (j
// has then left the gate).
func (g *runGate) enter(ctx context.Context, j *job) bool {
	if g == nil {
		return true
	}
	select {
	case <-j.admit:
		return true
	case <-ctx.Done():
		g.leave(j)
		return false
	}
}

// leave takes j out of the gate, once: its handler returned, or it will not
// run. The next job waiting may then start.
func (g *runGate) leave(j *job) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if j.admit == nil || j.left {
		return
	}
	j.left = true
	if j.admitted {
		g.running--
	} else if i := slices.Index(g.waiting, j); i >= 0 {
		g.waiting = slices.Delete(g.waiting, i, i+1)
	}
	g.admitLocked()
}
