package sqlite_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
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
				"AckBatch with a pop": func() error {
					_, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q", Acks: []core.AckItem{{Claim: claim}}, Pop: core.AckPop{Lease: time.Minute, N: 2}})
					return err
				},
				"AckBatch refused with a pop": func() error {
					stale := claim
					stale.Token++
					_, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q", Acks: []core.AckItem{{Claim: stale}}, Pop: core.AckPop{Lease: time.Minute, N: 1}})
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
					// The row as the store left it: with the store as its
					// owner, seq may be behind the last value drawn.
					var seq, owner int64
					if err := db.QueryRow(`SELECT seq, owner FROM queues WHERE name = 'q'`).Scan(&seq, &owner); err != nil {
						t.Fatal(err)
					}
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
					execSQL(t, db, `INSERT OR REPLACE INTO queues (name, seq, owner) VALUES ('q', ?1, ?2)`, seq, owner)
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

// TestDamagedTimesAreSetAside gives a task whose time in its order index
// is not a time (text, a blob, NULL): a Running task's deadline, a
// Scheduled task's run-after time. The scans compare it with the clock and
// would skip it forever, leaving the task stuck: instead the scan sets it
// aside as Quarantined in the same step and goes on; the reads before that
// write nothing (Get shows it quarantined, List passes over it).
func TestDamagedTimesAreSetAside(t *testing.T) {
	clock := core.NewFakeClock(spec.Epoch)
	path := filepath.Join(t.TempDir(), "deadline.db")
	s := openStore(t, path, sqlite.WithClock(clock), sqlite.WithSynchronous(sqlite.SyncNormal))
	db := rawDB(t, path)
	enqueue(t, s, "q", "a")
	enqueue(t, s, "q", "b")
	enqueue(t, s, "q", "later", func(a *model.EnqueueArgs) { a.RunAfter = spec.Epoch.Add(time.Second) })
	damaged := popOne(t, s, "q", time.Second)
	popOne(t, s, "q", time.Hour) // sound, and not expired
	clock.Advance(2 * time.Second)

	scans := []struct {
		id, col, state string
		restore        int64
		scan           func() error
	}{
		{damaged.ID, "deadline", "3", damaged.Deadline.UnixMicro(), func() error {
			res, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "q", ClaimTTL: time.Minute})
			if err == nil && len(res.Claims) != 0 {
				return fmt.Errorf("claims %+v", res.Claims)
			}
			return err
		}},
		{damaged.ID, "deadline", "3", damaged.Deadline.UnixMicro(), func() error {
			res, err := s.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: "q"})
			if err == nil && len(res.Tasks) != 0 {
				return fmt.Errorf("recovered %+v", res.Tasks)
			}
			return err
		}},
		{"later", "run_after", "1", spec.Epoch.Add(time.Second).UnixMicro(), func() error {
			res, err := s.Promote(ctx, core.PromoteParams{Queue: "q"})
			if err == nil && len(res.IDs) != 0 {
				return fmt.Errorf("promoted %v", res.IDs)
			}
			return err
		}},
	}
	for _, sc := range scans {
		for _, damage := range []struct{ name, value string }{
			{"text", `'soon'`}, {"a blob", `X'00'`}, {"NULL", `NULL`},
		} {
			t.Run(sc.col+" "+damage.name, func(t *testing.T) {
				execSQL(t, db, `UPDATE tasks SET `+sc.col+` = `+damage.value+` WHERE id = ?1`, sc.id)
				before := dump(t, db)
				if got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: sc.id}); err != nil || got.State != core.Quarantined {
					t.Errorf("Get: %+v, %v; want it quarantined", got, err)
				}
				if after := dump(t, db); after != before {
					t.Fatalf("Get changed the database:\nbefore %s\nafter  %s", before, after)
				}
				if err := sc.scan(); err != nil {
					t.Errorf("scan past a %s that is %s: %v", sc.col, damage.name, err)
				}
				got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: sc.id})
				if err != nil || got.State != core.Quarantined || !strings.Contains(got.Quarantine, "not a time") {
					t.Errorf("Get after the scan: %+v, %v; want it quarantined with its reason", got, err)
				}
				res, err := s.List(ctx, core.ListParams{Queue: "q", State: core.Quarantined, Limit: 10})
				if err != nil || len(res.Tasks) != 1 || res.Tasks[0].ID != sc.id {
					t.Errorf("List(quarantined): %+v, %v", res.Tasks, err)
				}
				if c, err := s.Counts(ctx, core.CountsParams{Queue: "q"}); err != nil || c.Quarantined != 1 {
					t.Errorf("Counts: %+v, %v", c, err)
				}
				// Repaired by hand, the task is found again.
				execSQL(t, db, `UPDATE tasks SET `+sc.col+` = ?1, state = `+sc.state+`, quarantine = NULL WHERE id = ?2`, sc.restore, sc.id)
			})
		}
	}
	// Repaired, the lapsed lease is found again.
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

// An AckBatch reads the queue's sequence through its first ack's
// statement. When the sequence row is gone and the claim's token is 1 (the
// first value, so the task looks sound stamped with 1 again), the batch
// still finds the sequence missing: ErrCorrupt, nothing changed.
func TestAckBatchFindsTheSequenceMissingBehindTheFirstClaim(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seq1.db")
	s := openStore(t, path, sqlite.WithSynchronous(sqlite.SyncNormal))
	db := rawDB(t, path)
	execSQL(t, db, `INSERT INTO queues (name, seq) VALUES ('q', 0)`)
	execSQL(t, db, `INSERT INTO tasks (queue, id, priority, state, attempt, max_attempts, version, claim_token, enqueued_at)
		VALUES ('q', 'a', 0, 2, 0, 3, 0, 0, 1)`)
	popped, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	if err != nil || len(popped.Tasks) != 1 || popped.Tasks[0].ClaimToken != 1 {
		t.Fatalf("Pop = %+v, %v; want the task claimed with token 1", popped.Tasks, err)
	}
	execSQL(t, db, `DELETE FROM queues`)
	before := dump(t, db)
	for _, n := range []int{0, 1} {
		_, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q", Acks: []core.AckItem{{Claim: popped.Tasks[0].Claim()}}, Pop: core.AckPop{Lease: time.Minute, N: n}})
		if !errors.Is(err, core.ErrCorrupt) {
			t.Errorf("AckBatch (pop %d) without the sequence row: %v, want ErrCorrupt", n, err)
		}
		if after := dump(t, db); after != before {
			t.Errorf("AckBatch (pop %d) changed the database:\n%s\nwant\n%s", n, after, before)
		}
	}
}
