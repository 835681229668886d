package sqlite_test

import (
	"context"
	"database/sql"
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

// An order and the task that confirms it commit together, or neither does.
func ExampleStore_EnqueueTx() {
	dir, err := os.MkdirTemp("", "leasehold-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	path := filepath.Join(dir, "shop.db")
	store, err := sqlite.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	// The application's own connection to the same file. _txlock=immediate
	// makes Begin take the write lock at once.
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER)`); err != nil {
		log.Fatal(err)
	}

	placeOrder := func(id string, total int, commit bool) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // after Commit, a no-op
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES (?, ?)`, id, total); err != nil {
			return err
		}
		_, err = store.EnqueueTx(ctx, tx, core.EnqueueParams{Queue: "confirmations", EnqueueArgs: model.EnqueueArgs{
			ID: "confirm-" + id, Payload: []byte(id), MaxAttempts: 5,
		}})
		if err != nil || !commit {
			return err // rolled back: no order, no task
		}
		return tx.Commit()
	}
	if err := placeOrder("o1", 42, true); err != nil {
		log.Fatal(err)
	}
	if err := placeOrder("o2", 7, false); err != nil {
		log.Fatal(err)
	}
	for _, id := range []string{"o1", "o2"} {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM orders WHERE id = ?`, id).Scan(&n); err != nil {
			log.Fatal(err)
		}
		_, err := store.Get(ctx, core.GetParams{Queue: "confirmations", ID: "confirm-" + id})
		fmt.Printf("%s: order rows %d, task found %v\n", id, n, err == nil)
	}
	// Output:
	// o1: order rows 1, task found true
	// o2: order rows 0, task found false
}
