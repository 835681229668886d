package redis_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/model"
)

// keptFor makes one Enqueue through a store on client with ctx and returns
// the time to live of the reply the server kept for it.
func keptFor(t *testing.T, ctx context.Context, client goredis.UniversalClient, id string) time.Duration {
	t.Helper()
	s, err := redis.New(client, redis.WithPrefix("kept-"+id+":"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: id, MaxAttempts: 1}}); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	replies := kept(t, s)
	if len(replies) != 1 {
		t.Fatalf("the Enqueue kept %d replies (%v), want one", len(replies), replies)
	}
	var ttl time.Duration
	for _, d := range replies {
		ttl = d
	}
	return ttl
}

// kept returns the time to live of each reply s keeps, by key.
func kept(t *testing.T, s *redis.Store) map[string]time.Duration {
	t.Helper()
	c := s.Client()
	out := map[string]time.Duration{}
	for _, k := range allKeys(t, c, s.Prefix()+"*}:req:*") {
		ttl, err := c.PTTL(context.Background(), k).Result()
		if err != nil || ttl <= 0 {
			t.Fatalf("PTTL %s = %v, %v; want a time to live", k, ttl, err)
		}
		out[k] = ttl
	}
	return out
}

// lastAttempt is how long after a call's deadline its reply may be kept
// with client options o: an attempt begun just before it (a handshake and
// a write), the store's margin of 2 s, and the rounding up to a second.
func lastAttempt(o *goredis.Options) time.Duration {
	return 2*o.WriteTimeout + o.ReadTimeout + 3*time.Second
}

