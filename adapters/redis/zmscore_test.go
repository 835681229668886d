package redis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/model"
)

// A server without ZMSCORE and SMISMEMBER (before Redis 6.2; here a user
// the ACL denies them) gets the batches' index checks one ZSCORE at a time
// and the registry's one SISMEMBER at a time: Pop of several tasks and
// AckBatch still work, a task missing from its ID index is still found
// (Pop sets it aside), and its ID stays taken.
func TestBatchChecksWithoutZMSCORE(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	if err := srv.Client().Do(ctx, "ACL", "SETUSER", "worker", "on", ">pw", "~*", "+@all", "-zmscore", "-smismember").Err(); err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, Username: "worker", Password: "pw"})
	t.Cleanup(func() { c.Close() })
	if err := c.ZMScore(ctx, "k", "m").Err(); err == nil {
		t.Fatal("the ACL lets the user run ZMSCORE")
	}
	s, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	enqueueN(t, s, 6)
	r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 3})
	if err != nil || len(r.Tasks) != 3 {
		t.Fatalf("pop of 3: %v, %v", r, err)
	}
	for i, it := range ackAll(t, s, r.Tasks).Items {
		if it.Err != nil || it.Task.State != model.Succeeded {
			t.Errorf("ack %d: %v, %v", i, it.Task.State, it.Err)
		}
	}

	keys := s.QueueKeys("q")
	if err := c.ZRem(ctx, keys["ids:ready"], "t4").Err(); err != nil {
		t.Fatal(err)
	}
	// The check without ZMSCORE finds t4 missing from its ID index: Pop
	// sets it aside and claims the sound tasks.
	r, err = s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 3})
	if err != nil || len(r.Tasks) != 2 || r.Tasks[0].ID != "t3" || r.Tasks[1].ID != "t5" {
		t.Fatalf("pop with a task missing from its ID index: %+v, %v; want t3 and t5", r.Tasks, err)
	}
	got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "t4"})
	if err != nil || got.State != core.Quarantined || !strings.Contains(got.Quarantine, keys["ids:ready"]) {
		t.Errorf("Get(t4): %+v, %v; want it quarantined as missing from %s", got, err, keys["ids:ready"])
	}
	// With its key gone too, t4's ID is taken by the registry alone.
	if err := c.Del(ctx, s.TaskKey("q", "t4")).Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t4", "t1"} {
		_, err = s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: id, MaxAttempts: 1}})
		if !errors.Is(err, core.ErrConflict) {
			t.Errorf("Enqueue(%s): %v, want ErrConflict", id, err)
		}
	}
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "t9", MaxAttempts: 1}}); err != nil {
		t.Errorf("Enqueue(t9): %v", err)
	}
	if err := c.SMIsMember(ctx, "k", "m").Err(); err == nil {
		t.Error("the ACL lets the user run SMISMEMBER")
	}
}

// The batches check the index entries of many tasks of one state with one
// ZMSCORE per index. Each kind of entry damage among several claims or
// several ready tasks is still found, for the damaged task alone: an
// AckBatch answers its item ErrCorrupt and acknowledges the others, and a
// Pop of several sets it aside and claims the sound tasks.
func TestBatchChecksFindEachTasksIndexDamage(t *testing.T) {
	ctx := context.Background()
	type damage struct {
		name  string
		index string // the key of QueueKeys the damage is in
		cmd   string // ZREM the task's entry, or ZADD it at score 1
	}
	damageOf := func(d damage, key, id string) []any {
		if d.cmd == "ZADD" {
			return []any{"ZADD", key, 1, id}
		}
		return []any{"ZREM", key, id}
	}
	for _, d := range []damage{
		{"MissingFromItsIDIndex", "ids:running", "ZREM"},
		{"AtAnotherScore", "running", "ZADD"},
		{"MissingFromItsOrderIndex", "running", "ZREM"},
	} {
		t.Run("AckBatch/"+d.name, func(t *testing.T) {
			s, c := newStore(t)
			enqueueN(t, s, 4)
			r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 4})
			if err != nil || len(r.Tasks) != 4 {
				t.Fatalf("pop of 4: %+v, %v", r, err)
			}
			if err := c.Do(ctx, damageOf(d, s.QueueKeys("q")[d.index], r.Tasks[2].ID)...).Err(); err != nil {
				t.Fatal(err)
			}
			for i, it := range ackAll(t, s, r.Tasks).Items {
				switch {
				case i == 2 && !errors.Is(it.Err, core.ErrCorrupt):
					t.Errorf("ack of the damaged task: %+v, %v; want ErrCorrupt", it.Task, it.Err)
				case i != 2 && (it.Err != nil || it.Task.State != model.Succeeded):
					t.Errorf("ack %d: %v, %v; want it acknowledged", i, it.Task.State, it.Err)
				}
			}
		})
	}
	for _, d := range []damage{
		{"MissingFromItsIDIndex", "ids:ready", "ZREM"},
		{"AtAnotherScore", "ready", "ZADD"},
	} {
		t.Run("Pop/"+d.name, func(t *testing.T) {
			s, c := newStore(t)
			enqueueN(t, s, 5)
			if err := c.Do(ctx, damageOf(d, s.QueueKeys("q")[d.index], "t1")...).Err(); err != nil {
				t.Fatal(err)
			}
			r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 3})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, task := range r.Tasks {
				ids = append(ids, task.ID)
			}
			if len(ids) != 3 || slices.Contains(ids, "t1") {
				t.Errorf("Pop of 3 claimed %v; want three sound tasks, not t1", ids)
			}
		})
	}
}

// enqueueN adds the tasks t0 ... t(n-1) to queue q.
func enqueueN(t *testing.T, s *redis.Store, n int) {
	t.Helper()
	var tasks []model.EnqueueArgs
	for i := range n {
		tasks = append(tasks, model.EnqueueArgs{ID: fmt.Sprintf("t%d", i), MaxAttempts: 1})
	}
	if _, err := s.EnqueueBatch(context.Background(), core.EnqueueBatchParams{Queue: "q", Tasks: tasks}); err != nil {
		t.Fatal(err)
	}
}

// ackAll acknowledges the claims on tasks of queue q with one AckBatch.
func ackAll(t *testing.T, s *redis.Store, tasks []core.Task) core.BatchResult {
	t.Helper()
	var acks []core.AckItem
	for _, task := range tasks {
		acks = append(acks, core.AckItem{Claim: task.Claim(), Result: []byte("ok")})
	}
	res, err := s.AckBatch(context.Background(), core.AckBatchParams{Queue: "q", Acks: acks})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
