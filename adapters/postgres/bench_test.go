package postgres_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/faultproxy"
	"github.com/leasehold/leasehold/internal/pgtest"
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

// BenchmarkWorker runs core.Worker on the store, as a user does: with 1, 8
// or 64 slots it pops, runs a handler that does nothing, and acknowledges.
// The queue holds the b.N tasks before the timer starts; ns/op is one task
// handled and settled.
func BenchmarkWorker(b *testing.B) {
	for _, slots := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("slots=%d", slots), func(b *testing.B) { benchWorkers(b, 1, slots) })
	}
}

// BenchmarkWorkerQueues spreads the b.N tasks over 1, 2 or 4 queues, each
// with a Worker of its own on one store. The writes of one queue run one
// transaction at a time (each holds the queue's row lock until it commits);
// those of different queues do not wait for each other. So it measures what
// that lock costs: 64 slots in all as one queue of 64, two of 32 or four
// of 16, and 128 as one queue or two of 64. ns/op is one task handled and
// settled.
func BenchmarkWorkerQueues(b *testing.B) {
	for _, c := range []struct{ queues, slots int }{{1, 64}, {2, 32}, {4, 16}, {1, 128}, {2, 64}} {
		b.Run(fmt.Sprintf("queues=%d/slots=%d", c.queues, c.slots), func(b *testing.B) { benchWorkers(b, c.queues, c.slots) })
	}
}

// BenchmarkWorkerOverANetwork is BenchmarkWorker through a proxy that
// holds every chunk 250 µs in each direction, a round trip of half a
// millisecond or more (see storeOverANetwork), as between two machines of
// a data centre: what a Worker's round trips cost where the database is
// not on its machine.
func BenchmarkWorkerOverANetwork(b *testing.B) {
	for _, slots := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("slots=%d", slots), func(b *testing.B) {
			benchWorkersOn(b, storeOverANetwork(b), 1, slots)
		})
	}
}

