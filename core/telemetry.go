package core

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName names the meter and the tracer leasehold takes from
// the providers.
const InstrumentationName = "github.com/leasehold/leasehold/core"

// The names of the metrics; Telemetry, in the package documentation,
// says what each counts.
const (
	MetricTasksEnqueued    = "leasehold.tasks.enqueued"
	MetricTasksClaimed     = "leasehold.tasks.claimed"
	MetricTasksAcked       = "leasehold.tasks.acked"
	MetricTasksFailed      = "leasehold.tasks.failed"
	MetricTasksRetried     = "leasehold.tasks.retried"
	MetricTasksReleased    = "leasehold.tasks.released"
	MetricLeasesLost       = "leasehold.leases.lost"
	MetricDecisionsStale   = "leasehold.decisions.stale"
	MetricTasksPromoted    = "leasehold.tasks.promoted"
	MetricExpiredClaimed   = "leasehold.expired.claimed"
	MetricExpiredRequeued  = "leasehold.expired.requeued"
	MetricExpiredFailed    = "leasehold.expired.failed"
	MetricExpiredRecovered = "leasehold.expired.recovered"
	MetricStoreErrors      = "leasehold.store.errors"
	MetricHandlerDuration  = "leasehold.handler.duration"
	MetricQueueLatency     = "leasehold.queue.latency"
)

// The attributes of the metrics and spans.
const (
	// AttrQueue is the queue's name, on every metric and span.
	AttrQueue = attribute.Key("leasehold.queue")
	// AttrComponent is "worker" or "broker".
	AttrComponent = attribute.Key("leasehold.component")
	// AttrDecision is the decision refused as stale: "ack", "fail",
	// "retry", "requeue" or "finalize".
	AttrDecision = attribute.Key("leasehold.decision")
	// AttrHandlerResult is what the handler returned: "success", "error"
	// or "panic".
	AttrHandlerResult = attribute.Key("leasehold.handler.result")
	// AttrState is the state a task was left in.
	AttrState = attribute.Key("leasehold.task.state")
	// AttrTaskID is the task's ID (spans only).
	AttrTaskID = attribute.Key("leasehold.task.id")
	// AttrClaimToken is the claim's token (attempt spans only).
	AttrClaimToken = attribute.Key("leasehold.claim.token")
	// AttrAttempt is the attempt's number (spans only).
	AttrAttempt = attribute.Key("leasehold.attempt")
	// AttrVersion is a broker's reap claim version (reap spans only).
	AttrVersion = attribute.Key("leasehold.reap.version")
	// AttrOutcome is what was recorded for an attempt or a reaper's
	// decision (spans only).
	AttrOutcome = attribute.Key("leasehold.outcome")
)

// The outcomes of an attempt span (AttrOutcome).
const (
	OutcomeAcked        = "acked"
	OutcomeRetried      = "retried"
	OutcomeFailed       = "failed"
	OutcomeLeaseLost    = "lease_lost"
	OutcomeGivenBack    = "given_back"
	OutcomeStoreError   = "store_error"
	OutcomeRequeued     = "requeued"
	OutcomeFinalized    = "finalized"
	OutcomeStaleDropped = "stale_dropped"
)

// telemetry holds the providers a component was given.
type telemetry struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
}

// WithMeterProvider sets the MeterProvider the component records its
// metrics with (default: a no-op provider). Telemetry, in the package
// documentation, lists the metrics.
func WithMeterProvider(p metric.MeterProvider) Option {
	return func(s *common) {
		if p == nil {
			s.invalid("nil meter provider")
			return
		}
		s.telemetry.meters = p
	}
}

// WithTracerProvider sets the TracerProvider the component makes its spans
// with (default: a no-op provider). Telemetry, in the package
// documentation, describes the spans.
func WithTracerProvider(p trace.TracerProvider) Option {
	return func(s *common) {
		if p == nil {
			s.invalid("nil tracer provider")
			return
		}
		s.telemetry.tracers = p
	}
}

