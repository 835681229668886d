package linearizability_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/model"
)

// TestPlansReachTheContractsEdges checks that the plans reach what small
// plans miss: a bulk enqueue of more tasks than the adapters' internal pages
// hold, followed by each op that walks an index over them; clock readings
// with a fraction of a microsecond; callers that scribble over answers.
func TestPlansReachTheContractsEdges(t *testing.T) {
	gen := linearizability.Plans(linearizability.PlanOptions{Mode: linearizability.MixedTime})
	walks := map[linearizability.Kind]bool{}
	var subMicro, scribble, bulk, big, batched int
	const plans = 600
	for seed := range plans {
		p := gen.Example(seed)
		subMicro += b2i(p.SubMicro > 0)
		scribble += b2i(p.Scribble)
		found := false
		for _, c := range p.Clients {
			for _, steps := range c.Rounds {
				for i, s := range steps {
					if s.Kind != linearizability.Enqueue || s.N <= 1 {
						continue
					}
					found = true
					big += b2i(s.N > 256)
					batched += b2i(s.Batched)
					for _, after := range steps[i+1:] {
						walks[after.Kind] = true
					}
				}
			}
		}
		bulk += b2i(found)
	}
	t.Logf("of %d plans: %d with a bulk enqueue (%d of more than 256 tasks, %d in one batch), %d with sub-microsecond readings, %d scribbling", plans, bulk, big, batched, subMicro, scribble)
	if bulk < plans/12 || big < bulk/4 || batched < bulk/2 || batched == bulk || subMicro < plans/8 || scribble < plans/2 {
		t.Errorf("the edges are drawn too rarely")
	}
	for _, k := range []linearizability.Kind{linearizability.Pop, linearizability.Promote, linearizability.ClaimExpired,
		linearizability.RecoverExpired, linearizability.Prune, linearizability.List} {
		if !walks[k] {
			t.Errorf("no bulk enqueue is followed by %v", k)
		}
	}
}

// TestBulkPlansWalkSeveralPages runs bulk plans on the memory adapter and
// checks that some op answered with more tasks than one page of 256.
func TestBulkPlansWalkSeveralPages(t *testing.T) {
	gen := linearizability.Plans(linearizability.PlanOptions{Mode: linearizability.FakeTime})
	ops := map[model.Op]bool{}
	for seed := 0; seed < 400 && len(ops) < 3; seed++ {
		p := gen.Example(seed)
		if !hasBulk(p, 256) {
			continue
		}
		h, err := linearizability.Execute(context.Background(), p, backendsMemory)
		if err != nil {
			t.Fatal(err)
		}
		if v := linearizability.Check(h, 10*time.Second); !v.OK() {
			t.Fatalf("seed %d: %v", seed, v.Result)
		}
		for _, op := range h.Operations {
			if len(op.Output.Tasks) > 256 || len(op.Output.IDs) > 256 || len(op.Output.Claims) > 256 {
				ops[op.Input.Op] = true
			}
		}
	}
	t.Logf("ops answered with more than 256 tasks: %v", ops)
	if len(ops) < 2 {
		t.Errorf("bulk plans made %d kinds of op walk more than one page, want 2 or more", len(ops))
	}
}

func hasBulk(p *linearizability.Plan, over int) bool {
	for _, c := range p.Clients {
		for _, steps := range c.Rounds {
			for _, s := range steps {
				if s.Kind == linearizability.Enqueue && s.N > over {
					return true
				}
			}
		}
	}
	return false
}

var backendsMemory linearizability.Factory = func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
	return linearizability.Shared(memory.New(memory.WithClock(clock), memory.WithCapacity(capacity))), nil
}

// onePage answers every walk of an index from its first 256 entries, as an
// adapter that forgets to read the next page.
type onePage struct{ core.Store }

func (s onePage) Prune(ctx context.Context, p core.PruneParams) (core.IDsResult, error) {
	if p.Limit == 0 || p.Limit > 256 {
		p.Limit = 256
	}
	return s.Store.Prune(ctx, p)
}

func (s onePage) ClaimExpired(ctx context.Context, p core.ClaimExpiredParams) (core.ReapResult, error) {
	if p.Limit == 0 || p.Limit > 256 {
		p.Limit = 256
	}
	return s.Store.ClaimExpired(ctx, p)
}

// aliasing hands every caller of Get the payload slice it handed out first
// for the task, as a store caching its answers would.
type aliasing struct {
	core.Store
	cache map[string][]byte
}

