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
	}
}

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
