package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// BenchmarkPop compares the two Pop implementations: one op is one Pop of
// n tasks from a queue of 1 000 Ready tasks and the InspectRequeues that
// put them back (the same work for both), by 1 and 8 goroutines.
func BenchmarkPop(b *testing.B) {
	ctx := context.Background()
	for _, mode := range popModes {
		for _, n := range []int{1, 10} {
			for _, g := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/n=%d/goroutines=%d", mode, n, g), func(b *testing.B) {
					s := newStore(b, postgres.WithPopMode(mode), postgres.WithoutNotifications())
					tasks := make([]model.EnqueueArgs, 1000)
					for i := range tasks {
						tasks[i] = model.EnqueueArgs{ID: fmt.Sprintf("task-%04d", i), MaxAttempts: 1 << 30}
					}
					if _, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "bench", Tasks: tasks}); err != nil {
						b.Fatal(err)
					}
					var done atomic.Int64
					b.ResetTimer()
					var wg sync.WaitGroup
					for w := range g {
						ops := b.N / g
						if w < b.N%g {
							ops++
						}
						wg.Go(func() {
							for range ops {
								res, err := s.Pop(ctx, core.PopParams{Queue: "bench", Lease: time.Hour, N: n})
								if err != nil {
									b.Error(err)
									return
								}
								done.Add(int64(len(res.Tasks)))
								for _, t := range res.Tasks {
									if _, err := s.InspectRequeue(ctx, core.InspectParams{Queue: "bench", ID: t.ID}); err != nil {
										b.Error(err)
										return
									}
								}
							}
						})
					}
					wg.Wait()
					b.ReportMetric(float64(done.Load())/float64(b.N), "tasks/op")
				})
			}
		}
	}
}
