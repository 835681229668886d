package linearizability_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/linearizability/backends"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The budget of TestRandomizedHistories comes from the environment, so the
// mutant runner (and anyone chasing a bug) can point it where they need:
//
//	LEASEHOLD_HISTORIES  histories per adapter (default: see adapters below)
//	LEASEHOLD_DURATION   time per adapter, e.g. 30s (default: see adapters)
//	LEASEHOLD_SEED       seed of the first history (default: from the time)
//	LEASEHOLD_MODE       fake, real or mixed (default mixed)
//	LEASEHOLD_FAULTS     1: inject transport faults and busy databases (default 0)
//	LEASEHOLD_CLIENTS    most clients in a plan (default 6)
//	LEASEHOLD_PARALLEL   histories run at once (default: twice the CPUs, at least 4)
//	LEASEHOLD_SHRINK     0: do not shrink a failing plan (default 1)
//	LEASEHOLD_OUT        where violations are saved (default $TMPDIR/leasehold-check)
//	LEASEHOLD_CHECK_TIMEOUT  longest check of one history, e.g. 10s (default 30s)
//
// A check that runs out of time is a violation (Unknown). The tests give it
// 30 s, not the harness's 10: `make test` runs the packages side by side on
// two cores, and a runtime history of 192 operations that checks in 2.3 s
// alone ran past 10 s there (it replays Ok). The mutant runner keeps 10 s,
// so that a mutant is flagged within its run's budget.
func budget(t *testing.T, name string, histories int, duration time.Duration) linearizability.Config {
	t.Helper()
	cfg := linearizability.Config{
		Name:      name,
		Histories: envInt(t, "LEASEHOLD_HISTORIES", histories),
		Duration:  envDuration(t, "LEASEHOLD_DURATION", duration),
		Seed:      uint64(envInt(t, "LEASEHOLD_SEED", int(time.Now().UnixNano()%1e9))),
		Clients:   envInt(t, "LEASEHOLD_CLIENTS", 6),
		Parallel:  envInt(t, "LEASEHOLD_PARALLEL", 0),
		Faults:    envInt(t, "LEASEHOLD_FAULTS", 0) == 1,
		OutDir:    os.Getenv("LEASEHOLD_OUT"),
		TimeMode:  linearizability.MixedTime,

		CheckTimeout: envDuration(t, "LEASEHOLD_CHECK_TIMEOUT", 30*time.Second),
	}
	if m := os.Getenv("LEASEHOLD_MODE"); m != "" {
		mode, err := linearizability.ParseTimeMode(m)
		if err != nil {
			t.Fatal(err)
		}
		cfg.TimeMode = mode
	}
	return cfg
}

func envInt(t *testing.T, key string, def int) int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, v, err)
	}
	return n
}

func envDuration(t *testing.T, key string, def time.Duration) time.Duration {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, v, err)
	}
	return d
}

