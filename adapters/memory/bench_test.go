package memory

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// benchSizes are the queue sizes the benchmarks compare: the cost of an
// operation should grow with log n only.
var benchSizes = []int{1_000, 1_000_000}

// cached holds the last store a benchmark built, for the next benchmark that
// asks for the same one: the cycles the benchmarks measure leave a store as
// they found it. The benchmark binary runs each (sub-)benchmark -count times
// in a row, so one store at a time is enough, and only one queue of a
// million tasks is in memory at once.
var cached struct {
	sync.Mutex
	key   string
	store *Store
}

func cachedStore(b *testing.B, key string, build func() (*Store, error)) *Store {
	cached.Lock()
	defer cached.Unlock()
	if cached.key == key {
		return cached.store
	}
	if cached.store != nil {
		_ = cached.store.Close()
		cached.key, cached.store = "", nil
		runtime.GC()
	}
	s, err := build()
	if err != nil {
		b.Fatal(err)
	}
	cached.key, cached.store = key, s
	return s
}

// fill enqueues size tasks with a 64-byte payload into queue "bench".
func fill(s *Store, size int) error {
	payload := make([]byte, 64)
	for i := range size {
		_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "bench", EnqueueArgs: model.EnqueueArgs{
			ID: "task-" + strconv.Itoa(i), Payload: payload, MaxAttempts: 3,
		}})
		if err != nil {
			return err
		}
	}
	return nil
}

// readyStore returns a store whose queue "bench" holds size Ready tasks.
func readyStore(b *testing.B, size int) *Store {
	return cachedStore(b, fmt.Sprintf("ready/%d", size), func() (*Store, error) {
		s := New(WithClock(core.NewFakeClock(epoch)))
		return s, fill(s, size)
	})
}

// runningStore returns a store whose queue "bench" holds size Running tasks,
// and its clock.
func runningStore(b *testing.B, size int) (*Store, *core.FakeClock) {
	clock := core.NewFakeClock(epoch)
	s := cachedStore(b, fmt.Sprintf("running/%d", size), func() (*Store, error) {
		s := New(WithClock(clock))
		if err := fill(s, size); err != nil {
			return nil, err
		}
		for popped := 0; popped < size; {
			r, err := s.Pop(ctx, core.PopParams{Queue: "bench", Lease: time.Second, N: model.MaxBatch})
			if err != nil {
				return nil, err
			}
			popped += len(r.Tasks)
		}
		return s, nil
	})
	return s, s.clock.(*core.FakeClock)
}

// parallel runs b.N calls of op spread over g goroutines.
func parallel(b *testing.B, g int, op func(b *testing.B)) {
	var wg sync.WaitGroup
	for w := range g {
		n := b.N / g
		if w < b.N%g {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				op(b)
			}
		}()
	}
	wg.Wait()
}

// BenchmarkPopAck measures one worker cycle on a queue of constant size: Pop
// one task, Ack it, and put it back (an operator's InspectRequeue, so the
// queue keeps its size without new IDs). One op is the whole cycle of three
// store operations, with 1, 8 and 64 goroutines sharing the queue.
func BenchmarkPopAck(b *testing.B) {
	for _, size := range benchSizes {
		for _, g := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("size=%d/goroutines=%d", size, g), func(b *testing.B) {
				s := readyStore(b, size)
				result := []byte("done")
				b.ReportAllocs()
				b.ResetTimer()
				parallel(b, g, func(b *testing.B) {
					r, err := s.Pop(ctx, core.PopParams{Queue: "bench", Lease: time.Minute, N: 1})
					if err != nil || len(r.Tasks) != 1 {
						b.Errorf("Pop: %d tasks, %v", len(r.Tasks), err)
						return
					}
					a, err := s.Ack(ctx, core.AckParams{Claim: r.Tasks[0].Claim(), Result: result})
					if err != nil {
						b.Errorf("Ack: %v", err)
						return
					}
					if _, err := s.InspectRequeue(ctx, core.InspectParams{Queue: "bench", ID: a.Task.ID, Expect: a.Task.Version}); err != nil {
						b.Errorf("InspectRequeue: %v", err)
					}
				})
			})
		}
	}
}

// BenchmarkEnqueue measures Enqueue of new tasks into one queue, which grows
// by b.N tasks, from 1 and from 8 goroutines.
func BenchmarkEnqueue(b *testing.B) {
	for _, g := range []int{1, 8} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			s := New(WithClock(core.NewFakeClock(epoch)))
			ids := make([]string, b.N)
			for i := range ids {
				ids[i] = "task-" + strconv.Itoa(i)
			}
			payload := make([]byte, 64)
			var mu sync.Mutex
			next := 0
			b.ReportAllocs()
			b.ResetTimer()
			parallel(b, g, func(b *testing.B) {
				mu.Lock()
				id := ids[next]
				next++
				mu.Unlock()
				_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "bench", EnqueueArgs: model.EnqueueArgs{ID: id, Payload: payload, MaxAttempts: 3}})
				if err != nil {
					b.Error(err)
				}
			})
		})
	}
}

