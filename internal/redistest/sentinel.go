package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartSentinel starts a private Redis Sentinel (redis-server --sentinel)
// on a free port that monitors primary under the master name name, with a
// quorum of one, so that it alone decides a failover: a primary that does
// not answer for a second is taken for dead and the best of its replicas
// is promoted (about two to three seconds in all). It returns when the
// Sentinel knows the primary and at least replicas of its replicas, and
// stops with the test.
func StartSentinel(tb testing.TB, name string, primary *Server, replicas int) *Server {
	tb.Helper()
	path := lookPath(tb)
	dir := tb.TempDir()
	conf := filepath.Join(dir, "sentinel.conf") // Sentinel rewrites it as it learns
	text := fmt.Sprintf("dir %s\nsentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n",
		dir, name, primary.port, name, name)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	var s *Server
	var err error
	for range 5 {
		var p int
		if p, err = freePort(); err != nil {
			break
		}
		s = &Server{path: path, port: p, conf: conf, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), tb: tb}
		if err = s.launch(); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("redistest: sentinel: %v", err)
	}
	tb.Cleanup(s.Stop)
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	defer sc.Close()
	ctx := context.Background()
	deadline := time.Now().Add(startTimeout)
	for {
		addr, err := sc.GetMasterAddrByName(ctx, name).Result()
		known, rerr := sc.Replicas(ctx, name).Result()
		if err == nil && rerr == nil && len(addr) == 2 && addr[1] == strconv.Itoa(primary.port) && len(known) >= replicas {
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: sentinel %s does not know %s at %s with %d replicas within %v: %v %v %v %v", s.Addr, name, primary.Addr, replicas, startTimeout, addr, err, known, rerr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// SentinelMaster returns the address the Sentinel at s gives for the
// master called name.
func SentinelMaster(tb testing.TB, s *Server, name string) string {
	tb.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	defer sc.Close()
	addr, err := sc.GetMasterAddrByName(context.Background(), name).Result()
	if err != nil || len(addr) != 2 {
		tb.Fatalf("redistest: SENTINEL GET-MASTER-ADDR-BY-NAME %s: %v, %v", name, addr, err)
	}
	return net.JoinHostPort(addr[0], addr[1])
}
