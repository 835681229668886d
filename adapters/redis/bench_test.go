package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/model"
)

// The benchmarks run on the package's test server (or REDIS_URL), on the
// server's clock, with a connection per goroutine. Each reports ops/s; the
// Ceiling benchmarks measure a trivial EVALSHA at the same concurrency, the
// most any one-script operation can reach on this server and client.
//
//	go test -run '^$' -bench . -count 5 ./adapters/redis/

var benchConcurrency = []int{1, 8, 64}

// benchClient returns a client with a connection for each of 64 goroutines.
func benchClient(b *testing.B) *goredis.Client {
	opt, err := goredis.ParseURL(redistest.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	opt.PoolSize = 80
	c := goredis.NewClient(opt)
	b.Cleanup(func() { c.Close() })
	return c
}

func benchStore(b *testing.B) *redis.Store {
	c := benchClient(b)
	s, err := redis.New(c, redis.WithPrefix(uniquePrefix(b, c)))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Preload(context.Background()); err != nil {
		b.Fatal(err)
	}
	return s
}

// parallel runs op n times over g goroutines (op gets a distinct index) and
// reports ops/s.
func parallel(b *testing.B, g, n int, op func(ctx context.Context, i int) error) {
	b.Helper()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	start := time.Now()
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || failed.Load() != nil {
					return
				}
				if err := op(ctx, i); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "ops/s")
}

// benchCost resets the server's command statistics and returns a func
// that, called when the measured work is done, reports what the server
// spent per unit (an operation, or
// a task for the batch benchmarks): srv-µs/<unit>, the time of the scripts
// (FCALL and EVALSHA) by INFO commandstats, which includes the commands
// they run, and calls/<unit>, every command counted there; and
// cpu-µs/<unit>, the server process's user and system CPU by INFO cpu
// (parsing and network included). The script time is wall time on the
// server's thread, so on a loaded machine it grows when the server is
// descheduled in a script; the CPU figure does not.
func benchCost(b *testing.B, c goredis.UniversalClient, unit string) func(units int) {
	b.Helper()
	ctx := context.Background()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	cpu0 := serverCPU(b, c)
	return func(n int) {
		b.Helper()
		if n == 0 {
			return
		}
		b.ReportMetric((serverCPU(b, c)-cpu0)*1e6/float64(n), "cpu-µs/"+unit)
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		var usec, calls float64
		for _, line := range strings.Split(info, "\n") {
			name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			var cl, us float64
			for _, kv := range strings.Split(stats, ",") {
				k, v, _ := strings.Cut(kv, "=")
				f, _ := strconv.ParseFloat(v, 64)
				switch k {
				case "calls":
					cl = f
				case "usec":
					us = f
				}
			}
			switch name {
			case "cmdstat_info", "cmdstat_config|resetstat":
				continue
			case "cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval":
				usec += us
			}
			calls += cl
		}
		b.ReportMetric(usec/float64(n), "srv-µs/"+unit)
		b.ReportMetric(calls/float64(n), "calls/"+unit)
	}
}

// info returns the fields of an INFO section, by name.
func info(b *testing.B, c goredis.UniversalClient, section string) map[string]string {
	b.Helper()
	text, err := c.Info(context.Background(), section).Result()
	if err != nil {
		b.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if name, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[name] = v
		}
	}
	return fields
}

// serverCPU returns the server's used_cpu_sys + used_cpu_user, in seconds.
func serverCPU(b *testing.B, c goredis.UniversalClient) float64 {
	b.Helper()
	f := info(b, c, "cpu")
	sys, _ := strconv.ParseFloat(f["used_cpu_sys"], 64)
	user, _ := strconv.ParseFloat(f["used_cpu_user"], 64)
	return sys + user
}

