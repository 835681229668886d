package oteltest_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is where every fake clock of these tests starts.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// guard bounds every wait on another goroutine: a failure deadline, never a
// way to let an effect happen.
const guard = 10 * time.Second

const queue = "jobs"

// rig is an SDK meter provider over a manual reader and an SDK tracer
// provider over a span recorder.
type rig struct {
	reader  *sdkmetric.ManualReader
	spans   *tracetest.SpanRecorder
	meters  core.Option
	tracers core.Option
}

func newRig(t *testing.T) *rig {
	r := &rig{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	r.meters, r.tracers = core.WithMeterProvider(mp), core.WithTracerProvider(tp)
	return r
}

// metrics is one collection, by metric name.
type metrics map[string]metricdata.Metrics

func (r *rig) collect(t *testing.T) metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != core.InstrumentationName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, core.InstrumentationName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// matches reports whether set holds every kv.
func matches(set attribute.Set, kv []attribute.KeyValue) bool {
	for _, want := range kv {
		if got, ok := set.Value(want.Key); !ok || got != want.Value {
			return false
		}
	}
	return true
}

// sum adds the points of a counter whose attributes hold every kv.
func (m metrics) sum(t *testing.T, name string, kv ...attribute.KeyValue) int64 {
	t.Helper()
	md, ok := m[name]
	if !ok {
		return 0
	}
	s, ok := md.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, want an int64 sum", name, md.Data)
	}
	if !s.IsMonotonic {
		t.Errorf("%s is not monotonic", name)
	}
	var n int64
	for _, p := range s.DataPoints {
		if matches(p.Attributes, kv) {
			n += p.Value
		}
	}
	return n
}

// points returns the attribute sets of a counter's points, as text.
func (m metrics) points(name string) []string {
	var out []string
	if s, ok := m[name].Data.(metricdata.Sum[int64]); ok {
		for _, p := range s.DataPoints {
			out = append(out, fmt.Sprintf("%s=%d", p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value))
		}
	}
	sort.Strings(out)
	return out
}

// count returns the number of measurements of a histogram whose attributes
// hold every kv, and their sum.
func (m metrics) count(t *testing.T, name string, kv ...attribute.KeyValue) (uint64, float64) {
	t.Helper()
	md, ok := m[name]
	if !ok {
		return 0, 0
	}
	h, ok := md.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is a %T, want a float64 histogram", name, md.Data)
	}
	if md.Unit != "s" {
		t.Errorf("%s has unit %q, want s", name, md.Unit)
	}
	var n uint64
	var sum float64
	for _, p := range h.DataPoints {
		if matches(p.Attributes, kv) {
			n += p.Count
			sum += p.Sum
		}
	}
	return n, sum
}

// ended returns the ended spans whose name starts with prefix.
func (r *rig) ended(prefix string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if strings.HasPrefix(s.Name(), prefix) {
			out = append(out, s)
		}
	}
	return out
}

func value(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

var q = core.AttrQueue.String(queue)

// await polls cond until it holds, advancing clk by step between polls when
// clk is not nil (so that a worker polling an empty queue on it polls
// again); it fails the test after guard.
func await(t *testing.T, what string, clk *core.FakeClock, step time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, guard)
		}
		if clk != nil {
			clk.Advance(step)
		}
		time.Sleep(time.Millisecond)
	}
}

// run starts w and returns a function that shuts it down within ctx's
// deadline and returns Shutdown's error; the test's cleanup calls it too.
func run(t *testing.T, w *core.Worker) (stop func(ctx context.Context) error) {
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()
	var once sync.Once
	var shutdownErr error
	stop = func(ctx context.Context) error {
		once.Do(func() {
			shutdownErr = w.Shutdown(ctx)
			if err := <-ran; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
		return shutdownErr
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		_ = stop(ctx)
	})
	return stop
}

// seen is what a handler saw of one attempt.
type seen struct {
	token uint64
	span  trace.SpanContext
}

type seenLog struct {
	mu sync.Mutex
	m  map[string]seen // by "task/attempt"
}

func (l *seenLog) add(ctx context.Context, c core.Claim) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]seen{}
	}
	l.m[fmt.Sprintf("%s/%d", c.TaskID, c.Attempt)] = seen{c.Token, trace.SpanContextFromContext(ctx)}
}

