package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// jumpingClock is a worker's clock that reads the store's fake clock off by
// a skew that may change while the worker runs (a clock that jumps); its
// timers are the store clock's.
type jumpingClock struct {
	*core.FakeClock
	skew *atomic.Int64
}

func (c jumpingClock) Now() time.Time {
	return c.FakeClock.Now().Add(time.Duration(c.skew.Load()))
}

// delayStore records the Delay of every Retry and the store's answer.
type delayStore struct {
	core.Store
	retries chan core.TaskResult
	delays  chan time.Duration
}

func (s *delayStore) Retry(ctx context.Context, p core.RetryParams) (core.TaskResult, error) {
	r, err := s.Store.Retry(ctx, p)
	if err == nil {
		s.delays <- p.Delay
		s.retries <- r
	}
	return r, err
}

// A worker's skew, whether it had it from the start or its clock jumped
// while the handler ran, never shifts a retry: the task's RunAfter is the
// store's clock at the Retry plus the policy's delay.
func TestWorkerRetriesOnTheStoresScheduleWhenItsClockIsSkewed(t *testing.T) {
	const delay = 500 * time.Millisecond
	for _, skew := range []time.Duration{5 * time.Second, -5 * time.Second} {
		for _, when := range []string{"from the start", "jumping mid-attempt"} {
			t.Run(fmt.Sprintf("skew=%v %s", skew, when), func(t *testing.T) {
				clk := core.NewFakeClock(t0)
				s := &delayStore{Store: newStore(t, clk), retries: make(chan core.TaskResult, 1), delays: make(chan time.Duration, 1)}
				enqueue(t, s, clk, "r")
				var off atomic.Int64
				if when == "from the start" {
					off.Store(int64(skew))
				}
				begun, release := make(chan struct{}), make(chan struct{})
				w := newWorker(t, s, jumpingClock{clk, &off}, func(context.Context, core.Claim, core.Task) ([]byte, error) {
					close(begun)
					<-release
					return nil, errors.New("try again")
				}, core.WithRetryPolicy(func(core.Task, error) (time.Duration, bool) { return delay, true }))
				stop := started(t, w)
				receive(t, begun)
				blockUntil(t, clk, 1) // the heartbeat
				off.Store(int64(skew))
				clk.Advance(1500 * time.Millisecond)
				close(release)
				res := receive(t, s.retries)
				stop()
				if d := receive(t, s.delays); d != delay {
					t.Errorf("Retry passed a delay of %v, want the policy's %v", d, delay)
				}
				storeNow := t0.Add(1500 * time.Millisecond)
				if !res.Now.Equal(storeNow) {
					t.Fatalf("the store's clock read %v at the Retry, want %v", res.Now, storeNow)
				}
				task := mustGet(t, s, "r")
				if want := storeNow.Add(delay); task.State != core.Scheduled || !task.RunAfter.Equal(want) {
					t.Fatalf("task %v runAfter %v, want scheduled at %v (the store's now + the delay), not shifted by the skew",
						task.State, task.RunAfter, want)
				}
			})
		}
	}
}
