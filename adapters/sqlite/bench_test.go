package sqlite_test

import (
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
