package core_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is where every fake clock of these tests starts.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// guard bounds every wait of a test on another goroutine: it is a failure
// deadline, never a way to let an effect happen.
const guard = 10 * time.Second

const queue = "jobs"

// newStore returns the store the tests of this package run on, judging time
// by clk: the memory adapter (the conformance suite of package spec checks it
// against the model).
func newStore(t testing.TB, clk core.Clock) core.Store {
	s := memory.New(memory.WithClock(clk))
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// errNetwork stands for a transport error: the store could not be reached.
var errNetwork = errors.New("network unreachable")

// event is one store call the recording store saw, after it returned.
type event struct {
	Op     string
	TaskID string
	Err    error
	N      int      // Pop: the batch asked for; AckBatch: its items
	IDs    []string // Pop, AckBatch: the tasks claimed
	Pop    int      // AckBatch: the pop asked for
	Items  []error  // AckBatch: each item's answer
}

// recStore wraps a store: it records the calls of the claim protocol and can
// cut the worker's heartbeats off (as a network partition would).
type recStore struct {
	core.Store
	failExtend atomic.Bool

	mu      sync.Mutex
	events  []event
	changed chan struct{}
}

func newRecStore(t testing.TB, clk core.Clock) *recStore {
	return &recStore{Store: newStore(t, clk), changed: make(chan struct{})}
}

func (s *recStore) record(op, id string, err error) { s.add(event{Op: op, TaskID: id, Err: err}) }

func (s *recStore) add(e event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
	close(s.changed)
	s.changed = make(chan struct{})
}

// count returns the number of recorded calls of op (any op if "").
func (s *recStore) count(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.events {
		if op == "" || e.Op == op {
			n++
		}
	}
	return n
}

// waitFor is wait that gives up after d and reports whether the call came.
func (s *recStore) waitFor(op string, n int, d time.Duration) (event, bool) {
	deadline := time.After(d)
	for {
		s.mu.Lock()
		k := 0
		for _, e := range s.events {
			if e.Op == op {
				k++
				if k == n {
					s.mu.Unlock()
					return e, true
				}
			}
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			return event{}, false
		}
	}
}

// advanceToPoll advances clk a second at a time, each time once a timer is
// waiting, until the worker makes its next Pop, and returns that call. A
// timer that is waiting need not be the poll's (a heartbeat timer stays
// armed until its job's due time), so one advance may come before the poll
// loop parks, and the next one wakes it.
func advanceToPoll(t testing.TB, s *recStore, clk *core.FakeClock) event {
	t.Helper()
	polls := s.count("Pop")
	give := time.After(guard)
	for {
		blockUntil(t, clk, 1)
		clk.Advance(time.Second)
		if e, ok := s.waitFor("Pop", polls+1, 50*time.Millisecond); ok {
			return e
		}
		select {
		case <-give:
			t.Fatalf("no Pop call number %d within %v; saw %v", polls+1, guard, s.snapshot())
		default:
		}
	}
}

// wait blocks until the n-th call of op (1 for the first) was recorded and
// returns it.
func (s *recStore) wait(t testing.TB, op string, n int) event {
	t.Helper()
	e, ok := s.waitFor(op, n, guard)
	if !ok {
		t.Fatalf("no %s call number %d within %v; saw %v", op, n, guard, s.snapshot())
	}
	return e
}

func (s *recStore) snapshot() []event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]event(nil), s.events...)
}

func (s *recStore) Pop(ctx context.Context, p core.PopParams) (core.TasksResult, error) {
	r, err := s.Store.Pop(ctx, p)
	e := event{Op: "Pop", Err: err, N: p.N}
	for _, t := range r.Tasks {
		e.IDs = append(e.IDs, t.ID)
	}
	s.add(e)
	return r, err
}

func (s *recStore) Extend(ctx context.Context, p core.ExtendParams) (core.TaskResult, error) {
	if s.failExtend.Load() {
		s.record("Extend", p.Claim.TaskID, errNetwork)
		return core.TaskResult{}, errNetwork
	}
	r, err := s.Store.Extend(ctx, p)
	s.record("Extend", p.Claim.TaskID, err)
	return r, err
}

