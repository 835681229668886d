package main

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/internal/redistest"
)

// TestPoisonRecordsDoNotStallWorkersRedis: one unreadable record per state
// in a queue of 1,000 on Redis (a task key holding a value that is not a
// packed task); the workers drain every sound task, the scans set the
// three they meet aside, and the operator removes all five.
func TestPoisonRecordsDoNotStallWorkersRedis(t *testing.T) {
	url := redistest.URL(t)
	opts, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opts)
	defer c.Close()
	const prefix = "poison-test"
	s, err := redis.New(c, redis.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sound := poisonQueue(t, s, "jobs", func(id string) {
		if err := c.Set(context.Background(), s.TaskKey("jobs", id), "garbage", 0).Err(); err != nil {
			t.Fatal(err)
		}
	})
	drainPoisoned(t, s, "jobs", sound)
	removePoison(t, s, "jobs", []string{"inspect", "--redis", url, "--prefix", prefix, "--queue", "jobs"})
}