// allKeys returns the keys that match pattern, on every master of a
// Cluster client.
func allKeys(t *testing.T, client goredis.UniversalClient, pattern string) []string {
	t.Helper()
	ctx := context.Background()
	cc, ok := client.(*goredis.ClusterClient)
	if !ok {
		keys, err := client.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	var mu sync.Mutex
	var keys []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
		ks, err := m.Keys(ctx, pattern).Result()
		mu.Lock()
		keys = append(keys, ks...)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestKeptRepliesOutlastTheClientsResends checks that a call's reply is
// kept as long as its client can send the call again: go-redis at its
// defaults may resend after the server ran the call for longer than each
// retry's read, dial and write timeouts together, and a reply that expired
// first would let the resend run the call a second time and be refused (an
// Enqueue with ErrConflict, an Ack with ErrStaleClaim). A call with a
// deadline starts no attempt after it, and one without retries is never
// resent, so those keep their replies for less.
func TestKeptRepliesOutlastTheClientsResends(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	open := func(o *goredis.Options) *goredis.Client {
		o.Addr = srv.Addr
		c := goredis.NewClient(o)
		t.Cleanup(func() { c.Close() })
		return c
	}

	def := open(&goredis.Options{})
	o := def.Options()
	least := time.Duration(o.MaxRetries) * (o.ReadTimeout + o.DialTimeout + o.WriteTimeout)
	if ttl := keptFor(t, ctx, def, "default"); ttl < least {
		t.Errorf("a call of a default client keeps its reply %v, less than %d retries of a read, a dial and a write (%v)", ttl, o.MaxRetries, least)
	}

	// A deadline of 3 s: the last attempt begins before it, then
	// handshakes and writes within the timeouts.
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	most := 3*time.Second + lastAttempt(o)
	if ttl := keptFor(t, dctx, def, "deadline"); ttl < 3*time.Second || ttl > most {
		t.Errorf("a call with a deadline 3 s away keeps its reply %v, want between 3 s and %v", ttl, most)
	}

	// Longer timeouts keep replies longer.
	slow := open(&goredis.Options{ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	if ttl, want := keptFor(t, ctx, slow, "slow"), 3*(30+30)*time.Second; ttl < want {
		t.Errorf("a client with 30 s timeouts keeps a reply %v, want at least %v", ttl, want)
	}

	// The pauses between dials count, as the client's own function gives
	// them; a client that dials without end keeps replies the longest.
	pausing := open(&goredis.Options{DialerRetryBackoff: func(int) time.Duration { return 10 * time.Second }})
	if ttl, want := keptFor(t, ctx, pausing, "pausing"), least+time.Duration(o.MaxRetries)*time.Duration(o.DialerRetries-1)*10*time.Second; ttl < want {
		t.Errorf("a client that pauses 10 s between dials keeps a reply %v, want at least %v", ttl, want)
	}
	redialing := open(&goredis.Options{DialerRetries: 1 << 20})
	if ttl := keptFor(t, ctx, redialing, "redialing"); ttl < 10*time.Minute {
		t.Errorf("a client that dials %d times keeps a reply %v, want the cap of 15 minutes", 1<<20, ttl)
	}

	// A client that never resends keeps a reply only briefly.
	once := open(&goredis.Options{MaxRetries: -1})
	if ttl := keptFor(t, ctx, once, "once"); ttl > 5*time.Second {
		t.Errorf("a client without retries keeps a reply %v, want at most 5 s", ttl)
	}

	// A Ring retries as a Client does; a Cluster client follows up to
	// MaxRedirects redirections, each with a node's retries (none at its
	// defaults), and its nodes' timeouts are a Client's defaults. A client
	// of a type the store cannot read would keep replies the cap of 15
	// minutes.
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"one": srv.Addr}})
	t.Cleanup(func() { ring.Close() })
	if ttl := keptFor(t, ctx, ring, "ring"); ttl < least || ttl >= 10*time.Minute {
		t.Errorf("a call of a default Ring keeps its reply %v, want at least %v and less than the cap", ttl, least)
	}
	cluster := redistest.StartCluster3(t, false).Client()
	co := cluster.Options()
	redirected := time.Duration((co.MaxRedirects+1)*(max(co.MaxRetries, 0)+1)-1) * (o.ReadTimeout + o.DialTimeout + o.WriteTimeout)
	if ttl := keptFor(t, ctx, cluster, "cluster"); ttl < redirected || ttl >= 10*time.Minute {
		t.Errorf("a call of a default Cluster client keeps its reply %v, want at least %v and less than the cap", ttl, redirected)
	}

	// A client without a read timeout may resend at any time: the reply is
	// kept for the longest the store keeps one.
	blocking := open(&goredis.Options{ReadTimeout: -1})
	if ttl := keptFor(t, ctx, blocking, "blocking"); ttl < 10*time.Minute {
		t.Errorf("a client without a read timeout keeps a reply %v, want the cap of 15 minutes", ttl)
	}
}

// TestAWorkersRepliesAreKeptForAboutALease checks that the calls of a
// core.Worker, which end within a lease, keep their replies for the lease
// and the handshake and write of a last attempt, not for the client's whole
// retry window.
func TestAWorkersRepliesAreKeptForAboutALease(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s, err := redis.Open("redis://" + srv.Addr + "/0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const lease = 5 * time.Second
	done := make(chan struct{})
	w, err := core.NewWorker(s, "q", func(context.Context, core.Claim, core.Task) ([]byte, error) {
		close(done)
		return nil, nil
	}, core.WithLease(lease), core.WithConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "t", MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the Worker handled nothing within 10 s")
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	most := lease + lastAttempt(s.Client().(*goredis.Client).Options())
	replies := kept(t, s)
	worker := 0
	for _, ttl := range replies {
		if ttl > most {
			continue // the Enqueue's, made without a deadline
		}
		worker++
		if ttl < lease/2 {
			t.Errorf("a Worker's call keeps its reply %v, less than half its lease", ttl)
		}
	}
	if worker == 0 {
		t.Fatalf("no kept reply of %d (%v) is a Worker's: none within %v", len(replies), replies, most)
	}
}

// TestCoalescedEnqueuesKeepTheirReplyUntilTheLastDeadline checks that
// concurrent Enqueues sent to the server together as one script, all with
// a deadline, keep its reply for the latest deadline and a last attempt,
// not for the client's whole retry window: the script they share has no
// caller left waiting after the last deadline, and starts no attempt then.
func TestCoalescedEnqueuesKeepTheirReplyUntilTheLastDeadline(t *testing.T) {
	srv := redistest.Start(t)
	s, err := redis.Open("redis://" + srv.Addr + "/0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			id := fmt.Sprintf("t%02d", i)
			if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: id, MaxAttempts: 1}}); err != nil {
				t.Errorf("Enqueue %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	if n := redis.Batched(s); n == 0 {
		t.Fatal("none of 64 concurrent Enqueues went out in a batch: the test needs some")
	}
	most := 3*time.Second + lastAttempt(s.Client().(*goredis.Client).Options())
	replies := kept(t, s)
	if len(replies) == 0 {
		t.Fatal("the Enqueues kept no reply")
	}
	for k, ttl := range replies {
		if ttl > most {
			t.Errorf("the reply %s is kept %v, want at most %v", k, ttl, most)
		}
	}
}