func (s *recStore) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	r, err := s.Store.Ack(ctx, p)
	s.record("Ack", p.Claim.TaskID, err)
	return r, err
}

func (s *recStore) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	r, err := s.Store.Fail(ctx, p)
	s.record("Fail", p.Claim.TaskID, err)
	return r, err
}

func (s *recStore) Retry(ctx context.Context, p core.RetryParams) (core.TaskResult, error) {
	r, err := s.Store.Retry(ctx, p)
	s.record("Retry", p.Claim.TaskID, err)
	return r, err
}

func (s *recStore) Requeue(ctx context.Context, p core.RequeueParams) (core.TaskResult, error) {
	r, err := s.Store.Requeue(ctx, p)
	s.record("Requeue", p.ReapClaim.TaskID, err)
	return r, err
}

func (s *recStore) Finalize(ctx context.Context, p core.FinalizeParams) (core.TaskResult, error) {
	r, err := s.Store.Finalize(ctx, p)
	s.record("Finalize", p.ReapClaim.TaskID, err)
	return r, err
}

// started runs w in the background and returns a function that shuts it
// down and checks that Run returned nil. The test's cleanup calls it too.
func started(t *testing.T, w *core.Worker) (stop func()) {
	t.Helper()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), guard)
			defer cancel()
			if err := w.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			if err := <-ran; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// receive waits for a value on ch, failing the test after guard.
func receive[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(guard):
		t.Fatalf("nothing received within %v", guard)
		panic("unreachable")
	}
}

// blockUntil waits until clk has n timers waiting, failing the test after
// guard.
func blockUntil(t testing.TB, clk *core.FakeClock, n int) {
	t.Helper()
	if !withinGuard(func(done <-chan struct{}) bool { return clk.BlockUntil(n, done) }) {
		t.Fatalf("the clock never had %d timers waiting (it has %d)", n, clk.Timers())
	}
}

// withinGuard runs wait with a channel closed after guard and returns what
// it returns.
func withinGuard(wait func(done <-chan struct{}) bool) bool {
	done := make(chan struct{})
	timer := time.AfterFunc(guard, func() { close(done) })
	defer timer.Stop()
	return wait(done)
}

// blockUntilTimerAt waits until clk has a timer due at at, failing the
// test after guard.
func blockUntilTimerAt(t testing.TB, clk *core.FakeClock, at time.Time) {
	t.Helper()
	if !withinGuard(func(done <-chan struct{}) bool { return clk.BlockUntilTimerAt(at, done) }) {
		t.Fatalf("the clock never had a timer due at %v (it has %d timers)", at, clk.Timers())
	}
}

// mustGet returns the task, failing the test on an error.
func mustGet(t testing.TB, s core.Store, id string) core.Task {
	t.Helper()
	task, err := s.Get(context.Background(), core.GetParams{Queue: queue, ID: id})
	if err != nil {
		t.Fatalf("Get(%q): %v", id, err)
	}
	return task
}

// enqueue adds a task with the given ID through a Queue.
func enqueue(t testing.TB, s core.Store, clk core.Clock, id string, opts ...core.EnqueueOption) core.Task {
	t.Helper()
	q, err := core.NewQueue(s, queue, core.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	task, err := q.Enqueue(context.Background(), []byte("payload of "+id), append([]core.EnqueueOption{core.WithID(id)}, opts...)...)
	if err != nil {
		t.Fatalf("Enqueue(%q): %v", id, err)
	}
	return task
}

// logRecorder is a slog.Handler that keeps every record, at every level.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}

func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// has reports whether a record with the message was logged at the level.
func (l *logRecorder) has(level slog.Level, msg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.records {
		if r.Level == level && r.Message == msg {
			return true
		}
	}
	return false
}

func (l *logRecorder) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.records {
		out = append(out, fmt.Sprintf("%v %s", r.Level, r.Message))
	}
	return out
}
