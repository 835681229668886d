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

// LiteQueue's schema as its current release creates it: one Queue table, a
// unique index on message_id, an index on (status, message_id), and the
// trigger that enforces maxsize.
var liteQueueSchema = []string{
	`CREATE TABLE IF NOT EXISTS "Queue"
                (
                  data       TEXT NOT NULL
                  , message_id TEXT NOT NULL
                  , status     INTEGER NOT NULL
                  , in_time    INTEGER NOT NULL
                  , lock_time  INTEGER
                  , done_time  INTEGER
                )`,
	`CREATE UNIQUE INDEX IF NOT EXISTS "Queue_message_id_unique_idx" ON "Queue"(message_id)`,
	`CREATE INDEX IF NOT EXISTS "Queue_status_message_id_idx" ON "Queue"(status, message_id)`,
	`CREATE TRIGGER IF NOT EXISTS "maxsize_control_Queue"
   BEFORE INSERT
   ON "Queue"
   WHEN (SELECT COUNT(*) FROM "Queue" WHERE status = 0) >= 100
BEGIN
    SELECT RAISE (ABORT,'Max queue length reached: 100');
END;`,
}

// Older LiteQueue releases named their indexes TIdx and SIdx, neither unique.
var oldLiteQueueSchema = []string{
	`CREATE TABLE IF NOT EXISTS Queue
                (
                  data       TEXT NOT NULL
                  , message_id TEXT NOT NULL
                  , status     INTEGER NOT NULL
                  , in_time    INTEGER NOT NULL
                  , lock_time  INTEGER
                  , done_time  INTEGER
                )`,
	`CREATE INDEX IF NOT EXISTS TIdx ON Queue(message_id)`,
	`CREATE INDEX IF NOT EXISTS SIdx ON Queue(status)`,
}

// liteQueueRow is a row as LiteQueue writes it: times in nanoseconds.
type liteQueueRow struct {
	data, id                   string
	status                     int
	inTime, lockTime, doneTime any // int64 nanoseconds or nil
}

// base is a LiteQueue time_ns() value with a sub-microsecond part.
var base = spec.Epoch.Add(-time.Hour).UnixNano() + 789

func ns(offset time.Duration) int64 { return base + int64(offset) }

// at is the leasehold time of a LiteQueue nanosecond value.
func at(v int64) time.Time { return time.Unix(0, v).Truncate(time.Microsecond).UTC() }

// UUIDv7-like IDs: they sort in the order the messages were put.
var liteQueueRows = []liteQueueRow{
	{`{"job": 1}`, "0190a000-0000-7000-8000-000000000001", 2, ns(0), ns(time.Second), ns(2 * time.Second)},     // DONE
	{`{"job": 2}`, "0190a000-0000-7000-8000-000000000002", 3, ns(1), ns(3 * time.Second), ns(4 * time.Second)}, // FAILED
	{`{"job": 3}`, "0190a000-0000-7000-8000-000000000003", 1, ns(2), ns(5 * time.Second), nil},                 // LOCKED
	{`{"job": 4}`, "0190a000-0000-7000-8000-000000000004", 0, ns(3), nil, nil},                                 // READY
	{`{"job": 5}`, "0190a000-0000-7000-8000-000000000005", 0, ns(4), ns(6 * time.Second), nil},                 // READY after retry()
	{`{"job": 6}`, "0190a000-0000-7000-8000-000000000006", 2, ns(5), nil, ns(7 * time.Second)},                 // DONE without a pop
	{``, "0190a000-0000-7000-8000-000000000007", 0, ns(6), nil, nil},                                           // READY, empty data
}

// writeLiteQueue creates a LiteQueue database at path with rows.
func writeLiteQueue(t *testing.T, path string, schema []string, rows []liteQueueRow) {
	t.Helper()
	db := rawDB(t, path)
	execSQL(t, db, `PRAGMA journal_mode = WAL`)
	for _, q := range schema {
		execSQL(t, db, q)
	}
	for _, r := range rows {
		execSQL(t, db, `INSERT INTO Queue (data, message_id, status, in_time, lock_time, done_time) VALUES (?, ?, ?, ?, ?, ?)`,
			r.data, r.id, r.status, r.inTime, r.lockTime, r.doneTime)
	}
	db.Close()
}

