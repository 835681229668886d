package postgres_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// sqlLog records every statement a pool's connections ran, in the order
// their results were read.
type sqlLog struct {
	mu    sync.Mutex
	sql   []string
	trips int // round trips: batches, and statements sent alone
}

// roundTrips returns the round trips since the last call.
func (l *sqlLog) roundTrips() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.trips
	l.trips = 0
	return n
}

func (l *sqlLog) add(sql string) {
	l.mu.Lock()
	l.sql = append(l.sql, strings.Join(strings.Fields(sql), " "))
	l.mu.Unlock()
}

func (l *sqlLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sql
	l.sql = nil
	return s
}

type logSQL struct{}

func (l *sqlLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	l.trips++
	l.mu.Unlock()
	return context.WithValue(ctx, logSQL{}, d.SQL)
}

func (l *sqlLog) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if sql, ok := ctx.Value(logSQL{}).(string); ok {
		l.add(sql)
	}
}

// batchStart marks in the log where a batch (one round trip) began.
const batchStart = "-- batch"

func (l *sqlLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	l.add(batchStart)
	l.mu.Lock()
	l.trips++
	l.mu.Unlock()
	return ctx
}

func (l *sqlLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if d.Err == nil {
		l.add(d.SQL)
	}
}

func (l *sqlLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// tracedStore is a store on a pool of its own whose statements are logged.
func tracedStore(t *testing.T) (*postgres.Store, *sqlLog) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	log := &sqlLog{}
	cfg.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	schema := pgtest.Take()
	s, err := postgres.New(context.Background(), pool, postgres.WithSchema(schema))
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		pgtest.Give(t, schema)
		pool.Close()
	})
	log.take()
	return s, log
}

// A lone Enqueue of a task without a unique key decides itself in the
// database: its COMMIT goes with its statements, in one round trip; other
// writes send their COMMIT once their statements' results are read.
func TestALoneEnqueueCostsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, log := tracedStore(t)
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 3}}); err != nil {
		t.Fatal(err)
	}
	sql := log.take()
	if len(sql) == 0 || sql[0] != batchStart || slices.Contains(sql[1:], batchStart) || !slices.Contains(sql, "COMMIT") {
		t.Errorf("Enqueue: want one round trip with its COMMIT, got %q", sql)
	}
	res, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	if err != nil || len(res.Tasks) != 1 {
		t.Fatalf("Pop: %v, %d tasks", err, len(res.Tasks))
	}
	sql = log.take()
	if i := slices.Index(sql, "COMMIT"); i < 1 || !slices.Contains(sql[:i], batchStart) {
		t.Errorf("Pop: want its COMMIT after its statements were read, got %q", sql)
	}
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 3}}); !errors.Is(err, core.ErrConflict) {
		t.Errorf("Enqueue of a taken ID: %v, want ErrConflict", err)
	}
}

