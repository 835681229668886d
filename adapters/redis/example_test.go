package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// A producer, a worker and a broker sharing one Redis. (Compiled, not run:
// it needs a server at the URL.)
func ExampleOpen() {
	ctx := context.Background()
	store, err := redis.Open("redis://worker:secret@localhost:6379/0", redis.WithPrefix("myapp:"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	_, err = store.Enqueue(ctx, core.EnqueueParams{Queue: "emails", EnqueueArgs: model.EnqueueArgs{
		ID: "welcome-42", Payload: []byte(`{"to":"ada@example.com"}`), MaxAttempts: 5}})
	if err != nil && !errors.Is(err, core.ErrConflict) {
		log.Fatal(err)
	}

	// A worker claims the task under a 30 s lease, judged by the server's clock.
	popped, err := store.Pop(ctx, core.PopParams{Queue: "emails", Lease: 30 * time.Second, N: 1})
	if err != nil || len(popped.Tasks) == 0 {
		return
	}
	claim := popped.Tasks[0].Claim()
	// ... send the email, fencing side effects with claim.Token ...
	if _, err := store.Ack(ctx, core.AckParams{Claim: claim, Result: []byte("sent")}); errors.Is(err, core.ErrStaleClaim) {
		fmt.Println("the lease lapsed and someone else decided the task; our ack changed nothing")
	}

	// A broker claims expired tasks and decides each one; a decision made
	// after anyone else acted is refused and writes nothing.
	reaped, err := store.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "emails", ClaimTTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	for _, rc := range reaped.Claims {
		_, err := store.Requeue(ctx, core.RequeueParams{ReapClaim: rc, Delay: time.Minute})
		if errors.Is(err, core.ErrStaleClaim) {
			continue // the worker acked late, or another broker took over
		}
	}
}