// wantTask is the task a LiteQueue row must become (see the package doc).
func wantTask(r liteQueueRow, queue string, version uint64) core.Task {
	want := core.Task{Queue: queue, ID: r.id, MaxAttempts: sqlite.DefaultLiteQueueMaxAttempts, Version: version,
		EnqueuedAt: at(r.inTime.(int64))}
	if r.data != "" {
		want.Payload = []byte(r.data)
	}
	lock, locked := r.lockTime.(int64)
	done, _ := r.doneTime.(int64)
	switch r.status {
	case 0:
		want.State = core.Ready
	case 1:
		want.State, want.Attempt, want.ClaimToken = core.Running, 1, version
		want.ClaimedAt, want.Deadline = at(lock), at(lock)
	case 2, 3:
		want.State = core.Succeeded
		if locked {
			want.Attempt, want.ClaimedAt = 1, at(lock)
		}
		want.FinishedAt = at(done)
		if r.status == 3 {
			want.State = core.Failed
			want.Errors = []core.TaskError{{Attempt: want.Attempt, At: want.FinishedAt, Message: sqlite.LiteQueueFailedMessage}}
		}
	}
	return want
}

func TestOpenMigratesALiteQueueDatabaseWithoutLosingAMessage(t *testing.T) {
	for _, layout := range []struct {
		name   string
		schema []string
	}{{"current", liteQueueSchema}, {"old", oldLiteQueueSchema}} {
		t.Run(layout.name, func(t *testing.T) {
			clock := core.NewFakeClock(spec.Epoch)
			path := filepath.Join(t.TempDir(), "jobs.queue.sqlite3")
			writeLiteQueue(t, path, layout.schema, liteQueueRows)

			s := openStore(t, path, sqlite.WithClock(clock))
			for i, r := range liteQueueRows {
				want := wantTask(r, "jobs", uint64(i+1))
				got, err := s.Get(ctx, core.GetParams{Queue: "jobs", ID: r.id})
				if err != nil || !got.Equal(want) {
					t.Errorf("message %s (status %d):\n got %+v (%v)\nwant %+v", r.id, r.status, got, err, want)
				}
			}
			counts, err := s.Counts(ctx, core.CountsParams{Queue: "jobs"})
			if want := (core.Counts{Ready: 3, Running: 1, Succeeded: 2, Failed: 1}); err != nil || counts != want {
				t.Errorf("Counts = %+v (%v), want %+v", counts, err, want)
			}

			db := rawDB(t, path)
			var version, tables int
			if err := db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != sqlite.SchemaVersion {
				t.Errorf("user_version = %d (%v), want %d", version, err, sqlite.SchemaVersion)
			}
			if err := db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE tbl_name = 'Queue'`).Scan(&tables); err != nil || tables != 0 {
				t.Errorf("%d schema objects of LiteQueue's table remain (%v)", tables, err)
			}

			// The LOCKED message's lease is already over: recovery returns
			// it to the queue at once, after the READY ones.
			rec, err := s.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: "jobs"})
			if err != nil || len(rec.Tasks) != 1 || rec.Tasks[0].ID != liteQueueRows[2].id || rec.Tasks[0].State != core.Ready {
				t.Fatalf("RecoverExpired = %+v, %v; want the LOCKED message back to Ready", rec.Tasks, err)
			}
			// Pop keeps LiteQueue's order: message_id order among READY ones.
			var order []string
			for {
				res, err := s.Pop(ctx, core.PopParams{Queue: "jobs", Lease: time.Minute, N: 1})
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Tasks) == 0 {
					break
				}
				order = append(order, res.Tasks[0].ID)
			}
			want := []string{liteQueueRows[3].id, liteQueueRows[4].id, liteQueueRows[6].id, liteQueueRows[2].id}
			if fmt.Sprint(order) != fmt.Sprint(want) {
				t.Errorf("pop order %v, want %v", order, want)
			}
			if task := enqueue(t, s, "jobs", "new"); task.Version != uint64(len(liteQueueRows))+1+1+4 {
				t.Errorf("a new task got version %d: the queue's sequence must continue after the imported messages", task.Version)
			}

			// Opening again migrates nothing more.
			s.Close()
			s = openStore(t, path, sqlite.WithClock(clock))
			if c, err := s.Counts(ctx, core.CountsParams{Queue: "jobs"}); err != nil || c.Total() != len(liteQueueRows)+1 {
				t.Errorf("after reopening: %+v, %v", c, err)
			}
		})
	}
}

func TestMigrationOptionsNameTheQueueAndItsAttempts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "legacy.db")
	writeLiteQueue(t, path, liteQueueSchema, liteQueueRows[3:4])
	s := openStore(t, path, sqlite.WithLiteQueueName("imported"), sqlite.WithLiteQueueMaxAttempts(7))
	got, err := s.Get(ctx, core.GetParams{Queue: "imported", ID: liteQueueRows[3].id})
	if err != nil || got.MaxAttempts != 7 {
		t.Errorf("imported task %+v, %v; want it in queue imported with 7 attempts", got, err)
	}

	path = filepath.Join(t.TempDir(), "unnamed.db") // no "<name>.queue.sqlite3": the default name
	writeLiteQueue(t, path, liteQueueSchema, liteQueueRows[3:4])
	s = openStore(t, path)
	if _, err := s.Get(ctx, core.GetParams{Queue: sqlite.DefaultLiteQueueName, ID: liteQueueRows[3].id}); err != nil {
		t.Errorf("task not in queue %s: %v", sqlite.DefaultLiteQueueName, err)
	}
}

// TestAMigrationThatFailsLeavesTheLiteQueueDatabaseAsItWas: a row leasehold
// cannot map stops the whole migration.
func TestAMigrationThatFailsLeavesTheLiteQueueDatabaseAsItWas(t *testing.T) {
	for _, bad := range []liteQueueRow{
		{"x", "0190a000-0000-7000-8000-0000000000ff", 7, ns(9), nil, nil},
		{"x", string(make([]byte, model.MaxIDLength+1)), 0, ns(9), nil, nil},
		{"x", "0190a000-0000-7000-8000-0000000000fe", 0, "noon", nil, nil},
	} {
		path := filepath.Join(t.TempDir(), "bad.queue.sqlite3")
		rows := append(append([]liteQueueRow(nil), liteQueueRows...), bad)
		writeLiteQueue(t, path, liteQueueSchema, rows)
		s, err := sqlite.Open(path)
		if !errors.Is(err, core.ErrCorrupt) {
			if s != nil {
				s.Close()
			}
			t.Errorf("Open with a LiteQueue row %+v: %v, want ErrCorrupt", bad, err)
			continue
		}
		db := rawDB(t, path)
		var n, version int
		if err := db.QueryRow(`SELECT count(*) FROM Queue`).Scan(&n); err != nil || n != len(rows) {
			t.Errorf("after a failed migration the Queue table has %d rows (%v), want %d", n, err, len(rows))
		}
		if err := db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != 0 {
			t.Errorf("after a failed migration user_version = %d (%v)", version, err)
		}
		var tasks int
		if err := db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = 'tasks'`).Scan(&tasks); err != nil || tasks != 0 {
			t.Errorf("after a failed migration the tasks table exists (%d, %v)", tasks, err)
		}
	}
}

// A database of schema version 2, from before the attempt timeout, opens:
// the migration adds the column, its tasks have no timeout and keep every
// other field, they run as before, and new tasks store theirs.
func TestOpenMigratesASchemaVersion2DatabaseToTheAttemptTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v2.db")
	db := rawDB(t, path)
	execSQL(t, db, `PRAGMA journal_mode = WAL`)
	for _, m := range sqlite.Migrations[:2] {
		execSQL(t, db, m)
	}
	enqueued := spec.Epoch.UnixMicro()
	execSQL(t, db, `INSERT INTO queues (name, seq) VALUES ('q', 1)`)
	execSQL(t, db, `INSERT INTO tasks (queue, id, payload, priority, state, attempt, max_attempts, version, claim_token, enqueued_at)
		VALUES ('q', 'old', X'7031', 4, 2, 0, 3, 1, 0, ?)`, enqueued)
	execSQL(t, db, fmt.Sprintf(`PRAGMA application_id = %d; PRAGMA user_version = 2`, sqlite.ApplicationID))
	db.Close()

	clock := core.NewFakeClock(spec.Epoch)
	s := openStore(t, path, sqlite.WithClock(clock))
	want := core.Task{Queue: "q", ID: "old", Payload: []byte("p1"), Priority: 4, State: core.Ready, MaxAttempts: 3,
		Version: 1, EnqueuedAt: time.UnixMicro(enqueued).UTC()}
	got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "old"})
	if err != nil || !got.Equal(want) {
		t.Fatalf("after migrating, Get = %+v, %v; want %+v", got, err, want)
	}
	var version int
	if err := rawDB(t, path).QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != sqlite.SchemaVersion {
		t.Fatalf("user_version = %d (%v), want %d", version, err, sqlite.SchemaVersion)
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

// A database of schema version 4, with its index of every task by state,
// opens: the migration drops that index and adds tasks_other, and List,
// Counts and the operations read its tasks as before, the one set aside
// included.
func TestOpenMigratesASchemaVersion4DatabaseWithoutTheStateIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v4.db")
	db := rawDB(t, path)
	execSQL(t, db, `PRAGMA journal_mode = WAL`)
	for _, m := range sqlite.Migrations[:4] {
		execSQL(t, db, m)
	}
	enqueued := spec.Epoch.UnixMicro()
	execSQL(t, db, `INSERT INTO queues (name, seq) VALUES ('q', 4)`)
	// Ready a (version 1) and c (3), b Running with token 2, d set aside.
	execSQL(t, db, `INSERT INTO tasks (queue, id, priority, state, attempt, max_attempts, version, claim_token, enqueued_at, claimed_at, deadline, quarantine) VALUES
		('q', 'a', 0, 2, 0, 3, 1, 0, ?1, NULL, NULL, NULL),
		('q', 'b', 0, 3, 1, 3, 2, 2, ?1, ?1, ?1 + 60000000, NULL),
		('q', 'c', 0, 2, 0, 3, 3, 0, ?1, NULL, NULL, NULL),
		('q', 'd', 0, 6, 0, 3, 4, 0, ?1, NULL, NULL, 'damaged')`, enqueued)
	execSQL(t, db, fmt.Sprintf(`PRAGMA application_id = %d; PRAGMA user_version = 4`, sqlite.ApplicationID))
	db.Close()

	clock := core.NewFakeClock(spec.Epoch)
	s := openStore(t, path, sqlite.WithClock(clock))
	var version int
	var indexes string
	raw := rawDB(t, path)
	if err := raw.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != sqlite.SchemaVersion {
		t.Fatalf("user_version = %d (%v), want %d", version, err, sqlite.SchemaVersion)
	}
	if err := raw.QueryRow(`SELECT group_concat(name, ' ') FROM (SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'tasks' AND sql IS NOT NULL ORDER BY name)`).Scan(&indexes); err != nil ||
		indexes != "tasks_failed tasks_other tasks_ready tasks_running tasks_scheduled tasks_succeeded" {
		t.Fatalf("indexes after migrating: %q (%v)", indexes, err)
	}
	if c, err := s.Counts(ctx, core.CountsParams{Queue: "q"}); err != nil || c.Ready != 2 || c.Running != 1 || c.Quarantined != 1 || c.Scheduled+c.Succeeded+c.Failed != 0 {
		t.Fatalf("Counts after migrating = %+v, %v", c, err)
	}
	for st, want := range map[core.State]string{core.Ready: "a c", core.Running: "b", core.Quarantined: "d", core.Succeeded: ""} {
		res, err := s.List(ctx, core.ListParams{Queue: "q", State: st, Limit: 10})
		var ids []string
		for _, task := range res.Tasks {
			ids = append(ids, task.ID)
		}
		if err != nil || strings.Join(ids, " ") != want {
			t.Errorf("List(%v) after migrating = %v, %v; want %q", st, ids, err, want)
		}
	}
	popped, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	if err != nil || len(popped.Tasks) != 1 || popped.Tasks[0].ID != "a" || popped.Tasks[0].Version != 5 {
		t.Fatalf("Pop after migrating = %+v, %v", popped.Tasks, err)
	}
	if _, err := s.Ack(ctx, core.AckParams{Claim: popped.Tasks[0].Claim()}); err != nil {
		t.Fatalf("Ack after migrating: %v", err)
	}
	if res, err := s.List(ctx, core.ListParams{Queue: "q", State: core.Succeeded, Limit: 10}); err != nil || len(res.Tasks) != 1 || res.Tasks[0].ID != "a" || res.Tasks[0].Version != 6 {
		t.Fatalf("List(succeeded) after the ack = %+v, %v", res.Tasks, err)
	}
}

