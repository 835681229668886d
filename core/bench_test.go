package core_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
)

// BenchmarkWorker measures the Worker's own cost per task on the memory
// store: pop (in batches of the free slots), run a handler that does
// nothing, ack. One op is one task.
func BenchmarkWorker(b *testing.B) {
	for _, slots := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("slots=%d", slots), func(b *testing.B) { runWorkerBench(b, slots, 0) })
	}
}

// BenchmarkWorkerSlowHandler is BenchmarkWorker with a handler that takes
// 1ms (it sleeps, as one waiting on a network would): throughput should grow
// with the slots until the worker's own cost is the limit.
func BenchmarkWorkerSlowHandler(b *testing.B) {
	for _, slots := range []int{8, 64, 256} {
		b.Run(fmt.Sprintf("slots=%d", slots), func(b *testing.B) { runWorkerBench(b, slots, time.Millisecond) })
	}
}

func runWorkerBench(b *testing.B, slots int, work time.Duration) {
	{
		{
			ctx := context.Background()
			store := memory.New()
			q, err := core.NewQueue(store, queue)
			if err != nil {
				b.Fatal(err)
			}
			for i := range b.N {
				if _, err := q.Enqueue(ctx, nil, core.WithID(fmt.Sprintf("t%09d", i))); err != nil {
					b.Fatal(err)
				}
			}
			var handled atomic.Int64
			done := make(chan struct{})
			w, err := core.NewWorker(store, queue, func(context.Context, core.Claim, core.Task) ([]byte, error) {
				if work > 0 {
					time.Sleep(work)
				}
				if handled.Add(1) == int64(b.N) {
					close(done)
				}
				return nil, nil
			}, core.WithConcurrency(slots), core.WithPollInterval(time.Millisecond, time.Millisecond))
			if err != nil {
				b.Fatal(err)
			}
			cpu0 := cpuTime()
			b.ResetTimer()
			ran := make(chan error, 1)
			go func() { ran <- w.Run(ctx) }()
			<-done
			if err := w.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := <-ran; err != nil {
				b.Fatal(err)
			}
			if st := w.Stats(); st.Acked != int64(b.N) {
				b.Fatalf("acked %d of %d", st.Acked, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		}
	}
}

// cpuTime is the CPU time the process used so far (every thread, the
// garbage collector's included): on a shared machine it varies less than the
// wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
