package sqlite_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// TestDamagedSequenceIsCorruptAndChangesNothing damages the queue's sequence
// row (a value that is not an integer, or no row at all while the queue has
// tasks): every operation that would draw a version fails with ErrCorrupt
// and leaves the database as it was, instead of restarting the versions at
// 1 and handing out a token that a live claim already holds.
func TestDamagedSequenceIsCorruptAndChangesNothing(t *testing.T) {
	for _, mode := range popModes {
		t.Run(mode.String(), func(t *testing.T) {
			clock := core.NewFakeClock(spec.Epoch)
			path := filepath.Join(t.TempDir(), "seq.db")
			s := openStore(t, path, sqlite.WithClock(clock), sqlite.WithPopMode(mode), sqlite.WithSynchronous(sqlite.SyncNormal))
			db := rawDB(t, path)
			enqueue(t, s, "q", "running")
			enqueue(t, s, "q", "ready")
			enqueue(t, s, "q", "later", func(a *model.EnqueueArgs) { a.RunAfter = spec.Epoch.Add(time.Second) })
			running := popOne(t, s, "q", time.Second)
			claim := running.Claim()
			clock.Advance(2 * time.Second)

			ops := map[string]func() error{
				"Enqueue": func() error {
					_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "new", MaxAttempts: 1}})
					return err
				},
				"EnqueueBatch": func() error {
					_, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "q", Tasks: []model.EnqueueArgs{{ID: "new", MaxAttempts: 1}}})
					return err
				},
				"Pop": func() error {
					_, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
					return err
				},
				"Promote": func() error { _, err := s.Promote(ctx, core.PromoteParams{Queue: "q"}); return err },
				"Extend":  func() error { _, err := s.Extend(ctx, core.ExtendParams{Claim: claim, Lease: time.Minute}); return err },
				"Ack":     func() error { _, err := s.Ack(ctx, core.AckParams{Claim: claim}); return err },
				"AckBatch": func() error {
					_, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q", Acks: []core.AckItem{{Claim: claim}}})
					return err
				},
				"Retry": func() error { _, err := s.Retry(ctx, core.RetryParams{Claim: claim}); return err },
				"ClaimExpired": func() error {
					_, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "q", ClaimTTL: time.Minute})
					return err
				},
				"RecoverExpired": func() error { _, err := s.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: "q"}); return err },
				"InspectRequeue": func() error {
					_, err := s.InspectRequeue(ctx, core.InspectParams{Queue: "q", ID: "ready"})
					return err
				},
			}
			for _, damage := range []struct{ name, sql string }{
				{"a sequence that is text", `UPDATE queues SET seq = 'x'`},
				{"a sequence that is a real", `UPDATE queues SET seq = 4.5`},
				{"no sequence row", `DELETE FROM queues`},
			} {
				t.Run(damage.name, func(t *testing.T) {
					saved := dump(t, db)
					execSQL(t, db, `SAVEPOINT damage`)
					execSQL(t, db, damage.sql)
					execSQL(t, db, `RELEASE damage`)
					before := dump(t, db)
					for name, op := range ops {
						if err := op(); !errors.Is(err, core.ErrCorrupt) {
							t.Errorf("%s with %s: %v, want ErrCorrupt", name, damage.name, err)
						}
						if after := dump(t, db); after != before {
							t.Fatalf("%s with %s changed the database:\nbefore %s\nafter  %s", name, damage.name, before, after)
						}
					}
					execSQL(t, db, `INSERT OR REPLACE INTO queues (name, seq) VALUES ('q', ?1)`, running.Version)
					if after := dump(t, db); after != saved {
						t.Fatalf("repair failed:\n%s\nwant %s", after, saved)
					}
				})
			}
			// Repaired, the sequence goes on from where it was.
			res, err := s.Ack(ctx, core.AckParams{Claim: claim})
			if err != nil || res.Task.Version != running.Version+1 {
				t.Errorf("Ack after the repair: version %d, %v; want %d", res.Task.Version, err, running.Version+1)
			}
		})
	}
}

