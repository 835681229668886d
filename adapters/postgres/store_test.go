package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

func enqueue(t *testing.T, s core.Store, queue, id string) core.Task {
	t.Helper()
	res, err := s.Enqueue(context.Background(), core.EnqueueParams{Queue: queue, EnqueueArgs: model.EnqueueArgs{ID: id, MaxAttempts: 3}})
	if err != nil {
		t.Fatalf("Enqueue(%s): %v", id, err)
	}
	return res.Task
}

// TestAnIdleWorkerClaimsANewTaskBeforeItsPoll: a Worker that found its
// queue empty waits for its next poll (an hour here); the NOTIFY of an
// Enqueue wakes it, and it handles the task long before.
func TestAnIdleWorkerClaimsANewTaskBeforeItsPoll(t *testing.T) {
	s := newStore(t)
	const poll = time.Hour
	handled := make(chan struct{}, 1)
	w, err := core.NewWorker(s, "wake", func(ctx context.Context, c core.Claim, task core.Task) ([]byte, error) {
		handled <- struct{}{}
		return nil, nil
	}, core.WithPollInterval(poll, poll))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// Let the worker find the queue empty and start waiting on its poll
	// (its first Pop comes at once) and its listener connect.
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	enqueue(t, s, "wake", "t1")
	select {
	case <-handled:
		t.Logf("claimed %v after the enqueue", time.Since(start))
	case <-time.After(30 * time.Second):
		t.Fatalf("the task was not handled within 30s of its enqueue (poll interval %v): no wake-up", poll)
	}
}

// TestWithoutNotificationsAWorkerWaitsForItsPoll is the control: the same
// worker on a store that sends no notifications does not handle the task
// before its poll.
func TestWithoutNotificationsAWorkerWaitsForItsPoll(t *testing.T) {
	s := newStore(t, postgres.WithoutNotifications())
	var n atomic.Int64
	w, err := core.NewWorker(s, "wake", func(ctx context.Context, c core.Claim, task core.Task) ([]byte, error) {
		n.Add(1)
		return nil, nil
	}, core.WithPollInterval(time.Hour, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	time.Sleep(500 * time.Millisecond)
	enqueue(t, s, "wake", "t1")
	time.Sleep(500 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if n.Load() != 0 {
		t.Fatalf("handled %d tasks without a wake-up or a poll", n.Load())
	}
}

// TestLeasesAreJudgedByTheDatabaseClock: without WithClock, Now is the
// server's clock, and a lease lapses by it.
func TestLeasesAreJudgedByTheDatabaseClock(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	var dbNow time.Time
	if err := s.Pool().QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	res, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Now.Sub(dbNow); d < 0 || d > 10*time.Second {
		t.Fatalf("Now %v is not the database's clock (%v)", res.Now, dbNow)
	}
	pop, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: 100 * time.Millisecond, N: 1})
	if err != nil || len(pop.Tasks) != 1 {
		t.Fatalf("Pop: %v %v", pop, err)
	}
	if got, _ := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "q", ClaimTTL: time.Minute}); len(got.Claims) != 0 {
		t.Fatalf("a lease of 100ms lapsed at once: %v", got.Claims)
	}
	time.Sleep(150 * time.Millisecond)
	got, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "q", ClaimTTL: time.Minute})
	if err != nil || len(got.Claims) != 1 {
		t.Fatalf("ClaimExpired after the lease: %v %v", got.Claims, err)
	}
	if !got.Now.After(pop.Tasks[0].Deadline) && !got.Now.Equal(pop.Tasks[0].Deadline) {
		t.Fatalf("claimed at %v, before the deadline %v", got.Now, pop.Tasks[0].Deadline)
	}
}

