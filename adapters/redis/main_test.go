package redis_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var storeSeq atomic.Int64

// newClient returns a client of the shared test server, closed at cleanup.
func newClient(tb testing.TB) *goredis.Client {
	tb.Helper()
	opt, err := goredis.ParseURL(redistest.URL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	c := goredis.NewClient(opt)
	tb.Cleanup(func() { c.Close() })
	return c
}

// uniquePrefix returns a key prefix no other store of this run uses; its
// keys are deleted at cleanup (they matter when REDIS_URL names a server
// that outlives the test).
func uniquePrefix(tb testing.TB, c goredis.UniversalClient) string {
	prefix := fmt.Sprintf("lht:%d:%d:", os.Getpid(), storeSeq.Add(1))
	tb.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
	return prefix
}

// newStore returns a Store with its own client and key prefix on the shared
// test server.
func newStore(tb testing.TB, opts ...redis.Option) (*redis.Store, *goredis.Client) {
	tb.Helper()
	c := newClient(tb)
	s, err := redis.New(c, append([]redis.Option{redis.WithPrefix(uniquePrefix(tb, c))}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, c
}

var harness = spec.Harness{
	Name: "redis",
	New: func(tb testing.TB, clock core.Clock, capacity int) core.Store {
		s, c := newStore(tb, redis.WithClock(clock), redis.WithCapacity(capacity))
		clients.Store(s, c)
		return s
	},
	Damage: damageTask,
}

// clients maps the stores of the harness to their clients, for damageTask.
var clients sync.Map

// damageTask writes an error history that does not parse into the stored
// task: its state and every field its order index is scored by stay as
// they were, so the record is damaged where it stands.
func damageTask(tb testing.TB, s core.Store, queue, id string) {
	tb.Helper()
	rs, ok := s.(*redis.Store)
	c, found := clients.Load(s)
	if !ok || !found {
		tb.Fatalf("Damage: not a store of this harness")
	}
	rdb := c.(goredis.UniversalClient)
	key := rs.TaskKey(queue, id)
	ctx := context.Background()
	values, ok := redis.UnpackValues(rdb.Get(ctx, key).Val())
	if !ok {
		tb.Fatalf("Damage: task %q does not unpack", id)
	}
	values[slices.Index(redis.StoredFields, "errors")] = "garbage"
	if err := rdb.Set(ctx, key, redis.PackValues(values), 0).Err(); err != nil {
		tb.Fatal(err)
	}
}

func TestConformance(t *testing.T) { spec.Run(t, harness) }

func TestDifferential(t *testing.T) { spec.Differential(t, harness) }

// The suite passes on a Redis Cluster of three masters through a cluster
// client: every key a script touches is in its queue's slot (a cluster
// refuses a script whose keys span slots). Then one store serves queues on
// each master: the library is loaded into every one.
func TestConformanceOnACluster(t *testing.T) {
	cl := redistest.StartCluster3(t, false)
	c := cl.Client()
	spec.Run(t, spec.Harness{
		Name: "redis-cluster",
		New: func(tb testing.TB, clock core.Clock, capacity int) core.Store {
			s, err := redis.New(c, redis.WithPrefix(uniquePrefix(tb, c)), redis.WithClock(clock), redis.WithCapacity(capacity))
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { s.Close() })
			return s
		},
	})
	s, err := redis.New(c, redis.WithPrefix(uniquePrefix(t, c)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	on := map[int]string{}
	for i := 0; len(on) < 3 && i < 100; i++ {
		q := fmt.Sprintf("q%d", i)
		on[cl.MasterOf(s.QueueKeys(q)["seq"])] = q
	}
	for m, q := range on {
		if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: q, EnqueueArgs: model.EnqueueArgs{ID: "t", MaxAttempts: 1}}); err != nil {
			t.Fatalf("Enqueue on master %d: %v", m, err)
		}
		pop, err := s.Pop(ctx, core.PopParams{Queue: q, Lease: time.Minute, N: 1})
		if err != nil || len(pop.Tasks) != 1 {
			t.Fatalf("Pop on master %d: %v, %v", m, pop.Tasks, err)
		}
		if _, err := s.Ack(ctx, core.AckParams{Claim: pop.Tasks[0].Claim()}); err != nil {
			t.Fatalf("Ack on master %d: %v", m, err)
		}
		if n, err := cl.Masters[m].Client().FunctionList(ctx, goredis.FunctionListQuery{}).Result(); err != nil || len(n) != 1 {
			t.Errorf("master %d holds libraries %v, %v; want the store's", m, n, err)
		}
	}
	if len(on) != 3 {
		t.Errorf("queues on %d masters of 3", len(on))
	}
}

// The suite passes through EVALSHA too: a user the ACL denies Functions
// (as a server before Redis 7.0 would) runs the same scripts that way.
func TestConformanceWithoutFunctions(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	if err := srv.Client().Do(ctx, "ACL", "SETUSER", "worker", "on", ">pw", "~*", "+@all", "-function", "-fcall", "-fcall_ro").Err(); err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, Username: "worker", Password: "pw"})
	t.Cleanup(func() { c.Close() })
	spec.Run(t, spec.Harness{
		Name: "redis-evalsha",
		New: func(tb testing.TB, clock core.Clock, capacity int) core.Store {
			s, err := redis.New(c, redis.WithPrefix(uniquePrefix(tb, c)), redis.WithClock(clock), redis.WithCapacity(capacity))
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { s.Close() })
			return s
		},
	})
}
