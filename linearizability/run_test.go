package linearizability_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/linearizability/backends"
)

func TestRunLeavesNoGoroutinesBehind(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	rep, err := linearizability.Run(context.Background(), linearizability.Config{
		Name: "memory", Factory: backends.Memory(), Histories: 100, Seed: 3, Faults: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Histories != 100 || rep.Violations != 0 {
		t.Fatalf("%d histories, %d violations", rep.Histories, rep.Violations)
	}
}

func TestIndeterminateOperationsAreCheckedBothWays(t *testing.T) {
	rep, err := linearizability.Run(context.Background(), linearizability.Config{
		Name: "memory", Factory: backends.Memory(), Histories: 400, Seed: 11, Faults: true, TimeMode: linearizability.FakeTime,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Violations != 0 {
		t.Fatalf("%d violations on the memory adapter; first: %s", rep.Violations, rep.Failures[0].Dir)
	}
	if rep.Indeterminate == 0 {
		t.Fatal("no operation was indeterminate")
	}
	t.Logf("%d histories, %d operations, %d indeterminate", rep.Histories, rep.Operations, rep.Indeterminate)

	// A store with a bug is still caught when some of its answers are lost.
	rep, err = linearizability.Run(context.Background(), linearizability.Config{
		Name: "forgetful", Histories: 2000, Seed: 11, Faults: true, TimeMode: linearizability.FakeTime, OutDir: t.TempDir(),
		Factory: func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
			return linearizability.Shared(forgetful{Store: memory.New(memory.WithClock(clock), memory.WithCapacity(capacity)), requeue: true}), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Violations == 0 {
		t.Errorf("a requeue without its guard passed %d histories with faults", rep.Histories)
	}
}

// panicky panics on every Ack.
type panicky struct{ core.Store }

func (panicky) Ack(context.Context, core.AckParams) (core.TaskResult, error) { panic("boom") }

func TestAPanickingStoreIsAnErrorNotACrash(t *testing.T) {
	_, err := linearizability.Run(context.Background(), linearizability.Config{
		Name: "panicky", Histories: 200, Seed: 1, TimeMode: linearizability.FakeTime,
		Factory: func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
			return linearizability.Shared(panicky{memory.New(memory.WithClock(clock), memory.WithCapacity(capacity))}), nil
		},
	})
	if err == nil || !strings.Contains(err.Error(), "panicked: boom") {
		t.Fatalf("err = %v, want the panic", err)
	}
}

func TestRunStopsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	histories := 0
	rep, err := linearizability.Run(ctx, linearizability.Config{
		Name: "memory", Factory: backends.Memory(), Duration: time.Hour, Seed: 1,
		Progress: func(p linearizability.Progress) {
			if histories = p.Histories; histories == 20 {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if rep.Histories < 20 || rep.Histories > 20+linearizability.DefaultParallel() {
		t.Errorf("%d histories after cancelling at 20", rep.Histories)
	}
}

func TestRunNeedsAFactoryAndABudget(t *testing.T) {
	if _, err := linearizability.Run(context.Background(), linearizability.Config{Histories: 1}); err == nil {
		t.Error("no factory: no error")
	}
	if _, err := linearizability.Run(context.Background(), linearizability.Config{Factory: backends.Memory()}); err == nil {
		t.Error("no budget: no error")
	}
}

func TestPlansOfASeedAreTheSame(t *testing.T) {
	gen := linearizability.Plans(linearizability.PlanOptions{Mode: linearizability.MixedTime, Faults: true})
	for seed := range 20 {
		a, b := gen.Example(seed).String(), gen.Example(seed).String()
		if a != b {
			t.Fatalf("seed %d drew two plans:\n%s\n%s", seed, a, b)
		}
	}
}

func TestCompactPlansRunTheSame(t *testing.T) {
	gen := linearizability.Plans(linearizability.PlanOptions{Mode: linearizability.FakeTime, MaxSteps: 1})
	compacted := 0
	for seed := range 300 {
		p := gen.Example(seed)
		p.StallEvery = 0
		c := p.Compact()
		if c.Steps() != p.Steps() {
			t.Fatalf("seed %d: %d steps, compact %d", seed, p.Steps(), c.Steps())
		}
		if c.Rounds() == p.Rounds() {
			continue
		}
		compacted++
		// The same ops with the same answers, at times shifted by the
		// leading gaps dropped.
		a, err := linearizability.Execute(context.Background(), p, backends.Memory())
		if err != nil {
			t.Fatal(err)
		}
		b, err := linearizability.Execute(context.Background(), c, backends.Memory())
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Operations) != len(b.Operations) {
			t.Fatalf("seed %d: %d operations, compact %d", seed, len(a.Operations), len(b.Operations))
		}
		if !linearizability.Check(b, time.Minute).OK() {
			t.Fatalf("seed %d: the compact plan's history is not linearizable", seed)
		}
	}
	if compacted == 0 {
		t.Fatal("no plan had an empty round")
	}
}