// TestRandomizedHistories runs rapid-drawn concurrent plans on every adapter
// and checks each history with porcupine. It fails on the first history that
// is not linearizable (Illegal, or Unknown: the check ran out of time), saves
// it, prints how to replay it, and then lets rapid shrink its plan.
//
// This is the test the mutant runner runs on patched copies of the module:
// it must fail whenever an adapter answers what the model cannot.
func TestRandomizedHistories(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		check(t, budget(t, "memory", 6000, 10*time.Second), backends.Memory())
	})
	t.Run("redis", func(t *testing.T) {
		f, err := backends.Redis(redistest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg := budget(t, "redis", 1500, 5*time.Second)
		check(t, cfg, f)
		if t.Failed() {
			return
		}
		// Then every client on one Store, with producers racing: the
		// store sends their concurrent Enqueues together.
		shared, err := backends.RedisShared(redistest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Name, cfg.ProducerTwins = "redis-shared", 3
		cfg.Histories, cfg.Duration = max(cfg.Histories/4, 1), max(cfg.Duration/4, time.Second)
		check(t, cfg, shared)
		if t.Failed() {
			return
		}
		// Then through fault proxies, on the client redis.Open makes (with
		// go-redis's retries): a plan's lost requests and replies are cuts
		// of a real connection, and the client sends the call again, which
		// must be answered with its own answer.
		proxied, err := backends.RedisProxy(redistest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Name, cfg.ProducerTwins, cfg.Faults = "redis-proxy", 0, true
		check(t, cfg, proxied)
	})
	t.Run("redis-cluster", func(t *testing.T) {
		// Three masters; the plans' queues, q0 and q1, are on two of them.
		f, err := backends.RedisCluster(redistest.StartCluster3(t, false).Addrs())
		if err != nil {
			t.Fatal(err)
		}
		check(t, budget(t, "redis-cluster", 300, 2*time.Second), f)
	})
	for _, mode := range []sqlite.PopMode{sqlite.PopReturning, sqlite.PopSelectUpdate} {
		name := "sqlite-" + mode.String()
		t.Run(name, func(t *testing.T) {
			f, err := backends.SQLite(t.TempDir(), mode)
			if err != nil {
				t.Fatal(err)
			}
			d := 3 * time.Second
			if raceEnabled {
				d = time.Second // a few histories: the driver is slow under -race
			}
			cfg := budget(t, name, 500, d)
			cfg.Tx = true // EnqueueTx and EnqueueBatchTx
			check(t, cfg, f)
		})
	}
	for _, mode := range []postgres.PopMode{postgres.PopUpdateReturning, postgres.PopSelectSkipLocked} {
		name := "postgres-" + mode.String()
		t.Run(name, func(t *testing.T) {
			f, cleanup, err := backends.Postgres(pgtest.URL(t), mode)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := cleanup(); err != nil {
					t.Error(err)
				}
			}()
			cfg := budget(t, name, 500, 3*time.Second)
			cfg.Tx = true // EnqueueTx and AckTx
			check(t, cfg, f)
		})
	}
}

// check runs the harness with cfg on f and fails t on a violation.
func check(t *testing.T, cfg linearizability.Config, f linearizability.Factory) {
	t.Helper()
	cfg.Factory = f
	rep, err := linearizability.Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("seed %d: %v", cfg.Seed, err)
	}
	t.Logf("%s: %d histories, %d operations (%d indeterminate, %d answered busy), %d violations; seeds %d..%d; run %v, check %v (slowest %v)",
		rep.Adapter, rep.Histories, rep.Operations, rep.Indeterminate, busyAnswers(rep), rep.Violations,
		cfg.Seed, cfg.Seed+uint64(max(rep.Histories, 1)-1), rep.RunTime.Round(time.Millisecond),
		rep.CheckTime.Round(time.Millisecond), rep.MaxCheck.Round(time.Microsecond))
	if rep.Histories == 0 {
		t.Fatal("no history ran")
	}
	if len(rep.Failures) == 0 {
		return
	}
	fl := rep.Failures[0]
	t.Errorf("leasehold-check: violation after %d histories in %v: %s history, seed %d, %s\n"+
		"replay the check: go run ./cmd/leasehold check --replay %s\n"+
		"run the plan again: LEASEHOLD_SEED=%d LEASEHOLD_HISTORIES=1 LEASEHOLD_MODE=%s LEASEHOLD_FAULTS=%d LEASEHOLD_CLIENTS=%d go test -run 'TestRandomizedHistories/%s' ./linearizability/\n%s",
		fl.After+1, fl.Elapsed.Round(time.Millisecond), fl.Result, fl.Seed, where(fl.Dir, fl.SaveError),
		filepath.Join(fl.Dir, "history.json"), fl.Seed, cfg.TimeMode, b2i(cfg.Faults), cfg.Clients, cfg.Name, fl.Plan)
	if envInt(t, "LEASEHOLD_SHRINK", 1) == 0 {
		return
	}
	s := shrink(cfg, fl.Seed, 10, envDuration(t, "LEASEHOLD_SHRINK_TIME", 20*time.Second))
	if s.plan == nil {
		t.Logf("rapid could not shrink the plan (%s):\n%s", s.outcome, s.log)
		return
	}
	t.Logf("rapid shrank the plan from %d steps to %d (%s); %s\n%s",
		fl.Plan.Steps(), s.plan.Steps(), s.outcome, where(s.dir, s.err), s.plan)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func where(dir string, err error) string {
	if err != nil {
		return "not saved: " + err.Error()
	}
	return "saved to " + dir
}

// shrunk is the result of shrink.
type shrunk struct {
	plan    *linearizability.Plan // the smallest failing plan, nil if none
	dir     string                // where it and its history were saved
	err     error
	outcome string // rapid's verdict on the shrinking
	log     string
}

// shrink asks rapid to minimise the failing plan of seed. rapid starts from
// the plan of the seed (Plans' Example(seed) is the first plan rapid.Check
// draws with -rapid.seed=seed) and shrinks its choices; each candidate plan is
// executed up to tries times, since a concurrent failure may need its
// interleaving to come back.
//
// How far it gets: rapid deletes whole steps, rounds and clients and moves
// each choice toward its simplest value (the newest claim, no fault, fake
// time, the first queue). On the store of the tests that acks with any
// token, a 35-step plan shrinks to 3 steps (enqueue; pop, then ack with a
// forged token) in most runs, and to about 7 when a candidate's failure does
// not come back in its tries and rapid stops, reporting the test as flaky.
// Failures that need a precise interleaving inside a round shrink less.
func shrink(cfg linearizability.Config, seed uint64, tries int, limit time.Duration) shrunk {
	gen := linearizability.Plans(linearizability.PlanOptions{Mode: cfg.TimeMode, MaxClients: cfg.Clients, Faults: cfg.Faults, ProducerTwins: cfg.ProducerTwins, Tx: cfg.Tx, WithoutContests: cfg.WithoutContests, UnbatchedFills: cfg.UnbatchedFills})
	restore := setFlags(map[string]string{
		"rapid.seed":       strconv.FormatUint(seed, 10),
		"rapid.checks":     "1",
		"rapid.nofailfile": "true",
		"rapid.shrinktime": limit.String(),
	})
	defer restore()
	var last struct {
		plan *linearizability.Plan
		h    *linearizability.History
		v    linearizability.Verdict
	}
	tb := &quietTB{name: "shrink"}
	rapid.Check(tb, func(t *rapid.T) {
		plan := gen.Draw(t, "plan")
		for range tries {
			h, err := linearizability.Execute(context.Background(), plan, cfg.Factory)
			if err != nil {
				t.Fatalf("execute: %v", err)
			}
			h.Adapter, h.Seed = cfg.Name, seed
			if v := linearizability.Check(h, 10*time.Second); !v.OK() {
				last.plan, last.h, last.v = plan, h, v
				t.Fatalf("%s history of %d operations", v.Result, len(h.Operations))
			}
		}
	})
	s := shrunk{outcome: tb.outcome(), log: tb.log.String()}
	if last.plan == nil {
		return s
	}
	s.plan = last.plan.Compact()
	out := cfg.OutDir
	if out == "" {
		out = linearizability.DefaultOutDir()
	}
	s.dir, s.err = linearizability.SaveFailure(filepath.Join(out, "shrunk"), last.h, s.plan, last.v)
	return s
}

// setFlags sets rapid's command-line flags (rapid reads its seed and budget
// only from them) and returns a function that restores them.
func setFlags(values map[string]string) (restore func()) {
	old := map[string]string{}
	for name, v := range values {
		f := flag.Lookup(name)
		if f == nil {
			continue
		}
		old[name] = f.Value.String()
		_ = f.Value.Set(v)
	}
	return func() {
		for name, v := range old {
			_ = flag.Lookup(name).Value.Set(v)
		}
	}
}

// quietTB is a rapid.TB that keeps what rapid says, so a test can shrink a
// failure without rapid failing the test for it.
type quietTB struct {
	name   string
	failed bool
	log    strings.Builder
}

func (q *quietTB) Helper()                           {}
func (q *quietTB) Name() string                      { return q.name }
func (q *quietTB) Logf(format string, args ...any)   { fmt.Fprintf(&q.log, format+"\n", args...) }
func (q *quietTB) Log(args ...any)                   { fmt.Fprintln(&q.log, args...) }
func (q *quietTB) Skipf(format string, args ...any)  { q.Logf(format, args...) }
func (q *quietTB) Skip(args ...any)                  { q.Log(args...) }
func (q *quietTB) SkipNow()                          {}
func (q *quietTB) Errorf(format string, args ...any) { q.failed = true; q.Logf(format, args...) }
func (q *quietTB) Error(args ...any)                 { q.failed = true; q.Log(args...) }
func (q *quietTB) Fatalf(format string, args ...any) { q.Errorf(format, args...) }
func (q *quietTB) Fatal(args ...any)                 { q.Error(args...) }
func (q *quietTB) FailNow()                          { q.failed = true }
func (q *quietTB) Fail()                             { q.failed = true }
func (q *quietTB) Failed() bool                      { return q.failed }

var rapidVerdict = regexp.MustCompile(`\[rapid\] (failed after \d+ tests|flaky test|OK|panic)[^\n]*`)

// outcome is the first line of rapid's verdict.
func (q *quietTB) outcome() string {
	if m := rapidVerdict.FindString(q.log.String()); m != "" {
		return m
	}
	return "no verdict from rapid"
}

// busyAnswers counts the operations of rep answered core.ErrBusy.
func busyAnswers(rep linearizability.Report) int {
	n := 0
	for k, c := range rep.Outcomes {
		if strings.HasSuffix(k, " busy") {
			n += c
		}
	}
	return n
}
