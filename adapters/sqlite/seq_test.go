package sqlite_test

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// seqRow reads a queue's sequence row: seq and owner.
func seqRow(t *testing.T, db *sql.DB, queue string) (seq, owner int64) {
	t.Helper()
	if err := db.QueryRow(`SELECT seq, owner FROM queues WHERE name = ?1`, queue).Scan(&seq, &owner); err != nil {
		t.Fatalf("the row of queue %s: %v", queue, err)
	}
	return seq, owner
}

// A store that writes the file alone names itself the owner of the queue's
// row at its first draw and then draws without rewriting it; Close writes
// the exact sequence back with no owner.
func TestALoneStoreDrawsWithoutRewritingTheSequenceRow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lone.db")
	s, err := sqlite.Open(path, sqlite.WithSynchronous(sqlite.SyncNormal))
	if err != nil {
		t.Fatal(err)
	}
	db := rawDB(t, path)
	var last uint64
	for i := range 20 {
		last = enqueue(t, s, "q", fmt.Sprintf("t%02d", i)).Version
	}
	popped, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 5})
	if err != nil || len(popped.Tasks) != 5 || popped.Tasks[0].Version != last+1 || popped.Tasks[4].Version != last+5 {
		t.Fatalf("Pop = %+v, %v; want versions %d..%d", popped.Tasks, err, last+1, last+5)
	}
	if seq, owner := seqRow(t, db, "q"); seq != 1 || owner == 0 {
		t.Errorf("after 25 draws the row holds seq %d, owner %d; want the first draw's 1 and the store as owner", seq, owner)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if seq, owner := seqRow(t, db, "q"); seq != int64(last)+5 || owner != 0 {
		t.Errorf("after Close the row holds seq %d, owner %d; want %d, 0", seq, owner, last+5)
	}
	s2 := openStore(t, path)
	if got := enqueue(t, s2, "q", "next").Version; got != last+6 {
		t.Errorf("the next store's first version %d, want %d", got, last+6)
	}
}

// Stores that take turns on one file continue one sequence: a store that
// finds the row owned by another derives the sequence from the tasks (the
// owner never closed: as after a crash), and a deletion by either of the
// task that holds the last value drawn reissues nothing.
func TestStoresTakingTurnsContinueOneSequence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "turns.db")
	clock := core.NewFakeClock(spec.Epoch)
	a := openStore(t, path, sqlite.WithClock(clock), sqlite.WithSynchronous(sqlite.SyncNormal))
	b := openStore(t, path, sqlite.WithClock(clock), sqlite.WithSynchronous(sqlite.SyncNormal))
	var want uint64
	check := func(who string, got uint64) {
		t.Helper()
		want++
		if got != want {
			t.Fatalf("%s stamped version %d, want %d", who, got, want)
		}
	}
	for i := range 3 {
		check("a", enqueue(t, a, "q", fmt.Sprintf("a%d", i)).Version)
	}
	// b finds the row owned by a: the last value is on a's last task.
	check("b", enqueue(t, b, "q", "b0").Version)
	check("a", enqueue(t, a, "q", "a3").Version)
	// The task holding the last value drawn is removed, by its store and
	// by the other: the next value is still the one after it.
	for _, remover := range []core.Store{a, b} {
		last := enqueue(t, a, "q", fmt.Sprintf("last-%p", remover))
		check("a", last.Version)
		if _, err := remover.Remove(ctx, core.InspectParams{Queue: "q", ID: last.ID}); err != nil {
			t.Fatal(err)
		}
		check("b", enqueue(t, b, "q", fmt.Sprintf("after-%p", remover)).Version)
		check("a", enqueue(t, a, "q", fmt.Sprintf("after-a-%p", remover)).Version)
	}
	// Pruned the same way, after a second with no other writer (so the
	// store writing last owns the row again).
	popped, err := a.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	if err != nil || len(popped.Tasks) != 1 {
		t.Fatalf("Pop: %+v, %v", popped, err)
	}
	check("a", popped.Tasks[0].Version)
	time.Sleep(1100 * time.Millisecond)
	acked, err := a.Ack(ctx, core.AckParams{Claim: popped.Tasks[0].Claim()})
	if err != nil {
		t.Fatal(err)
	}
	check("a", acked.Task.Version)
	if _, owner := seqRow(t, rawDB(t, path), "q"); owner == 0 {
		t.Errorf("after a second alone the store did not own the row")
	}
	clock.Advance(time.Hour)
	pruned, err := b.Prune(ctx, core.PruneParams{Queue: "q", Before: clock.Now(), States: []core.State{core.Succeeded}})
	if err != nil || len(pruned.IDs) != 1 {
		t.Fatalf("Prune: %+v, %v", pruned, err)
	}
	check("b", enqueue(t, b, "q", "after-prune").Version)
	check("a", enqueue(t, a, "q", "after-prune-a").Version)
	// A rolled-back transaction of the caller's draws nothing.
	db := rawDB(t, path)
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.EnqueueTx(ctx, tx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "rolled-back", MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	check("a", enqueue(t, a, "q", "after-rollback").Version)
	tx, err = db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.EnqueueTx(ctx, tx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "committed", MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	check("EnqueueTx", res.Task.Version)
	check("a", enqueue(t, a, "q", "after-commit").Version)
	check("b", enqueue(t, b, "q", "after-commit-b").Version)
}

// A database of schema version 6 opens at version 7: its queue rows have no
// owner (their seq is exact), and the sequence goes on from seq.
func TestOpenMigratesASchemaVersion6DatabaseToTheSequenceOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v6.db")
	db := rawDB(t, path)
	execSQL(t, db, `PRAGMA journal_mode = WAL`)
	for _, m := range sqlite.Migrations[:6] {
		execSQL(t, db, m)
	}
	execSQL(t, db, `INSERT INTO queues (name, seq) VALUES ('q', 7)`)
	execSQL(t, db, `INSERT INTO tasks (queue, id, payload, priority, state, attempt, max_attempts, version, claim_token, enqueued_at)
		VALUES ('q', 'old', X'7031', 0, 2, 0, 3, 5, 0, ?)`, spec.Epoch.UnixMicro())
	execSQL(t, db, fmt.Sprintf(`PRAGMA application_id = %d; PRAGMA user_version = 6`, sqlite.ApplicationID))
	db.Close()

	s := openStore(t, path)
	var version int
	if err := rawDB(t, path).QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != sqlite.SchemaVersion {
		t.Fatalf("user_version = %d (%v), want %d", version, err, sqlite.SchemaVersion)
	}
	if seq, owner := seqRow(t, rawDB(t, path), "q"); seq != 7 || owner != 0 {
		t.Fatalf("migrated row: seq %d, owner %d; want 7, 0", seq, owner)
	}
	res, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	if err != nil || len(res.Tasks) != 1 || res.Tasks[0].Version != 8 {
		t.Fatalf("Pop after migrating: %+v, %v; want the old task at version 8", res.Tasks, err)
	}
}

