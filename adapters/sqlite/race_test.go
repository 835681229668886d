package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// TestStaleWorkerRaceOfTheSQLiteSeed replays the race of the SQLite seed
// report with each pop implementation: worker A pops, recovery retries the
// task, worker B pops it; A's ack and A's fail must be stale claims that
// change nothing, and B's ack must succeed. A, B and the recovery each use
// their own Store on the same file, as separate processes would.
func TestStaleWorkerRaceOfTheSQLiteSeed(t *testing.T) {
	for _, mode := range popModes {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			clock := core.NewFakeClock(spec.Epoch)
			path := filepath.Join(t.TempDir(), "seed.db")
			opts := []sqlite.Option{sqlite.WithClock(clock), sqlite.WithPopMode(mode)}
			a, b, recovery := openStore(t, path, opts...), openStore(t, path, opts...), openStore(t, path, opts...)

			if _, err := a.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "m1", Payload: []byte("job"), MaxAttempts: 5}}); err != nil {
				t.Fatal(err)
			}
			popA := popOne(t, a, "q", time.Second)

			clock.Advance(2 * time.Second) // A stops responding; its lease lapses
			rec, err := recovery.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: "q"})
			if err != nil || len(rec.Tasks) != 1 || rec.Tasks[0].State != core.Ready {
				t.Fatalf("RecoverExpired = %+v, %v; want m1 back to Ready", rec.Tasks, err)
			}
			if rec.Tasks[0].ClaimToken != 0 || !rec.Tasks[0].ClaimedAt.IsZero() || !rec.Tasks[0].Deadline.IsZero() || !rec.Tasks[0].FinishedAt.IsZero() {
				t.Errorf("recovered task keeps claim fields: %+v", rec.Tasks[0])
			}

			popB := popOne(t, b, "q", time.Minute)
			if popB.ClaimToken == popA.ClaimToken || popB.Attempt != 2 {
				t.Fatalf("B's claim %+v does not supersede A's %+v", popB.Claim(), popA.Claim())
			}

			_, err = a.Ack(ctx, core.AckParams{Claim: popA.Claim(), Result: []byte("stale")})
			if !errors.Is(err, core.ErrStaleClaim) {
				t.Errorf("A's Ack after B popped: %v, want ErrStaleClaim", err)
			}
			_, err = a.Fail(ctx, core.FailParams{Claim: popA.Claim(), Message: "stale"})
			if !errors.Is(err, core.ErrStaleClaim) {
				t.Errorf("A's Fail after B popped: %v, want ErrStaleClaim", err)
			}
			got, err := b.Get(ctx, core.GetParams{Queue: "q", ID: "m1"})
			if err != nil || !got.Equal(popB) {
				t.Errorf("after A's stale decisions the task is %+v (%v), want B's claim untouched: %+v", got, err, popB)
			}

			ack, err := b.Ack(ctx, core.AckParams{Claim: popB.Claim(), Result: []byte("done")})
			if err != nil || ack.Task.State != core.Succeeded || string(ack.Task.Result) != "done" {
				t.Fatalf("B's Ack = %+v, %v; want Succeeded with B's result", ack.Task, err)
			}
			_, err = a.Ack(ctx, core.AckParams{Claim: popA.Claim()})
			if !errors.Is(err, core.ErrStaleClaim) {
				t.Errorf("A's Ack after B's: %v, want ErrStaleClaim", err)
			}
			final, _ := a.Get(ctx, core.GetParams{Queue: "q", ID: "m1"})
			if !final.Equal(ack.Task) {
				t.Errorf("final task %+v, want B's acknowledged task %+v", final, ack.Task)
			}
		})
	}
}

// popOne pops exactly one task.
func popOne(t *testing.T, s core.Store, queue string, lease time.Duration) core.Task {
	t.Helper()
	res, err := s.Pop(context.Background(), core.PopParams{Queue: queue, Lease: lease, N: 1})
	if err != nil || len(res.Tasks) != 1 {
		t.Fatalf("Pop(%s) = %d tasks, %v; want one", queue, len(res.Tasks), err)
	}
	return res.Tasks[0]
}
