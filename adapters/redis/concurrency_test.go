package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// pause waits d or until ctx is done: the stalls of a simulated worker or
// broker (a GC pause, a slow handler), not a wait for an effect.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// 8 workers and 2 brokers, each with its own client, run 2 000 tasks with
// leases short enough that stalled workers lose them and stalled brokers
// lose their claims to each other, on the server's clock. At the end every
// task is Succeeded or Failed exactly as its one accepted decision said:
// none lost, none decided twice.
func TestWorkersAndBrokersRunEveryTaskToExactlyOneDecision(t *testing.T) {
	const (
		tasks    = 2000
		workers  = 8
		brokers  = 2
		lease    = 30 * time.Millisecond
		claimTTL = 20 * time.Millisecond
		queue    = "conc"
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// One prefix for all: the stores share the queue, each with its own client.
	prefixStore, _ := newStore(t)
	stores := make([]*redis.Store, workers+brokers)
	for i := range stores {
		c := newClient(t)
		s, err := redis.New(c, redis.WithPrefix(prefixStore.Prefix()))
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}

	// The handler's decision for each task: every seventh fails.
	wantFail := func(i int) bool { return i%7 == 0 }
	id := func(i int) string { return fmt.Sprintf("task-%04d", i) }
	for i := range tasks {
		_, err := stores[0].Enqueue(ctx, core.EnqueueParams{Queue: queue, EnqueueArgs: model.EnqueueArgs{
			ID: id(i), Payload: []byte(fmt.Sprint(i)), MaxAttempts: 1 << 20}})
		if err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu       sync.Mutex
		accepted = map[string]string{} // task → "succeeded" or "failed"
		twice    []string
		decided  atomic.Int64
		runs     atomic.Int64 // handler executions
		lost     atomic.Int64 // worker decisions refused as stale
		stale    atomic.Int64 // broker decisions refused as stale
		done     = make(chan struct{})
	)
	record := func(task, outcome string) {
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := accepted[task]; ok {
			twice = append(twice, fmt.Sprintf("%s: %s then %s", task, prev, outcome))
		}
		accepted[task] = outcome
		if decided.Add(1) == tasks {
			close(done)
		}
	}
	var unexpected atomic.Pointer[error]
	fail := func(err error) {
		unexpected.CompareAndSwap(nil, &err)
		cancel()
	}

	var wg sync.WaitGroup
	for w := range workers {
		s := stores[w]
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r, err := s.Pop(ctx, core.PopParams{Queue: queue, Lease: lease, N: 1 + rng.IntN(3)})
				if err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("pop: %w", err))
					}
					return
				}
				if len(r.Tasks) == 0 {
					pause(ctx, time.Millisecond)
					continue
				}
				for _, task := range r.Tasks {
					runs.Add(1)
					claim := task.Claim()
					stall := time.Duration(rng.IntN(3)) * time.Millisecond
					if rng.IntN(5) == 0 {
						stall = lease + time.Duration(rng.IntN(30))*time.Millisecond
					}
					if rng.IntN(4) == 0 { // renew the lease half-way, maybe too late
						pause(ctx, stall/2)
						if _, err := s.Extend(ctx, core.ExtendParams{Claim: claim, Lease: lease}); err != nil && !errors.Is(err, core.ErrStaleClaim) {
							if ctx.Err() == nil {
								fail(fmt.Errorf("extend %s: %w", task.ID, err))
							}
							return
						}
					}
					pause(ctx, stall)
					var i int
					fmt.Sscan(string(task.Payload), &i)
					if wantFail(i) {
						_, err = s.Fail(ctx, core.FailParams{Claim: claim, Message: "handler failed"})
					} else {
						_, err = s.Ack(ctx, core.AckParams{Claim: claim, Result: []byte("result " + task.ID)})
					}
					switch {
					case err == nil:
						record(task.ID, map[bool]string{true: "failed", false: "succeeded"}[wantFail(i)])
					case errors.Is(err, core.ErrStaleClaim):
						lost.Add(1)
					case ctx.Err() != nil:
						return
					default:
						fail(fmt.Errorf("decide %s: %w", task.ID, err))
						return
					}
				}
			}
		}()
	}
	for b := range brokers {
		s := stores[workers+b]
		rng := rand.New(rand.NewPCG(seed, uint64(100+b)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := s.Promote(ctx, core.PromoteParams{Queue: queue}); err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("promote: %w", err))
					}
					return
				}
				r, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: queue, ClaimTTL: claimTTL, Limit: 20})
				if err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("claim expired: %w", err))
					}
					return
				}
				for _, rc := range r.Claims {
					if rng.IntN(8) == 0 { // stall past the claim TTL
						pause(ctx, claimTTL+time.Duration(rng.IntN(10))*time.Millisecond)
					}
					var delay time.Duration
					if rng.IntN(2) == 0 {
						delay = time.Duration(rng.IntN(5)) * time.Millisecond
					}
					_, err := s.Requeue(ctx, core.RequeueParams{ReapClaim: rc, Delay: delay})
					switch {
					case err == nil:
					case errors.Is(err, core.ErrStaleClaim):
						stale.Add(1)
					case ctx.Err() != nil:
						return
					default:
						fail(fmt.Errorf("requeue %s: %w", rc.TaskID, err))
						return
					}
				}
				pause(ctx, 2*time.Millisecond)
			}
		}()
	}

	select {
	case <-done:
	case <-ctx.Done():
	}
	cancel()
	wg.Wait()
	if p := unexpected.Load(); p != nil {
		t.Fatalf("unexpected error: %v", *p)
	}
	if len(twice) > 0 {
		t.Fatalf("tasks decided twice: %v", twice)
	}
	if n := decided.Load(); n != tasks {
		t.Fatalf("%d of %d tasks decided before the deadline", n, tasks)
	}
	t.Logf("%d handler runs, %d worker decisions refused as stale, %d broker decisions refused as stale",
		runs.Load(), lost.Load(), stale.Load())

	// The store agrees with the accepted decisions, task by task.
	check := context.Background()
	counts, err := stores[0].Counts(check, core.CountsParams{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	wantFailed := 0
	for i := range tasks {
		if wantFail(i) {
			wantFailed++
		}
	}
	if want := (core.Counts{Succeeded: tasks - wantFailed, Failed: wantFailed}); counts != want {
		t.Errorf("counts %+v, want %+v", counts, want)
	}
	for _, st := range []core.State{core.Succeeded, core.Failed} {
		after := ""
		for {
			page, err := stores[0].List(check, core.ListParams{Queue: queue, State: st, After: after, Limit: model.MaxBatch})
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range page.Tasks {
				if accepted[task.ID] != st.String() {
					t.Errorf("task %s is %v, its accepted decision was %q", task.ID, st, accepted[task.ID])
				}
				if st == core.Succeeded && string(task.Result) != "result "+task.ID {
					t.Errorf("task %s result %q", task.ID, task.Result)
				}
				if st == core.Failed && task.HandlerFailures() != 1 {
					t.Errorf("task %s has %d handler failures, want 1: %v", task.ID, task.HandlerFailures(), task.Errors)
				}
			}
			if page.Next == "" {
				break
			}
			after = page.Next
		}
	}
}