// dropKept deletes the replies s keeps for resends (its keys
// <prefix>{queue}:req:<request ID>, see lua/lib.lua) and returns the bytes
// of the server's memory that frees (used_memory before and after).
func dropKept(b *testing.B, s *redis.Store) int64 {
	b.Helper()
	ctx := context.Background()
	c := s.Client()
	used := func() int64 {
		n, err := strconv.ParseInt(info(b, c, "memory")["used_memory"], 10, 64)
		if err != nil {
			b.Fatal("INFO memory: used_memory: ", err)
		}
		return n
	}
	var keys []string
	iter := c.Scan(ctx, 0, s.Prefix()+"*:req:*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		b.Fatal(err)
	}
	before := used()
	for i := 0; i < len(keys); i += 1000 {
		if err := c.Unlink(ctx, keys[i:min(i+1000, len(keys))]...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	return before - used()
}

// reportKept reports the memory the replies kept for resends hold, per
// unit: what deleting them frees. Each is kept while its client may
// resend it (see resend.go), so a store holds about this much times that
// window of its rate.
func reportKept(b *testing.B, s *redis.Store, n int, unit string) {
	b.Helper()
	b.ReportMetric(float64(dropKept(b, s))/float64(n), "kept-B/"+unit)
}

// fill enqueues n tasks (outside the timer) with 64 goroutines.
func fill(b *testing.B, s *redis.Store, queue string, n int) {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if err := enqueue(ctx, s, queue, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

func enqueue(ctx context.Context, s *redis.Store, queue string, i int64) error {
	_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: queue, EnqueueArgs: model.EnqueueArgs{
		ID: fmt.Sprintf("t%09d", i), Payload: []byte("payload"), MaxAttempts: 3}})
	return err
}

func BenchmarkCeiling(b *testing.B) {
	trivial := goredis.NewScript("return 1")
	for _, g := range benchConcurrency {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			c := benchClient(b)
			if err := trivial.Load(context.Background(), c).Err(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			parallel(b, g, b.N, func(ctx context.Context, _ int) error {
				return trivial.Run(ctx, c, []string{"k"}).Err()
			})
		})
	}
}

func BenchmarkEnqueue(b *testing.B) {
	for _, g := range benchConcurrency {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			s := benchStore(b)
			cost := benchCost(b, s.Client(), "op")
			b.ResetTimer()
			parallel(b, g, b.N, func(ctx context.Context, i int) error {
				return enqueue(ctx, s, "bench", int64(i))
			})
			cost(b.N)
			reportKept(b, s, b.N, "op")
		})
	}
}

// BenchmarkPopAck is one worker cycle: Pop one task, Ack it (two scripts).
func BenchmarkPopAck(b *testing.B) {
	for _, g := range benchConcurrency {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			s := benchStore(b)
			fill(b, s, "bench", b.N)
			cost := benchCost(b, s.Client(), "op")
			b.ResetTimer()
			parallel(b, g, b.N, func(ctx context.Context, _ int) error {
				r, err := s.Pop(ctx, core.PopParams{Queue: "bench", Lease: time.Minute, N: 1})
				if err != nil {
					return err
				}
				if len(r.Tasks) != 1 {
					return fmt.Errorf("pop returned %d tasks", len(r.Tasks))
				}
				_, err = s.Ack(ctx, core.AckParams{Claim: r.Tasks[0].Claim(), Result: []byte("ok")})
				return err
			})
			cost(b.N)
		})
	}
}

// BenchmarkClaimExpired claims one expired task per operation.
func BenchmarkClaimExpired(b *testing.B) {
	for _, g := range benchConcurrency {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			s := benchStore(b)
			fill(b, s, "bench", b.N)
			b.StopTimer()
			ctx := context.Background()
			for popped := 0; popped < b.N; {
				r, err := s.Pop(ctx, core.PopParams{Queue: "bench", Lease: time.Microsecond, N: model.MaxBatch})
				if err != nil {
					b.Fatal(err)
				}
				popped += len(r.Tasks)
			}
			b.StartTimer()
			b.ResetTimer()
			parallel(b, g, b.N, func(ctx context.Context, _ int) error {
				r, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "bench", ClaimTTL: time.Hour, Limit: 1})
				if err == nil && len(r.Claims) != 1 {
					err = fmt.Errorf("claimed %d tasks", len(r.Claims))
				}
				return err
			})
		})
	}
}

// BenchmarkPopBatch pops n tasks per call from one goroutine and reports
// tasks/s, against n single Pops.
func BenchmarkPopBatch(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			s := benchStore(b)
			fill(b, s, "bench", b.N*n)
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				r, err := s.Pop(ctx, core.PopParams{Queue: "bench", Lease: time.Minute, N: n})
				if err != nil {
					b.Fatal(err)
				}
				if len(r.Tasks) != n {
					b.Fatalf("popped %d tasks, want %d", len(r.Tasks), n)
				}
			}
			b.ReportMetric(float64(b.N*n)/time.Since(start).Seconds(), "tasks/s")
		})
	}
}

// BenchmarkEnqueueBatch adds n tasks per EnqueueBatch from one goroutine
// and reports tasks/s.
func BenchmarkEnqueueBatch(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			s := benchStore(b)
			ctx := context.Background()
			tasks := make([]model.EnqueueArgs, n)
			cost := benchCost(b, s.Client(), "task")
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				for j := range tasks {
					tasks[j] = model.EnqueueArgs{ID: fmt.Sprintf("t%09d", i*n+j), Payload: []byte("payload"), MaxAttempts: 3}
				}
				r, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "bench", Tasks: tasks})
				if err != nil {
					b.Fatal(err)
				}
				for _, it := range r.Items {
					if it.Err != nil {
						b.Fatal(it.Err)
					}
				}
			}
			b.ReportMetric(float64(b.N*n)/time.Since(start).Seconds(), "tasks/s")
			cost(b.N * n)
		})
	}
}

