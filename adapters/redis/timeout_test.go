package redis_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// A task written in the layout before the attempt timeout (14 packed
// fields) reads as timeout 0, and every script that rewrites it keeps its
// other fields and stores the 15-field layout.
func TestARecordOfTheOldLayoutReadsAsNoTimeout(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t)
	for _, id := range []string{"old", "new"} {
		if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: id, Payload: []byte("p"), MaxAttempts: 2, Timeout: time.Minute}}); err != nil {
			t.Fatal(err)
		}
	}
	key := s.TaskKey("q", "old")
	f, ok := redis.UnpackValues(c.Get(ctx, key).Val())
	if !ok || len(f) != len(redis.StoredFields) || f[14] != "60000000000" {
		t.Fatalf("stored %v (%v), want %d fields ending in the timeout in ns", f, ok, len(redis.StoredFields))
	}
	if err := c.Set(ctx, key, redis.PackValues(f[:14]), 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "old"})
	if err != nil || got.Timeout != 0 || string(got.Payload) != "p" || got.MaxAttempts != 2 {
		t.Fatalf("Get of the old record = %+v, %v; want timeout 0 and the rest kept", got, err)
	}
	if n, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "new"}); err != nil || n.Timeout != time.Minute {
		t.Fatalf("Get of the new record = %+v, %v", n, err)
	}
	popped, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 2})
	if err != nil || len(popped.Tasks) != 2 {
		t.Fatalf("Pop = %+v, %v", popped, err)
	}
	for _, task := range popped.Tasks {
		want := map[string]time.Duration{"old": 0, "new": time.Minute}[task.ID]
		if task.Timeout != want {
			t.Errorf("popped %s with timeout %v, want %v", task.ID, task.Timeout, want)
		}
	}
	f, ok = redis.UnpackValues(c.Get(ctx, key).Val())
	if !ok || len(f) != 15 || f[14] != "" {
		t.Fatalf("after Pop the old record is stored as %v (%v), want 15 fields with an empty timeout", f, ok)
	}
}

// A task packed as one MessagePack array, as earlier versions of the store
// wrote it, reads as the same task and goes through every step; the first
// write stores it in the current form (its values one after the other).
// One of that form whose field is damaged reads as damaged: Get shows it
// quarantined, and a Pop that meets it sets it aside.
func TestARecordOfTheArrayFormReadsTheSame(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t)
	for _, id := range []string{"old", "bad"} {
		if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: id, Payload: []byte("p"), MaxAttempts: 2}}); err != nil {
			t.Fatal(err)
		}
		key := s.TaskKey("q", id)
		v := c.Get(ctx, key).Val()
		if v == "" || v[0]&0xf0 == 0x90 || v[0] == 0xdc {
			t.Fatalf("a new record starts with %#x: an array's header", v[0])
		}
		f, ok := redis.UnpackValues(v)
		if !ok || len(f) != len(redis.StoredFields) {
			t.Fatalf("stored %v (%v)", f, ok)
		}
		if id == "bad" {
			f[slices.Index(redis.StoredFields, "attempt")] = int64(-1)
		}
		if err := c.Set(ctx, key, redis.PackArray(f), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "old"})
	if err != nil || string(before.Payload) != "p" || before.MaxAttempts != 2 || before.State != model.Ready || before.Version != 1 {
		t.Fatalf("Get of the array record = %+v, %v", before, err)
	}
	if bad, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "bad"}); err != nil || bad.State != model.Quarantined || !strings.Contains(bad.Quarantine, "attempt") {
		t.Fatalf("Get of the damaged array record = %+v, %v; want it quarantined for its attempt", bad, err)
	}
	popped, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	if err != nil || len(popped.Tasks) != 1 || popped.Tasks[0].ID != "old" || popped.Tasks[0].Attempt != 1 {
		t.Fatalf("Pop = %+v, %v; want the array record, claimed", popped, err)
	}
	if v := c.Get(ctx, s.TaskKey("q", "old")).Val(); v == "" || v[0]&0xf0 == 0x90 || v[0] == 0xdc {
		t.Fatalf("after Pop the record still starts with %#x", v[0])
	}
	acked, err := s.Ack(ctx, core.AckParams{Claim: popped.Tasks[0].Claim(), Result: []byte("ok")})
	if err != nil || acked.Task.State != model.Succeeded || string(acked.Task.Result) != "ok" || string(acked.Task.Payload) != "p" {
		t.Fatalf("Ack = %+v, %v", acked, err)
	}
	if next, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1}); err != nil || len(next.Tasks) != 0 {
		t.Fatalf("Pop over the damaged record = %+v, %v; want none claimed", next, err)
	}
	if bad, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "bad"}); err != nil || bad.State != model.Quarantined {
		t.Fatalf("Get of the damaged record after the Pop = %+v, %v; want it set aside", bad, err)
	}
}
