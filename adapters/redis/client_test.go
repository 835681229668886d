package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/model"
)

func enqueueOne(ctx context.Context, s core.Store, queue, id string) error {
	_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: queue, EnqueueArgs: model.EnqueueArgs{ID: id, MaxAttempts: 1}})
	return err
}

// While the server is down every operation fails with a transport error
// (none of the store's typed errors, which would claim to know the
// outcome); once it is back the same store works again. Nothing survives
// the restart (the test server saves nothing), so this checks only that
// the client recovers.
func TestTheStoreRecoversWhenTheServerRestarts(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { c.Close() })
	s, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := enqueueOne(ctx, s, "q", "before"); err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	for _, op := range []func() error{
		func() error { return enqueueOne(ctx, s, "q", "during") },
		func() error { _, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Second, N: 1}); return err },
		func() error { _, err := s.Counts(ctx, core.CountsParams{Queue: "q"}); return err },
	} {
		err := op()
		if err == nil {
			t.Fatal("an operation succeeded while the server was down")
		}
		if model.Kind(err) != nil || errors.Is(err, core.ErrCorrupt) || errors.Is(err, core.ErrClosed) {
			t.Errorf("while down: %v is a typed store error, want a transport error", err)
		}
	}

	srv.Restart()
	if err := enqueueOne(ctx, s, "q", "after"); err != nil {
		t.Fatalf("enqueue after restart: %v", err)
	}
	r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Second, N: 10})
	if err != nil {
		t.Fatalf("pop after restart: %v", err)
	}
	if len(r.Tasks) != 1 || r.Tasks[0].ID != "after" {
		t.Errorf("pop after restart returned %v, want the task enqueued after it", r.Tasks)
	}
	if _, err := s.Ack(ctx, core.AckParams{Claim: r.Tasks[0].Claim()}); err != nil {
		t.Errorf("ack after restart: %v", err)
	}
}

// By default the store judges time by the server's clock, and reports it.
func TestTheServerClockJudgesByDefault(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t)
	server, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Now.Sub(server); d < 0 || d > 5*time.Second || r.Now.Location() != time.UTC || r.Now.Nanosecond()%1000 != 0 {
		t.Errorf("Now %v, server TIME before it %v", r.Now, server)
	}
	if !r.Task.EnqueuedAt.Equal(r.Now) {
		t.Errorf("EnqueuedAt %v, Now %v", r.Task.EnqueuedAt, r.Now)
	}
	p, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Hour, N: 1})
	if err != nil || len(p.Tasks) != 1 {
		t.Fatalf("pop: %v %v", p.Tasks, err)
	}
	if got := p.Tasks[0].Deadline.Sub(p.Now); got != time.Hour {
		t.Errorf("deadline %v after Now, want the lease, 1h", got)
	}
	if p.Now.Before(r.Now) {
		t.Errorf("server clock went back: %v then %v", r.Now, p.Now)
	}
}

