package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/faultproxy"
	"github.com/leasehold/leasehold/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// echoServer answers every line it reads with the same line; it stops at
// cleanup.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) (string, error) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

func TestForwards(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	for _, line := range []string{"one", "two", "three"} {
		got, err := roundTrip(t, c, r, line)
		if err != nil || got != line {
			t.Fatalf("echo %q = %q, %v", line, got, err)
		}
	}
	s := p.Stats()
	if s.Connections != 1 || s.Open != 1 || s.ChunksUp != 3 || s.ChunksDown != 3 {
		t.Fatalf("stats %+v, want 1 connection open, 3 chunks each way", s)
	}
}

func TestDialFailureClosesTheClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := newProxy(t, dead)
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(t, c, r, "x"); err == nil {
		t.Fatal("round trip through a proxy to a dead target succeeded")
	}
	if s := p.Stats(); s.DialFailures != 1 {
		t.Fatalf("DialFailures = %d, want 1", s.DialFailures)
	}
}

func TestCutBeforeRequestEchoNeverSeesIt(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(t, c, r, "warm"); err != nil {
		t.Fatal(err)
	}
	p.CutBeforeRequest()
	if got, err := roundTrip(t, c, r, "lost"); err == nil {
		t.Fatalf("cut request answered %q", got)
	}
	s := p.Stats()
	if s.CutsBeforeRequest != 1 || s.ChunksUp != 1 {
		t.Fatalf("stats %+v, want 1 cut before request and 1 chunk up", s)
	}
	// One-shot: a new connection passes.
	c2, r2 := dial(t, p.Addr())
	if got, err := roundTrip(t, c2, r2, "again"); err != nil || got != "again" {
		t.Fatalf("after the cut: %q, %v", got, err)
	}
}

func TestSetDelay(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	p.SetDelay(50 * time.Millisecond)
	start := time.Now()
	if _, err := roundTrip(t, c, r, "slow"); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Fatalf("round trip with 50ms each way took %v", el)
	}
	p.SetDelay(0)
	start = time.Now()
	if _, err := roundTrip(t, c, r, "fast"); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 90*time.Millisecond {
		t.Fatalf("round trip without delay took %v", el)
	}
}

func TestBlackholeHoldsThenDelivers(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	p.Blackhole(200 * time.Millisecond)
	start := time.Now()
	got, err := roundTrip(t, c, r, "held")
	if err != nil || got != "held" {
		t.Fatalf("after blackhole: %q, %v", got, err)
	}
	if el := time.Since(start); el < 190*time.Millisecond {
		t.Fatalf("blackhole of 200ms let a round trip through in %v", el)
	}
	s := p.Stats()
	if s.Blackholes != 1 || s.HeldChunks < 1 {
		t.Fatalf("stats %+v, want 1 blackhole and a held chunk", s)
	}
	// Disarm ends a blackhole early.
	p.Blackhole(time.Hour)
	go func() { time.Sleep(50 * time.Millisecond); p.Disarm() }()
	if got, err := roundTrip(t, c, r, "early"); err != nil || got != "early" {
		t.Fatalf("after Disarm: %q, %v", got, err)
	}
}

func TestCutAll(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c1, r1 := dial(t, p.Addr())
	c2, r2 := dial(t, p.Addr())
	for _, cr := range []struct {
		c net.Conn
		r *bufio.Reader
	}{{c1, r1}, {c2, r2}} {
		if _, err := roundTrip(t, cr.c, cr.r, "hi"); err != nil {
			t.Fatal(err)
		}
	}
	p.CutAll()
	for _, r := range []*bufio.Reader{r1, r2} {
		if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("read after CutAll: %v, want EOF", err)
		}
	}
	if s := p.Stats(); s.CutAllConns != 2 || s.Open != 0 {
		t.Fatalf("stats %+v, want 2 connections cut, none open", s)
	}
	c3, r3 := dial(t, p.Addr())
	if got, err := roundTrip(t, c3, r3, "new"); err != nil || got != "new" {
		t.Fatalf("after CutAll: %q, %v", got, err)
	}
}

func TestCloseIsIdempotentAndClosesConnections(t *testing.T) {
	p, err := faultproxy.New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(t, c, r, "hi"); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("connection open after Close")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("proxy accepts after Close")
	}
}

// redisPair returns a client through a proxy to a private redis-server
// (no retries, so each fault shows as one error) and a direct client.
func redisPair(t *testing.T) (*faultproxy.Proxy, *goredis.Client, *goredis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	p := newProxy(t, srv.Addr)
	via := goredis.NewClient(&goredis.Options{Addr: p.Addr(), MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { via.Close() })
	return p, via, srv.Client()
}

func TestRedisCutAfterReplySetTookEffectClientSawError(t *testing.T) {
	p, via, direct := redisPair(t)
	ctx := context.Background()
	if err := via.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.CutAfterReply()
	if err := via.Set(ctx, "k", "v", 0).Err(); err == nil {
		t.Fatal("SET whose reply was cut returned no error")
	}
	if got, err := direct.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; the SET should have taken effect", got, err)
	}
	if s := p.Stats(); s.CutsAfterReply != 1 {
		t.Fatalf("CutsAfterReply = %d", s.CutsAfterReply)
	}
	// The client reconnects and goes on.
	if got, err := via.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET after the cut = %q, %v", got, err)
	}
}

func TestRedisCutBeforeRequestSetNeverRan(t *testing.T) {
	p, via, direct := redisPair(t)
	ctx := context.Background()
	if err := via.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.CutBeforeRequest()
	if err := via.Set(ctx, "k", "v", 0).Err(); err == nil {
		t.Fatal("SET whose request was cut returned no error")
	}
	if n, err := direct.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k = %d, %v; the SET should never have run", n, err)
	}
	if s := p.Stats(); s.CutsBeforeRequest != 1 {
		t.Fatalf("CutsBeforeRequest = %d", s.CutsBeforeRequest)
	}
}

// A retrying client resends a command whose reply was cut: the proxy shows
// the very problem a non-idempotent command has under retries.
func TestRedisCutAfterReplyWithRetriesRunsTwice(t *testing.T) {
	srv := redistest.Start(t)
	p := newProxy(t, srv.Addr)
	via := goredis.NewClient(&goredis.Options{Addr: p.Addr(), MaxRetries: 3, PoolSize: 1})
	t.Cleanup(func() { via.Close() })
	ctx := context.Background()
	if err := via.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.CutAfterReply()
	n, err := via.Incr(ctx, "n").Result()
	if err != nil {
		t.Fatalf("INCR with retries: %v", err)
	}
	if n != 2 {
		t.Fatalf("INCR answered %d, want 2 (the cut first run counted once, the retry again)", n)
	}
}
