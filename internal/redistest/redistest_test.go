package redistest_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestStartRestartStop(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	if !s.Running() {
		t.Fatal("server not running after Start")
	}
	c := s.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got := c.Get(ctx, "k").Val(); got != "v" {
		t.Fatalf("GET k = %q, want v", got)
	}
	opt, err := redis.ParseURL(s.URL())
	if err != nil || opt.Addr != s.Addr || opt.DB != 0 {
		t.Fatalf("URL %q parses to %+v, %v; want addr %s db 0", s.URL(), opt, err, s.Addr)
	}

	addr := s.Addr
	s.Restart()
	if s.Addr != addr || !s.Running() {
		t.Fatalf("after Restart: addr %s running %v, want %s running", s.Addr, s.Running(), addr)
	}
	// Nothing is saved, so the restarted server is empty; the old client
	// reconnects by itself.
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k after restart = %d, %v; want 0, nil", n, err)
	}

	s.Stop()
	if s.Running() {
		t.Fatal("server running after Stop")
	}
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Fatalf("%s still accepts connections after Stop", addr)
	}
	s.Stop() // a second Stop does nothing
}

func TestServersAreSeparate(t *testing.T) {
	ctx := context.Background()
	a, b := redistest.Start(t), redistest.Start(t)
	if a.Addr == b.Addr {
		t.Fatalf("two servers share %s", a.Addr)
	}
	if err := a.Client().Set(ctx, "k", "a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n := b.Client().Exists(ctx, "k").Val(); n != 0 {
		t.Fatalf("key written to %s visible on %s", a.Addr, b.Addr)
	}
}

func TestSharedURL(t *testing.T) {
	ctx := context.Background()
	u1, u2 := redistest.URL(t), redistest.URL(t)
	if u1 != u2 {
		t.Fatalf("URL returned %q then %q; want one shared server", u1, u2)
	}
	opt, err := redis.ParseURL(u1)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING %s: %v", u1, err)
	}
}

func TestStartCluster(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.Addr}})
	defer c.Close()
	if err := c.Set(ctx, "{a}x", "1", 0).Err(); err != nil {
		t.Fatalf("SET on the cluster: %v", err)
	}
	if err := c.Do(ctx, "MSET", "{a}x", "1", "{b}y", "2").Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("MSET across slots: %v, want CROSSSLOT", err)
	}
}

// Three masters split the slots, each with a replica; keys land on every
// master; a failover kills one master and its replica serves its slots,
// with what the master had replicated, while the other masters go on.
func TestStartCluster3AndFailover(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster3(t, true)
	if len(cl.Masters) != 3 || len(cl.Replicas) != 3 {
		t.Fatalf("%d masters, %d replicas", len(cl.Masters), len(cl.Replicas))
	}
	c := cl.Client()
	keys := map[int]string{}
	for i := 0; len(keys) < 3 && i < 100; i++ {
		k := fmt.Sprintf("{k%d}x", i)
		keys[cl.MasterOf(k)] = k
	}
	if len(keys) != 3 {
		t.Fatalf("keys on %d masters of 3", len(keys))
	}
	for m, k := range keys {
		if err := c.Set(ctx, k, "before", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		// The key is on its master, and on nothing else.
		if v, err := cl.Masters[m].Client().Get(ctx, k).Result(); err != nil || v != "before" {
			t.Fatalf("GET %s on master %d: %q, %v", k, m, v, err)
		}
		if n, err := cl.Masters[m].Client().Wait(ctx, 1, 5000).Result(); err != nil || n != 1 {
			t.Fatalf("WAIT on master %d: %d, %v", m, n, err)
		}
	}
	old := cl.Masters[1].Addr
	cl.Failover(1)
	if cl.Masters[1].Addr == old || cl.Replicas[1] != nil {
		t.Fatalf("master 1 is still %s", old)
	}
	c.ReloadState(ctx)
	for m, k := range keys {
		var v string
		var err error
		for range 50 { // the client learns the new layout on its first error
			if v, err = c.Get(ctx, k).Result(); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil || v != "before" {
			t.Errorf("GET %s (master %d) after the failover: %q, %v", k, m, v, err)
		}
		if err := c.Set(ctx, k, "after", 0).Err(); err != nil {
			t.Errorf("SET %s (master %d) after the failover: %v", k, m, err)
		}
	}
	// The new master gets a replica again.
	if r := cl.AddReplica(1); cl.Replicas[1] != r {
		t.Fatal("AddReplica did not record the replica")
	}
	if n, err := cl.Masters[1].Client().Wait(ctx, 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT on the new master: %d, %v", n, err)
	}
}

// recordingTB is a testing.TB whose Skipf and Fatalf record the message and
// end the calling goroutine, as the real ones do.
type recordingTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// callWith runs fn(tb) on its own goroutine, which Skipf or Fatalf may end.
func callWith(tb *recordingTB, fn func(testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(tb)
	}()
	<-done
}

// Without redis-server on PATH a test is skipped with an install hint, or
// fails when CI=true.
func TestMissingServerSkipsOutsideCIAndFailsInCI(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("REDIS_URL", "")
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		for name, fn := range map[string]func(testing.TB){
			"Start": func(tb testing.TB) { redistest.Start(tb) },
			"URL":   func(tb testing.TB) { redistest.URL(tb) },
		} {
			tb := &recordingTB{TB: t}
			callWith(tb, fn)
			msg := tb.skipped
			if ci == "true" {
				msg = tb.fatal
				if tb.skipped != "" {
					t.Errorf("%s with CI=true skipped: %s", name, tb.skipped)
				}
			} else if tb.fatal != "" {
				t.Errorf("%s outside CI failed: %s", name, tb.fatal)
			}
			if !strings.Contains(msg, "apt-get install redis-server") {
				t.Errorf("%s (CI=%q): message %q does not say how to install redis-server", name, ci, msg)
			}
		}
	}
}
