// Package backends makes the stores of each adapter for the linearizability
// harness: one linearizability.Factory per adapter. It is the glue between
// the harness, which knows only core.Store, and the adapters; the
// `leasehold check` command and the harness's tests share it.
package backends

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/faultproxy"
	"github.com/leasehold/leasehold/linearizability"
)

// Memory returns the factory of the in-process store: a new store per
// history, shared by its clients (it has no connections of its own).
func Memory() linearizability.Factory {
	return func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
		s := memory.New(memory.WithClock(clock), memory.WithCapacity(capacity))
		b := linearizability.SharedBatch(s)
		b.Damage = memoryDamage(s)
		return b, nil
	}
}

// historySeq numbers the histories of this process, for key prefixes.
var historySeq atomic.Uint64

// Redis returns the factory of stores on the Redis server at url
// (redis://host:port/db). Each history writes under a key prefix of its own
// ("leasehold-check:<run>:<n>:"), deleted when the history ends; each of its
// clients has a connection of its own (kept open for later histories). The
// stores judge time by the harness's clock (WithClock), not the server's:
// the checker must know the clock readings an indeterminate op may have
// used. The connections stay open for the life of the process.
func Redis(url string) (linearizability.Factory, error) {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("backends: redis URL %q: %w", url, err)
	}
	ping := goredis.NewClient(opts)
	defer ping.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ping.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("backends: redis at %s: %w", opts.Addr, err)
	}
	run := time.Now().UnixNano()
	// Connections outlive histories: a client of a history takes an idle
	// one (or dials), and gives it back when the history ends.
	var mu sync.Mutex
	var idle []*goredis.Client
	take := func() *goredis.Client {
		mu.Lock()
		defer mu.Unlock()
		if n := len(idle); n > 0 {
			c := idle[n-1]
			idle = idle[:n-1]
			return c
		}
		o := *opts
		o.PoolSize = 1 // a client of the plan is one connection
		return goredis.NewClient(&o)
	}
	give := func(cs []*goredis.Client) {
		mu.Lock()
		defer mu.Unlock()
		idle = append(idle, cs...)
	}
	damager := goredis.NewClient(opts) // the damage hooks' own (for the life of the process)
	return func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
		prefix := fmt.Sprintf("leasehold-check:%x:%d:", run, historySeq.Add(1))
		var hmu sync.Mutex
		var used []*goredis.Client
		return &linearizability.Backend{
			Client: func() (core.Store, error) {
				c := take()
				hmu.Lock()
				used = append(used, c)
				hmu.Unlock()
				return redis.New(c, redis.WithPrefix(prefix), redis.WithClock(clock), redis.WithCapacity(capacity))
			},
			Close: func() error {
				c := take()
				err := deletePrefix(c, prefix)
				hmu.Lock()
				defer hmu.Unlock()
				give(append(used, c))
				return err
			},
			Damage: redisDamage(damager, prefix),
		}, nil
	}, nil
}

// RedisShared returns the factory of Redis histories whose clients all use
// one Store (a client with a pool of connections, as a service with many
// goroutines uses one): concurrent calls then meet inside the store, where
// concurrent Enqueue calls on a queue go to the server together. The
// connections go through a proxy (internal/faultproxy) that delays every
// request and reply by 200µs, a network's round trip, so that calls of
// different clients overlap there often. Each history writes under a key
// prefix of its own, deleted when it ends; the stores judge time by the
// harness's clock.
func RedisShared(url string) (linearizability.Factory, error) {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("backends: redis URL %q: %w", url, err)
	}
	p, err := faultproxy.New(opts.Addr) // lives as long as the process
	if err != nil {
		return nil, fmt.Errorf("backends: proxy: %w", err)
	}
	p.SetDelay(200 * time.Microsecond)
	opts.Addr = p.Addr()
	opts.PoolSize = 16           // more than a plan has clients
	c := goredis.NewClient(opts) // lives as long as the process
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return nil, errors.Join(fmt.Errorf("backends: redis at %s: %w", opts.Addr, err), c.Close(), p.Close())
	}
	run := time.Now().UnixNano()
	return func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
		prefix := fmt.Sprintf("leasehold-check:%x:%d:", run, historySeq.Add(1))
		s, err := redis.New(c, redis.WithPrefix(prefix), redis.WithClock(clock), redis.WithCapacity(capacity))
		if err != nil {
			return nil, err
		}
		b := linearizability.SharedBatch(s)
		b.Close = func() error { return errors.Join(s.Close(), deletePrefix(c, prefix)) }
		b.Damage = redisDamage(c, prefix)
		return b, nil
	}, nil
}

