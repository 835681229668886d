package redistest_test

import (
	"context"
	"net"
	"strings"
	"testing"

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