// meter returns the component's meter, a no-op one when it was given no
// provider.
func (c *common) meter() metric.Meter {
	p := c.telemetry.meters
	if p == nil {
		p = metricnoop.NewMeterProvider()
	}
	return p.Meter(InstrumentationName)
}

// tracer returns the component's tracer, nil when it was given no provider:
// then it makes no spans at all, not even no-op ones.
func (c *common) tracer() trace.Tracer {
	if c.telemetry.tracers == nil {
		return nil
	}
	return c.telemetry.tracers.Tracer(InstrumentationName)
}

// instruments makes instruments, falling back on no-op ones (and logging
// why) when a provider refuses one.
type instruments struct {
	m   metric.Meter
	log *slog.Logger
}

func (in instruments) refused(name string, err error) {
	in.log.Warn("leasehold: the meter provider refused an instrument; it records nothing", "instrument", name, "err", err)
}

func (in instruments) counter(name, unit, desc string) metric.Int64Counter {
	c, err := in.m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	if err != nil || c == nil {
		in.refused(name, err)
		return metricnoop.Int64Counter{}
	}
	return c
}

// latencyBuckets are the bucket boundaries, in seconds, advised for both
// histograms: from a millisecond to ten minutes.
var latencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

func (in instruments) seconds(name, desc string) metric.Float64Histogram {
	h, err := in.m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	if err != nil || h == nil {
		in.refused(name, err)
		return metricnoop.Float64Histogram{}
	}
	return h
}

// measure is an attribute set as the options the instruments take, made
// once so that a measurement allocates nothing.
type measure struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func attrs(kv ...attribute.KeyValue) measure {
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	return measure{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
}

// stopwatch measures elapsed time on a Clock: on the monotonic clock for
// SystemClock, else by the Clock's own readings.
type stopwatch struct {
	local, mono time.Time
}

func startStopwatch(c Clock) stopwatch { return stopwatch{local: c.Now(), mono: time.Now()} }

func (s stopwatch) elapsed(c Clock) time.Duration {
	if _, system := c.(SystemClock); system {
		return time.Since(s.mono)
	}
	return max(c.Now().Sub(s.local), 0)
}

// queueTelemetry is what a Queue records.
type queueTelemetry struct {
	tracer   trace.Tracer
	queue    attribute.KeyValue
	enqueued metric.Int64Counter
	set      measure
	spanName string
}

func newQueueTelemetry(c *common, queue string) queueTelemetry {
	in := instruments{c.meter(), c.logger}
	q := AttrQueue.String(queue)
	return queueTelemetry{
		tracer:   c.tracer(),
		queue:    q,
		enqueued: in.counter(MetricTasksEnqueued, "{task}", "Tasks added to the queue by Enqueue."),
		set:      attrs(q),
		spanName: "enqueue " + queue,
	}
}

// noSpan is the span of a component given no tracer provider: it records
// nothing.
var noSpan = trace.SpanFromContext(context.Background())

func (t *queueTelemetry) startEnqueue(ctx context.Context) (context.Context, trace.Span) {
	if t.tracer == nil {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, t.spanName, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(t.queue))
}

func (t *queueTelemetry) enqueueDone(ctx context.Context, span trace.Span, task Task, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		t.enqueued.Add(ctx, 1, t.set.add...)
		if span.IsRecording() {
			span.SetAttributes(AttrTaskID.String(task.ID), AttrState.String(task.State.String()))
		}
	}
	span.End()
}

// decision is a decision a Worker or a Broker records through a claim.
type decision uint8

const (
	decisionAck decision = iota
	decisionFail
	decisionRetry
	decisionRequeue
	decisionFinalize
	nDecisions
)

var decisionNames = [nDecisions]string{"ack", "fail", "retry", "requeue", "finalize"}

// workerTelemetry is what a Worker records.
type workerTelemetry struct {
	tracer   trace.Tracer
	queue    attribute.KeyValue
	spanName string

	claimed, acked, failed, retried, released metric.Int64Counter
	leasesLost, stale, storeErrors            metric.Int64Counter
	handlerDuration, queueLatency             metric.Float64Histogram

	set, storeErrSet        measure
	staleSet                [nDecisions]measure
	success, failure, panic measure
}