func (l *seenLog) get(id string, attempt int) (seen, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.m[fmt.Sprintf("%s/%d", id, attempt)]
	return s, ok
}

func TestEveryOutcomeIsCountedAndEveryAttemptHasASpanWithItsClaim(t *testing.T) {
	r := newRig(t)
	clk := core.NewFakeClock(t0)
	store := memory.New(memory.WithClock(clk))
	defer store.Close()
	ctx := context.Background()

	producer, err := core.NewQueue(store, queue, core.WithClock(clk), r.meters, r.tracers)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ok", "permanent", "flaky"} {
		if _, err := producer.Enqueue(ctx, []byte(id), core.WithID(id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := producer.Enqueue(ctx, nil, core.WithID("ok")); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("second Enqueue of ok: %v, want ErrConflict", err)
	}
	clk.Advance(2 * time.Second) // every task has waited 2 s when the worker starts

	var log seenLog
	w, err := core.NewWorker(store, queue, func(ctx context.Context, c core.Claim, task core.Task) ([]byte, error) {
		log.add(ctx, c)
		clk.Advance(250 * time.Millisecond) // the handler's run time, on the worker's clock
		switch {
		case task.ID == "permanent":
			return nil, core.Permanent(errors.New("bad payload"))
		case task.ID == "flaky" && c.Attempt == 1:
			return nil, errors.New("try again")
		}
		return []byte("done"), nil
	}, core.WithClock(clk), core.WithConcurrency(1), core.WithPollInterval(10*time.Millisecond, 10*time.Millisecond),
		core.WithRetryPolicy(func(core.Task, error) (time.Duration, bool) { return 0, true }),
		// One claim per handler, so each claim comes after the handler
		// before it (the queue latencies below): a task claimed ahead is
		// claimed while the handler before it runs, and its latency,
		// which ends at the claim, is that much shorter.
		core.WithPrefetch(0),
		r.meters, r.tracers)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	// The worker pops again as soon as a slot is free and a Pop found work,
	// so the clock moves only in the handlers.
	await(t, "two acks and a failure", nil, 0, func() bool {
		s := w.Stats()
		return s.Acked == 2 && s.Failed == 1
	})
	if err := stop(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	m := r.collect(t)
	st := w.Stats()
	for _, c := range []struct {
		name string
		want int64
	}{
		{core.MetricTasksEnqueued, 3},
		{core.MetricTasksClaimed, 4},
		{core.MetricTasksAcked, 2},
		{core.MetricTasksFailed, 1},
		{core.MetricTasksRetried, 1},
	} {
		if got := m.sum(t, c.name, q); got != c.want {
			t.Errorf("%s{queue=%s} = %d, want %d (points %v)", c.name, queue, got, c.want, m.points(c.name))
		}
	}
	if got := []int64{m.sum(t, core.MetricTasksClaimed), m.sum(t, core.MetricTasksAcked),
		m.sum(t, core.MetricTasksFailed), m.sum(t, core.MetricTasksRetried)}; fmt.Sprint(got) !=
		fmt.Sprint([]int64{st.Popped, st.Acked, st.Failed, st.Retried}) {
		t.Errorf("metrics %v disagree with the worker's stats %+v", got, st)
	}
	for _, name := range []string{core.MetricLeasesLost, core.MetricDecisionsStale, core.MetricTasksReleased, core.MetricStoreErrors} {
		if _, ok := m[name]; ok {
			t.Errorf("%s recorded without a lost lease, a stale decision, a shutdown or a store error: %v", name, m.points(name))
		}
	}

	n, sum := m.count(t, core.MetricHandlerDuration, q)
	if n != 4 || sum < 0.99 || sum > 1.01 {
		t.Errorf("handler duration: %d measurements summing %vs, want 4 of 0.25 s", n, sum)
	}
	for result, want := range map[string]uint64{"success": 2, "error": 2, "panic": 0} {
		if got, _ := m.count(t, core.MetricHandlerDuration, q, core.AttrHandlerResult.String(result)); got != want {
			t.Errorf("handler duration with result %s: %d measurements, want %d", result, got, want)
		}
	}
	// The three tasks waited 2 s, plus 0.25 s for each handler run before
	// theirs; the retried attempt waited for no one.
	if n, sum := m.count(t, core.MetricQueueLatency, q); n != 4 || sum < 2+2.25+2.5-0.01 || sum > 2+2.25+2.5+0.01 {
		t.Errorf("queue latency: %d measurements summing %vs, want 4 summing 6.75 s", n, sum)
	}

	if got := len(r.ended("enqueue " + queue)); got != 4 {
		t.Errorf("%d enqueue spans, want 4 (three enqueued, one refused)", got)
	}
	var refused int
	for _, s := range r.ended("enqueue ") {
		if s.SpanKind() != trace.SpanKindProducer {
			t.Errorf("enqueue span of kind %v", s.SpanKind())
		}
		if s.Status().Code == codes.Error {
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("%d enqueue spans with an error status, want 1", refused)
	}

	attempts := r.ended("process " + queue)
	if len(attempts) != 4 {
		t.Fatalf("%d attempt spans, want 4", len(attempts))
	}
	want := map[string]string{"ok/1": core.OutcomeAcked, "permanent/1": core.OutcomeFailed,
		"flaky/1": core.OutcomeRetried, "flaky/2": core.OutcomeAcked}
	for _, s := range attempts {
		id, attempt := value(s, core.AttrTaskID).AsString(), int(value(s, core.AttrAttempt).AsInt64())
		key := fmt.Sprintf("%s/%d", id, attempt)
		h, ok := log.get(id, attempt)
		if !ok {
			t.Errorf("span for %s, which no handler ran", key)
			continue
		}
		if got := value(s, core.AttrClaimToken).AsInt64(); uint64(got) != h.token {
			t.Errorf("%s: span token %d, the handler's claim %d", key, got, h.token)
		}
		if got := value(s, core.AttrQueue).AsString(); got != queue {
			t.Errorf("%s: span queue %q", key, got)
		}
		if got := value(s, core.AttrOutcome).AsString(); got != want[key] {
			t.Errorf("%s: outcome %q, want %q", key, got, want[key])
		}
		if s.SpanContext().SpanID() != h.span.SpanID() || s.SpanContext().TraceID() != h.span.TraceID() {
			t.Errorf("%s: the handler's context carries span %v, not its attempt's %v", key, h.span.SpanID(), s.SpanContext().SpanID())
		}
		if s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("%s: span kind %v", key, s.SpanKind())
		}
		failed := want[key] != core.OutcomeAcked
		if got := s.Status().Code == codes.Error; got != failed {
			t.Errorf("%s: error status %v, want %v (%+v)", key, got, failed, s.Status())
		}
		if got := len(s.Events()) > 0; got != failed {
			t.Errorf("%s: handler error recorded %v, want %v", key, got, failed)
		}
		delete(want, key)
	}
	if len(want) != 0 {
		t.Errorf("no span for %v", want)
	}
}

// TestALostLeaseAndTheLateAckAreCountedApartFromFailures scripts a lost
// lease: the worker is paused (its clock stands still, so it sends no
// heartbeat) while the store's clock moves past the lease; the broker
// requeues the task; the handler then returns and the worker's Ack is
// refused as stale.
func TestALostLeaseAndTheLateAckAreCountedApartFromFailures(t *testing.T) {
	r := newRig(t)
	storeClk := core.NewFakeClock(t0)
	workerClk := core.NewFakeClock(t0)
	store := memory.New(memory.WithClock(storeClk))
	defer store.Close()
	ctx := context.Background()

	producer, err := core.NewQueue(store, queue, r.meters, r.tracers)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := producer.Enqueue(ctx, nil, core.WithID("slow")); err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	var log seenLog
	w, err := core.NewWorker(store, queue, func(ctx context.Context, c core.Claim, _ core.Task) ([]byte, error) {
		log.add(ctx, c)
		if c.Attempt == 1 {
			close(started)
			<-release
		}
		return nil, nil
	}, core.WithClock(workerClk), core.WithLease(10*time.Second), core.WithPollInterval(time.Second, time.Second),
		r.meters, r.tracers)
	if err != nil {
		t.Fatal(err)
	}
	b, err := core.NewBroker(store, core.WithQueues(queue), core.WithClock(storeClk),
		core.WithRetryPolicy(func(core.Task, error) (time.Duration, bool) { return 0, true }),
		r.meters, r.tracers)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	select {
	case <-started:
	case <-time.After(guard):
		t.Fatal("the handler did not start")
	}
	storeClk.Advance(11 * time.Second)
	if p, err := b.RunOnce(ctx); err != nil || p.Requeued != 1 {
		t.Fatalf("RunOnce: %+v, %v; want one task requeued", p, err)
	}
	close(release)
	await(t, "the stale ack", nil, 0, func() bool { return w.Stats().LeasesLost == 1 })
	await(t, "the second attempt's ack", workerClk, time.Second, func() bool { return w.Stats().Acked == 1 })
	if err := stop(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	m := r.collect(t)
	worker := core.AttrComponent.String("worker")
	if got := m.sum(t, core.MetricLeasesLost, q); got != 1 {
		t.Errorf("leases lost = %d, want 1 (%v)", got, m.points(core.MetricLeasesLost))
	}
	if got := m.sum(t, core.MetricDecisionsStale, q, worker, core.AttrDecision.String("ack")); got != 1 {
		t.Errorf("stale acks = %d, want 1 (%v)", got, m.points(core.MetricDecisionsStale))
	}
	if got := m.sum(t, core.MetricDecisionsStale); got != 1 {
		t.Errorf("stale decisions = %d, want 1 (%v)", got, m.points(core.MetricDecisionsStale))
	}
	for _, c := range []struct {
		name string
		want int64
	}{
		{core.MetricTasksClaimed, 2},
		{core.MetricTasksAcked, 1}, // the second attempt's; the stale one is not counted
		{core.MetricTasksFailed, 0},
		{core.MetricTasksRetried, 0},
		{core.MetricExpiredClaimed, 1},
		{core.MetricExpiredRequeued, 1},
		{core.MetricExpiredFailed, 0},
		{core.MetricStoreErrors, 0},
	} {
		if got := m.sum(t, c.name, q); got != c.want {
			t.Errorf("%s = %d, want %d (%v)", c.name, got, c.want, m.points(c.name))
		}
	}
	if st := w.Stats(); st.LeasesLost != 1 || st.StaleDecisions != 1 {
		t.Errorf("worker stats %+v, want one lost lease and one stale decision", st)
	}

	first, _ := log.get("slow", 1)
	second, _ := log.get("slow", 2)
	if second.token <= first.token {
		t.Fatalf("tokens %d then %d: the second claim must be newer", first.token, second.token)
	}
	outcomes := map[uint64]string{}
	for _, s := range r.ended("process ") {
		outcomes[uint64(value(s, core.AttrClaimToken).AsInt64())] = value(s, core.AttrOutcome).AsString()
		if value(s, core.AttrOutcome).AsString() == core.OutcomeLeaseLost && s.Status().Code != codes.Error {
			t.Errorf("the lost attempt's span has status %+v, want an error", s.Status())
		}
	}
	if want := map[uint64]string{first.token: core.OutcomeLeaseLost, second.token: core.OutcomeAcked}; fmt.Sprint(outcomes) != fmt.Sprint(want) {
		t.Errorf("attempt outcomes by token %v, want %v", outcomes, want)
	}
	reaps := r.ended("reap " + queue)
	if len(reaps) != 1 || value(reaps[0], core.AttrOutcome).AsString() != core.OutcomeRequeued ||
		value(reaps[0], core.AttrTaskID).AsString() != "slow" || value(reaps[0], core.AttrAttempt).AsInt64() != 1 {
		t.Errorf("reap spans %v, want one for slow's first attempt, requeued", reaps)
	}
	if n := len(r.spans.Ended()); n != 2+1+1 {
		t.Errorf("%d spans ended, want 4: two attempts, one reap decision, one enqueue", n)
	}
}

func TestABrokersStaleDecisionAndARecoveryAreCountedByTheBroker(t *testing.T) {
	r := newRig(t)
	clk := core.NewFakeClock(t0)
	store := memory.New(memory.WithClock(clk))
	defer store.Close()
	ctx := context.Background()
	producer, err := core.NewQueue(store, queue, r.meters, r.tracers)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if _, err := producer.Enqueue(ctx, nil, core.WithID(id)); err != nil {
			t.Fatal(err)
		}
	}
	// A worker that vanished: it claimed both tasks and was never heard of
	// again.
	if res, err := store.Pop(ctx, core.PopParams{Queue: queue, Lease: time.Second, N: 2}); err != nil || len(res.Tasks) != 2 {
		t.Fatalf("Pop: %v, %v", res, err)
	}
	clk.Advance(2 * time.Second)

	// The operator requeues the task while the broker consults its policy:
	// the broker's decision is stale.
	inspector, err := core.NewInspector(store, queue)
	if err != nil {
		t.Fatal(err)
	}
	policy := func(task core.Task, _ error) (time.Duration, bool) {
		if _, err := inspector.Requeue(ctx, task.ID, core.AnyVersion); err != nil {
			t.Errorf("operator's Requeue: %v", err)
		}
		return 0, true
	}
	b, err := core.NewBroker(store, core.WithQueues(queue), core.WithRetryPolicy(policy), r.meters, r.tracers)
	if err != nil {
		t.Fatal(err)
	}
	recoverer, err := core.NewBroker(store, core.WithQueues(queue), core.WithRecoverExpired(0), r.meters, r.tracers)
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.RunOnce(ctx)
	if err != nil || p.Dropped != 2 {
		t.Fatalf("RunOnce: %+v, %v; want both decisions dropped", p, err)
	}
	// Both are Ready again (the operator's requeue); a worker claims one
	// and vanishes.
	if res, err := store.Pop(ctx, core.PopParams{Queue: queue, Lease: time.Second, N: 1}); err != nil || len(res.Tasks) != 1 {
		t.Fatalf("Pop: %v, %v", res, err)
	}
	clk.Advance(2 * time.Second)
	if p, err := recoverer.RunOnce(ctx); err != nil || p.Recovered != 1 {
		t.Fatalf("recovery pass: %+v, %v; want one task recovered", p, err)
	}

	m := r.collect(t)
	broker := core.AttrComponent.String("broker")
	if got := m.sum(t, core.MetricDecisionsStale, q, broker, core.AttrDecision.String("requeue")); got != 2 {
		t.Errorf("the broker's stale requeues = %d, want 2 (%v)", got, m.points(core.MetricDecisionsStale))
	}
	if got := m.sum(t, core.MetricDecisionsStale, core.AttrComponent.String("worker")); got != 0 {
		t.Errorf("stale decisions counted for a worker: %v", m.points(core.MetricDecisionsStale))
	}
	if got := m.sum(t, core.MetricExpiredRecovered, q, core.AttrState.String(core.Ready.String())); got != 1 {
		t.Errorf("recovered to ready = %d, want 1 (%v)", got, m.points(core.MetricExpiredRecovered))
	}
	for _, c := range []struct {
		name string
		want int64
	}{
		{core.MetricExpiredClaimed, 2},
		{core.MetricExpiredRequeued, 0},
		{core.MetricLeasesLost, 0},
		{core.MetricStoreErrors, 0},
	} {
		if got := m.sum(t, c.name, q); got != c.want {
			t.Errorf("%s = %d, want %d (%v)", c.name, got, c.want, m.points(c.name))
		}
	}
	if st := b.Stats(); st.StaleDropped != 2 {
		t.Errorf("broker stats %+v, want two stale drops", st)
	}
	reaps := r.ended("reap " + queue)
	if len(reaps) != 2 {
		t.Fatalf("%d reap spans, want 2", len(reaps))
	}
	if n := len(r.spans.Ended()); n != 2+2 {
		t.Errorf("%d spans ended, want 4: two enqueues and two reap decisions (a recovery makes none)", n)
	}
	for _, s := range reaps {
		if got := value(s, core.AttrOutcome).AsString(); got != core.OutcomeStaleDropped {
			t.Errorf("reap span outcome %q, want %q", got, core.OutcomeStaleDropped)
		}
	}
}

// failingAcks is a store whose Ack never reaches it.
type failingAcks struct{ core.Store }

var errNetwork = errors.New("network unreachable")

func (failingAcks) Ack(context.Context, core.AckParams) (core.TaskResult, error) {
	return core.TaskResult{}, errNetwork
}

func TestAStoreErrorAPanicAndAGivenBackTaskEachEndTheirAttempt(t *testing.T) {
	r := newRig(t)
	clk := core.NewFakeClock(t0)
	mem := memory.New(memory.WithClock(clk))
	defer mem.Close()
	store := failingAcks{mem}
	ctx := context.Background()
	producer, err := core.NewQueue(store, queue, r.meters, r.tracers)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"unacked", "panics", "held"} {
		if _, err := producer.Enqueue(ctx, nil, core.WithID(id)); err != nil {
			t.Fatal(err)
		}
	}
	holding := make(chan struct{})
	w, err := core.NewWorker(store, queue, func(ctx context.Context, c core.Claim, _ core.Task) ([]byte, error) {
		switch c.TaskID {
		case "held":
			close(holding)
			<-ctx.Done() // returns once the worker gives the task back
			return nil, context.Cause(ctx)
		case "panics":
			panic("handler bug")
		}
		return nil, nil
	}, core.WithClock(clk), core.WithConcurrency(2), core.WithShutdownTimeout(0), r.meters, r.tracers)
	if err != nil {
		t.Fatal(err)
	}
	// Run's context ends with no shutdown timeout: the running task is given
	// back at once (Shutdown past its deadline would leave it held instead).
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	select {
	case <-holding:
	case <-time.After(guard):
		t.Fatal("the held task's handler did not start")
	}
	await(t, "the failed ack and the retried panic", nil, 0, func() bool {
		s := w.Stats()
		return s.StoreErrors == 1 && s.Retried == 1
	})
	// Shut down once the worker waits for its next poll (and for held's
	// heartbeat), so that no Pop races the shutdown.
	parked := make(chan struct{})
	timer := time.AfterFunc(guard, func() { close(parked) })
	defer timer.Stop()
	if !clk.BlockUntil(2, parked) {
		t.Fatalf("the worker never waited for its poll and its heartbeat (%d timers)", clk.Timers())
	}
	stopRun()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(guard):
		t.Fatal("Run did not return")
	}

	m := r.collect(t)
	if got := m.sum(t, core.MetricStoreErrors, q, core.AttrComponent.String("worker")); got != 1 {
		t.Errorf("store errors = %d, want 1 (%v)", got, m.points(core.MetricStoreErrors))
	}
	if got := m.sum(t, core.MetricTasksReleased, q); got != 1 {
		var spans []string
		for _, s := range r.ended("process ") {
			spans = append(spans, fmt.Sprintf("%s/%d:%s", value(s, core.AttrTaskID).AsString(), value(s, core.AttrAttempt).AsInt64(), value(s, core.AttrOutcome).AsString()))
		}
		t.Errorf("released = %d, want 1; stats %+v; attempts %v", got, w.Stats(), spans)
	}
	if got := m.sum(t, core.MetricTasksRetried, q); got != 1 {
		t.Errorf("retried = %d, want 1 (the panic)", got)
	}
	if n, _ := m.count(t, core.MetricHandlerDuration, q, core.AttrHandlerResult.String("panic")); n != 1 {
		t.Errorf("handler durations with result panic: %d, want 1", n)
	}
	for _, name := range []string{core.MetricTasksAcked, core.MetricTasksFailed, core.MetricLeasesLost} {
		if got := m.sum(t, name, q); got != 0 {
			t.Errorf("%s = %d, want 0", name, got)
		}
	}
	outcomes := map[string]string{}
	for _, s := range r.ended("process ") {
		outcomes[value(s, core.AttrTaskID).AsString()] = value(s, core.AttrOutcome).AsString()
	}
	want := map[string]string{"unacked": core.OutcomeStoreError, "panics": core.OutcomeRetried, "held": core.OutcomeGivenBack}
	if fmt.Sprint(outcomes) != fmt.Sprint(want) {
		t.Errorf("attempt outcomes %v, want %v", outcomes, want)
	}
}