// BenchmarkDecisionOverANetwork times a worker's decisions made one at a
// time (Extend, a lease's renewal, and Fail) through the proxy of
// BenchmarkWorkerOverANetwork: what each of their round trips costs.
// ns/op is one decision.
func BenchmarkDecisionOverANetwork(b *testing.B) {
	ctx := context.Background()
	b.Run("op=Extend", func(b *testing.B) {
		s := storeOverANetwork(b)
		if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1}}); err != nil {
			b.Fatal(err)
		}
		pop, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
		if err != nil || len(pop.Tasks) != 1 {
			b.Fatalf("Pop: %v", err)
		}
		c := pop.Tasks[0].Claim()
		b.ResetTimer()
		for range b.N {
			if _, err := s.Extend(ctx, core.ExtendParams{Claim: c, Lease: time.Minute}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("op=Fail", func(b *testing.B) {
		s := storeOverANetwork(b)
		claims := make([]model.Claim, 0, b.N)
		for len(claims) < b.N {
			n := min(b.N-len(claims), core.MaxBatch)
			tasks := make([]model.EnqueueArgs, n)
			for i := range tasks {
				tasks[i] = model.EnqueueArgs{ID: fmt.Sprintf("t%08d", len(claims)+i), MaxAttempts: 1}
			}
			if _, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "q", Tasks: tasks}); err != nil {
				b.Fatal(err)
			}
			pop, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Hour, N: n})
			if err != nil || len(pop.Tasks) != n {
				b.Fatalf("Pop: %d of %d, %v", len(pop.Tasks), n, err)
			}
			for _, t := range pop.Tasks {
				claims = append(claims, t.Claim())
			}
		}
		b.ResetTimer()
		for _, c := range claims {
			if _, err := s.Fail(ctx, core.FailParams{Claim: c, Message: "no"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// storeOverANetwork returns a store in a schema of its own whose
// connections go through a proxy that holds every chunk 250 µs in each
// direction (longer where the machine's timers are coarser: 1.1 ms on
// one whose `SELECT 1` through it then took 2.3 ms).
func storeOverANetwork(b *testing.B) *postgres.Store {
	cfg, err := pgxpool.ParseConfig(pgtest.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	p, err := faultproxy.New(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	host, port, _ := net.SplitHostPort(p.Addr())
	n, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(n)
	cfg.ConnConfig.TLSConfig, cfg.ConnConfig.Fallbacks = nil, nil
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	schema := pgtest.Take()
	b.Cleanup(func() { pgtest.Give(b, schema) })
	s, err := postgres.New(context.Background(), pool, postgres.WithSchema(schema))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	p.SetDelay(250 * time.Microsecond)
	return s
}

// benchWorkers fills queues queues with b.N tasks in all, then times one
// core.Worker of slots slots per queue, on one store, until every task is
// acknowledged.
func benchWorkers(b *testing.B, queues, slots int) { benchWorkersOn(b, newStore(b), queues, slots) }

// benchWorkersOn is benchWorkers on the store s.
func benchWorkersOn(b *testing.B, s *postgres.Store, queues, slots int) {
	ctx := context.Background()
	name := func(q int) string {
		if queues == 1 {
			return "bench"
		}
		return fmt.Sprintf("bench-%d", q)
	}
	for q := range queues {
		n := b.N / queues
		if q < b.N%queues {
			n++
		}
		for i := 0; i < n; i += core.MaxBatch {
			tasks := make([]model.EnqueueArgs, min(core.MaxBatch, n-i))
			for j := range tasks {
				tasks[j] = model.EnqueueArgs{ID: fmt.Sprintf("task-%08d", i+j), MaxAttempts: 1}
			}
			if _, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: name(q), Tasks: tasks}); err != nil {
				b.Fatal(err)
			}
		}
	}
	var handled atomic.Int64
	done := make(chan struct{})
	workers := make([]*core.Worker, queues)
	for q := range workers {
		w, err := core.NewWorker(s, name(q), func(context.Context, core.Claim, core.Task) ([]byte, error) {
			if handled.Add(1) == int64(b.N) {
				close(done)
			}
			return nil, nil
		}, core.WithConcurrency(slots))
		if err != nil {
			b.Fatal(err)
		}
		workers[q] = w
	}
	b.ReportAllocs()
	b.ResetTimer()
	ran := make(chan error, queues)
	for _, w := range workers {
		go func() { ran <- w.Run(ctx) }()
	}
	<-done
	for _, w := range workers {
		if err := w.Shutdown(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	var acked int64
	for _, w := range workers {
		if err := <-ran; err != nil {
			b.Fatal(err)
		}
		acked += w.Stats().Acked
	}
	if acked != int64(b.N) {
		b.Fatalf("acked %d of %d", acked, b.N)
	}
}

// BenchmarkEnqueue adds tasks one Enqueue at a time, as core.Queue does,
// from 1 and 8 goroutines on one store (notifications on, the default);
// ns/op is one task added.
func BenchmarkEnqueue(b *testing.B) {
	ctx := context.Background()
	for _, g := range []int{1, 8} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			s := newStore(b)
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for range g {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						p := core.EnqueueParams{Queue: "bench", EnqueueArgs: model.EnqueueArgs{ID: fmt.Sprintf("task-%08d", i), MaxAttempts: 1}}
						if _, err := s.Enqueue(ctx, p); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// BenchmarkEnqueueBatch adds tasks by EnqueueBatch calls of size tasks
// each, from one goroutine; ns/op is one task added.
func BenchmarkEnqueueBatch(b *testing.B) {
	ctx := context.Background()
	for _, size := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			s := newStore(b)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += size {
				tasks := make([]model.EnqueueArgs, min(size, b.N-i))
				for j := range tasks {
					tasks[j] = model.EnqueueArgs{ID: fmt.Sprintf("task-%08d", i+j), Payload: []byte("payload"), MaxAttempts: 1}
				}
				res, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "bench", Tasks: tasks})
				if err != nil {
					b.Fatal(err)
				}
				for _, it := range res.Items {
					if it.Err != nil {
						b.Fatal(it.Err)
					}
				}
			}
		})
	}
}