// A database of schema version 5 opens at version 6: its tasks have no
// unique key and hold none, and the tasks enqueued after take, hold and
// release keys.
func TestOpenMigratesASchemaVersion5DatabaseToUniqueKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v5.db")
	db := rawDB(t, path)
	execSQL(t, db, `PRAGMA journal_mode = WAL`)
	for _, m := range sqlite.Migrations[:5] {
		execSQL(t, db, m)
	}
	enqueued := spec.Epoch.UnixMicro()
	execSQL(t, db, `INSERT INTO queues (name, seq) VALUES ('q', 1)`)
	execSQL(t, db, `INSERT INTO tasks (queue, id, payload, priority, state, attempt, max_attempts, version, claim_token, enqueued_at)
		VALUES ('q', 'old', X'7031', 0, 2, 0, 3, 1, 0, ?)`, enqueued)
	execSQL(t, db, fmt.Sprintf(`PRAGMA application_id = %d; PRAGMA user_version = 5`, sqlite.ApplicationID))
	db.Close()

	clock := core.NewFakeClock(spec.Epoch)
	s := openStore(t, path, sqlite.WithClock(clock))
	got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "old"})
	if err != nil || got.UniqueKey != "" || !got.UniqueUntil.IsZero() || got.State != core.Ready {
		t.Fatalf("after migrating, Get = %+v, %v", got, err)
	}
	var version int
	if err := rawDB(t, path).QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != sqlite.SchemaVersion {
		t.Fatalf("user_version = %d (%v), want %d", version, err, sqlite.SchemaVersion)
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
	if err := rawDB(t, path).QueryRow(`SELECT count(*) FROM unique_keys`).Scan(&entries); err != nil || entries != 0 {
		t.Fatalf("%d key entries after the holder was removed (%v), want 0", entries, err)
	}
	if err := enq("b"); err != nil {
		t.Fatalf("Enqueue after the holder was removed: %v", err)
	}
}
