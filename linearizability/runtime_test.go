package linearizability_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

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
	t.Logf("%s: %d runtime histories, %d operations (%d indeterminate), %d violations, in %v (seed %d)",
		rep.Adapter, rep.Histories, rep.Operations, rep.Indeterminate, rep.Violations, rep.Elapsed.Round(time.Millisecond), cfg.Seed)
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
		t.Errorf("leasehold-check: violation after %d histories in %v: seed %d: %s; saved to %s%s\nrerun: LEASEHOLD_SEED=%d LEASEHOLD_HISTORIES=1 go test -run 'TestRuntimeHistories/%s' ./linearizability/",
			fl.After+1, fl.Elapsed.Round(time.Millisecond), fl.Seed, fl.Verdict(), fl.Dir, b.String(), fl.Seed, rep.Adapter)
	}
}

// TestRandomizedHistoriesThroughFaultProxy runs the store-level plans on
// Redis through fault proxies: a plan's lost requests and replies are cuts
// of a real connection, which go-redis retries.
func TestRandomizedHistoriesThroughFaultProxy(t *testing.T) {
	f, err := backends.RedisProxy(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := budget(t, "redis-proxy", 300, time.Second)
	cfg.Faults = os.Getenv("LEASEHOLD_FAULTS") != "0"
	check(t, cfg, f)
}
