package linearizability_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/linearizability/backends"
)

// histories runs n plans with exactly clients clients and rounds rounds
// (fake time, no faults, no clock stalls) on the memory adapter.
func histories(b *testing.B, n, clients, rounds int) []*linearizability.History {
	b.Helper()
	gen := linearizability.Plans(linearizability.PlanOptions{Mode: linearizability.FakeTime,
		MinClients: clients, MaxClients: clients, MinRounds: rounds, MaxRounds: rounds})
	var out []*linearizability.History
	for seed := range n {
		p := gen.Example(seed)
		p.StallEvery = 0
		h, err := linearizability.Execute(context.Background(), p, backends.Memory())
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, h)
	}
	return out
}

// BenchmarkCheck measures the time porcupine takes to check one history, by
// the number of clients and of rounds (so of operations: see ops/history).
// Run with: go test -run '^$' -bench BenchmarkCheck ./linearizability/
func BenchmarkCheck(b *testing.B) {
	for _, clients := range []int{3, 6, 12} {
		for _, rounds := range []int{2, 8, 32} {
			b.Run(fmt.Sprintf("clients=%d/rounds=%d", clients, rounds), func(b *testing.B) {
				hs := histories(b, 20, clients, rounds)
				ops := 0
				for _, h := range hs {
					ops += len(h.Operations)
				}
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					if v := linearizability.Check(hs[i%len(hs)], time.Minute); !v.OK() {
						b.Fatalf("history %d: %v", i%len(hs), v.Result)
					}
				}
				b.ReportMetric(float64(ops)/float64(len(hs)), "ops/history")
			})
		}
	}
}

// BenchmarkRunner measures the operations per second the runner drives on
// each adapter, plans drawn as Run draws them (mixed time, clock stalls),
// one history at a time and without checking.
// Run with: go test -run '^$' -bench BenchmarkRunner ./linearizability/
func BenchmarkRunner(b *testing.B) {
	adapters := []struct {
		name    string
		factory func(b *testing.B) linearizability.Factory
	}{
		{"memory", func(*testing.B) linearizability.Factory { return backends.Memory() }},
		{"redis", func(b *testing.B) linearizability.Factory {
			f, err := backends.Redis(redistest.URL(b))
			if err != nil {
				b.Fatal(err)
			}
			return f
		}},
	}
	for _, a := range adapters {
		for _, mode := range []linearizability.TimeMode{linearizability.FakeTime, linearizability.MixedTime} {
			b.Run(a.name+"/"+mode.String(), func(b *testing.B) {
				f := a.factory(b)
				gen := linearizability.Plans(linearizability.PlanOptions{Mode: mode})
				ops := 0
				start := time.Now()
				for i := 0; b.Loop(); i++ {
					h, err := linearizability.Execute(context.Background(), gen.Example(i), f)
					if err != nil {
						b.Fatal(err)
					}
					ops += len(h.Operations)
				}
				b.ReportMetric(float64(ops)/time.Since(start).Seconds(), "ops/s")
				b.ReportMetric(float64(ops)/float64(b.N), "ops/history")
			})
		}
	}
}
