package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// EnqueueTx checks unique keys inside the caller's transaction: a key
// another task holds is a *DuplicateError that leaves the transaction able
// to go on, and a key taken by a transaction that rolls back is free
// afterwards.
func TestEnqueueTxUniqueKeys(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	keyed := func(id, key string) core.EnqueueParams {
		return core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: id, MaxAttempts: 1, UniqueKey: key}}
	}
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
