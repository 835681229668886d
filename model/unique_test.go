package model_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/model"
)

// holderOf returns the holder a refusal names, or fails the test when err is
// not a *DuplicateError that is also an ErrConflict.
func holderOf(t *testing.T, err error) string {
	t.Helper()
	var d *model.DuplicateError
	if !errors.As(err, &d) || !errors.Is(err, model.ErrConflict) {
		t.Fatalf("got %v, want a *DuplicateError (ErrConflict)", err)
	}
	return d.TaskID
}

// TestUniqueKeyWhilePending checks the default hold: the key is held while
// its holder is pending, a duplicate is refused naming the holder and
// changes nothing, and each way out of pending (Ack, Fail, Cancel) or a
// Remove releases it.
func TestUniqueKeyWhilePending(t *testing.T) {
	now := time.Unix(1_000_000, 0).UTC()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, end := range []string{"ack", "fail", "cancel", "remove"} {
		q := model.NewQueue("q", 0)
		var err error
		q, _, err = q.Enqueue(now, model.EnqueueArgs{ID: "a", MaxAttempts: 1, UniqueKey: "k"})
		must(err)
		if id, ok := q.KeyHolder(now, "k"); !ok || id != "a" {
			t.Fatalf("holder %q %v, want a", id, ok)
		}
		next, _, err := q.Enqueue(now, model.EnqueueArgs{ID: "b", MaxAttempts: 1, UniqueKey: "k"})
		if holderOf(t, err) != "a" || !next.Equal(q) {
			t.Fatal("a refused duplicate named the wrong holder or changed the queue")
		}
		// A task of another key, or of none, is not held up.
		q, _, err = q.Enqueue(now, model.EnqueueArgs{ID: "c", MaxAttempts: 1, UniqueKey: "other"})
		must(err)
		q, _, err = q.Enqueue(now, model.EnqueueArgs{ID: "d", MaxAttempts: 1})
		must(err)
		var ts []model.Task
		q, ts, err = q.Pop(now, time.Second, 1)
		must(err)
		if ts[0].ID != "a" || ts[0].UniqueKey != "k" {
			t.Fatalf("popped %+v, want a with its key", ts[0])
		}
		if _, _, err := q.Enqueue(now, model.EnqueueArgs{ID: "b", MaxAttempts: 1, UniqueKey: "k"}); holderOf(t, err) != "a" {
			t.Fatal("a Running holder released its key")
		}
		switch end {
		case "ack":
			q, _, err = q.Ack(now, ts[0].Claim(), nil)
		case "fail":
			q, _, err = q.Fail(now, ts[0].Claim(), "no")
		case "cancel":
			q, _, err = q.Cancel(now, "a", 0)
		case "remove":
			q, _, err = q.Remove("a", 0)
		}
		must(err)
		if _, ok := q.KeyHolder(now, "k"); ok {
			t.Fatalf("%s: the key is still held", end)
		}
		q, _, err = q.Enqueue(now, model.EnqueueArgs{ID: "b", MaxAttempts: 1, UniqueKey: "k"})
		must(err)
		if id, _ := q.KeyHolder(now, "k"); id != "b" {
			t.Fatalf("%s: holder %q, want b", end, id)
		}
		if end == "remove" {
			continue
		}
		// An operator's requeue of a: b took the key meanwhile, so a holds
		// nothing even pending; once b is done, the key is free.
		q, _, err = q.InspectRequeue("a", 0)
		must(err)
		q, _, err = q.Remove("b", 0)
		must(err)
		if id, ok := q.KeyHolder(now, "k"); ok {
			t.Fatalf("%s: %q holds the key after its last taker was removed", end, id)
		}
	}
}

// TestUniqueKeyRequeuedHolder checks that a holder an operator requeues
// holds its key again when nobody took it meanwhile.
func TestUniqueKeyRequeuedHolder(t *testing.T) {
	now := time.Unix(1_000_000, 0).UTC()
	q := model.NewQueue("q", 0)
	q, _, _ = q.Enqueue(now, model.EnqueueArgs{ID: "a", MaxAttempts: 1, UniqueKey: "k"})
	q, _, _ = q.Cancel(now, "a", 0)
	if _, ok := q.KeyHolder(now, "k"); ok {
		t.Fatal("a cancelled holder holds its key")
	}
	q, _, _ = q.InspectRequeue("a", 0)
	if id, ok := q.KeyHolder(now, "k"); !ok || id != "a" {
		t.Fatalf("holder %q %v after the requeue, want a", id, ok)
	}
}

