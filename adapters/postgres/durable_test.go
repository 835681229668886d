package postgres_test

import (
	"context"
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

// The store's own transactions commit without waiting for the disk, so
// that the queue's lock is not held while it flushes; a write is answered
// only once a flush behind its COMMIT returned, and a read only once what
// it saw is flushed.
func TestWritesAreAnsweredOnceDurable(t *testing.T) {
	ctx := context.Background()
	s, log := tracedStore(t)
	writes := map[string]func() error{
		"Enqueue": func() error {
			_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 3}})
			return err
		},
		"Pop and Ack": func() error {
			res, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
			if err != nil || len(res.Tasks) != 1 {
				t.Fatalf("Pop: %v, %d tasks", err, len(res.Tasks))
			}
			_, err = s.Ack(ctx, core.AckParams{Claim: res.Tasks[0].Claim()})
			return err
		},
		"Remove": func() error {
			_, err := s.Remove(ctx, core.InspectParams{Queue: "q", ID: "a"})
			return err
		},
	}
	for _, name := range []string{"Enqueue", "Pop and Ack", "Remove"} {
		if err := writes[name](); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sql := log.take()
		commits, async := 0, 0
		for i, q := range sql {
			if strings.Contains(q, "set_config('synchronous_commit', 'off', true)") {
				async++
			}
			if q != "COMMIT" {
				continue
			}
			commits++
			if i+1 == len(sql) || !strings.Contains(sql[i+1], "pg_logical_emit_message") {
				t.Errorf("%s: the COMMIT was not followed by a flush before the answer: %q", name, sql[i:])
			}
		}
		if commits == 0 || async != commits {
			t.Errorf("%s: %d commits, %d of them without waiting for the disk: %q", name, commits, async, sql)
		}
		if name == "Enqueue" {
			// A lone Enqueue decides itself in the database: its COMMIT
			// goes with its statements, in one round trip.
			if len(sql) == 0 || sql[0] != batchStart || slices.Contains(sql[1:], batchStart) {
				t.Errorf("Enqueue took more than one round trip: %q", sql)
			}
		}
	}
	if _, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "gone"}); err == nil {
		t.Fatal("Get of a removed task found it")
	}
	if _, err := s.Counts(ctx, core.CountsParams{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	sql := slices.DeleteFunc(log.take(), func(q string) bool { return q == batchStart })
	if len(sql) < 2 || !strings.Contains(strings.Join(sql[1:], "\n"), "pg_current_wal_flush_lsn") {
		t.Errorf("Counts was answered without waiting for what it read to be flushed: %q", sql)
	}
}
