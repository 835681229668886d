package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// The race of the SQLite seed report, refused: worker A's lease lapses,
// recovery returns the task to the queue, worker B claims it, and A's late
// Ack is a stale claim that changes nothing, while B's succeeds.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "leasehold-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	clock := core.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	store, err := sqlite.Open(filepath.Join(dir, "jobs.db"), sqlite.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	_, _ = store.Enqueue(ctx, core.EnqueueParams{Queue: "mail", EnqueueArgs: model.EnqueueArgs{
		ID: "welcome-42", Payload: []byte(`{"to":"ada"}`), MaxAttempts: 3,
	}})
	a, _ := store.Pop(ctx, core.PopParams{Queue: "mail", Lease: 30 * time.Second, N: 1})
	fmt.Println("A claims attempt", a.Tasks[0].Attempt, "with token", a.Tasks[0].ClaimToken)

	clock.Advance(time.Minute) // A stops responding
	recovered, _ := store.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: "mail"})
	fmt.Println("recovered:", recovered.Tasks[0].State)

	b, _ := store.Pop(ctx, core.PopParams{Queue: "mail", Lease: 30 * time.Second, N: 1})
	fmt.Println("B claims attempt", b.Tasks[0].Attempt, "with token", b.Tasks[0].ClaimToken)

	_, err = store.Ack(ctx, core.AckParams{Claim: a.Tasks[0].Claim()})
	fmt.Println("A's ack is stale:", errors.Is(err, core.ErrStaleClaim))
	done, err := store.Ack(ctx, core.AckParams{Claim: b.Tasks[0].Claim(), Result: []byte("sent")})
	fmt.Println("B's ack:", done.Task.State, err)
	// Output:
	// A claims attempt 1 with token 2
	// recovered: ready
	// B claims attempt 2 with token 4
	// A's ack is stale: true
	// B's ack: succeeded <nil>
}