// BenchmarkPopAckBatch is a batching worker's cycle from one goroutine: Pop
// n tasks, then AckBatch them (two calls for n tasks); it reports tasks/s.
func BenchmarkPopAckBatch(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			s := benchStore(b)
			fill(b, s, "bench", b.N*n)
			ctx := context.Background()
			cost := benchCost(b, s.Client(), "task")
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				r, err := s.Pop(ctx, core.PopParams{Queue: "bench", Lease: time.Minute, N: n})
				if err != nil {
					b.Fatal(err)
				}
				if len(r.Tasks) != n {
					b.Fatalf("popped %d tasks, want %d", len(r.Tasks), n)
				}
				acks := make([]core.AckItem, len(r.Tasks))
				for i, t := range r.Tasks {
					acks[i] = core.AckItem{Claim: t.Claim(), Result: []byte("ok")}
				}
				res, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "bench", Acks: acks})
				if err != nil {
					b.Fatal(err)
				}
				for _, it := range res.Items {
					if it.Err != nil {
						b.Fatal(it.Err)
					}
				}
			}
			b.ReportMetric(float64(b.N*n)/time.Since(start).Seconds(), "tasks/s")
			cost(b.N * n)
		})
	}
}

// BenchmarkAckPop is a concurrency-1 worker's cycle: one AckBatch that
// acknowledges the task claimed before and claims the next (one call a
// task, as core.Worker makes it).
func BenchmarkAckPop(b *testing.B) {
	s := benchStore(b)
	fill(b, s, "bench", b.N+1)
	ctx := context.Background()
	r, err := s.Pop(ctx, core.PopParams{Queue: "bench", Lease: time.Minute, N: 1})
	if err != nil || len(r.Tasks) != 1 {
		b.Fatalf("pop: %d tasks, %v", len(r.Tasks), err)
	}
	held := r.Tasks[0]
	cost := benchCost(b, s.Client(), "task")
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		res, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "bench",
			Acks: []core.AckItem{{Claim: held.Claim(), Result: []byte("ok")}},
			Pop:  core.AckPop{Lease: time.Minute, N: 1}})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Items) != 1 || res.Items[0].Err != nil {
			b.Fatalf("ack: %+v", res.Items)
		}
		if i < b.N-1 {
			if len(res.Claimed) != 1 {
				b.Fatalf("popped %d tasks", len(res.Claimed))
			}
			held = res.Claimed[0]
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tasks/s")
	cost(b.N)
}

// BenchmarkWorker is core.Worker on the Redis store at its defaults apart
// from the concurrency (WithConcurrency), with a handler that does nothing:
// the time from starting the worker until it has acknowledged every task
// enqueued before (one op is one task), as bench/peers measures processing.
// cpu-ns/op is the benchmark process's CPU per task (the client's cost; the
// server's is cpu-µs/task).
func BenchmarkWorker(b *testing.B) {
	for _, g := range benchConcurrency {
		b.Run(fmt.Sprintf("c=%d", g), func(b *testing.B) {
			s := benchStore(b)
			ctx := context.Background()
			b.StopTimer()
			tasks := make([]model.EnqueueArgs, 0, model.MaxBatch)
			for i := 0; i < b.N; i += len(tasks) {
				tasks = tasks[:0]
				for j := i; j < min(b.N, i+model.MaxBatch); j++ {
					tasks = append(tasks, model.EnqueueArgs{ID: fmt.Sprintf("t%09d", j), Payload: []byte("{}"), MaxAttempts: 3})
				}
				r, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "bench", Tasks: tasks})
				if err != nil {
					b.Fatal(err)
				}
				for _, it := range r.Items {
					if it.Err != nil {
						b.Fatal(it.Err)
					}
				}
			}
			dropKept(b, s) // the EnqueueBatch calls' replies: not the Worker's
			w, err := core.NewWorker(s, "bench",
				func(context.Context, core.Claim, core.Task) ([]byte, error) { return nil, nil },
				core.WithConcurrency(g))
			if err != nil {
				b.Fatal(err)
			}
			cost := benchCost(b, s.Client(), "task")
			cpu0 := processCPU()
			b.StartTimer()
			ran := make(chan error, 1)
			go func() { ran <- w.Run(ctx) }()
			for w.Stats().Acked < int64(b.N) {
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			cpu := processCPU() - cpu0
			cost(b.N)
			reportKept(b, s, b.N, "task")
			if err := w.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
			if err := <-ran; err != nil {
				b.Fatal(err)
			}
			if st := w.Stats(); st.Acked != int64(b.N) || st.StoreErrors != 0 {
				b.Fatalf("acked %d of %d, %d store errors", st.Acked, b.N, st.StoreErrors)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the CPU time the benchmark process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
