package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/spec"
)

var popModes = []postgres.PopMode{postgres.PopUpdateReturning, postgres.PopSelectSkipLocked}

// newStore makes a store on a schema no other store uses, emptied and
// given back when the test ends.
func newStore(tb testing.TB, opts ...postgres.Option) *postgres.Store {
	tb.Helper()
	pool := pgtest.Pool(tb)
	schema := pgtest.Take()
	s, err := postgres.New(context.Background(), pool, append([]postgres.Option{postgres.WithSchema(schema)}, opts...)...)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() {
		s.Close()
		pgtest.Give(tb, schema)
	})
	return s
}

func harness(mode postgres.PopMode) spec.Harness {
	return spec.Harness{
		Name: "postgres/" + mode.String(),
		New: func(tb testing.TB, clock core.Clock, capacity int) core.Store {
			return newStore(tb, postgres.WithClock(clock), postgres.WithCapacity(capacity), postgres.WithPopMode(mode))
		},
		Damage: damageRow,
		Tx:     &spec.TxHarness{Open: openApp, Ack: true},
	}
}

// openApp gives the application a table of its own in the store's schema,
// empty, and transactions of the store's pool at PostgreSQL's default
// isolation, READ COMMITTED, in which the store enqueues one task at a time
// (PostgreSQL has no EnqueueBatchTx) and acks (a spec.TxAcker).
func openApp(tb testing.TB, s core.Store) spec.TxDB {
	tb.Helper()
	ps, ok := s.(*postgres.Store)
	if !ok {
		tb.Fatalf("Tx: not a store of this harness")
	}
	app := pgApp{s: ps, table: pgx.Identifier{ps.Schema(), "app_rows"}.Sanitize()}
	// The schema is recycled from store to store: its rows go first.
	if _, err := ps.Pool().Exec(context.Background(), `CREATE TABLE IF NOT EXISTS `+app.table+` (key text PRIMARY KEY); DELETE FROM `+app.table); err != nil {
		tb.Fatalf("Tx: %v", err)
	}
	return app
}

// pgApp is an application's side of a store's database.
type pgApp struct {
	s     *postgres.Store
	table string
}

func (a pgApp) Begin(ctx context.Context) (spec.AppTx, error) {
	tx, err := a.s.Pool().Begin(ctx)
	if err != nil {
		return nil, err
	}
	return pgAppTx{a: a, tx: tx}, nil
}

func (a pgApp) HasRow(ctx context.Context, key string) (bool, error) {
	var n int
	err := a.s.Pool().QueryRow(ctx, `SELECT count(*) FROM `+a.table+` WHERE key = $1`, key).Scan(&n)
	return n > 0, err
}

// pgAppTx is an open transaction of the application.
type pgAppTx struct {
	a  pgApp
	tx pgx.Tx
}

func (t pgAppTx) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	return t.a.s.EnqueueTx(ctx, t.tx, p)
}

func (t pgAppTx) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	return t.a.s.AckTx(ctx, t.tx, p)
}

func (t pgAppTx) Write(ctx context.Context, key string) error {
	_, err := t.tx.Exec(ctx, `INSERT INTO `+t.a.table+` (key) VALUES ($1)`, key)
	return err
}

func (t pgAppTx) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgAppTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

var _ spec.TxAcker = pgAppTx{}

// damageRow gives a task an error history that is a JSON object, not an
// array: every column its state's index reads stays as it was.
func damageRow(tb testing.TB, s core.Store, queue, id string) {
	tb.Helper()
	ps, ok := s.(*postgres.Store)
	if !ok {
		tb.Fatalf("Damage: not a store of this harness")
	}
	q := `UPDATE ` + pgx.Identifier{ps.Schema()}.Sanitize() + `.tasks SET errors = '{"a": 1}' WHERE queue = $1 AND id = $2`
	tag, err := ps.Pool().Exec(context.Background(), q, queue, []byte(id))
	if err != nil || tag.RowsAffected() != 1 {
		tb.Fatalf("Damage(%s): %v, %d rows", id, err, tag.RowsAffected())
	}
}

func TestConformance(t *testing.T) {
	for _, mode := range popModes {
		t.Run(mode.String(), func(t *testing.T) { spec.Run(t, harness(mode)) })
	}
}

// TestDifferential runs on the default Pop only, to keep the suite's time
// down; the other Pop runs the conformance suite here and the randomized
// histories of package linearizability.
func TestDifferential(t *testing.T) {
	spec.Differential(t, harness(postgres.PopUpdateReturning))
}