func (s *aliasing) Get(ctx context.Context, p core.GetParams) (core.Task, error) {
	t, err := s.Store.Get(ctx, p)
	if err != nil {
		return t, err
	}
	key := fmt.Sprint(p.Queue, "/", p.ID, "/", t.Version)
	if b, ok := s.cache[key]; ok {
		t.Payload = b
	} else {
		s.cache[key] = t.Payload
	}
	return t, nil
}

// nanoNow reports the reading of its clock to the nanosecond.
type nanoNow struct {
	core.Store
	clock core.Clock
}

func (s nanoNow) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	r, err := s.Store.Enqueue(ctx, p)
	if err == nil {
		r.Now = s.clock.Now()
		r.Task.EnqueuedAt = r.Now
	}
	return r, err
}

// TestHarnessCatchesEdgeBugs runs the harness on stores with a bug at each
// edge and expects each to be caught.
func TestHarnessCatchesEdgeBugs(t *testing.T) {
	for _, m := range []struct {
		name string
		wrap func(core.Store, core.Clock) core.Store
	}{
		{"OnePage", func(s core.Store, _ core.Clock) core.Store { return onePage{s} }},
		{"Aliasing", func(s core.Store, _ core.Clock) core.Store { return &aliasing{Store: s, cache: map[string][]byte{}} }},
		{"NanosecondNow", func(s core.Store, c core.Clock) core.Store { return nanoNow{s, c} }},
	} {
		t.Run(m.name, func(t *testing.T) {
			cfg := linearizability.Config{
				Name: m.name, Histories: 3000, Seed: 1, TimeMode: linearizability.FakeTime, OutDir: t.TempDir(),
				Factory: func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
					return linearizability.Shared(m.wrap(memory.New(memory.WithClock(clock), memory.WithCapacity(capacity)), clock)), nil
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
		})
	}
}

// TestBatchedBulkIsOneEnqueueBatch runs bulk plans on a memory store with
// its batch calls: a Batched fill is one recorded EnqueueBatch of all its
// tasks (and, Taken, of the plan's task IDs and its first item again, in
// the middle and at the end, both always refused as taken), and the history
// is linearizable.
func TestBatchedBulkIsOneEnqueueBatch(t *testing.T) {
	gen := linearizability.Plans(linearizability.PlanOptions{Mode: linearizability.FakeTime})
	batches, taken := 0, 0
	for seed := 0; seed < 400 && (batches < 5 || taken < 2); seed++ {
		p := gen.Example(seed)
		want := map[int]bool{}
		for _, c := range p.Clients {
			for _, steps := range c.Rounds {
				for _, s := range steps {
					if s.Kind == linearizability.Enqueue && s.N > 1 && s.Batched {
						n := s.N
						if s.Taken {
							n += len(p.Tasks) + 2
						}
						want[n] = true
					}
				}
			}
		}
		if len(want) == 0 {
			continue
		}
		h, err := linearizability.Execute(context.Background(), p, func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
			return linearizability.SharedBatch(memory.New(memory.WithClock(clock), memory.WithCapacity(capacity))), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if v := linearizability.Check(h, 10*time.Second); !v.OK() {
			t.Fatalf("seed %d: %v", seed, v.Result)
		}
		for _, op := range h.Operations {
			if op.Input.Op == model.OpEnqueueBatch && want[len(op.Input.Batch)] {
				batches++
				delete(want, len(op.Input.Batch))
				b := op.Input.Batch
				if b[len(b)-1].ID == b[0].ID {
					taken++
					switch items := op.Output.Items; {
					case len(items) != len(b):
						t.Errorf("seed %d: a batch of %d items answered with %d", seed, len(b), len(items))
					default:
						for i := 1; i < len(b); i++ {
							if b[i].ID == b[0].ID && items[i].Err != "conflict" {
								t.Errorf("seed %d: a batch naming its first ID again: item %d %+v, want conflict", seed, i, items[i])
							}
						}
						if repeats := countID(b, b[0].ID); repeats != 3 {
							t.Errorf("seed %d: a batch naming taken IDs names its first ID %d times, want 3", seed, repeats)
						}
					}
				}
			}
		}
		if len(want) > 0 {
			t.Errorf("seed %d: no EnqueueBatch of %v tasks in the history", seed, want)
		}
	}
	if batches < 5 || taken < 2 {
		t.Errorf("%d batched fills in 400 plans, %d of them naming taken IDs", batches, taken)
	}
}

// countID returns how many items of b have the ID id.
func countID(b []model.EnqueueArgs, id string) int {
	n := 0
	for _, it := range b {
		if it.ID == id {
			n++
		}
	}
	return n
}
