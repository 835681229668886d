package core_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/core"
)

// An explicit empty ID is a caller's mistake, not a request for a generated
// one: were it generated, two "idempotent" enqueues would make two tasks.
func TestEnqueueRefusesAnExplicitEmptyID(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, core.NewFakeClock(t0))
	q, err := core.NewQueue(s, queue, core.WithClock(core.NewFakeClock(t0)))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		task, err := q.Enqueue(ctx, []byte("once"), core.WithID(""))
		if !errors.Is(err, core.ErrInvalidArgument) {
			t.Fatalf("Enqueue(WithID(\"\")) = %+v, %v, want ErrInvalidArgument", task, err)
		}
	}
	// The last WithID wins, as with every other option.
	if _, err := q.Enqueue(ctx, nil, core.WithID(""), core.WithID("x")); err != nil {
		t.Fatalf("Enqueue(WithID(\"\"), WithID(\"x\")) = %v", err)
	}
	in, err := core.NewInspector(s, queue)
	if err != nil {
		t.Fatal(err)
	}
	c, err := in.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Total() != 1 {
		t.Fatalf("the refused enqueues changed the queue: %+v", c)
	}
	// Without WithID the ID is still generated.
	task, err := q.Enqueue(ctx, nil)
	if err != nil || task.ID == "" {
		t.Fatalf("Enqueue without WithID = %+v, %v", task, err)
	}
}
