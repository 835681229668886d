package core_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// deadlineStore records, for each Pop and AckBatch, how far the deadline
// of the call's context lay when the call began.
type deadlineStore struct {
	core.BatchStore
	mu   sync.Mutex
	left []time.Duration
}

func (s *deadlineStore) note(ctx context.Context) {
	dl, ok := ctx.Deadline()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok {
		s.left = append(s.left, -1)
		return
	}
	s.left = append(s.left, time.Until(dl))
}

func (s *deadlineStore) Pop(ctx context.Context, p core.PopParams) (core.TasksResult, error) {
	s.note(ctx)
	return s.BatchStore.Pop(ctx, p)
}

func (s *deadlineStore) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	s.note(ctx)
	return s.BatchStore.AckBatch(ctx, p)
}

// On the system's clock every store call of a Worker is bounded by the
// lease: its context's deadline lies between 15/16 of a lease and one lease
// away when the call begins, also for calls made long after the first (the
// calls share a deadline context, renewed as the lease advances).
func TestWorkerStoreCallsHaveADeadlineOfAboutOneLease(t *testing.T) {
	clk := core.SystemClock{}
	const lease = 1600 * time.Millisecond // shadows the package's
	s := &deadlineStore{BatchStore: newStore(t, clk).(core.BatchStore)}
	done := make(chan string, 16)
	w := newWorker(t, s, clk, func(_ context.Context, c core.Claim, _ core.Task) ([]byte, error) {
		done <- c.TaskID
		return nil, nil
	}, core.WithLease(lease), core.WithHeartbeat(lease/3), core.WithPollInterval(time.Millisecond, 5*time.Millisecond))
	started(t, w)
	// Tasks over about three sixteenths of the lease: a deadline taken once
	// and never renewed would be short of 15/16 of a lease by then.
	for _, id := range []string{"a", "b", "c", "d"} {
		enqueue(t, s, clk, id)
		if got := receive(t, done); got != id {
			t.Fatalf("handled %s, want %s", got, id)
		}
		time.Sleep(lease / 16)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.left) < 4 {
		t.Fatalf("%d store calls recorded, want at least 4", len(s.left))
	}
	for i, d := range s.left {
		if d > lease || d < lease-lease/16-50*time.Millisecond {
			t.Errorf("call %d: deadline %v away, want between %v and %v", i, d, lease-lease/16, lease)
		}
	}
}
