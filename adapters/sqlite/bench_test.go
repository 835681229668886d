package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// BenchmarkPopAck measures the worker's cycle: Pop one task, Ack it, and
// Enqueue a replacement so the queue keeps benchQueued Ready tasks. ns/op is
// one whole cycle (three store operations), with 1, 8 and 64 goroutines
// cycling at once; cpu-ns/op is the CPU time the process spent per cycle.
// The memory adapter runs in the same benchmark for comparison.
func BenchmarkPopAck(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) core.Store
	}{
		{"sqlite-returning", sqliteBench(sqlite.WithPopMode(sqlite.PopReturning))},
		{"sqlite-select-update", sqliteBench(sqlite.WithPopMode(sqlite.PopSelectUpdate))},
		{"sqlite-returning-sync-normal", sqliteBench(sqlite.WithPopMode(sqlite.PopReturning), sqlite.WithSynchronous(sqlite.SyncNormal))},
		{"memory", func(*testing.B) core.Store { return memory.New() }},
	}
	for _, st := range stores {
		for _, g := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", st.name, g), func(b *testing.B) {
				s := st.open(b)
				defer s.Close()
				var next atomic.Int64
				enq := func() error {
					_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "bench", EnqueueArgs: model.EnqueueArgs{
						ID: fmt.Sprintf("task-%09d", next.Add(1)), Payload: benchPayload, MaxAttempts: 3,
					}})
					return err
				}
				for range benchQueued {
					if err := enq(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				cpu := cpuTime()
				b.ResetTimer()
				var wg sync.WaitGroup
				errs := make(chan error, g)
				for w := range g {
					n := b.N / g
					if w < b.N%g {
						n++
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range n {
							res, err := s.Pop(ctx, core.PopParams{Queue: "bench", Lease: time.Minute, N: 1})
							if err == nil && len(res.Tasks) != 1 {
								err = fmt.Errorf("Pop returned %d tasks", len(res.Tasks))
							}
							if err == nil {
								_, err = s.Ack(ctx, core.AckParams{Claim: res.Tasks[0].Claim()})
							}
							if err == nil {
								err = enq()
							}
							if err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
			})
		}
	}
}

// cpuTime is the CPU time the process has used, user and system. The
// benchmark reports it per cycle as well: on a shared machine the wall time
// per cycle depends on the other processes, the CPU time much less.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchQueued is the number of Ready tasks the benchmark keeps queued.
const benchQueued = 1000

var benchPayload = []byte(`{"kind":"email","to":"someone@example.org"}`)

