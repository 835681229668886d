package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

// TestSmoke runs every cell once on 50 tasks, as `make bench-peers` would,
// and checks that each one ran, that leasehold's finished, and that the
// report has its tables. It needs redis-server on PATH and, for the River
// reference rows, the local PostgreSQL; without them it skips, except with
// CI=true.
func TestSmoke(t *testing.T) {
	ci := needRedisServer(t)
	const tasks = 50
	args := []string{"-tasks", "50", "-rounds", "1", "-cell-limit", "3s", "-quiet"}
	pg := "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	if c, err := pgx.Connect(context.Background(), pg); err != nil {
		if ci {
			t.Fatalf("PostgreSQL at %s: %v", pg, err)
		}
		t.Logf("PostgreSQL at %s: %v; the River reference rows are left out", pg, err)
		args = append(args, "-postgres", "")
		pg = ""
	} else {
		c.Close(context.Background())
	}

	cfg, err := parseFlags(args, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := bench(context.Background(), cfg, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range systems() {
		if s.group == "postgres" && pg == "" {
			continue
		}
		for _, w := range s.workloads {
			k := cellKey{s.group, s.name, w}
			got := rep.samples[k]
			if len(got) != 1 {
				t.Errorf("%s: %d samples, want 1", k, len(got))
				continue
			}
			smp := got[0]
			switch {
			case smp.err != nil:
				t.Errorf("%s: %v", k, smp.err)
			case smp.done < 0 || smp.done > tasks || smp.elapsed <= 0:
				t.Errorf("%s: %d tasks in %v", k, smp.done, smp.elapsed)
			case s.name == "leasehold" && !smp.complete:
				t.Errorf("%s: %d of %d tasks done within the cell limit", k, smp.done, tasks)
			case smp.done == 0:
				// A peer may not get going within the limit on a loaded
				// machine (River under the race detector, for one).
				t.Logf("%s: no task done within the cell limit", k)
			case s.group == "redis" && (smp.redis == nil || smp.redis.scripts < 0.005 || smp.redis.cpuUsec <= 0):
				t.Errorf("%s: server usage %+v", k, smp.redis)
			case s.group == "redis" && smp.probe == nil:
				t.Errorf("%s: no probe of the server's other clients", k)
			}
		}
	}

	var out bytes.Buffer
	rep.write(&out, append([]string{"peers"}, args...))
	for _, want := range []string{
		"### Redis", "### SQLite, each system", "### SQLite at matched durability",
		"| leasehold / asynq |", "| leasehold / river |", "| leasehold / goqite |", "| ceiling: EVALSHA",
		"river: journal_mode=delete, synchronous=FULL", "goqite: journal_mode=wal, synchronous=NORMAL",
		"load average", "| PING p50 / p99 ms | longest call ms | calls > 1 ms |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if pg != "" && !strings.Contains(out.String(), "### PostgreSQL") {
		t.Errorf("report lacks the PostgreSQL table:\n%s", out.String())
	}
	if strings.Contains(out.String(), "### Errors") {
		t.Errorf("report lists errors:\n%s", out.String())
	}
}

func TestProduceAddsExactlyN(t *testing.T) {
	for _, c := range []struct{ p, n, per int }{{1, 10, 1}, {8, 1000, 1}, {8, 1050, 100}, {3, 7, 100}} {
		var added atomic.Int64
		done, err := produce(context.Background(), c.p, c.n, c.per, func(_ context.Context, k int) error {
			if k < 1 || k > c.per {
				t.Errorf("call of %d tasks, per %d", k, c.per)
			}
			added.Add(int64(k))
			return nil
		})
		if err != nil || done != c.n || added.Load() != int64(c.n) {
			t.Errorf("produce(%d, %d, %d) = %d, %v; added %d", c.p, c.n, c.per, done, err, added.Load())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	done, err := produce(ctx, 2, 1<<30, 1, func(context.Context, int) error { time.Sleep(time.Millisecond); return nil })
	if err == nil || done == 0 || done >= 1<<30 {
		t.Errorf("at the end of ctx: %d, %v", done, err)
	}
}

func TestRoundsInterleaveSystems(t *testing.T) {
	plan := planCells(config{only: []string{"redis/*/enqueue-1", "sqlite-normal/*/process-8"}})
	var got []string
	for round := range 2 {
		for _, k := range roundOrder(plan, round) {
			got = append(got, k.String())
		}
	}
	want := []string{
		"redis/leasehold/enqueue-1", "redis/asynq/enqueue-1", "redis/ceiling/enqueue-1",
		"sqlite-normal/leasehold/process-8", "sqlite-normal/river/process-8",
		"sqlite-normal/river-cooldown-1ms/process-8", "sqlite-normal/goqite/process-8",
		"redis/asynq/enqueue-1", "redis/ceiling/enqueue-1", "redis/leasehold/enqueue-1",
		"sqlite-normal/river/process-8", "sqlite-normal/river-cooldown-1ms/process-8",
		"sqlite-normal/goqite/process-8", "sqlite-normal/leasehold/process-8",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("order of two rounds:\n got %v\nwant %v", got, want)
	}
	if n := len(planCells(config{pgURL: "x"})); n != 72 {
		t.Errorf("the full plan has %d cells, want 72 (14 Redis, 20 per SQLite group, 18 PostgreSQL)", n)
	}
}

func TestSelected(t *testing.T) {
	k := cellKey{"sqlite-normal", "river", "process-64"}
	for f, want := range map[string]bool{
		"": true, "sqlite-normal": true, "river": true, "*/river/process-*": true, "sqlite/river": false,
		"redis": false, "*/leasehold/*": false, "process-8": false,
	} {
		var only []string
		if f != "" {
			only = []string{f}
		}
		if got := selected(only, k); got != want {
			t.Errorf("selected(%q, %s) = %v, want %v", f, k, got, want)
		}
	}
}

func TestMedianAndCmdstat(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median = %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median = %v", m)
	}
	calls, usec, err := parseCmdstat("calls=1001,usec=498,usec_per_call=0.50,rejected_calls=0,failed_calls=0")
	if err != nil || calls != 1001 || usec != 498 {
		t.Errorf("parseCmdstat = %v, %v, %v", calls, usec, err)
	}
	if _, _, err := parseCmdstat("rejected_calls=0"); err == nil {
		t.Error("parseCmdstat without calls: no error")
	}
	if got := num(1234567.4); got != "1 234 567" {
		t.Errorf("num = %q", got)
	}
}

// The probe sees what a long script does to the server's other clients: a
// script that runs 5 ms shows in SLOWLOG as the longest call, and a PING
// sent meanwhile waits for it.
func TestProbeSeesALongScript(t *testing.T) {
	needRedisServer(t)
	ctx := context.Background()
	srv, err := startRedis(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	opt, err := goredis.ParseURL(srv.url())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{redisURL: srv.url(), admin: goredis.NewClient(opt)}
	defer e.admin.Close()
	p, err := startProbe(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	const spin = `local t = redis.call('TIME'); local start = t[1] * 1e6 + t[2]
repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - start >= tonumber(ARGV[1])
return 1`
	for range 20 {
		if err := e.admin.Eval(ctx, spin, nil, 5000).Err(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := p.finish(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	// (Another call may take over 1 ms on a busy machine.)
	if st.slow < 20 || st.longest < 5*time.Millisecond || st.longest > time.Second {
		t.Errorf("SLOWLOG: %d calls over 1 ms, the longest %v; want at least the 20 scripts of 5 ms", st.slow, st.longest)
	}
	if st.p99 < time.Millisecond || st.p50 <= 0 {
		t.Errorf("PING p50 %v, p99 %v while the server spent 0.1 s in scripts of 5 ms", st.p50, st.p99)
	}
}

// needRedisServer skips t when redis-server is not on PATH, and fails it
// instead with CI=true; it reports whether CI=true.
func needRedisServer(t *testing.T) (ci bool) {
	t.Helper()
	ci = os.Getenv("CI") == "true"
	if _, err := exec.LookPath("redis-server"); err != nil {
		if ci {
			t.Fatal("redis-server not on PATH")
		}
		t.Skip("redis-server not on PATH (apt-get install redis-server)")
	}
	return ci
}