func newWorkerTelemetry(c *common, queue string) workerTelemetry {
	in := instruments{c.meter(), c.logger}
	q := AttrQueue.String(queue)
	component := AttrComponent.String("worker")
	t := workerTelemetry{
		tracer:   c.tracer(),
		queue:    q,
		spanName: "process " + queue,

		claimed:         in.counter(MetricTasksClaimed, "{task}", "Tasks claimed by a worker's Pop."),
		acked:           in.counter(MetricTasksAcked, "{task}", "Attempts recorded with Ack."),
		failed:          in.counter(MetricTasksFailed, "{task}", "Attempts recorded with Fail: a permanent error, or no retry left."),
		retried:         in.counter(MetricTasksRetried, "{task}", "Attempts recorded with Retry by the retry policy."),
		released:        in.counter(MetricTasksReleased, "{task}", "Unfinished tasks given back at shutdown."),
		leasesLost:      in.counter(MetricLeasesLost, "{lease}", "Claims a worker found superseded: its lease lapsed and another actor decided the task."),
		stale:           in.counter(MetricDecisionsStale, "{decision}", "Decisions refused because their claim no longer held the task, and dropped."),
		storeErrors:     in.counter(MetricStoreErrors, "{error}", "Store calls that failed for a reason other than a stale claim."),
		handlerDuration: in.seconds(MetricHandlerDuration, "How long a handler ran."),
		queueLatency:    in.seconds(MetricQueueLatency, "From the time a task could run to its claim, on the store's clock."),

		set:         attrs(q),
		storeErrSet: attrs(q, component),
		success:     attrs(q, AttrHandlerResult.String("success")),
		failure:     attrs(q, AttrHandlerResult.String("error")),
		panic:       attrs(q, AttrHandlerResult.String("panic")),
	}
	for d := decisionAck; d <= decisionRetry; d++ {
		t.staleSet[d] = attrs(q, component, AttrDecision.String(decisionNames[d]))
	}
	return t
}

// readySince returns when a task could last run: the later of its enqueue,
// its run-after time and its last error (the time it was returned to the
// queue).
func readySince(t Task) time.Time {
	at := t.EnqueuedAt
	if t.RunAfter.After(at) {
		at = t.RunAfter
	}
	if n := len(t.Errors); n > 0 && t.Errors[n-1].At.After(at) {
		at = t.Errors[n-1].At
	}
	return at
}

// popped records the tasks of one Pop.
func (t *workerTelemetry) popped(ctx context.Context, res TasksResult) {
	if len(res.Tasks) == 0 {
		return
	}
	t.claimed.Add(ctx, int64(len(res.Tasks)), t.set.add...)
	for _, task := range res.Tasks {
		claimed := task.ClaimedAt
		if claimed.IsZero() {
			claimed = res.Now
		}
		if since := readySince(task); !since.IsZero() && !claimed.IsZero() {
			t.queueLatency.Record(ctx, max(claimed.Sub(since), 0).Seconds(), t.set.rec...)
		}
	}
}

// attempt is the telemetry of one attempt: its span, ended once with the
// attempt's outcome.
type attempt struct {
	span  trace.Span
	once  sync.Once
	watch stopwatch
}

// startAttempt starts the span of a claimed task's attempt and returns the
// context that carries it.
func (t *workerTelemetry) startAttempt(ctx context.Context, j *job) context.Context {
	if t.tracer == nil {
		return ctx
	}
	ctx, j.tel.span = t.tracer.Start(ctx, t.spanName, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(t.queue,
			AttrTaskID.String(j.task.ID),
			AttrClaimToken.Int64(int64(j.claim.Token)),
			AttrAttempt.Int(j.claim.Attempt)))
	return ctx
}

// handlerStarted starts timing the handler.
func (t *workerTelemetry) handlerStarted(c Clock, j *job) { j.tel.watch = startStopwatch(c) }