// TestUniqueKeyForPeriod checks the period hold: from the enqueue time for
// the period on the store's clock, whatever the state, and not after.
func TestUniqueKeyForPeriod(t *testing.T) {
	now := time.Unix(1_000_000, 0).UTC()
	q := model.NewQueue("q", 0)
	q, a, err := q.Enqueue(now, model.EnqueueArgs{ID: "a", MaxAttempts: 1, UniqueKey: "k", UniqueFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !a.UniqueUntil.Equal(now.Add(time.Minute)) {
		t.Fatalf("UniqueUntil %v, want %v", a.UniqueUntil, now.Add(time.Minute))
	}
	q, ts, _ := q.Pop(now, time.Second, 1)
	q, _, _ = q.Ack(now, ts[0].Claim(), nil)
	later := now.Add(time.Minute - time.Microsecond)
	if _, _, err := q.Enqueue(later, model.EnqueueArgs{ID: "b", MaxAttempts: 1, UniqueKey: "k"}); holderOf(t, err) != "a" {
		t.Fatal("a Succeeded task released its key before its period ended")
	}
	if _, _, err := q.Enqueue(now.Add(time.Minute), model.EnqueueArgs{ID: "b", MaxAttempts: 1, UniqueKey: "k"}); err != nil {
		t.Fatalf("at the period's end: %v", err)
	}
	// Pruned within the period: released.
	q, _, _ = q.Prune([]model.State{model.Succeeded}, now.Add(time.Second), 0)
	if _, _, err := q.Enqueue(now, model.EnqueueArgs{ID: "b", MaxAttempts: 1, UniqueKey: "k"}); err != nil {
		t.Fatalf("after the holder was pruned: %v", err)
	}
}

// TestUniqueKeyArguments checks the argument rules and the order of the
// refusals: the ID, then the key, then the capacity.
func TestUniqueKeyArguments(t *testing.T) {
	now := time.Unix(1_000_000, 0).UTC()
	q := model.NewQueue("q", 1)
	for _, a := range []model.EnqueueArgs{
		{ID: "x", MaxAttempts: 1, UniqueKey: strings.Repeat("k", model.MaxUniqueKeyLength+1)},
		{ID: "x", MaxAttempts: 1, UniqueKey: "k", UniqueFor: -time.Second},
		{ID: "x", MaxAttempts: 1, UniqueKey: "k", UniqueFor: model.MaxDuration + 1},
		{ID: "x", MaxAttempts: 1, UniqueFor: time.Second},
	} {
		if _, _, err := q.Enqueue(now, a); !errors.Is(err, model.ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", a, err)
		}
	}
	q, _, err := q.Enqueue(now, model.EnqueueArgs{ID: "a", MaxAttempts: 1, UniqueKey: strings.Repeat("k", model.MaxUniqueKeyLength)})
	if err != nil {
		t.Fatal(err)
	}
	var d *model.DuplicateError
	if _, _, err := q.Enqueue(now, model.EnqueueArgs{ID: "a", MaxAttempts: 1, UniqueKey: "other"}); !errors.Is(err, model.ErrConflict) || errors.As(err, &d) {
		t.Fatalf("a taken ID: %v, want a plain ErrConflict", err)
	}
	if _, _, err := q.Enqueue(now, model.EnqueueArgs{ID: "b", MaxAttempts: 1, UniqueKey: strings.Repeat("k", model.MaxUniqueKeyLength)}); holderOf(t, err) != "a" {
		t.Fatal("a full queue answered before the held key")
	}
	if _, _, err := q.Enqueue(now, model.EnqueueArgs{ID: "b", MaxAttempts: 1, UniqueKey: "free"}); !errors.Is(err, model.ErrQueueFull) {
		t.Fatalf("a free key in a full queue: %v, want ErrQueueFull", err)
	}
	// In a batch, an item may be refused for a key an earlier item took.
	r := model.NewQueue("r", 0)
	r, items, err := r.EnqueueBatch(now, []model.EnqueueArgs{
		{ID: "a", MaxAttempts: 1, UniqueKey: "k"},
		{ID: "b", MaxAttempts: 1, UniqueKey: "k"},
	})
	if err != nil || items[0].Err != nil || holderOf(t, items[1].Err) != "a" || r.Len() != 1 {
		t.Fatalf("batch: %v %+v", err, items)
	}
}