// Open makes a client from a URL, with user and password, and closes it on
// Close; a rediss:// URL asks for TLS.
func TestOpenFromAURL(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client()
	if err := admin.Do(ctx, "ACL", "SETUSER", "worker", "on", ">s3cret", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}

	s, err := redis.Open("redis://worker:s3cret@" + srv.Addr + "/0")
	if err != nil {
		t.Fatal(err)
	}
	if err := enqueueOne(ctx, s, "q", "a"); err != nil {
		t.Fatalf("enqueue as worker: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := enqueueOne(ctx, s, "q", "b"); !errors.Is(err, core.ErrClosed) {
		t.Errorf("enqueue after Close: %v, want ErrClosed", err)
	}
	if err := s.Client().Ping(ctx).Err(); err == nil {
		t.Error("Close did not close the client Open made")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	bad, err := redis.Open("redis://worker:wrong@" + srv.Addr + "/0")
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := enqueueOne(ctx, bad, "q", "c"); err == nil || model.Kind(err) != nil {
		t.Errorf("enqueue with a wrong password: %v, want an authentication error", err)
	}

	tls, err := redis.Open("rediss://" + srv.Addr + "/0")
	if err != nil {
		t.Fatal(err)
	}
	defer tls.Close()
	if c, ok := tls.Client().(*goredis.Client); !ok || c.Options().TLSConfig == nil {
		t.Error("a rediss:// URL made a client without TLS")
	}

	if _, err := redis.Open("http://" + srv.Addr); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("Open with an http URL: %v, want ErrInvalidArgument", err)
	}
}

// New keeps a store's keys under its prefix, refuses a prefix that would
// break the hash tag, and does not close a client it did not make.
func TestNewAndPrefixes(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	if _, err := redis.New(nil); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("New(nil): %v", err)
	}
	for _, p := range []string{"a{", "}b", "{x}"} {
		if _, err := redis.New(c, redis.WithPrefix(p)); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("prefix %q: %v, want ErrInvalidArgument", p, err)
		}
	}
	prefix := uniquePrefix(t, c)
	a, err := redis.New(c, redis.WithPrefix(prefix+"a:"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := redis.New(c, redis.WithPrefix(prefix+"b:"))
	if err != nil {
		t.Fatal(err)
	}
	if err := enqueueOne(ctx, a, "q", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, core.GetParams{Queue: "q", ID: "x"}); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("a task of prefix a seen through prefix b: %v", err)
	}
	keys := dump(t, c, a)
	if len(keys) == 0 {
		t.Fatal("no keys under the prefix")
	}
	for k := range keys {
		if !strings.HasPrefix(k, prefix+"a:{q}:") {
			t.Errorf("key %q outside the store's prefix and hash tag", k)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("closing a store closed the caller's client: %v", err)
	}
	d, err := redis.New(c)
	if err != nil || d.Prefix() != redis.DefaultPrefix {
		t.Errorf("default prefix %q, %v", d.Prefix(), err)
	}
}

// Times the store cannot hold exactly are invalid arguments, refused before
// anything is written.
func TestArgumentsOutsideTheTimeRange(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	far := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1, RunAfter: far}})
	if !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("run after year 3000: %v", err)
	}
	if _, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: model.MaxDuration + time.Second, N: 1}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("lease over MaxDuration: %v", err)
	}
	// Prune's bound is not stored: any time is fine.
	if _, err := s.Prune(ctx, core.PruneParams{Queue: "q", States: []core.State{core.Succeeded}, Before: far}); err != nil {
		t.Errorf("prune before year 3000: %v", err)
	}
	if _, err := s.Prune(ctx, core.PruneParams{Queue: "q", States: []core.State{core.Succeeded}}); err != nil {
		t.Errorf("prune before the zero time: %v", err)
	}
}

// The store asks a Worker for two AckBatch calls at once (core.AckFlighter):
// the server runs one while the next travels.
func TestTheStoreAsksForTwoAckBatchesAtOnce(t *testing.T) {
	s, _ := newStore(t)
	var f core.AckFlighter = s
	if got := f.AckFlights(); got != 2 {
		t.Fatalf("AckFlights = %d, want 2", got)
	}
}

// A Worker on the store that sets no batch size takes the store's
// (core.BatchSizer): DefaultBatchSize, or WithDefaultBatchSize's, clamped
// to 1..core.MaxBatch.
func TestStoreAsksWorkersForSmallBatches(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	for _, tc := range []struct {
		opts []redis.Option
		want int
	}{
		{nil, redis.DefaultBatchSize},
		{[]redis.Option{redis.WithDefaultBatchSize(200)}, 200},
		{[]redis.Option{redis.WithDefaultBatchSize(0)}, 1},
		{[]redis.Option{redis.WithDefaultBatchSize(core.MaxBatch + 1)}, core.MaxBatch},
	} {
		s, err := redis.New(c, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		var bs core.BatchSizer = s
		if got := bs.DefaultBatchSize(); got != tc.want {
			t.Fatalf("DefaultBatchSize = %d, want %d", got, tc.want)
		}
	}
}