// TestSchemasAreIsolatedAndVersioned: two stores on two schemas of one
// database do not see each other's tasks; the schema records its version;
// a schema from a newer build is refused.
func TestSchemasAreIsolatedAndVersioned(t *testing.T) {
	ctx := context.Background()
	a, b := newStore(t), newStore(t)
	enqueue(t, a, "q", "only-in-a")
	if _, err := b.Get(ctx, core.GetParams{Queue: "q", ID: "only-in-a"}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("b sees a's task: %v", err)
	}
	v, err := postgres.CurrentSchemaVersion(ctx, a.Pool(), a.Schema())
	if err != nil || v != postgres.SchemaVersion {
		t.Fatalf("schema version %d, %v; want %d", v, err, postgres.SchemaVersion)
	}
	// Opening again migrates nothing and keeps the tasks.
	again, err := postgres.New(ctx, a.Pool(), postgres.WithSchema(a.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Get(ctx, core.GetParams{Queue: "q", ID: "only-in-a"}); err != nil {
		t.Fatalf("reopened store lost the task: %v", err)
	}
	again.Close()
	// A newer build's schema.
	schema := pgtest.Schema()
	c, err := postgres.New(ctx, a.Pool(), postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer pgtest.Drop(t, pgtest.URL(t), schema)
	c.Close()
	if _, err := a.Pool().Exec(ctx, `INSERT INTO `+pgx.Identifier{schema}.Sanitize()+`.schema_version (version) VALUES ($1)`, postgres.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.New(ctx, a.Pool(), postgres.WithSchema(schema)); err == nil {
		t.Fatal("a schema from a newer build was accepted")
	}
}

// TestDamagedRowsAreSetAside: rows changed behind the store's back are
// damaged records: Get shows them quarantined and writes nothing, a
// decision on one is ErrCorrupt (a row whose state is none holds no claim:
// ErrStaleClaim), the scan that meets one sets it aside with the reason
// and draws no version, and the operator removes it. A lost sequence row
// is the queue's damage: ErrCorrupt.
func TestDamagedRowsAreSetAside(t *testing.T) {
	ctx := context.Background()
	damage := map[string]string{
		"unknown state":           `UPDATE %s.tasks SET state = 9`,
		"errors not an array":     `UPDATE %s.tasks SET errors = '{"a": 1}'`,
		"errors JSON null":        `UPDATE %s.tasks SET errors = 'null'`,
		"errors holding null":     `UPDATE %s.tasks SET errors = '[null]'`,
		"running without a claim": `UPDATE %s.tasks SET claim_token = 0`,
		"priority out of range":   `UPDATE %s.tasks SET priority = 99999`,
		"negative timeout":        `UPDATE %s.tasks SET timeout_ns = -1`,
	}
	for name, q := range damage {
		t.Run(name, func(t *testing.T) {
			clock := core.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			s := newStore(t, postgres.WithClock(clock))
			enqueue(t, s, "q", "a")
			pop, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
			if err != nil || len(pop.Tasks) != 1 {
				t.Fatalf("Pop: %v", err)
			}
			if _, err := s.Pool().Exec(ctx, sprintf(q, pgx.Identifier{s.Schema()}.Sanitize())); err != nil {
				t.Fatal(err)
			}
			seq := func() int64 {
				var seq int64
				if err := s.Pool().QueryRow(ctx, `SELECT seq FROM `+pgx.Identifier{s.Schema()}.Sanitize()+`.queues`).Scan(&seq); err != nil {
					t.Fatal(err)
				}
				return seq
			}
			if got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "a"}); err != nil || got.State != core.Quarantined || got.Quarantine == "" {
				t.Errorf("Get: %+v, %v; want it quarantined with the reason", got, err)
			}
			// The damage is reported first, whatever the token (a damaged
			// token included), by every decision; a row whose state is
			// none is no task's, so no claim holds it.
			want := core.ErrCorrupt
			if name == "unknown state" {
				want = core.ErrStaleClaim
			}
			c := pop.Tasks[0].Claim()
			decisions := map[string]func() (core.TaskResult, error){
				"Extend": func() (core.TaskResult, error) {
					return s.Extend(ctx, core.ExtendParams{Claim: c, Lease: time.Minute})
				},
				"Ack":   func() (core.TaskResult, error) { return s.Ack(ctx, core.AckParams{Claim: c}) },
				"Fail":  func() (core.TaskResult, error) { return s.Fail(ctx, core.FailParams{Claim: c, Message: "m"}) },
				"Retry": func() (core.TaskResult, error) { return s.Retry(ctx, core.RetryParams{Claim: c, Message: "m"}) },
			}
			for op, do := range decisions {
				if _, err := do(); !errors.Is(err, want) {
					t.Errorf("%s: %v, want %v", op, err, want)
				}
			}
			if n := seq(); n != 2 {
				t.Errorf("sequence %d after refused operations, want 2", n)
			}
			clock.Advance(2 * time.Minute)
			if res, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "q", ClaimTTL: time.Minute}); err != nil || len(res.Claims) != 0 {
				t.Errorf("ClaimExpired: %+v, %v; want nothing claimed", res.Claims, err)
			}
			if n := seq(); n != 2 {
				t.Errorf("sequence %d after a record was set aside, want 2", n)
			}
			list, err := s.List(ctx, core.ListParams{Queue: "q", State: core.Quarantined, Limit: 10})
			if err != nil || len(list.Tasks) != 1 || list.Tasks[0].ID != "a" || list.Tasks[0].Quarantine == "" {
				t.Errorf("List(quarantined): %+v, %v", list.Tasks, err)
			}
			if c, err := s.Counts(ctx, core.CountsParams{Queue: "q"}); err != nil || c != (core.Counts{Quarantined: 1}) {
				t.Errorf("Counts: %+v, %v; want 1 quarantined", c, err)
			}
			if _, err := s.Remove(ctx, core.InspectParams{Queue: "q", ID: "a", Expect: 2}); !errors.Is(err, core.ErrConflict) {
				t.Errorf("Remove with a version: %v, want ErrConflict", err)
			}
			if r, err := s.Remove(ctx, core.InspectParams{Queue: "q", ID: "a"}); err != nil || r.Task.State != core.Quarantined {
				t.Errorf("Remove: %+v, %v; want the quarantined record", r.Task, err)
			}
			if _, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "a"}); !errors.Is(err, core.ErrNotFound) {
				t.Errorf("Get after Remove: %v, want ErrNotFound", err)
			}
		})
	}
	// Each case twice: damaged right after the queue's first write, and
	// after a second, once the store has seen the queue's sequence past 0
	// and no longer asks for the row it knows (postgres.KnowsQueueRow).
	// Either way the store answers as a new store would.
	for _, known := range []bool{false, true} {
		prepare := func(t *testing.T) *postgres.Store {
			s := newStore(t)
			enqueue(t, s, "q", "a")
			if known {
				// A write that changes nothing, under the queue's lock.
				if r, err := s.Promote(ctx, core.PromoteParams{Queue: "q"}); err != nil || len(r.IDs) != 0 {
					t.Fatalf("Promote: %+v, %v", r, err)
				}
			}
			if got := postgres.KnowsQueueRow(s, "q"); got != known {
				t.Fatalf("the store knows the queue's row: %v, want %v", got, known)
			}
			return s
		}
		name := func(n string) string {
			if known {
				return n + ", row known"
			}
			return n
		}
		t.Run(name("sequence row lost"), func(t *testing.T) {
			s := prepare(t)
			if _, err := s.Pool().Exec(ctx, `DELETE FROM `+pgx.Identifier{s.Schema()}.Sanitize()+`.queues`); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "b", MaxAttempts: 1}}); !errors.Is(err, core.ErrCorrupt) {
				t.Errorf("Enqueue after the sequence was lost: %v, want ErrCorrupt", err)
			}
			if _, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1}); !errors.Is(err, core.ErrCorrupt) {
				t.Errorf("Pop after the sequence was lost: %v, want ErrCorrupt", err)
			}
			// The refused Enqueue, sent with its COMMIT, wrote nothing: no
			// task, and no new sequence row.
			var tasks, queues int
			schema := pgx.Identifier{s.Schema()}.Sanitize()
			if err := s.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM `+schema+`.tasks), (SELECT count(*) FROM `+schema+`.queues)`).Scan(&tasks, &queues); err != nil {
				t.Fatal(err)
			}
			if tasks != 1 || queues != 0 {
				t.Errorf("after the refused Enqueue: %d tasks and %d sequence rows, want 1 and 0", tasks, queues)
			}
		})
		t.Run(name("sequence reset"), func(t *testing.T) {
			s := prepare(t)
			schema := pgx.Identifier{s.Schema()}.Sanitize()
			if _, err := s.Pool().Exec(ctx, `UPDATE `+schema+`.queues SET seq = 0`); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "b", MaxAttempts: 1}}); !errors.Is(err, core.ErrCorrupt) {
				t.Errorf("Enqueue after the sequence was reset: %v, want ErrCorrupt", err)
			}
			if _, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1}); !errors.Is(err, core.ErrCorrupt) {
				t.Errorf("Pop after the sequence was reset: %v, want ErrCorrupt", err)
			}
			if tasks, seq := tasksAndSequence(t, s); tasks != 1 || seq != 0 {
				t.Errorf("after the refused Enqueue: %d tasks, sequence at %d; want 1 and 0 (a version 1 issued again)", tasks, seq)
			}
		})
		// A queue whose row and tasks are all gone is a new queue: its row
		// is made again and its versions start at 1, for an Enqueue sent
		// with its COMMIT and for a Pop.
		for _, first := range []string{"Enqueue", "Pop"} {
			t.Run(name("row and tasks gone, then "+first), func(t *testing.T) {
				s := prepare(t)
				schema := pgx.Identifier{s.Schema()}.Sanitize()
				if _, err := s.Pool().Exec(ctx, `DELETE FROM `+schema+`.tasks; DELETE FROM `+schema+`.queues`); err != nil {
					t.Fatal(err)
				}
				if first == "Pop" {
					if r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1}); err != nil || len(r.Tasks) != 0 {
						t.Fatalf("Pop of the empty queue: %+v, %v", r.Tasks, err)
					}
				}
				if got := enqueue(t, s, "q", "b"); got.Version != 1 {
					t.Errorf("Enqueue: version %d, want 1", got.Version)
				}
				r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
				if err != nil || len(r.Tasks) != 1 || r.Tasks[0].ID != "b" || r.Tasks[0].ClaimToken != 2 {
					t.Fatalf("Pop: %+v, %v; want b claimed at token 2", r.Tasks, err)
				}
				if tasks, seq := tasksAndSequence(t, s); tasks != 1 || seq != 2 {
					t.Errorf("%d tasks, sequence at %d; want 1 and 2", tasks, seq)
				}
			})
		}
	}
}

// tasksAndSequence returns the number of tasks of the store's schema and
// the sequence of its one queue's row.
func tasksAndSequence(t *testing.T, s *postgres.Store) (tasks int, seq int64) {
	t.Helper()
	schema := pgx.Identifier{s.Schema()}.Sanitize()
	if err := s.Pool().QueryRow(context.Background(), `SELECT (SELECT count(*) FROM `+schema+`.tasks), (SELECT seq FROM `+schema+`.queues)`).Scan(&tasks, &seq); err != nil {
		t.Fatal(err)
	}
	return tasks, seq
}

// A schema of version 1, from before the attempt timeout, is migrated by
// New: its tasks have no timeout and keep every other field, they run as
// before, and new tasks store theirs.
func TestNewMigratesAVersion1SchemaToTheAttemptTimeout(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema()
	defer pgtest.Drop(t, pgtest.URL(t), schema)
	quoted := pgx.Identifier{schema}.Sanitize()
	for _, q := range []string{
		`CREATE SCHEMA ` + quoted,
		`CREATE TABLE ` + quoted + `.schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
		strings.ReplaceAll(postgres.Migrations[0], "{s}", quoted),
		`INSERT INTO ` + quoted + `.schema_version (version) VALUES (1)`,
		`INSERT INTO ` + quoted + `.queues (name, seq) VALUES ('q', 1)`,
		`INSERT INTO ` + quoted + `.tasks (queue, id, payload, priority, state, attempt, max_attempts, version, claim_token, enqueued_at)
		 VALUES ('q', 'old', 'p1', 4, 2, 0, 3, 1, 0, 1000)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s, err := postgres.New(ctx, pool, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, err := postgres.CurrentSchemaVersion(ctx, pool, schema); err != nil || v != postgres.SchemaVersion {
		t.Fatalf("schema version %d, %v; want %d", v, err, postgres.SchemaVersion)
	}
	want := core.Task{Queue: "q", ID: "old", Payload: []byte("p1"), Priority: 4, State: core.Ready, MaxAttempts: 3,
		Version: 1, EnqueuedAt: time.UnixMicro(1000).UTC()}
	if got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "old"}); err != nil || !got.Equal(want) {
		t.Fatalf("after migrating, Get = %+v, %v; want %+v", got, err, want)
	}
	res, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "new", MaxAttempts: 1, Timeout: 90 * time.Second}})
	if err != nil || res.Task.Version != 2 || res.Task.Timeout != 90*time.Second {
		t.Fatalf("Enqueue after migrating = %+v, %v", res.Task, err)
	}
	popped, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 2})
	if err != nil || len(popped.Tasks) != 2 || popped.Tasks[0].ID != "old" || popped.Tasks[0].Timeout != 0 || popped.Tasks[1].Timeout != 90*time.Second {
		t.Fatalf("Pop after migrating = %+v, %v", popped.Tasks, err)
	}
	if _, err := s.Ack(ctx, core.AckParams{Claim: popped.Tasks[0].Claim()}); err != nil {
		t.Fatalf("Ack of the migrated task: %v", err)
	}
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func TestQueuesNamesTheQueuesOfTheSchema(t *testing.T) {
	ctx := context.Background()
	a, b := newStore(t), newStore(t)
	enqueue(t, a, "b.q", "1")
	enqueue(t, a, "a:q", "2")
	enqueue(t, a, "b.q", "3")
	enqueue(t, b, "elsewhere", "4")
	// A refused Enqueue adds no queue.
	if _, err := a.Enqueue(ctx, core.EnqueueParams{Queue: "c", EnqueueArgs: model.EnqueueArgs{ID: "x"}}); err == nil {
		t.Fatal("an Enqueue with MaxAttempts 0 was accepted")
	}
	got, err := a.Queues(ctx)
	if err != nil || fmt.Sprint(got) != "[a:q b.q]" {
		t.Errorf("Queues = %q, %v; want [a:q b.q]", got, err)
	}
}

// A schema of version 4, from before unique keys, is migrated by New: its
// tasks have no key and hold none, and new tasks take, hold and release
// theirs (the holder's removal deletes its key entry).
func TestNewMigratesAVersion4SchemaToUniqueKeys(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema()
	defer pgtest.Drop(t, pgtest.URL(t), schema)
	quoted := pgx.Identifier{schema}.Sanitize()
	stmts := []string{
		`CREATE SCHEMA ` + quoted,
		`CREATE TABLE ` + quoted + `.schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
	}
	for v, m := range postgres.Migrations[:4] {
		stmts = append(stmts, strings.ReplaceAll(m, "{s}", quoted), sprintf(`INSERT INTO %s.schema_version (version) VALUES (%d)`, quoted, v+1))
	}
	stmts = append(stmts, `INSERT INTO `+quoted+`.queues (name, seq) VALUES ('q', 1)`,
		`INSERT INTO `+quoted+`.tasks (queue, id, payload, priority, state, attempt, max_attempts, version, claim_token, enqueued_at)
		 VALUES ('q', 'old', 'p1', 0, 2, 0, 3, 1, 0, 1000)`)
	for _, q := range stmts {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s, err := postgres.New(ctx, pool, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, err := postgres.CurrentSchemaVersion(ctx, pool, schema); err != nil || v != postgres.SchemaVersion {
		t.Fatalf("schema version %d, %v; want %d", v, err, postgres.SchemaVersion)
	}
	if got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "old"}); err != nil || got.UniqueKey != "" || !got.UniqueUntil.IsZero() {
		t.Fatalf("after migrating, Get = %+v, %v", got, err)
	}
	enq := func(id string) error {
		_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: id, MaxAttempts: 1, UniqueKey: "k"}})
		return err
	}
	if err := enq("a"); err != nil {
		t.Fatalf("Enqueue with a key after migrating: %v", err)
	}
	var d *core.DuplicateError
	if err := enq("b"); !errors.As(err, &d) || d.TaskID != "a" {
		t.Fatalf("a second Enqueue of the key: %v, want a duplicate held by a", err)
	}
	if _, err := s.Remove(ctx, core.InspectParams{Queue: "q", ID: "a"}); err != nil {
		t.Fatal(err)
	}
	var entries int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+quoted+`.unique_keys`).Scan(&entries); err != nil || entries != 0 {
		t.Fatalf("%d key entries after the holder was removed (%v), want 0", entries, err)
	}
	if err := enq("b"); err != nil {
		t.Fatalf("Enqueue after the holder was removed: %v", err)
	}
}
