// Command quickstart enqueues a task and serves its queue with a Client over
// an embedded store until the task has succeeded.
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

	// Or redis.Open("redis://127.0.0.1:6379/0") or sqlite.Open("jobs.db"),
	// which also return an error to check.
	store := memory.New()
	defer store.Close()

	send := func(ctx context.Context, c core.Claim, t core.Task) ([]byte, error) {
		// c.Token grows with every claim of the task: pass it to your own
		// writes so a superseded claim cannot overwrite a newer one. An
		// error returned here is retried with backoff until MaxAttempts;
		// core.Permanent(err) fails the task at once.
		fmt.Printf("sending %q under token %d\n", t.Payload, c.Token)
		return []byte("sent"), nil
	}
	// One Client serves every queue of the store it is given, and runs
	// their maintenance: due tasks are promoted, lapsed leases reaped.
	client, err := core.NewClient(store,
		core.WithQueue("emails", send,
			core.WithConcurrency(8), core.WithLease(30*time.Second), core.WithTimeout(time.Minute)),
	)
	if err != nil {
		return err
	}
	emails, err := client.Queue("emails")
	if err != nil {
		return err
	}
	task, err := emails.Enqueue(ctx, []byte("welcome ada"), core.WithMaxAttempts(5))
	if err != nil {
		return err
	}

	// Stop once the task has succeeded (a service would run until a signal).
	go func() {
		defer stop()
		for ctx.Err() == nil {
			if t, err := emails.Get(ctx, task.ID); err == nil && t.State == core.Succeeded {
				fmt.Printf("task %s: %s, result %q\n", t.ID, t.State, t.Result)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	// Run serves the queues until ctx is done, then shuts down gracefully:
	// running handlers get WithShutdownTimeout to finish, and unfinished
	// tasks are given back.
	return client.Run(ctx)
}