// Stores that each own the row whenever they draw (no second of sharing
// after another's commit) and never close, as after crashes: each writer
// that finds the row owned by another derives the sequence from the tasks,
// so a deletion of the task holding the last value drawn must have written
// the sequence to the row first, whichever store deleted it. A fresh store
// (which remembers nothing) checks the sequence after each step.
func TestOwnedSequenceSurvivesDeletionsOfTheLastTask(t *testing.T) {
	path := filepath.Join(t.TempDir(), "owned.db")
	clock := core.NewFakeClock(spec.Epoch)
	open := func() *sqlite.Store {
		s := openStore(t, path, sqlite.WithClock(clock), sqlite.WithSynchronous(sqlite.SyncNormal))
		s.SetSharedFor(0)
		return s
	}
	a, b := open(), open()
	var want uint64
	check := func(who string, got uint64) {
		t.Helper()
		want++
		if got != want {
			t.Fatalf("%s stamped version %d, want %d", who, got, want)
		}
	}
	n := 0
	id := func() string { n++; return fmt.Sprintf("t%03d", n) }
	for _, remover := range []*sqlite.Store{a, b} {
		for range 3 {
			check("a", enqueue(t, a, "q", id()).Version)
		}
		last := enqueue(t, a, "q", id())
		check("a", last.Version)
		if _, err := remover.Remove(ctx, core.InspectParams{Queue: "q", ID: last.ID}); err != nil {
			t.Fatal(err)
		}
		check("a fresh store", enqueue(t, open(), "q", id()).Version)
		check("b", enqueue(t, b, "q", id()).Version)
	}
	for _, pruner := range []*sqlite.Store{a, b} {
		popped, err := a.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
		if err != nil || len(popped.Tasks) != 1 {
			t.Fatalf("Pop: %+v, %v", popped, err)
		}
		check("a", popped.Tasks[0].Version)
		acked, err := a.Ack(ctx, core.AckParams{Claim: popped.Tasks[0].Claim()})
		if err != nil {
			t.Fatal(err)
		}
		check("a", acked.Task.Version)
		clock.Advance(time.Second)
		if pruned, err := pruner.Prune(ctx, core.PruneParams{Queue: "q", Before: clock.Now(), States: []core.State{core.Succeeded}}); err != nil || len(pruned.IDs) != 1 {
			t.Fatalf("Prune: %+v, %v", pruned, err)
		}
		check("a fresh store", enqueue(t, open(), "q", id()).Version)
		check("a", enqueue(t, a, "q", id()).Version)
	}
}
