package redis_test

import (
	"context"
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
