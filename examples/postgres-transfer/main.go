// Command postgres-transfer moves money between two accounts as a task, and
// acknowledges the task in the same PostgreSQL transaction as the transfer
// (postgres.Store.AckTx): the transfer and the ack commit together or not at
// all, and a worker whose claim was superseded is refused inside its
// transaction, before anything commits.
//
//	go run ./examples/postgres-transfer -url postgres://postgres@127.0.0.1:5432/test
//
// It works in a schema of its own (-schema), which it drops at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

func main() {
	url := flag.String("url", "postgres://postgres@127.0.0.1:5432/test", "the database")
	schema := flag.String("schema", "transfer_example", "the schema to work in (dropped at the end)")
	flag.Parse()
	if err := run(context.Background(), *url, *schema, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

const queue = "transfers"

func run(ctx context.Context, url, schema string, out io.Writer) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The store shares the application's pool, so its transactions can hold
	// both the application's writes and the task's.
	store, err := postgres.New(ctx, pool, postgres.WithSchema(schema))
	if err != nil {
		return err
	}
	defer store.DropSchema(context.Background())
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+accounts+` (name text PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO `+accounts+` VALUES ('ada', 100), ('bob', 0)`); err != nil {
		return err
	}
	balances := func(when string) error {
		var ada, bob int64
		err := pool.QueryRow(ctx, `SELECT (SELECT balance FROM `+accounts+` WHERE name = 'ada'), (SELECT balance FROM `+accounts+` WHERE name = 'bob')`).Scan(&ada, &bob)
		fmt.Fprintf(out, "%s: ada %d, bob %d\n", when, ada, bob)
		return err
	}
	state := func(when string) error {
		t, err := store.Get(ctx, core.GetParams{Queue: queue, ID: "transfer-1"})
		fmt.Fprintf(out, "%s: task %s\n", when, t.State)
		return err
	}

	// transfer moves 30 from ada to bob and acknowledges the claim in one
	// transaction; commit false stands for a failure after the ack (the
	// process dies, a later write fails), which rolls everything back.
	transfer := func(c core.Claim, commit bool) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) // after Commit, does nothing
		if _, err := tx.Exec(ctx, `UPDATE `+accounts+` SET balance = balance - 30 WHERE name = 'ada'`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE `+accounts+` SET balance = balance + 30 WHERE name = 'bob'`); err != nil {
			return err
		}
		// Last, just before Commit: the ack checks the claim's token here,
		// inside the transaction.
		if _, err := store.AckTx(ctx, tx, core.AckParams{Claim: c, Result: []byte("moved 30")}); err != nil {
			return err // the deferred Rollback undoes the transfer
		}
		if !commit {
			return errors.New("crashed before commit")
		}
		return tx.Commit(ctx)
	}

	if _, err := store.Enqueue(ctx, core.EnqueueParams{Queue: queue, EnqueueArgs: model.EnqueueArgs{
		ID: "transfer-1", Payload: []byte(`{"from":"ada","to":"bob","amount":30}`), MaxAttempts: 3,
	}}); err != nil {
		return err
	}
	if err := balances("before"); err != nil {
		return err
	}

	// Worker A claims the task with a short lease and stalls past it; a
	// broker takes the lapsed claim and requeues the task; worker B claims it.
	a, err := store.Pop(ctx, core.PopParams{Queue: queue, Lease: 50 * time.Millisecond, N: 1})
	if err != nil || len(a.Tasks) != 1 {
		return fmt.Errorf("pop A: %v", err)
	}
	fmt.Fprintf(out, "worker A claims with token %d\n", a.Tasks[0].ClaimToken)
	time.Sleep(100 * time.Millisecond)
	reaped, err := store.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: queue, ClaimTTL: time.Minute})
	if err != nil || len(reaped.Claims) != 1 {
		return fmt.Errorf("claim expired: %v", err)
	}
	if _, err := store.Requeue(ctx, core.RequeueParams{ReapClaim: reaped.Claims[0]}); err != nil {
		return err
	}
	b, err := store.Pop(ctx, core.PopParams{Queue: queue, Lease: time.Minute, N: 1})
	if err != nil || len(b.Tasks) != 1 {
		return fmt.Errorf("pop B: %v", err)
	}
	fmt.Fprintf(out, "worker B claims with token %d\n", b.Tasks[0].ClaimToken)

	// A wakes up and tries its transfer: refused inside its transaction.
	err = transfer(a.Tasks[0].Claim(), true)
	fmt.Fprintf(out, "worker A's transfer: stale claim %v (%v)\n", errors.Is(err, core.ErrStaleClaim), firstLine(err))
	if err := balances("after A"); err != nil {
		return err
	}

	// B's first try acks, then fails before its commit: neither the
	// transfer nor the ack is kept.
	err = transfer(b.Tasks[0].Claim(), false)
	fmt.Fprintf(out, "worker B's first try: %v\n", err)
	if err := balances("after B's first try"); err != nil {
		return err
	}
	if err := state("after B's first try"); err != nil {
		return err
	}

	// B tries again and commits: the transfer and the ack, together.
	if err := transfer(b.Tasks[0].Claim(), true); err != nil {
		return err
	}
	if err := balances("after B's second try"); err != nil {
		return err
	}
	return state("after B's second try")
}

func firstLine(err error) string {
	if err == nil {
		return "no error"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