// TestDamagedDeadlinesAreCorrupt gives a Running task whose lease has
// lapsed a deadline that is not a time (text, a blob, NULL). The expiry
// scans compare it with the clock and would skip it forever, leaving the
// task claimed by nobody: ClaimExpired and RecoverExpired fail with
// ErrCorrupt instead, Get and List do not return the row as valid, and
// nothing changes.
func TestDamagedDeadlinesAreCorrupt(t *testing.T) {
	clock := core.NewFakeClock(spec.Epoch)
	path := filepath.Join(t.TempDir(), "deadline.db")
	s := openStore(t, path, sqlite.WithClock(clock), sqlite.WithSynchronous(sqlite.SyncNormal))
	db := rawDB(t, path)
	enqueue(t, s, "q", "a")
	enqueue(t, s, "q", "b")
	damaged := popOne(t, s, "q", time.Second)
	popOne(t, s, "q", time.Hour) // sound, and not expired
	clock.Advance(2 * time.Second)

	ops := map[string]func() error{
		"ClaimExpired": func() error {
			_, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "q", ClaimTTL: time.Minute})
			return err
		},
		"RecoverExpired": func() error { _, err := s.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: "q"}); return err },
		"Get":            func() error { _, err := s.Get(ctx, core.GetParams{Queue: "q", ID: damaged.ID}); return err },
		"List": func() error {
			_, err := s.List(ctx, core.ListParams{Queue: "q", State: core.Running, Limit: 10})
			return err
		},
	}
	for _, damage := range []struct{ name, value string }{
		{"text", `'soon'`}, {"a blob", `X'00'`}, {"NULL", `NULL`},
	} {
		t.Run(damage.name, func(t *testing.T) {
			execSQL(t, db, `UPDATE tasks SET deadline = `+damage.value+` WHERE id = ?1`, damaged.ID)
			before := dump(t, db)
			for name, op := range ops {
				if err := op(); !errors.Is(err, core.ErrCorrupt) {
					t.Errorf("%s with a deadline that is %s: %v, want ErrCorrupt", name, damage.name, err)
				}
				if after := dump(t, db); after != before {
					t.Fatalf("%s changed the database:\nbefore %s\nafter  %s", name, before, after)
				}
			}
		})
	}
	// Repaired, the lapsed lease is found again.
	execSQL(t, db, `UPDATE tasks SET deadline = ?1 WHERE id = ?2`, damaged.Deadline.UnixMicro(), damaged.ID)
	res, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "q", ClaimTTL: time.Minute})
	if err != nil || len(res.Claims) != 1 || res.Claims[0].TaskID != damaged.ID {
		t.Errorf("ClaimExpired after the repair: %+v, %v; want the claim of %s", res.Claims, err, damaged.ID)
	}
}

// TestCheckpointPagesOption checks that the writer checkpoints the log at
// the configured length, and that a length below 1 is refused.
func TestCheckpointPagesOption(t *testing.T) {
	if _, err := sqlite.Open(filepath.Join(t.TempDir(), "x.db"), sqlite.WithCheckpointPages(0)); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("WithCheckpointPages(0): %v, want ErrInvalidArgument", err)
	}
	for _, pages := range []int{10, sqlite.DefaultCheckpointPages} {
		path := filepath.Join(t.TempDir(), "ckpt.db")
		s := openStore(t, path, sqlite.WithCheckpointPages(pages), sqlite.WithSynchronous(sqlite.SyncNormal))
		for i := range 40 {
			enqueue(t, s, "q", fmt.Sprintf("t%02d", i))
		}
		// PRAGMA wal_checkpoint(PASSIVE) reports the frames in the log: a
		// checkpoint at 10 pages has restarted it since, the default has not.
		var busy, frames, done int
		if err := rawDB(t, path).QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &done); err != nil {
			t.Fatal(err)
		}
		if short := frames < 40; short != (pages == 10) {
			t.Errorf("checkpoint at %d pages: %d frames in the log after 40 enqueues", pages, frames)
		}
	}
}
