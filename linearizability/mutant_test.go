package linearizability_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/linearizability"
)

// forgetful wraps a store with bugs of the seeds' kind: decisions that take
// the task's current claim instead of checking the caller's.
type forgetful struct {
	core.Store
	ack, fail, extend, requeue bool
}

func (f forgetful) current(ctx context.Context, q, id string) (core.Task, bool) {
	t, err := f.Store.Get(ctx, core.GetParams{Queue: q, ID: id})
	return t, err == nil
}

func (f forgetful) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	if t, ok := f.current(ctx, p.Claim.Queue, p.Claim.TaskID); ok && f.ack && t.ClaimToken != 0 {
		p.Claim.Token = t.ClaimToken
	}
	return f.Store.Ack(ctx, p)
}

func (f forgetful) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	if t, ok := f.current(ctx, p.Claim.Queue, p.Claim.TaskID); ok && f.fail && t.ClaimToken != 0 {
		p.Claim.Token = t.ClaimToken
	}
	return f.Store.Fail(ctx, p)
}

func (f forgetful) Extend(ctx context.Context, p core.ExtendParams) (core.TaskResult, error) {
	if t, ok := f.current(ctx, p.Claim.Queue, p.Claim.TaskID); ok && f.extend && t.ClaimToken != 0 {
		p.Claim.Token = t.ClaimToken
	}
	return f.Store.Extend(ctx, p)
}

func (f forgetful) Requeue(ctx context.Context, p core.RequeueParams) (core.TaskResult, error) {
	if t, ok := f.current(ctx, p.ReapClaim.Queue, p.ReapClaim.TaskID); ok && f.requeue {
		p.ReapClaim.Version = t.Version
	}
	return f.Store.Requeue(ctx, p)
}

// TestHarnessCatchesForgetfulStores runs the harness on stores with the
// seeds' bugs and expects each to be caught, and the plan of one to shrink.
func TestHarnessCatchesForgetfulStores(t *testing.T) {
	for _, m := range []struct {
		name string
		f    forgetful
	}{
		{"AckWithoutClaimCheck", forgetful{ack: true}},
		{"FailWithoutClaimCheck", forgetful{fail: true}},
		{"ExtendWithoutGuard", forgetful{extend: true}},
		{"RequeueWithoutGuard", forgetful{requeue: true}},
	} {
		t.Run(m.name, func(t *testing.T) {
			cfg := linearizability.Config{
				Name: m.name, Histories: 3000, Seed: 1, TimeMode: linearizability.FakeTime, OutDir: t.TempDir(),
				Factory: func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
					w := m.f
					w.Store = memory.New(memory.WithClock(clock), memory.WithCapacity(capacity))
					return linearizability.Shared(w), nil
				},
			}
			rep, err := linearizability.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Failures) == 0 {
				t.Fatalf("%d histories passed", rep.Histories)
			}
			f := rep.Failures[0]
			t.Logf("caught after %d histories (seed %d, %d operations, %v)", f.After+1, f.Seed, len(f.History.Operations), f.Result)
			for _, name := range []string{"plan.json", "plan.txt", "history.json", "history.html"} {
				if _, err := os.Stat(filepath.Join(f.Dir, name)); err != nil {
					t.Error(err)
				}
			}
			if m.name != "AckWithoutClaimCheck" {
				return
			}
			// A failure that needs a particular interleaving of the clients
			// may not come back when its plan is run again, so try the
			// plans of a few failing seeds before calling shrinking broken.
			more := cfg
			more.MaxViolations, more.Seed, more.OutDir = 5, f.Seed+1, t.TempDir()
			again, err := linearizability.Run(context.Background(), more)
			if err != nil {
				t.Fatal(err)
			}
			var s shrunk
			for _, g := range append([]linearizability.Failure{f}, again.Failures...) {
				if s = shrink(cfg, g.Seed, 10, 5*time.Second); s.plan != nil {
					f = g
					break
				}
			}
			if s.plan == nil {
				t.Fatalf("no shrunk plan for %d failing seeds: %s\n%s", 1+len(again.Failures), s.outcome, s.log)
			}
			t.Logf("shrunk from %d steps to %d (%s):\n%s", f.Plan.Steps(), s.plan.Steps(), s.outcome, s.plan)
			if s.plan.Steps() > f.Plan.Steps() {
				t.Errorf("the shrunk plan is longer than the plan")
			}
		})
	}
}