func sqliteBench(opts ...sqlite.Option) func(b *testing.B) core.Store {
	return func(b *testing.B) core.Store {
		s, err := sqlite.Open(filepath.Join(b.TempDir(), "bench.db"), opts...)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
}

// BenchmarkEnqueue measures one producer adding one task per call, each call
// its own transaction (nothing to group with). ns/op is one Enqueue.
func BenchmarkEnqueue(b *testing.B) {
	for _, sync := range []struct {
		name string
		s    sqlite.Synchronous
	}{{"sync-normal", sqlite.SyncNormal}, {"sync-full", sqlite.SyncFull}} {
		b.Run(sync.name, func(b *testing.B) {
			s := sqliteBench(sqlite.WithSynchronous(sync.s))(b)
			defer s.Close()
			b.ReportAllocs()
			cpu := cpuTime()
			b.ResetTimer()
			for i := range b.N {
				_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "bench", EnqueueArgs: model.EnqueueArgs{
					ID: fmt.Sprintf("task-%09d", i), Payload: benchPayload, MaxAttempts: 3,
				}})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// fill enqueues n tasks on queue "bench" as fast as the store allows (in
// batches when it can), outside the benchmark's timer.
func fill(b *testing.B, s core.Store, n int) {
	b.Helper()
	const chunk = 500
	var wg sync.WaitGroup
	errs := make(chan error, (n+chunk-1)/chunk)
	sem := make(chan struct{}, 8)
	for from := 0; from < n; from += chunk {
		to := min(from+chunk, n)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			args := make([]model.EnqueueArgs, 0, to-from)
			for i := from; i < to; i++ {
				args = append(args, model.EnqueueArgs{ID: fmt.Sprintf("task-%09d", i), Payload: benchPayload, MaxAttempts: 3})
			}
			if bs, ok := s.(core.BatchStore); ok {
				res, err := bs.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "bench", Tasks: args})
				if err == nil {
					for _, it := range res.Items {
						if it.Err != nil {
							err = it.Err
							break
						}
					}
				}
				if err != nil {
					errs <- err
				}
				return
			}
			for _, a := range args {
				if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "bench", EnqueueArgs: a}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// BenchmarkPopAckBatch measures the store's side of a worker that claims in
// batches: each of 1, 8 or 64 goroutines pops up to popBatch tasks at once
// and records their success with one AckBatch (one Ack per task on a store
// without it). The queue holds the b.N tasks before the timer starts; ns/op
// is one task popped and acknowledged.
func BenchmarkPopAckBatch(b *testing.B) {
	const popBatch = 16
	for _, g := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			s := sqliteBench(sqlite.WithSynchronous(sqlite.SyncNormal))(b)
			defer s.Close()
			fill(b, s, b.N)
			var left atomic.Int64
			left.Store(int64(b.N))
			b.ReportAllocs()
			cpu := cpuTime()
			b.ResetTimer()
			var wg sync.WaitGroup
			errs := make(chan error, g)
			for range g {
				wg.Go(func() {
					for {
						n := int(min(left.Add(-popBatch)+popBatch, popBatch))
						if n <= 0 {
							return
						}
						res, err := s.Pop(ctx, core.PopParams{Queue: "bench", Lease: time.Minute, N: n})
						if err == nil && len(res.Tasks) != n {
							err = fmt.Errorf("Pop returned %d tasks, want %d", len(res.Tasks), n)
						}
						if err == nil {
							err = ackAll(s, res.Tasks)
						}
						if err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
		})
	}
}

// ackAll acknowledges tasks with one AckBatch, or one Ack each on a store
// that has no batches.
func ackAll(s core.Store, tasks []core.Task) error {
	bs, ok := s.(core.BatchStore)
	if !ok {
		for _, t := range tasks {
			if _, err := s.Ack(ctx, core.AckParams{Claim: t.Claim()}); err != nil {
				return err
			}
		}
		return nil
	}
	acks := make([]core.AckItem, len(tasks))
	for i, t := range tasks {
		acks[i] = core.AckItem{Claim: t.Claim()}
	}
	res, err := bs.AckBatch(ctx, core.AckBatchParams{Queue: "bench", Acks: acks})
	if err != nil {
		return err
	}
	for _, it := range res.Items {
		if it.Err != nil {
			return it.Err
		}
	}
	return nil
}

// BenchmarkWorker runs core.Worker on the store, as a user does: with 1, 8
// or 64 slots it pops, runs a handler that does nothing, and acknowledges,
// at SyncNormal. The queue holds the b.N tasks before the timer starts; ns/op
// is one task handled and settled.
func BenchmarkWorker(b *testing.B) {
	for _, slots := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("slots=%d", slots), func(b *testing.B) {
			s := sqliteBench(sqlite.WithSynchronous(sqlite.SyncNormal))(b)
			defer s.Close()
			fill(b, s, b.N)
			var handled atomic.Int64
			done := make(chan struct{})
			w, err := core.NewWorker(s, "bench", func(context.Context, core.Claim, core.Task) ([]byte, error) {
				if handled.Add(1) == int64(b.N) {
					close(done)
				}
				return nil, nil
			}, core.WithConcurrency(slots), core.WithPollInterval(time.Millisecond, time.Millisecond))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu := cpuTime()
			b.ResetTimer()
			ran := make(chan error, 1)
			go func() { ran <- w.Run(ctx) }()
			<-done
			if err := w.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
			if err := <-ran; err != nil {
				b.Fatal(err)
			}
			if st := w.Stats(); st.Acked != int64(b.N) {
				b.Fatalf("acked %d of %d", st.Acked, b.N)
			}
		})
	}
}
