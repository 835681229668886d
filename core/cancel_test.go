package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// TestWorkerLearnsOfACancelAtItsHeartbeat cancels a task a Worker is
// running: the next heartbeat is refused as cancelled, the handler's
// context ends with a cause for which errors.Is(cause, ErrCancelled)
// holds, and the Worker neither retries nor acks the task, which stays
// Failed with the cancellation as its last error.
func TestWorkerLearnsOfACancelAtItsHeartbeat(t *testing.T) {
	ctx := context.Background()
	clk := core.NewFakeClock(time.Unix(1_700_000_000, 0))
	s := newRecStore(t, clk)
	ins, err := core.NewInspector(s, queue)
	if err != nil {
		t.Fatal(err)
	}
	started1 := make(chan struct{})
	causes := make(chan error, 1)
	w := newWorker(t, s, clk, func(ctx context.Context, _ core.Claim, _ core.Task) ([]byte, error) {
		close(started1)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, errors.New("stopped") // a failure the policy must never see
	}, core.WithRetryPolicy(func(core.Task, error) (time.Duration, bool) {
		t.Error("the retry policy was consulted for a cancelled task")
		return 0, true
	}))
	enqueue(t, s, clk, "t1")
	started(t, w)
	receive(t, started1)
	task, err := ins.Cancel(ctx, "t1", core.AnyVersion)
	if err != nil || task.State != core.Failed || !task.Cancelled() {
		t.Fatalf("Cancel: %+v, %v", task, err)
	}
	blockUntil(t, clk, 1)
	clk.Advance(heartbeat)
	e := s.wait(t, "Extend", 1)
	if !errors.Is(e.Err, core.ErrCancelled) || !errors.Is(e.Err, core.ErrStaleClaim) {
		t.Fatalf("the heartbeat after the Cancel: %v, want ErrCancelled and ErrStaleClaim", e.Err)
	}
	cause := receive(t, causes)
	if !errors.Is(cause, core.ErrCancelled) || !errors.Is(cause, core.ErrClaimSuperseded) {
		t.Fatalf("the handler's cause: %v, want ErrCancelled", cause)
	}
	// The handler has returned; give the Worker time to (not) decide.
	for range 3 {
		blockUntil(t, clk, 1)
		clk.Advance(time.Second)
	}
	for _, op := range []string{"Ack", "Fail", "Retry"} {
		if n := s.count(op); n != 0 {
			t.Errorf("the Worker sent %d %s calls for the cancelled task", n, op)
		}
	}
	if got := mustGet(t, s, "t1"); !got.Cancelled() || got.Attempt != 1 {
		t.Fatalf("the cancelled task: %+v", got)
	}
}
