package backends

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/faultproxy"
	"github.com/leasehold/leasehold/linearizability"
)

// RedisProxy returns the factory of Redis stores that reach the server at
// rawURL through a fault proxy: each client of a history gets a proxy of its
// own (internal/faultproxy) and a store made by redis.Open on the proxy's
// address, so it has the client configuration a user gets (a connection
// pool, go-redis's retries on). The stores implement
// linearizability.FaultInjector: a lost request is a connection cut before
// the request reaches the server, a lost reply a cut after the server ran
// it (go-redis then retries, and the adapter must answer the retransmission
// with the first answer), a stalled call a blackhole of the proxy. Keys go
// under a prefix per history, deleted when it ends.
func RedisProxy(rawURL string) (linearizability.Factory, error) {
	opts, err := goredis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("backends: redis URL %q: %w", rawURL, err)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("backends: redis URL %q: %w", rawURL, err)
	}
	admin := goredis.NewClient(opts) // cleans up after each history; lives as long as the process
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.Ping(ctx).Err(); err != nil {
		_ = admin.Close()
		return nil, fmt.Errorf("backends: redis at %s: %w", opts.Addr, err)
	}
	run := time.Now().UnixNano()
	return func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
		prefix := fmt.Sprintf("leasehold-check:%x:%d:", run, historySeq.Add(1))
		var mu sync.Mutex
		var proxies []*faultproxy.Proxy
		return &linearizability.Backend{
			Client: func() (core.Store, error) {
				p, err := faultproxy.New(opts.Addr)
				if err != nil {
					return nil, fmt.Errorf("backends: fault proxy: %w", err)
				}
				mu.Lock()
				proxies = append(proxies, p)
				mu.Unlock()
				via := *u
				via.Host = p.Addr()
				s, err := redis.Open(via.String(), redis.WithPrefix(prefix), redis.WithClock(clock), redis.WithCapacity(capacity))
				if err != nil {
					return nil, err
				}
				return &ProxiedStore{Store: s, Proxy: p}, nil
			},
			Close: func() error {
				mu.Lock()
				defer mu.Unlock()
				err := deletePrefix(admin, prefix)
				for _, p := range proxies {
					err = errors.Join(err, p.Close())
				}
				return err
			},
		}, nil
	}, nil
}

// ProxiedStore is a Redis store whose connections go through a fault proxy.
type ProxiedStore struct {
	*redis.Store
	Proxy *faultproxy.Proxy
}

// InjectFault arms the proxy: lost requests and replies as cuts, a stall
// as a blackhole. Slow replies and busy databases it leaves to the harness.
func (s *ProxiedStore) InjectFault(kind linearizability.CallFaultKind, d time.Duration) bool {
	switch kind {
	case linearizability.CallLoseRequest:
		s.Proxy.CutBeforeRequest()
	case linearizability.CallLoseReply:
		s.Proxy.CutAfterReply()
	case linearizability.CallStall:
		s.Proxy.Blackhole(d)
	default:
		return false
	}
	return true
}

// SQLiteStore is a SQLite store that can make its database busy: another
// connection takes the write lock and holds it for a while, as another
// process writing would.
type SQLiteStore struct {
	*sqlite.Store
	path    string
	holders *sync.WaitGroup // connections holding the lock; waited for before the files go
	app     *sqliteApp      // the application's connections, for its transactions
}

// Close closes the application's connections and the store.
func (s *SQLiteStore) Close() error {
	var err error
	if s.app != nil {
		err = s.app.close()
	}
	return errors.Join(err, s.Store.Close())
}

// InjectFault makes the database busy for d (CallBusy and CallStall); the
// other faults it leaves to the harness. It returns once the other
// connection holds the lock, so the call that follows meets it.
func (s *SQLiteStore) InjectFault(kind linearizability.CallFaultKind, d time.Duration) bool {
	if kind != linearizability.CallBusy && kind != linearizability.CallStall {
		return false
	}
	db, err := sql.Open("sqlite", s.path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return false
	}
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err == nil {
		_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	}
	if err != nil {
		if conn != nil {
			_ = conn.Close()
		}
		_ = db.Close()
		return false
	}
	s.holders.Go(func() {
		time.Sleep(d)
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		_ = conn.Close()
		_ = db.Close()
	})
	return true
}
