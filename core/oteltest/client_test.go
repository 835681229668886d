package oteltest_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
)

// A Client given the providers once passes them to its queue handles, its
// workers and its brokers.
func TestAClientPassesItsProvidersToEveryPart(t *testing.T) {
	r := newRig(t)
	s := memory.New()
	defer s.Close()
	c, err := core.NewClient(s, r.meters, r.tracers,
		core.WithQueue(queue, func(ctx context.Context, _ core.Claim, _ core.Task) ([]byte, error) { return []byte("ok"), nil },
			core.WithPollInterval(time.Millisecond, 5*time.Millisecond)),
		core.WithMaintenance(core.WithInterval(5*time.Millisecond)),
	)
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Queue(queue)
	if err != nil {
		t.Fatal(err)
	}
	task, err := q.Enqueue(context.Background(), nil, core.WithDelay(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- c.Run(context.Background()) }()
	deadline := time.Now().Add(guard)
	for {
		got, err := q.Get(context.Background(), task.ID)
		if err == nil && got.State == core.Succeeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task = %+v, %v; want succeeded", got, err)
		}
		time.Sleep(time.Millisecond)
	}
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	m := r.collect(t)
	for name, want := range map[string]int64{
		core.MetricTasksEnqueued: 1, // the Client's queue handle
		core.MetricTasksPromoted: 1, // its broker
		core.MetricTasksClaimed:  1, // its worker
		core.MetricTasksAcked:    1,
	} {
		if got := m.sum(t, name, core.AttrQueue.String(queue)); got != want {
			t.Errorf("%s = %d, want %d (points %v)", name, got, want, m.points(name))
		}
	}
	if len(r.ended("process "+queue)) != 1 || len(r.ended("enqueue "+queue)) != 1 {
		t.Errorf("spans: %d process, %d enqueue; want one of each through the Client", len(r.ended("process "+queue)), len(r.ended("enqueue "+queue)))
	}
}