// RedisCluster returns the factory of stores on the Redis Cluster whose
// nodes include addrs, as Redis does on one server: a key prefix per
// history, deleted when it ends, and the harness's clock. Every store of
// every history shares one cluster client (a pool per node), which routes
// each queue's scripts to the master of its slot (a store from redis.New
// leaves its client open when closed). opts are added to every store's
// (redis.WithReplicaAcks, say). The client, made with go-redis's default
// options, stays open for the life of the process.
func RedisCluster(addrs []string, opts ...redis.Option) (linearizability.Factory, error) {
	return RedisClusterClient(goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs}), opts...)
}

// RedisClusterClient is RedisCluster on a cluster client of the caller's
// (with hooks of its own, say), which it closes if the cluster does not
// answer and otherwise leaves open.
func RedisClusterClient(c *goredis.ClusterClient, opts ...redis.Option) (linearizability.Factory, error) {
	addrs := c.Options().Addrs
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error { return m.Ping(ctx).Err() }); err != nil {
		c.Close()
		return nil, fmt.Errorf("backends: redis cluster at %v: %w", addrs, err)
	}
	run := time.Now().UnixNano()
	return func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
		prefix := fmt.Sprintf("leasehold-check:%x:%d:", run, historySeq.Add(1))
		return &linearizability.Backend{
			Client: func() (core.Store, error) {
				return redis.New(c, append([]redis.Option{redis.WithPrefix(prefix), redis.WithClock(clock), redis.WithCapacity(capacity)}, opts...)...)
			},
			Close: func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return c.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error { return deletePrefix(m, prefix) })
			},
			Damage: redisDamage(c, prefix),
		}, nil
	}, nil
}

// deletePrefix deletes every key that starts with prefix.
func deletePrefix(c *goredis.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return fmt.Errorf("backends: clean up %s*: %w", prefix, err)
		}
		if len(keys) > 0 {
			if err := c.Unlink(ctx, keys...).Err(); err != nil {
				return fmt.Errorf("backends: clean up %s*: %w", prefix, err)
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// SQLite returns the factory of SQLite stores with the given Pop
// implementation. Each history has a database file of its own in dir
// (created if needed), removed when the history ends; each of its clients
// opens its own Store on that file (its own connections, as another process
// would), after the first has created the schema. The stores are
// SQLiteStores, which the runtime mode can make meet a busy database and
// whose transactions (linearizability.TxStore) are an application's on
// connections of its own, writing a table of its own in the same file.
func SQLite(dir string, mode sqlite.PopMode) (linearizability.Factory, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("backends: sqlite folder: %w", err)
	}
	run := time.Now().UnixNano()
	return func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
		path := filepath.Join(dir, fmt.Sprintf("leasehold-check-%x-%d.db", run, historySeq.Add(1)))
		// A busy timeout of linearizability.BusyTimeout, not ten seconds: a
		// write lock is held for milliseconds here, a store whose write
		// waits for the lock an application's transaction holds while that
		// transaction waits for the write (an EnqueueTx made beside it)
		// should fail soon, and the runtime plans hold the lock past it
		// (CallFault.PastTimeout) for calls to be answered core.ErrBusy.
		opts := []sqlite.Option{sqlite.WithClock(clock), sqlite.WithCapacity(capacity), sqlite.WithPopMode(mode),
			sqlite.WithReaders(2), sqlite.WithSynchronous(sqlite.SyncNormal), sqlite.WithBusyTimeout(linearizability.BusyTimeout)}
		first, err := sqlite.Open(path, opts...)
		if err != nil {
			return nil, err
		}
		if err := createSQLiteApp(path); err != nil {
			return nil, errors.Join(err, first.Close())
		}
		var mu sync.Mutex
		var stores []*sqlite.Store
		var apps []*sqliteApp
		var holders sync.WaitGroup
		client := func(s *sqlite.Store) *SQLiteStore {
			app := &sqliteApp{path: path}
			apps = append(apps, app)
			return &SQLiteStore{Store: s, path: path, holders: &holders, app: app}
		}
		damage, closeDamage := sqliteDamage(path)
		return &linearizability.Backend{
			Damage: damage,
			Client: func() (core.Store, error) {
				mu.Lock()
				defer mu.Unlock()
				if len(stores) == 0 {
					stores = append(stores, first)
					return client(first), nil
				}
				s, err := sqlite.Open(path, opts...)
				if err != nil {
					return nil, err
				}
				stores = append(stores, s)
				return client(s), nil
			},
			Close: func() error {
				mu.Lock()
				defer mu.Unlock()
				holders.Wait()
				var err error
				for _, a := range apps {
					err = errors.Join(err, a.close())
				}
				err = errors.Join(err, closeDamage())
				if len(stores) == 0 {
					err = errors.Join(err, first.Close())
				}
				for _, s := range stores {
					err = errors.Join(err, s.Close())
				}
				for _, suffix := range []string{"", "-wal", "-shm"} {
					if rmErr := os.Remove(path + suffix); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
						err = errors.Join(err, rmErr)
					}
				}
				return err
			},
		}, nil
	}, nil
}
