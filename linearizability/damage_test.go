package linearizability_test

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/linearizability"
)

// TestDamageIsDrawnRarelyAndReachesTheStore: about one plan in
// DamageOdds damages a record, never more than one, and on the memory
// store the damage shows: a store that ignores it is caught in many of
// those histories, one that takes it in none.
func TestDamageIsDrawnRarelyAndReachesTheStore(t *testing.T) {
	gen := linearizability.Plans(linearizability.PlanOptions{Mode: linearizability.FakeTime})
	const plans = 800
	var damaging []*linearizability.Plan
	for i := range plans {
		p := gen.Example(i)
		n := 0
		for _, c := range p.Clients {
			for _, r := range c.Rounds {
				for _, s := range r {
					if s.Kind == linearizability.DamageTask {
						n++
					}
				}
			}
		}
		if n > 1 {
			t.Fatalf("plan %d damages %d records", i, n)
		}
		if n == 1 {
			damaging = append(damaging, p)
		}
	}
	if lo, hi := plans/linearizability.DamageOdds/2, 2*plans/linearizability.DamageOdds; len(damaging) < lo || len(damaging) > hi {
		t.Fatalf("%d of %d plans damage a record, want %d..%d", len(damaging), plans, lo, hi)
	}
	// Each damaging plan runs twice: on a store that takes the damage, and
	// on one whose hook leaves the record sound. The first must pass; the
	// second is caught wherever the damage showed in an answer.
	var took, shown int
	for _, p := range damaging {
		for _, ignore := range []bool{false, true} {
			h, err := linearizability.Execute(context.Background(), p, func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
				s := memory.New(memory.WithClock(clock), memory.WithCapacity(capacity))
				b := linearizability.SharedBatch(s)
				b.Damage = s.Damage
				if ignore { // finds the record, and leaves it sound
					b.Damage = func(ctx context.Context, q, id string) error {
						_, err := s.Get(ctx, core.GetParams{Queue: q, ID: id})
						return err
					}
				}
				return b, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			v := linearizability.Check(h, 0)
			switch {
			case !ignore && !v.OK():
				t.Fatalf("a damaging history is %v:\n%s", v.Result, p)
			case !ignore:
				for _, op := range h.Operations {
					if op.Input.Damage && op.Output.Err == "" {
						took++
					}
				}
			case !v.OK():
				shown++
			}
		}
	}
	t.Logf("%d of %d plans damage a record; %d damages took; the damage shows in %d histories", len(damaging), plans, took, shown)
	if shown < took/4 {
		t.Errorf("the damage showed in %d histories of %d damages", shown, took)
	}
}

// TestDamageUnseenIsCaught: a store that is told of the damage and
// ignores it (the hook succeeds, the record stays sound) answers what the
// model cannot, and the harness says so.
func TestDamageUnseenIsCaught(t *testing.T) {
	cfg := linearizability.Config{
		Name: "damage-ignored", Histories: 3000, Seed: 1, TimeMode: linearizability.FakeTime, OutDir: t.TempDir(),
		Factory: func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
			b := linearizability.SharedBatch(memory.New(memory.WithClock(clock), memory.WithCapacity(capacity)))
			b.Damage = func(context.Context, string, string) error { return nil }
			return b, nil
		},
	}
	rep, err := linearizability.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failures) == 0 {
		t.Fatalf("%d histories passed", rep.Histories)
	}
	t.Logf("caught after %d histories", rep.Failures[0].After+1)
}
