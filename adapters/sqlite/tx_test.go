package sqlite_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// appDB opens the store's file as an application would, with write
// transactions that take the lock at BEGIN, and gives it a table of its own.
func appDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return db
}

func orders(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func enqueueArgs(id string) core.EnqueueParams {
	return core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: id, Payload: []byte("confirm " + id), MaxAttempts: 3}}
}

// A task enqueued in the application's transaction exists if and only if
// the transaction commits, and the sequence stays whole either way: no
// version is reissued, no later Pop trips on a gap.
func TestEnqueueTxCommitsAndRollsBackWithTheApplication(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := appDB(t, path)
	first := enqueue(t, s, "q", "before")

	// Rolled back: neither the order nor the task.
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO orders VALUES ('o1')`); err != nil {
		t.Fatal(err)
	}
	gone, err := s.EnqueueTx(ctx, tx, enqueueArgs("o1"))
	if err != nil {
		t.Fatal(err)
	}
	if gone.Task.Version != first.Version+1 {
		t.Fatalf("the task in the transaction has version %d after %d", gone.Task.Version, first.Version)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "o1"}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Get of the rolled-back task = %v, want ErrNotFound", err)
	}
	if n := orders(t, db); n != 0 {
		t.Fatalf("%d orders after the rollback", n)
	}
	after := enqueue(t, s, "q", "after")
	if after.Version != first.Version+1 {
		t.Fatalf("after a rollback the next version is %d, want %d: the sequence moved", after.Version, first.Version+1)
	}

	// Committed, with a refused item in between that leaves the
	// transaction usable: the order and the task.
	tx, err = db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO orders VALUES ('o2')`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueTx(ctx, tx, enqueueArgs("after")); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("EnqueueTx of a taken ID = %v, want ErrConflict", err)
	}
	kept, err := s.EnqueueTx(ctx, tx, enqueueArgs("o2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := orders(t, db); n != 1 {
		t.Fatalf("%d orders after the commit", n)
	}
	got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "o2"})
	if err != nil || got.Version != after.Version+1 || got.State != core.Ready || string(got.Payload) != "confirm o2" {
		t.Fatalf("Get of the committed task = %+v, %v (EnqueueTx said %+v)", got, err, kept.Task)
	}
	popped, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: 60e9, N: 3})
	if err != nil || len(popped.Tasks) != 3 {
		t.Fatalf("Pop = %d tasks, %v", len(popped.Tasks), err)
	}
	seen := map[uint64]bool{}
	for _, task := range popped.Tasks {
		if seen[task.ClaimToken] || task.ClaimToken <= got.Version {
			t.Fatalf("token %d reissued or not after every version (%+v)", task.ClaimToken, popped.Tasks)
		}
		seen[task.ClaimToken] = true
	}
}

// While the application's transaction holds the write lock, the store's own
// writes wait for it and then go on, each with a version of its own.
func TestEnqueueTxAndTheStoreShareTheSequence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := appDB(t, path)
	enqueue(t, s, "q", "seed")
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	in, err := s.EnqueueTx(ctx, tx, enqueueArgs("in-tx"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var out core.TaskResult
	var outErr error
	wg.Go(func() { out, outErr = s.Enqueue(ctx, enqueueArgs("outside")) })
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if outErr != nil {
		t.Fatal(outErr)
	}
	if out.Task.Version == in.Task.Version {
		t.Fatalf("the store's enqueue and the transaction's both got version %d", in.Task.Version)
	}
}

func TestEnqueueTxRefusesBadArguments(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := appDB(t, path)
	if _, err := s.EnqueueTx(ctx, nil, enqueueArgs("x")); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("nil tx: %v", err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, p := range []core.EnqueueParams{enqueueArgs(""), {Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "x", MaxAttempts: 0}}, {Queue: "", EnqueueArgs: model.EnqueueArgs{ID: "x", MaxAttempts: 1}}} {
		if _, err := s.EnqueueTx(ctx, tx, p); !errors.Is(err, core.ErrInvalidArgument) {
			t.Fatalf("EnqueueTx(%+v) = %v, want ErrInvalidArgument", p, err)
		}
	}
	res, err := s.EnqueueBatchTx(ctx, tx, core.EnqueueBatchParams{Queue: "q", Tasks: []model.EnqueueArgs{{ID: "a", MaxAttempts: 1}, {ID: "a", MaxAttempts: 1}}})
	if err != nil || res.Items[0].Err != nil || !errors.Is(res.Items[1].Err, core.ErrConflict) {
		t.Fatalf("EnqueueBatchTx = %+v, %v", res, err)
	}
}

// EnqueueTx checks unique keys inside the application's transaction: a key
// another task holds is a *DuplicateError that leaves tx able to go on, and
// a key taken by a transaction that rolls back is free afterwards.
func TestEnqueueTxUniqueKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := appDB(t, path)
	keyed := func(id, key string) core.EnqueueParams {
		p := enqueueArgs(id)
		p.UniqueKey = key
		return p
	}
	enqueue(t, s, "q", "holder", func(a *model.EnqueueArgs) { a.UniqueKey = "k" })

	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var d *core.DuplicateError
	if _, err := s.EnqueueTx(ctx, tx, keyed("dup", "k")); !errors.As(err, &d) || d.TaskID != "holder" || !errors.Is(err, core.ErrConflict) {
		t.Fatalf("EnqueueTx of a held key: %v, want a duplicate held by holder", err)
	}
	if _, err := s.EnqueueTx(ctx, tx, keyed("other", "k2")); err != nil {
		t.Fatalf("EnqueueTx after the refusal: %v", err)
	}
	if _, err := tx.Exec(`INSERT INTO orders (id) VALUES ('o1')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	// The rolled-back task took k2 only inside tx.
	enqueue(t, s, "q", "after", func(a *model.EnqueueArgs) { a.UniqueKey = "k2" })
	if _, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "other"}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Get of the rolled-back task: %v", err)
	}
	tx, err = db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.EnqueueBatchTx(ctx, tx, core.EnqueueBatchParams{Queue: "q", Tasks: []model.EnqueueArgs{
		keyed("x", "k3").EnqueueArgs, keyed("y", "k3").EnqueueArgs,
	}})
	if err != nil || res.Items[0].Err != nil || !errors.As(res.Items[1].Err, &d) || d.TaskID != "x" {
		t.Fatalf("EnqueueBatchTx: %+v, %v", res.Items, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "x"}); err != nil {
		t.Fatalf("Get of the committed task: %v", err)
	}
}
