package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// keyed is the Enqueue of task id under unique key key, in queue q.
func keyed(id, key string) core.EnqueueParams {
	return core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: id, MaxAttempts: 1, UniqueKey: key}}
}

// EnqueueTx checks unique keys inside the caller's transaction: a key
// another task holds is a *DuplicateError that leaves the transaction able
// to go on, and a key taken by a transaction that rolls back is free
// afterwards.
func TestEnqueueTxUniqueKeys(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.Enqueue(ctx, keyed("holder", "k")); err != nil {
		t.Fatal(err)
	}
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var d *core.DuplicateError
	if _, err := s.EnqueueTx(ctx, tx, keyed("dup", "k")); !errors.As(err, &d) || d.TaskID != "holder" || !errors.Is(err, core.ErrConflict) {
		t.Fatalf("EnqueueTx of a held key: %v, want a duplicate held by holder", err)
	}
	if _, err := s.EnqueueTx(ctx, tx, keyed("other", "k2")); err != nil {
		t.Fatalf("EnqueueTx after the refusal: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, keyed("after", "k2")); err != nil {
		t.Fatalf("Enqueue of the key a rolled-back task took: %v", err)
	}
	tx, err = s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueTx(ctx, tx, keyed("x", "k3")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, keyed("y", "k3")); !errors.As(err, &d) || d.TaskID != "x" {
		t.Fatalf("Enqueue of the key a committed task took: %v, want a duplicate held by x", err)
	}
}

// A refused EnqueueTx or AckTx leaves the caller's transaction holding the
// queue's row lock: the transaction holds the queue from its first
// operation to its end, refused or not, so nothing else is applied to the
// queue between its operations (the model's one instant). Another
// connection's NOWAIT lock of the row fails until the transaction ends.
func TestARefusedOperationInATransactionKeepsTheQueueLocked(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.Enqueue(ctx, keyed("holder", "k")); err != nil {
		t.Fatal(err)
	}
	locked := func() bool {
		t.Helper()
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{s.Schema(), "queues"}.Sanitize()+` WHERE name = 'q' FOR UPDATE NOWAIT`)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55P03" {
			return true
		}
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	for _, refuse := range []struct {
		name string
		op   func(tx pgx.Tx) error
		want error
	}{
		{"EnqueueTx of a held key", func(tx pgx.Tx) error { _, err := s.EnqueueTx(ctx, tx, keyed("dup", "k")); return err }, core.ErrConflict},
		{"AckTx of a forged claim", func(tx pgx.Tx) error {
			_, err := s.AckTx(ctx, tx, core.AckParams{Claim: core.Claim{Queue: "q", TaskID: "holder", Token: 99}})
			return err
		}, core.ErrStaleClaim},
	} {
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := refuse.op(tx); !errors.Is(err, refuse.want) {
			t.Fatalf("%s: %v, want %v", refuse.name, err, refuse.want)
		}
		if !locked() {
			t.Errorf("%s: the queue's row was free after the refusal, with the transaction open", refuse.name)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if locked() {
			t.Errorf("%s: the queue's row still locked after the rollback", refuse.name)
		}
	}
}
