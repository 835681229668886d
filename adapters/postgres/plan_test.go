package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// oneConnectionStore returns a store in a schema of its own over a pool of
// one connection, so that every statement of the store runs on that
// connection and its plan cache; the pool, and the schema's name.
func oneConnectionStore(t *testing.T) (*postgres.Store, *pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := pgtest.Take()
	t.Cleanup(func() { pgtest.Give(t, schema) })
	s, err := postgres.New(ctx, pool, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, pool, schema
}

// enqueueIDs adds the tasks prefix+from .. prefix+(from+n-1) to queue q of
// s, in EnqueueBatch calls of at most size tasks, each of which must be
// added.
func enqueueIDs(t *testing.T, s *postgres.Store, prefix string, from, n, size int) {
	t.Helper()
	for i := from; i < from+n; i += size {
		var tasks []model.EnqueueArgs
		for j := i; j < min(from+n, i+size); j++ {
			tasks = append(tasks, model.EnqueueArgs{ID: fmt.Sprintf("%s%06d", prefix, j), MaxAttempts: 1})
		}
		res, err := s.EnqueueBatch(context.Background(), core.EnqueueBatchParams{Queue: "q", Tasks: tasks})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range res.Items {
			if it.Err != nil {
				t.Fatal(it.Err)
			}
		}
	}
}

// serverCount returns what query (with the schema's name as $1) counts in
// the server's statistics, the store's connection's included: it is told
// to flush its statistics at its next statement, which is then run.
func serverCount(t *testing.T, pool *pgxpool.Pool, schema, query string) int64 {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := pool.QueryRow(ctx, query, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A connection that ran AckBatch while the tasks table was small goes on
// reading the claimed tasks without a sequential scan of the table once it
// has grown: a prepared statement's cached generic plan, made on the small
// table, must not stay one that scans the whole table (it did: a hash join
// on ctid over a sequential scan, 8 ms an AckBatch of 8 at 100 000 rows).
// The table's sequential scans are counted by the server's statistics.
func TestAckBatchKeepsOffSequentialScansAfterTheTableGrows(t *testing.T) {
	ctx := context.Background()
	s, pool, schema := oneConnectionStore(t)

	fill := func(prefix string, n int) { enqueueIDs(t, s, prefix, 0, n, core.MaxBatch) }
	r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	if err != nil || len(r.Tasks) != 0 {
		t.Fatalf("Pop on an empty queue: %d tasks, %v", len(r.Tasks), err)
	}
	fill("a", 100)
	r, err = s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 8})
	if err != nil || len(r.Tasks) != 8 {
		t.Fatalf("Pop: %d tasks, %v", len(r.Tasks), err)
	}
	held := r.Tasks
	cycles := func(n int) {
		t.Helper()
		for range n {
			acks := make([]core.AckItem, len(held))
			for i, h := range held {
				acks[i] = core.AckItem{Claim: h.Claim()}
			}
			res, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q", Acks: acks, Pop: core.AckPop{Lease: time.Minute, N: 8}})
			if err != nil {
				t.Fatal(err)
			}
			for i, it := range res.Items {
				if it.Err != nil {
					t.Fatalf("item %d: %v", i, it.Err)
				}
			}
			if len(res.Claimed) != 8 {
				t.Fatalf("AckBatch claimed %d tasks, want 8", len(res.Claimed))
			}
			held = res.Claimed
		}
	}
	cycles(10) // the plans are made and cached on the small table
	fill("b", 5000)

	// seqScans is the number of sequential scans of the tasks table the
	// server counted.
	seqScans := func() int64 {
		return serverCount(t, pool, schema, `SELECT seq_scan FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'tasks'`)
	}
	before := seqScans()
	const n = 30
	cycles(n)
	if d := seqScans() - before; d > 0 {
		t.Fatalf("%d AckBatches of 8 on a table of 5 100 tasks started %d sequential scans of it, want none", n, d)
	}
}

// The store's own transactions run every prepared statement on its cached
// generic plan, never planning it again for the values of one call: left
// to choose (plan_cache_mode auto), the server compared AckBatch's generic
// plan with its plans for a batch of one and went on planning it anew on
// every call, 0.39 ms of a Worker's 1.3 ms cycle at one slot. A worker of
// one slot acknowledges and claims one task per call, and a producer adds
// one task per Enqueue; afterwards no statement of the store's connection
// has been planned for its values more than the five times the server
// always does before it compares (pg_prepared_statements counts them): the
// statements that precede the transaction's settings, such as the lock,
// have those five, and then run on their generic plans.
func TestStoreStatementsKeepTheirGenericPlans(t *testing.T) {
	ctx := context.Background()
	s, pool, _ := oneConnectionStore(t)

	const n = 20
	for i := range n {
		p := core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: fmt.Sprintf("t%02d", i), MaxAttempts: 1}}
		if _, err := s.Enqueue(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	if err != nil || len(r.Tasks) != 1 {
		t.Fatalf("Pop: %d tasks, %v", len(r.Tasks), err)
	}
	held := r.Tasks[0]
	for i := 1; i < n; i++ {
		res, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q", Acks: []core.AckItem{{Claim: held.Claim()}}, Pop: core.AckPop{Lease: time.Minute, N: 1}})
		if err != nil || len(res.Items) != 1 || res.Items[0].Err != nil || len(res.Claimed) != 1 {
			t.Fatalf("AckBatch %d: %+v, %v", i, res, err)
		}
		held = res.Claimed[0]
	}

	rows, err := pool.Query(ctx, `SELECT statement, custom_plans, generic_plans FROM pg_prepared_statements WHERE custom_plans > 5`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var stmt string
		var custom, generic int64
		if err := rows.Scan(&stmt, &custom, &generic); err != nil {
			t.Fatal(err)
		}
		t.Errorf("planned %d times for its values (%d times on its generic plan):\n%s", custom, generic, stmt)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// An EnqueueBatch looks up each of its IDs by the primary key, whatever the
// size of the queue: written as NOT EXISTS, the lookup became, in the
// generic plan, an anti join that read every task of the queue by its
// index on each call (4 ms an EnqueueBatch of 10 at 20 000 tasks, against
// 1 ms). The index entries the server read are counted by its statistics.
func TestEnqueueBatchLooksUpItsIDsAlone(t *testing.T) {
	s, pool, schema := oneConnectionStore(t)
	enqueueIDs(t, s, "a", 0, 5000, core.MaxBatch)
	indexReads := func() int64 {
		return serverCount(t, pool, schema, `SELECT coalesce(sum(idx_tup_read), 0)::bigint FROM pg_stat_user_indexes WHERE schemaname = $1 AND relname = 'tasks'`)
	}
	before := indexReads()
	const calls, size = 10, 10
	enqueueIDs(t, s, "b", 0, calls*size, size)
	if d := indexReads() - before; d > calls*size*10 {
		t.Fatalf("%d EnqueueBatches of %d on a queue of 5 000 tasks read %d index entries of the tasks, want at most %d", calls, size, d, calls*size*10)
	}
}
