package main

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/internal/pgtest"
)

// TestPoisonRecordsDoNotStallWorkersPostgres: one unreadable record per
// state in a queue of 1,000 on PostgreSQL (an error history that is a JSON
// object, not an array); the workers drain every sound task, the scans set
// the three they meet aside, and the operator removes all five.
func TestPoisonRecordsDoNotStallWorkersPostgres(t *testing.T) {
	url := pgtest.URL(t)
	schema := pgtest.Schema()
	defer pgtest.Drop(t, url, schema)
	ctx := context.Background()
	s, err := postgres.Open(ctx, url, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q := `UPDATE ` + pgx.Identifier{schema}.Sanitize() + `.tasks SET errors = '{"a": 1}' WHERE queue = 'jobs' AND id = $1`
	sound := poisonQueue(t, s, "jobs", func(id string) {
		if tag, err := s.Pool().Exec(ctx, q, []byte(id)); err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("damage %s: %v", id, err)
		}
	})
	drainPoisoned(t, s, "jobs", sound)
	removePoison(t, s, "jobs", []string{"inspect", "--postgres", url, "--schema", schema, "--queue", "jobs"})
}