// handlerReturned records the handler's duration and error.
func (t *workerTelemetry) handlerReturned(ctx context.Context, c Clock, j *job, err error) {
	set := t.success
	if err != nil {
		set = t.failure
		var pe *PanicError
		if errors.As(err, &pe) {
			set = t.panic
		}
		if j.tel.span != nil {
			j.tel.span.RecordError(err)
			j.tel.span.SetStatus(codes.Error, err.Error())
		}
	}
	t.handlerDuration.Record(ctx, j.tel.watch.elapsed(c).Seconds(), set.rec...)
}

// end ends the attempt's span with its outcome.
func (a *attempt) end(outcome string) {
	if a.span == nil {
		return
	}
	a.once.Do(func() {
		if !a.span.IsRecording() {
			a.span.End()
			return
		}
		a.span.SetAttributes(AttrOutcome.String(outcome))
		switch outcome {
		case OutcomeLeaseLost:
			a.span.SetStatus(codes.Error, "lease lost: the claim was superseded")
		case OutcomeStoreError:
			a.span.SetStatus(codes.Error, "the outcome could not be recorded")
		}
		a.span.End()
	})
}

// recorded counts a decision the store accepted for the job and ends its
// attempt.
func (t *workerTelemetry) recorded(ctx context.Context, j *job, d decision) {
	switch d {
	case decisionAck:
		t.acked.Add(ctx, 1, t.set.add...)
		j.tel.end(OutcomeAcked)
	case decisionFail:
		t.failed.Add(ctx, 1, t.set.add...)
		j.tel.end(OutcomeFailed)
	case decisionRetry:
		t.retried.Add(ctx, 1, t.set.add...)
		j.tel.end(OutcomeRetried)
	}
}

// givenBack counts a task given back at shutdown and ends its attempt.
func (t *workerTelemetry) givenBack(ctx context.Context, j *job) {
	t.released.Add(ctx, 1, t.set.add...)
	j.tel.end(OutcomeGivenBack)
}

// staleDecision counts a decision refused as stale.
func (t *workerTelemetry) staleDecision(ctx context.Context, d decision) {
	t.stale.Add(ctx, 1, t.staleSet[d].add...)
}

// leaseLost counts a superseded claim and ends its attempt.
func (t *workerTelemetry) leaseLost(ctx context.Context, j *job) {
	t.leasesLost.Add(ctx, 1, t.set.add...)
	j.tel.end(OutcomeLeaseLost)
}

// storeError counts a failed store call; with final, the call was the
// job's decision, which is now left to a broker.
func (t *workerTelemetry) storeError(ctx context.Context, j *job, final bool) {
	t.storeErrors.Add(ctx, 1, t.storeErrSet.add...)
	if final && j != nil {
		j.tel.end(OutcomeStoreError)
	}
}

// brokerTelemetry is what a Broker records.
type brokerTelemetry struct {
	tracer trace.Tracer
	queues map[string]*brokerQueueTelemetry

	promoted, claimed, requeued, finalized, recovered metric.Int64Counter
	stale, storeErrors                                metric.Int64Counter
}

type brokerQueueTelemetry struct {
	queue                    attribute.KeyValue
	spanName                 string
	set, storeErrSet         measure
	staleRequeue, staleFinal measure

	recoveredMu  sync.Mutex
	recoveredSet map[State]measure // by the state a task was left in
}

func newBrokerQueueTelemetry(name string) *brokerQueueTelemetry {
	q := AttrQueue.String(name)
	component := AttrComponent.String("broker")
	return &brokerQueueTelemetry{
		queue:        q,
		spanName:     "reap " + name,
		set:          attrs(q),
		storeErrSet:  attrs(q, component),
		staleRequeue: attrs(q, component, AttrDecision.String(decisionNames[decisionRequeue])),
		staleFinal:   attrs(q, component, AttrDecision.String(decisionNames[decisionFinalize])),
		recoveredSet: map[State]measure{},
	}
}

