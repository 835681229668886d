// Command quickstart is the README's short example, whole: it enqueues a
// task, runs a worker and a broker over an embedded store until the task has
// succeeded, and shuts both down.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	// Or redis.Open("redis://127.0.0.1:6379/0"), sqlite.Open("jobs.db").
	store := memory.New()
	defer store.Close()

	q, err := core.NewQueue(store, "emails")
	if err != nil {
		return err
	}
	task, err := q.Enqueue(ctx, []byte("welcome ada"), core.WithMaxAttempts(5))
	if err != nil {
		return err
	}

	w, err := core.NewWorker(store, "emails",
		func(ctx context.Context, c core.Claim, t core.Task) ([]byte, error) {
			// c.Token grows with every claim of the task: pass it to your
			// own writes so a superseded claim cannot overwrite a newer one.
			// An error returned here is retried with backoff until
			// MaxAttempts; core.Permanent(err) fails the task at once.
			fmt.Printf("sending %q under token %d\n", t.Payload, c.Token)
			return []byte("sent"), nil
		},
		core.WithConcurrency(8), core.WithLease(30*time.Second))
	if err != nil {
		return err
	}
	// The broker promotes due tasks and reaps lapsed leases through the
	// retry policy; any number of brokers may tend the same queues.
	b, err := core.NewBroker(store, core.WithQueues("emails"))
	if err != nil {
		return err
	}
	go b.Run(ctx)

	// Stop once the task has succeeded (a service would run until a signal).
	go func() {
		defer stop()
		for ctx.Err() == nil {
			if t, err := q.Get(ctx, task.ID); err == nil && t.State == core.Succeeded {
				fmt.Printf("task %s: %s, result %q\n", t.ID, t.State, t.Result)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	// Run pops, heartbeats and acks; when ctx is done it shuts down
	// gracefully, giving unfinished tasks back.
	return w.Run(ctx)
}
