package memory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// A worker claims a task, its lease lapses, a broker claims the task, and the
// late worker's Ack still wins, because nobody decided first. The broker's
// decision is then stale.
func ExampleNew() {
	ctx := context.Background()
	clock := core.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memory.New(memory.WithClock(clock), memory.WithCapacity(1000))
	defer store.Close()

	_, _ = store.Enqueue(ctx, core.EnqueueParams{Queue: "mail", EnqueueArgs: model.EnqueueArgs{
		ID: "welcome-42", Payload: []byte(`{"to":"ada"}`), MaxAttempts: 3,
	}})
	popped, _ := store.Pop(ctx, core.PopParams{Queue: "mail", Lease: 30 * time.Second, N: 1})
	claim := popped.Tasks[0].Claim()
	fmt.Println("claimed", claim.TaskID, "attempt", claim.Attempt)

	clock.Advance(time.Minute) // the lease lapses
	reaped, _ := store.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "mail", ClaimTTL: time.Minute})
	fmt.Println("broker claims", len(reaped.Claims), "task")

	acked, err := store.Ack(ctx, core.AckParams{Claim: claim, Result: []byte("sent")})
	fmt.Println("late ack:", acked.Task.State, err)

	_, err = store.Requeue(ctx, core.RequeueParams{ReapClaim: reaped.Claims[0]})
	fmt.Println("broker requeue is stale:", errors.Is(err, core.ErrStaleClaim))
	// Output:
	// claimed welcome-42 attempt 1
	// broker claims 1 task
	// late ack: succeeded <nil>
	// broker requeue is stale: true
}

// One damaged record among sound ones: the worker's Pop sets it aside and
// claims the next task, and the operator finds the poison one quarantined
// and removes it.
func ExampleStore_Damage() {
	ctx := context.Background()
	store := memory.New()
	defer store.Close()
	for _, id := range []string{"poison", "sound"} {
		_, _ = store.Enqueue(ctx, core.EnqueueParams{Queue: "mail", EnqueueArgs: model.EnqueueArgs{ID: id, MaxAttempts: 3}})
	}
	_ = store.Damage(ctx, "mail", "poison")

	popped, _ := store.Pop(ctx, core.PopParams{Queue: "mail", Lease: time.Minute, N: 1})
	fmt.Println("claimed", popped.Tasks[0].ID)
	counts, _ := store.Counts(ctx, core.CountsParams{Queue: "mail"})
	fmt.Println("quarantined", counts.Quarantined)
	removed, err := store.Remove(ctx, core.InspectParams{Queue: "mail", ID: "poison"})
	fmt.Println("removed", removed.Task.ID, removed.Task.State, err)
	// Output:
	// claimed sound
	// quarantined 1
	// removed poison quarantined <nil>
}