// A worker's decision alone (Extend, Ack, Fail, Retry) goes to the server
// with the lock, its times taken from the database's clock there, with
// the read of its task that says why if it is refused, and with its
// COMMIT: one round trip. Each leaves its task as the model says.
func TestAWorkersDecisionCostsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, log := tracedStore(t)
	for _, id := range []string{"a", "b", "c", "d"} {
		enqueue(t, s, "q", id)
	}
	pop, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 4})
	if err != nil || len(pop.Tasks) != 4 {
		t.Fatalf("Pop: %v, %d tasks", err, len(pop.Tasks))
	}
	claim := map[string]model.Claim{}
	for _, task := range pop.Tasks {
		claim[task.ID] = task.Claim()
	}
	log.roundTrips()
	decisions := []struct {
		name string
		do   func() (core.TaskResult, error)
		want func(now time.Time, got core.Task) bool
	}{
		{"Extend", func() (core.TaskResult, error) {
			return s.Extend(ctx, core.ExtendParams{Claim: claim["a"], Lease: 90 * time.Second})
		}, func(now time.Time, got core.Task) bool {
			return got.State == core.Running && got.Deadline.Equal(now.Add(90*time.Second))
		}},
		{"Ack", func() (core.TaskResult, error) {
			return s.Ack(ctx, core.AckParams{Claim: claim["b"], Result: []byte("r")})
		}, func(now time.Time, got core.Task) bool {
			return got.State == core.Succeeded && string(got.Result) == "r" && got.FinishedAt.Equal(now)
		}},
		{"Fail", func() (core.TaskResult, error) {
			return s.Fail(ctx, core.FailParams{Claim: claim["c"], Message: "no"})
		}, func(now time.Time, got core.Task) bool {
			return got.State == core.Failed && len(got.Errors) == 1 && got.Errors[0].Message == "no" && got.Errors[0].At.Equal(now)
		}},
		{"Retry", func() (core.TaskResult, error) {
			return s.Retry(ctx, core.RetryParams{Claim: claim["d"], Delay: 30 * time.Second, Message: "later"})
		}, func(now time.Time, got core.Task) bool {
			return got.State == core.Scheduled && got.RunAfter.Equal(now.Add(30*time.Second)) && len(got.Errors) == 1
		}},
	}
	for _, d := range decisions {
		res, err := d.do()
		if err != nil {
			t.Fatalf("%s: %v", d.name, err)
		}
		sql := log.take()
		if n := log.roundTrips(); n != 1 || !slices.Contains(sql, "COMMIT") {
			t.Errorf("%s: %d round trips, want 1 (the lock, the statements and the COMMIT)", d.name, n)
		}
		if !d.want(res.Now, res.Task) {
			t.Errorf("%s at %v: task %+v", d.name, res.Now, res.Task)
		}
		got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: res.Task.ID})
		if err != nil || got.State != res.Task.State || got.Version != res.Task.Version {
			t.Errorf("%s: stored %+v, %v; answered %+v", d.name, got, err, res.Task)
		}
		log.roundTrips()
		log.take()
	}
}

// An EnqueueBatch of tasks without a unique key, on a store without a
// capacity, decides itself in the database as a lone Enqueue does: its
// statement, the reads of the IDs it did not add, and its COMMIT go in one
// round trip. Each item is answered as Enqueue would answer it.
func TestAnEnqueueBatchCostsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, log := tracedStore(t)
	enqueue(t, s, "q", "old")
	log.take()
	log.roundTrips()
	res, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "q", Tasks: []model.EnqueueArgs{
		{ID: "a", MaxAttempts: 1},
		{ID: "old", MaxAttempts: 1},
		{ID: "a", MaxAttempts: 1},
		{ID: "later", MaxAttempts: 1, RunAfter: time.Now().Add(time.Hour)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	sql := log.take()
	if n := log.roundTrips(); n != 1 || !slices.Contains(sql, "COMMIT") {
		t.Errorf("EnqueueBatch: %d round trips, want 1 (the lock, the statement and the COMMIT)", n)
	}
	want := []error{nil, core.ErrConflict, core.ErrConflict, nil}
	for i, it := range res.Items {
		if !errors.Is(it.Err, want[i]) || (want[i] == nil) != (it.Err == nil) {
			t.Errorf("item %d: %v, want %v", i, it.Err, want[i])
		}
	}
	if res.Items[0].Task.State != core.Ready || res.Items[3].Task.State != core.Scheduled || !res.Items[0].Task.EnqueuedAt.Equal(res.Now) {
		t.Errorf("the added items: %+v, %+v", res.Items[0].Task, res.Items[3].Task)
	}
	for _, i := range []int{0, 3} {
		got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: res.Items[i].Task.ID})
		if err != nil || got.State != res.Items[i].Task.State || got.Version != res.Items[i].Task.Version || !got.EnqueuedAt.Equal(res.Now) {
			t.Errorf("item %d stored as %+v, %v; answered %+v", i, got, err, res.Items[i].Task)
		}
	}
}
