package linearizability_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/linearizability/backends"
)

// The runtime mode reads the same environment as TestRandomizedHistories
// (LEASEHOLD_HISTORIES, LEASEHOLD_DURATION, LEASEHOLD_SEED, LEASEHOLD_MODE,
// LEASEHOLD_FAULTS, LEASEHOLD_PARALLEL, LEASEHOLD_OUT), faults on unless
// LEASEHOLD_FAULTS=0.

// TestRuntimeHistories runs generated runtime plans (real Workers, Brokers
// and an Inspector over recorded stores) on every adapter, and fails on the
// first history that is not linearizable or breaks a runtime property,
// naming the property. The mutant runner runs it (-run TestRuntimeHistories)
// on patched copies of core.
func TestRuntimeHistories(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		checkRuntime(t, runtimeBudget(t, "memory", 400, 3*time.Second), backends.Memory())
	})
	t.Run("redis", func(t *testing.T) {
		f, err := backends.Redis(redistest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		checkRuntime(t, runtimeBudget(t, "redis", 150, 2*time.Second), f)
	})
	t.Run("redis-shared", func(t *testing.T) {
		f, err := backends.RedisShared(redistest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		checkRuntime(t, runtimeBudget(t, "redis-shared", 60, time.Second), f)
	})
	t.Run("redis-proxy", func(t *testing.T) {
		f, err := backends.RedisProxy(redistest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		checkRuntime(t, runtimeBudget(t, "redis-proxy", 150, 2*time.Second), f)
	})
	t.Run("sqlite", func(t *testing.T) {
		f, err := backends.SQLite(t.TempDir(), sqlite.PopReturning)
		if err != nil {
			t.Fatal(err)
		}
		checkRuntime(t, runtimeBudget(t, "sqlite", 60, 2*time.Second), f)
	})
}

func runtimeBudget(t *testing.T, name string, histories int, d time.Duration) linearizability.Config {
	t.Helper()
	cfg := budget(t, name, histories, d)
	cfg.Faults = os.Getenv("LEASEHOLD_FAULTS") != "0"
	return cfg
}

func checkRuntime(t *testing.T, cfg linearizability.Config, f linearizability.Factory) {
	t.Helper()
	cfg.Factory = f
	cfg.Logf = t.Logf
	rep, err := linearizability.RunRuntime(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d runtime histories, %d operations (%d indeterminate, %d answered busy), %d violations, in %v (seed %d)",
		rep.Adapter, rep.Histories, rep.Operations, rep.Indeterminate, busyAnswers(rep), rep.Violations, rep.Elapsed.Round(time.Millisecond), cfg.Seed)
	if rep.Histories == 0 {
		t.Fatal("no history ran")
	}
	for _, fl := range rep.Failures {
		var b strings.Builder
		for i, v := range fl.Properties {
			if i == 8 {
				b.WriteString("\n  ...")
				break
			}
			b.WriteString("\n  " + v.String())
		}
		// The first words are the mutant runner's (fuzz/mutants): how many
		// histories and how long it took to find the violation.
		t.Errorf("leasehold-check: violation after %d histories in %v: seed %d: %s; saved to %s%s\nrerun: LEASEHOLD_SEED=%d LEASEHOLD_HISTORIES=1 LEASEHOLD_MODE=%s LEASEHOLD_FAULTS=%d go test -run 'TestRuntimeHistories/%s' ./linearizability/",
			fl.After+1, fl.Elapsed.Round(time.Millisecond), fl.Seed, fl.Verdict(), fl.Dir, b.String(), fl.Seed, cfg.TimeMode, b2i(cfg.Faults), rep.Adapter)
	}
	if len(rep.Failures) == 0 || envInt(t, "LEASEHOLD_SHRINK", 1) == 0 {
		return
	}
	fl := rep.Failures[0]
	plan, dir, outcome, err := shrinkRuntime(cfg, fl, 5, envDuration(t, "LEASEHOLD_SHRINK_TIME", 20*time.Second))
	if plan == nil {
		t.Logf("rapid could not shrink the runtime plan (%s)", outcome)
		return
	}
	t.Logf("rapid shrank the runtime plan from %d tasks, %d ticks, %d workers, %d brokers to %d, %d, %d, %d (%s); %s\n%s",
		len(fl.RuntimePlan.Tasks), len(fl.RuntimePlan.Ticks), len(fl.RuntimePlan.Workers), len(fl.RuntimePlan.Brokers),
		len(plan.Tasks), len(plan.Ticks), len(plan.Workers), len(plan.Brokers), outcome, where(dir, err), plan)
}

// shrinkRuntime asks rapid to minimise the runtime plan of a failure, as
// shrink does for store-level plans: rapid starts from the plan of the
// failure's seed and keeps a smaller plan if, in one of tries runs, it
// breaks the property the failure broke first (or, for a failure of
// linearizability alone, is not linearizable).
func shrinkRuntime(cfg linearizability.Config, fl linearizability.Failure, tries int, limit time.Duration) (plan *linearizability.RuntimePlan, dir, outcome string, err error) {
	gen := linearizability.RuntimePlans(linearizability.RuntimeOptions{Mode: cfg.TimeMode, Faults: cfg.Faults})
	restore := setFlags(map[string]string{
		"rapid.seed":       strconv.FormatUint(fl.Seed, 10),
		"rapid.checks":     "1",
		"rapid.nofailfile": "true",
		"rapid.shrinktime": limit.String(),
	})
	defer restore()
	want := ""
	if len(fl.Properties) > 0 {
		want = fl.Properties[0].Property
	}
	var last struct {
		plan  *linearizability.RuntimePlan
		rh    *linearizability.RuntimeHistory
		v     linearizability.Verdict
		props []linearizability.Violation
	}
	tb := &quietTB{name: "shrink"}
	rapid.Check(tb, func(t *rapid.T) {
		plan := gen.Draw(t, "plan")
		for range tries {
			rh, err := linearizability.ExecuteRuntime(context.Background(), plan, cfg.Factory)
			if err != nil {
				t.Fatalf("execute: %v", err)
			}
			rh.History.Adapter, rh.History.Seed = cfg.Name, fl.Seed
			v := linearizability.Check(rh.History, 10*time.Second)
			props := linearizability.CheckRuntime(plan, rh)
			broken := want == "" && !v.OK() || slices.ContainsFunc(props, func(p linearizability.Violation) bool { return p.Property == want })
			if broken {
				last.plan, last.rh, last.v, last.props = plan, rh, v, props
				t.Fatalf("the plan still fails")
			}
		}
	})
	if last.plan == nil {
		return nil, "", tb.outcome(), nil
	}
	out := cfg.OutDir
	if out == "" {
		out = linearizability.DefaultOutDir()
	}
	dir, err = linearizability.SaveRuntimeFailure(filepath.Join(out, "shrunk"), last.plan, last.rh, last.v, last.props)
	return last.plan, dir, tb.outcome(), err
}
