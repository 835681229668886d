// Package backends makes the stores of each adapter for the linearizability
// harness: one linearizability.Factory per adapter. It is the glue between
// the harness, which knows only core.Store, and the adapters; the
// `leasehold check` command and the harness's tests share it.
package backends

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/linearizability"
)

// Memory returns the factory of the in-process store: a new store per
// history, shared by its clients (it has no connections of its own).
func Memory() linearizability.Factory {
	return func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
		return linearizability.Shared(memory.New(memory.WithClock(clock), memory.WithCapacity(capacity))), nil
	}
}

// historySeq numbers the histories of this process, for key prefixes.
var historySeq atomic.Uint64

// Redis returns the factory of stores on the Redis server at url
// (redis://host:port/db). Each history writes under a key prefix of its own
// ("leasehold-check:<pid-ish>:<n>:"), deleted when the history ends; each of
// its clients has its own connection. The stores judge time by the
// harness's clock (WithClock), not the server's: the checker must know the
// clock readings an indeterminate op may have used.
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
	return func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
		prefix := fmt.Sprintf("leasehold-check:%x:%d:", run, historySeq.Add(1))
		var mu sync.Mutex
		var clients []*goredis.Client
		newClient := func() *goredis.Client {
			o := *opts
			o.PoolSize = 1 // one connection: a client of the plan is one connection
			c := goredis.NewClient(&o)
			mu.Lock()
			clients = append(clients, c)
			mu.Unlock()
			return c
		}
		return &linearizability.Backend{
			Client: func() (core.Store, error) {
				return redis.New(newClient(), redis.WithPrefix(prefix), redis.WithClock(clock), redis.WithCapacity(capacity))
			},
			Close: func() error {
				c := newClient()
				err := deletePrefix(c, prefix)
				mu.Lock()
				defer mu.Unlock()
				for _, c := range clients {
					err = errors.Join(err, c.Close())
				}
				return err
			},
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