func newBrokerTelemetry(c *common, queues []string) brokerTelemetry {
	in := instruments{c.meter(), c.logger}
	t := brokerTelemetry{
		tracer: c.tracer(),
		queues: make(map[string]*brokerQueueTelemetry, len(queues)),

		promoted:    in.counter(MetricTasksPromoted, "{task}", "Scheduled tasks made Ready by a broker's mover."),
		claimed:     in.counter(MetricExpiredClaimed, "{task}", "Tasks whose lease lapsed, claimed by a broker's reaper."),
		requeued:    in.counter(MetricExpiredRequeued, "{task}", "Expired tasks a broker's retry policy sent back to the queue."),
		finalized:   in.counter(MetricExpiredFailed, "{task}", "Expired tasks a broker's retry policy failed."),
		recovered:   in.counter(MetricExpiredRecovered, "{task}", "Expired tasks decided in one step by RecoverExpired."),
		stale:       in.counter(MetricDecisionsStale, "{decision}", "Decisions refused because their claim no longer held the task, and dropped."),
		storeErrors: in.counter(MetricStoreErrors, "{error}", "Store calls that failed for a reason other than a stale claim."),
	}
	for _, name := range queues {
		t.queues[name] = newBrokerQueueTelemetry(name)
	}
	return t
}

// of returns the telemetry of a queue; one the broker was not built with
// (never the case for its own passes) gets its own.
func (t *brokerTelemetry) of(queue string) *brokerQueueTelemetry {
	if q, ok := t.queues[queue]; ok {
		return q
	}
	return newBrokerQueueTelemetry(queue)
}

func (t *brokerTelemetry) promotedN(ctx context.Context, queue string, n int) {
	if n > 0 {
		t.promoted.Add(ctx, int64(n), t.of(queue).set.add...)
	}
}

func (t *brokerTelemetry) claimedN(ctx context.Context, queue string, n int) {
	if n > 0 {
		t.claimed.Add(ctx, int64(n), t.of(queue).set.add...)
	}
}

func (t *brokerTelemetry) recoveredTasks(ctx context.Context, queue string, tasks []Task) {
	q := t.of(queue)
	for _, task := range tasks {
		q.recoveredMu.Lock()
		set, ok := q.recoveredSet[task.State]
		if !ok {
			set = attrs(q.queue, AttrState.String(task.State.String()))
			q.recoveredSet[task.State] = set
		}
		q.recoveredMu.Unlock()
		t.recovered.Add(ctx, 1, set.add...)
	}
}

func (t *brokerTelemetry) storeError(ctx context.Context, queue string) {
	t.storeErrors.Add(ctx, 1, t.of(queue).storeErrSet.add...)
}

// startDecision starts the span of a reaper's decision on one claim.
func (t *brokerTelemetry) startDecision(ctx context.Context, rc ReapClaim) (context.Context, trace.Span) {
	if t.tracer == nil {
		return ctx, noSpan
	}
	q := t.of(rc.Queue)
	return t.tracer.Start(ctx, q.spanName, trace.WithAttributes(q.queue,
		AttrTaskID.String(rc.TaskID),
		AttrVersion.Int64(int64(rc.Version)),
		AttrAttempt.Int(rc.Task.Attempt)))
}

// decided counts a reaper's decision by the store's answer and ends its
// span. A store error is counted by storeError.
func (t *brokerTelemetry) decided(ctx context.Context, span trace.Span, queue string, retry bool, err error) {
	q := t.of(queue)
	var outcome string
	switch {
	case err == nil && retry:
		t.requeued.Add(ctx, 1, q.set.add...)
		outcome = OutcomeRequeued
	case err == nil:
		t.finalized.Add(ctx, 1, q.set.add...)
		outcome = OutcomeFinalized
	case superseded(err):
		set := q.staleFinal
		if retry {
			set = q.staleRequeue
		}
		t.stale.Add(ctx, 1, set.add...)
		outcome = OutcomeStaleDropped
	default:
		outcome = OutcomeStoreError
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	if span.IsRecording() {
		span.SetAttributes(AttrOutcome.String(outcome))
	}
	span.End()
}
