// Command sqlite-service is a service over SQLite: one Client serves two
// queues and their maintenance until SIGINT or SIGTERM, then shuts down
// within a deadline.
//
//	go run ./examples/sqlite-service -db jobs.db -enqueue 3
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("sqlite-service", flag.ContinueOnError)
	path := fs.String("db", "jobs.db", "the SQLite database file")
	enqueue := fs.Int("enqueue", 0, "enqueue this many demonstration tasks in each queue at start")
	grace := fs.Duration("grace", 10*time.Second, "how long shutdown waits for running handlers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	store, err := sqlite.Open(*path)
	if err != nil {
		return err
	}
	defer store.Close()

	handle := func(ctx context.Context, c core.Claim, t core.Task) ([]byte, error) {
		select {
		case <-time.After(10 * time.Millisecond): // the work
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		fmt.Fprintf(out, "done %s/%s (attempt %d, token %d)\n", t.Queue, t.ID, c.Attempt, c.Token)
		return []byte("ok"), nil
	}
	client, err := core.NewClient(store,
		core.WithQueue("emails", handle, core.WithConcurrency(8)),
		core.WithQueue("reports", handle, core.WithConcurrency(2), core.WithTimeout(time.Minute)),
		core.WithQueueDefaults(core.WithLease(30*time.Second)),
	)
	if err != nil {
		return err
	}
	for _, name := range client.Queues() {
		q, err := client.Queue(name)
		if err != nil {
			return err
		}
		for i := range *enqueue {
			if _, err := q.Enqueue(ctx, fmt.Appendf(nil, "job %d", i)); err != nil {
				return err
			}
		}
	}

	ran := make(chan error, 1)
	go func() { ran <- client.Run(context.Background()) }()
	fmt.Fprintln(out, "serving", client.Queues())
	select {
	case err := <-ran:
		return err
	case <-ctx.Done():
	}
	// A signal: stop popping and give running handlers the grace period.
	// Tasks still held after it are named; their leases lapse and a broker
	// (of this service's next run, or of another replica) decides them.
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	err = client.Shutdown(sctx)
	// Run's error names the same held tasks, if any: report it only when
	// Shutdown found nothing to say.
	if runErr := <-ran; err == nil {
		err = runErr
	}
	fmt.Fprintln(out, "stopped")
	return err
}
