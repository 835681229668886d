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
	mu  sync.Mutex
	sql []string
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
