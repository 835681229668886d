package linearizability_test

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/linearizability/backends"
)

// The plans of a TxStore have transactions of every shape, and the
// histories check them: committed and rolled back, with tasks enqueued (one
// at a time and, on SQLite, in a batch) or refused, and on PostgreSQL with
// claims acked in them.
func TestTxStepsAreRunAndChecked(t *testing.T) {
	sf, err := backends.SQLite(t.TempDir(), sqlite.PopReturning)
	if err != nil {
		t.Fatal(err)
	}
	pf, cleanup, err := backends.Postgres(pgtest.URL(t), postgres.PopUpdateReturning)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cleanup(); err != nil {
			t.Error(err)
		}
	}()
	for _, c := range []struct {
		name    string
		f       linearizability.Factory
		results []string
	}{
		{"sqlite", sf, []string{"Tx commit", "Tx rollback", "Tx commit: Enqueue ok", "Tx rollback: Enqueue ok",
			"Tx commit: EnqueueBatch ok", "Tx rollback: EnqueueBatch ok", "Tx commit: Enqueue conflict"}},
		{"postgres", pf, []string{"Tx commit", "Tx rollback", "Tx commit: Enqueue ok", "Tx rollback: Enqueue ok",
			"Tx commit: Ack ok", "Tx rollback: Ack ok", "Tx commit: Enqueue conflict"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := linearizability.Run(context.Background(), linearizability.Config{
				Name: c.name, Factory: c.f, Histories: 40, Seed: 1, TimeMode: linearizability.FakeTime,
				Tx: true, OutDir: t.TempDir(), Parallel: 4,
			})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Violations > 0 {
				t.Fatalf("%d violations; the first saved to %s", rep.Violations, rep.Failures[0].Dir)
			}
			for _, r := range c.results {
				if rep.Outcomes[r] == 0 {
					t.Errorf("no %q in %d histories: %v", r, rep.Histories, rep.Outcomes)
				}
			}
		})
	}
}
