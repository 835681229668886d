package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// TestWorkerFindsNothingInAPausedQueue runs a Worker over a queue its
// Inspector paused: the Worker's running task keeps its lease and is
// acked, its Pops claim nothing while the queue is paused, and after the
// Resume it takes the task that waited.
func TestWorkerFindsNothingInAPausedQueue(t *testing.T) {
	ctx := context.Background()
	clk := core.NewFakeClock(time.Unix(1_700_000_000, 0))
	s := newRecStore(t, clk)
	ins, err := core.NewInspector(s, queue)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	handled := make(chan string, 4)
	w := newWorker(t, s, clk, func(_ context.Context, _ core.Claim, task core.Task) ([]byte, error) {
		handled <- task.ID
		if task.ID == "first" {
			<-release
		}
		return nil, nil
	})
	enqueue(t, s, clk, "first")
	started(t, w)
	if id := receive(t, handled); id != "first" {
		t.Fatalf("handled %q first", id)
	}
	if paused, err := ins.Pause(ctx); err != nil || !paused {
		t.Fatalf("Pause: %v, %v", paused, err)
	}
	enqueue(t, s, clk, "second")
	// The held claim keeps heartbeating while the queue is paused.
	for i := range 2 {
		blockUntil(t, clk, 1)
		clk.Advance(heartbeat)
		if e := s.wait(t, "Extend", i+1); e.Err != nil {
			t.Fatalf("a heartbeat of the paused queue's running task: %v", e.Err)
		}
	}
	pops := s.count("Pop")
	close(release)
	s.wait(t, "Ack", 1)
	if got := mustGet(t, s, "first"); got.State != core.Succeeded {
		t.Fatalf("the task running at the Pause is %v, want succeeded", got.State)
	}
	// The slot is free: the Worker pops at once, and finds nothing.
	if e := s.wait(t, "Pop", pops+1); e.Err != nil || len(e.IDs) != 0 {
		t.Fatalf("the Pop after the Ack of the paused queue: %v, %v", e.IDs, e.Err)
	}
	if got := mustGet(t, s, "second"); got.State != core.Ready {
		t.Fatalf("the task enqueued while paused is %v, want ready", got.State)
	}
	c, err := ins.Counts(ctx)
	if err != nil || !c.Paused {
		t.Fatalf("Counts while paused: %+v, %v", c, err)
	}

	if paused, err := ins.Resume(ctx); err != nil || paused {
		t.Fatalf("Resume: %v, %v", paused, err)
	}
	advanceToPoll(t, s, clk)
	if id := receive(t, handled); id != "second" {
		t.Fatalf("handled %q after the Resume, want second", id)
	}
}