// BenchmarkClaimExpired measures a broker pass that claims 100 expired tasks
// of a queue holding size Running tasks, all expired: one op is one
// ClaimExpired call; ns/task is the cost per task claimed.
func BenchmarkClaimExpired(b *testing.B) {
	const batch = 100
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			s, clock := runningStore(b, size)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				// Every deadline so far is now due again: each call claims
				// the batch with the oldest deadlines.
				clock.Advance(time.Second)
				r, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "bench", ClaimTTL: time.Second, Limit: batch})
				if err != nil || len(r.Claims) != batch {
					b.Fatalf("ClaimExpired: %d claims, %v", len(r.Claims), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/task")
		})
	}
}

// BenchmarkPopAckBatch measures the cycle a batching worker runs, from one
// goroutine, on a queue of size Ready tasks that never runs dry: n tasks
// claimed and acknowledged per round, in three modes:
//
//   - ack: Pop(n), then one Ack per task;
//   - ackbatch: Pop(n), then one AckBatch of the n claims;
//   - ackpop: one AckBatch of the n claims of the round before that also
//     claims the next n (AckBatchParams.Pop), the worker's steady state.
//
// One op is one task's Pop and Ack, and its requeue (InspectRequeue, so the
// queue keeps its size); the cycles/s metric times the Pop and the
// acknowledgements alone (the store calls of a worker), cpu-ns/op is the
// process's CPU per op, requeue and garbage collector included.
// cycles/cpu-s counts the same cycles per second of CPU the benchmark's
// thread spent in those calls (Linux): on a shared machine, where the wall
// clock also counts the time other processes held the core, it is close to
// what cycles/s is on an idle one (the collector's background work, which
// runs on another core there, is left out; its assists are in).
func BenchmarkPopAckBatch(b *testing.B) {
	for _, size := range benchSizes {
		for _, n := range []int{1, 10, 100} {
			for _, mode := range []string{"ack", "ackbatch", "ackpop"} {
				b.Run(fmt.Sprintf("size=%d/n=%d/%s", size, n, mode), func(b *testing.B) {
					benchPopAck(b, readyStore(b, size), n, mode)
				})
			}
		}
	}
}

// benchPopAck runs b.N cycles of BenchmarkPopAckBatch's mode in batches of n
// on queue "bench" of s, and leaves the queue as it found it.
func benchPopAck(b *testing.B, s *Store, n int, mode string) {
	const lease = time.Minute
	result := []byte("done")
	acks := make([]core.AckItem, 0, n)
	acked := make([]core.Task, 0, n)
	var claimed []core.Task
	var popAck, onCPU time.Duration
	runtime.LockOSThread() // threadCPU reads this goroutine's thread
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	popped := 0
	for done := 0; done < b.N; {
		start := time.Now()
		cpuStart, _ := threadCPU()
		if claimed == nil || mode != "ackpop" {
			r, err := s.Pop(ctx, core.PopParams{Queue: "bench", Lease: lease, N: min(n, b.N-popped)})
			if err != nil || len(r.Tasks) == 0 {
				b.Fatalf("Pop: %d tasks, %v", len(r.Tasks), err)
			}
			claimed = r.Tasks
			popped += len(r.Tasks)
		}
		acked = acked[:0]
		if mode == "ack" {
			for _, t := range claimed {
				a, err := s.Ack(ctx, core.AckParams{Claim: t.Claim(), Result: result})
				if err != nil {
					b.Fatalf("Ack: %v", err)
				}
				acked = append(acked, a.Task)
			}
		} else {
			acks = acks[:0]
			for _, t := range claimed {
				acks = append(acks, core.AckItem{Claim: t.Claim(), Result: result})
			}
			p := core.AckBatchParams{Queue: "bench", Acks: acks}
			if mode == "ackpop" {
				p.Pop = core.AckPop{Lease: lease, N: min(n, b.N-popped)}
			}
			res, err := s.AckBatch(ctx, p)
			if err != nil {
				b.Fatalf("AckBatch: %v", err)
			}
			for _, it := range res.Items {
				if it.Err != nil {
					b.Fatalf("AckBatch item: %v", it.Err)
				}
				acked = append(acked, it.Task)
			}
			if len(res.Claimed) != p.Pop.N {
				b.Fatalf("AckBatch claimed %d tasks, want %d", len(res.Claimed), p.Pop.N)
			}
			claimed = res.Claimed
			popped += len(res.Claimed)
		}
		popAck += time.Since(start)
		cpuEnd, _ := threadCPU()
		onCPU += cpuEnd - cpuStart
		done += len(acked)
		for _, t := range acked {
			if _, err := s.InspectRequeue(ctx, core.InspectParams{Queue: "bench", ID: t.ID, Expect: t.Version}); err != nil {
				b.Fatalf("InspectRequeue: %v", err)
			}
		}
	}
	if popped != b.N {
		b.Fatalf("%d tasks popped, want %d", popped, b.N)
	}
	b.ReportMetric(float64(b.N)/popAck.Seconds(), "cycles/s")
	if _, ok := threadCPU(); ok && onCPU > 0 {
		b.ReportMetric(float64(b.N)/onCPU.Seconds(), "cycles/cpu-s")
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
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
