package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
)

// applicationID marks a leasehold database in its header (PRAGMA
// application_id): "LSHD".
const applicationID = 0x4C534844

// SchemaVersion is the schema this package writes, kept in PRAGMA
// user_version. Open migrates older leasehold databases forward and refuses
// newer ones.
const SchemaVersion = 7

// migrations[i] brings a database from schema version i to i+1.
var migrations = []string{
	// 0 -> 1: the queues and tasks tables and their indexes.
	`
CREATE TABLE queues (
  name TEXT PRIMARY KEY,
  seq  INTEGER NOT NULL     -- the last value drawn from the queue's sequence
);
CREATE TABLE tasks (
  queue        TEXT    NOT NULL,
  id           TEXT    NOT NULL,
  payload      BLOB,
  priority     INTEGER NOT NULL,
  state        INTEGER NOT NULL,  -- 1 scheduled, 2 ready, 3 running, 4 succeeded, 5 failed
  attempt      INTEGER NOT NULL,
  max_attempts INTEGER NOT NULL,
  version      INTEGER NOT NULL,
  claim_token  INTEGER NOT NULL,  -- 0: none
  enqueued_at  INTEGER,           -- times: Unix microseconds, NULL for unset
  run_after    INTEGER,
  claimed_at   INTEGER,
  deadline     INTEGER,
  finished_at  INTEGER,
  errors       TEXT    NOT NULL DEFAULT '[]',  -- JSON array of {attempt, at, message, lease_expired}
  result       BLOB,
  PRIMARY KEY (queue, id)
);
-- The order indexes are partial: each holds the tasks of one state only, so
-- a transition rewrites the entries of the states it leaves and enters and
-- no others.
-- Pop: Ready tasks by priority (highest first), then the order they became Ready.
CREATE INDEX tasks_ready     ON tasks (queue, priority DESC, version) WHERE state = 2;
-- Promote: Scheduled tasks by RunAfter, then ID.
CREATE INDEX tasks_scheduled ON tasks (queue, run_after, id) WHERE state = 1;
-- ClaimExpired, RecoverExpired: Running tasks by Deadline, then ID.
CREATE INDEX tasks_running   ON tasks (queue, deadline, id) WHERE state = 3;
-- Prune: terminal tasks by FinishedAt, then ID.
CREATE INDEX tasks_succeeded ON tasks (queue, finished_at, id) WHERE state = 4;
CREATE INDEX tasks_failed    ON tasks (queue, finished_at, id) WHERE state = 5;
-- List and Counts: the tasks of each state by ID.
CREATE INDEX tasks_state     ON tasks (queue, state, id);
`,
	// 1 -> 2: the reason a record was set aside (state 6, quarantined).
	`ALTER TABLE tasks ADD COLUMN quarantine TEXT;`,
	// 2 -> 3: the attempt timeout stored with a task, in nanoseconds (0:
	// none); the tasks of older versions have none.
	`ALTER TABLE tasks ADD COLUMN timeout_ns INTEGER NOT NULL DEFAULT 0;`,
	// 3 -> 4: the queue's paused flag (1 while paused: Pop claims nothing).
	`ALTER TABLE queues ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;`,
	// 4 -> 5: no index of every task by state. Each transition rewrote two
	// of its entries, often on two pages of the log, for List and Counts
	// alone: List now reads the primary key (queue, id) in order, Counts
	// the partial index of each state, and tasks_other holds the records
	// whose state is none of the five (set aside, or damaged), which no
	// transition enters or leaves.
	`DROP INDEX tasks_state;
CREATE INDEX tasks_other ON tasks (queue, id) WHERE ` + otherStates + `;`,
	// 5 -> 6: unique keys. A task keeps its key (NULL: none) and the end of
	// its hold (NULL: while pending); unique_keys names each key's last
	// taker, and deleting the taker deletes its entry (a task without a key
	// pays nothing: the trigger's WHEN skips it).
	`
ALTER TABLE tasks ADD COLUMN unique_key TEXT;
ALTER TABLE tasks ADD COLUMN unique_until INTEGER;
CREATE TABLE unique_keys (
  queue   TEXT NOT NULL,
  key     TEXT NOT NULL,
  task_id TEXT NOT NULL,
  PRIMARY KEY (queue, key)
) WITHOUT ROWID;
CREATE TRIGGER tasks_release_key AFTER DELETE ON tasks WHEN OLD.unique_key IS NOT NULL BEGIN
  DELETE FROM unique_keys WHERE queue = OLD.queue AND key = OLD.unique_key AND task_id = OLD.id;
END;
`,
	// 6 -> 7: the owner of a queue's sequence row (0: seq is the last value
	// drawn). A store that writes the file alone names itself there and
	// keeps drawing in memory without rewriting the row; the sequence is
	// then the largest of seq and the versions of the queue's tasks (see
	// seq.go).
	`ALTER TABLE queues ADD COLUMN owner INTEGER NOT NULL DEFAULT 0;`,
}

// otherStates is the condition of tasks_other: a state that is none of the
// five of a task's life (Quarantined, or a damaged value; the column is
// NOT NULL).
const otherStates = `state NOT IN (1, 2, 3, 4, 5)`

// The LiteQueue table Open recognizes: one table named Queue with these
// columns (LiteQueue's status codes are READY 0, LOCKED 1, DONE 2, FAILED 3).
var liteQueueColumns = []string{"data", "message_id", "status", "in_time", "lock_time", "done_time"}

// LiteQueueFailedMessage is the error history entry given to a message that
// LiteQueue had marked FAILED, which kept no message of its own.
const LiteQueueFailedMessage = "marked failed by LiteQueue before migration"

// migrate brings the database to SchemaVersion in one write transaction.
func migrate(w *sql.DB, path string, cfg config) error {
	ctx := context.Background()
	conn, err := w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("leasehold/sqlite: open %s: %w", path, err)
	}
	defer conn.Close()
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("leasehold/sqlite: open %s: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("leasehold/sqlite: open %s: journal mode is %q, want WAL", path, mode)
	}
	tx, err := conn.BeginTx(ctx, nil) // BEGIN IMMEDIATE: concurrent openers take turns
	if err != nil {
		return fmt.Errorf("leasehold/sqlite: open %s: %w", path, err)
	}
	defer tx.Rollback()
	var appID, version int64
	if err := tx.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return fmt.Errorf("leasehold/sqlite: open %s: %w", path, err)
	}
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("leasehold/sqlite: open %s: %w", path, err)
	}
	switch {
	case appID == applicationID:
		if version > SchemaVersion {
			return fmt.Errorf("leasehold/sqlite: %s has schema version %d; this build knows versions up to %d", path, version, SchemaVersion)
		}
		if version == SchemaVersion {
			return nil // nothing to write: the transaction rolls back
		}
	case appID == 0 && version == 0:
		tables, err := userTables(ctx, tx)
		if err != nil {
			return fmt.Errorf("leasehold/sqlite: open %s: %w", path, err)
		}
		switch {
		case len(tables) == 0:
		case len(tables) == 1 && strings.EqualFold(tables[0], "Queue"):
			if err := checkLiteQueue(ctx, tx, tables[0]); err != nil {
				return fmt.Errorf("leasehold/sqlite: %s: %w", path, err)
			}
		default:
			return fmt.Errorf("leasehold/sqlite: %s is neither a leasehold nor a LiteQueue database (tables %s)", path, strings.Join(tables, ", "))
		}
	default:
		return fmt.Errorf("leasehold/sqlite: %s is not a leasehold database (application_id %#x, user_version %d)", path, appID, version)
	}
	for v := version; v < SchemaVersion; v++ {
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("leasehold/sqlite: %s: migrating to schema version %d: %w", path, v+1, err)
		}
	}
	if version == 0 {
		if err := importLiteQueue(ctx, tx, cfg); err != nil {
			return fmt.Errorf("leasehold/sqlite: %s: importing LiteQueue messages: %w", path, err)
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA application_id = %d; PRAGMA user_version = %d", applicationID, SchemaVersion)); err != nil {
		return fmt.Errorf("leasehold/sqlite: open %s: %w", path, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("leasehold/sqlite: open %s: %w", path, err)
	}
	return nil
}

func userTables(ctx context.Context, tx *sql.Tx) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	return names, rows.Err()
}

func checkLiteQueue(ctx context.Context, tx *sql.Tx, table string) error {
	rows, err := tx.QueryContext(ctx, `SELECT name FROM pragma_table_info(?1)`, table)
	if err != nil {
		return err
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return err
		}
		have[strings.ToLower(n)] = true
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, c := range liteQueueColumns {
		if !have[c] {
			return fmt.Errorf("table %s lacks LiteQueue's column %s; not migrating it", table, c)
		}
	}
	return nil
}

// importLiteQueue moves every message of a LiteQueue table into the tasks
// table and drops the LiteQueue table (with its indexes and maxsize
// trigger), in the migration's transaction. See the package documentation
// for the mapping.
func importLiteQueue(ctx context.Context, tx *sql.Tx, cfg config) error {
	tables, err := userTables(ctx, tx)
	if err != nil {
		return err
	}
	legacy := ""
	for _, t := range tables {
		if strings.EqualFold(t, "Queue") {
			legacy = t
		}
	}
	if legacy == "" {
		return nil
	}
	quoted := `"` + strings.ReplaceAll(legacy, `"`, `""`) + `"`
	rows, err := tx.QueryContext(ctx, `SELECT data, message_id, status, in_time, lock_time, done_time FROM `+quoted+` ORDER BY message_id, rowid`)
	if err != nil {
		return err
	}
	var tasks []model.Task
	seen := map[string]bool{}
	for rows.Next() {
		var raw [6]any
		if err := rows.Scan(&raw[0], &raw[1], &raw[2], &raw[3], &raw[4], &raw[5]); err != nil {
			rows.Close()
			return err
		}
		t, err := liteQueueTask(raw, cfg, uint64(len(tasks)+1))
		if err != nil {
			rows.Close()
			return err
		}
		if seen[t.ID] {
			rows.Close()
			return corrupt("LiteQueue message_id %q appears more than once", t.ID)
		}
		seen[t.ID] = true
		tasks = append(tasks, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	insert, err := tx.PrepareContext(ctx, insertTaskSQL)
	if err != nil {
		return err
	}
	defer insert.Close()
	for _, t := range tasks {
		if _, err := insert.ExecContext(ctx, taskArgs(t)...); err != nil {
			return fmt.Errorf("message %q: %w", t.ID, err)
		}
	}
	if len(tasks) > 0 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO queues (name, seq) VALUES (?1, ?2)`, cfg.legacyQueue, len(tasks)); err != nil {
			return err
		}
	}
	_, err = tx.ExecContext(ctx, `DROP TABLE `+quoted)
	return err
}

// liteQueueTask maps one LiteQueue row (data, message_id, status, in_time,
// lock_time, done_time) to a task with the given version.
func liteQueueTask(raw [6]any, cfg config, version uint64) (model.Task, error) {
	t := model.Task{Queue: cfg.legacyQueue, Version: version, MaxAttempts: cfg.legacyAttempts}
	switch id := raw[1].(type) {
	case string:
		t.ID = id
	case []byte:
		t.ID = string(id)
	case int64:
		t.ID = fmt.Sprint(id)
	default:
		return t, corrupt("LiteQueue message_id %v (%T) is not text", id, id)
	}
	if model.ValidateID(t.ID) != nil {
		return t, corrupt("LiteQueue message_id %q: a task ID has 1..%d bytes", t.ID, model.MaxIDLength)
	}
	switch data := raw[0].(type) {
	case nil:
	case string:
		t.Payload = []byte(data)
	case []byte:
		t.Payload = data
	case int64, float64:
		t.Payload = fmt.Append(nil, data)
	default:
		return t, corrupt("LiteQueue message %q: data of type %T", t.ID, data)
	}
	if len(t.Payload) == 0 {
		t.Payload = nil
	}
	var err error
	fail := func(e error) {
		if err == nil && e != nil {
			err = fmt.Errorf("LiteQueue message %q: %w", t.ID, e)
		}
	}
	inTime, ok, e := legacyTime(raw[3])
	fail(e)
	if !ok && e == nil {
		fail(corrupt("in_time is NULL"))
	}
	lockTime, locked, e := legacyTime(raw[4])
	fail(e)
	doneTime, done, e := legacyTime(raw[5])
	fail(e)
	if err != nil {
		return t, err
	}
	t.EnqueuedAt = inTime
	status, isInt := raw[2].(int64)
	if !isInt {
		return t, corrupt("LiteQueue message %q: status %v (%T) is not an integer", t.ID, raw[2], raw[2])
	}
	finished := func() time.Time { // a finished message's best known finish time
		switch {
		case done:
			return doneTime
		case locked:
			return lockTime
		}
		return inTime
	}
	switch status {
	case 0: // READY: waiting for a worker; the migration is its fresh start.
		t.State = model.Ready
	case 1: // LOCKED: claimed by a LiteQueue worker that holds no leasehold token.
		// The lease is over at once, so ClaimExpired or RecoverExpired
		// decide it like any task whose worker stopped responding.
		t.State = model.Running
		t.Attempt = 1
		t.ClaimToken = version
		t.ClaimedAt = inTime
		if locked {
			t.ClaimedAt = lockTime
		}
		t.Deadline = t.ClaimedAt
	case 2: // DONE
		t.State = model.Succeeded
		t.FinishedAt = finished()
		if locked {
			t.Attempt, t.ClaimedAt = 1, lockTime
		}
	case 3: // FAILED
		t.State = model.Failed
		t.FinishedAt = finished()
		if locked {
			t.Attempt, t.ClaimedAt = 1, lockTime
		}
		t.Errors = []model.TaskError{{Attempt: t.Attempt, At: t.FinishedAt, Message: LiteQueueFailedMessage}}
	default:
		return t, corrupt("LiteQueue message %q: unknown status %d", t.ID, status)
	}
	return t, nil
}

// legacyTime decodes a LiteQueue timestamp. LiteQueue writes nanoseconds
// since the Unix epoch (time.time_ns); a value too small to be nanoseconds of
// this era is read by magnitude as micro-, milli- or plain seconds, and a
// REAL as seconds with a fraction. ok is false for NULL.
func legacyTime(v any) (t time.Time, ok bool, err error) {
	var ns float64
	switch v := v.(type) {
	case nil:
		return time.Time{}, false, nil
	case int64:
		switch a := math.Abs(float64(v)); {
		case a >= 1e17:
			return time.Unix(0, v).Truncate(time.Microsecond).UTC(), true, nil
		case a >= 1e14:
			return time.UnixMicro(v).UTC(), true, nil
		case a >= 1e11:
			return time.UnixMilli(v).UTC(), true, nil
		default:
			return time.Unix(v, 0).UTC(), true, nil
		}
	case float64:
		ns = v * 1e9
	default:
		return time.Time{}, false, corrupt("timestamp %v of type %T", v, v)
	}
	if math.IsNaN(ns) || math.Abs(ns) >= math.MaxInt64 {
		return time.Time{}, false, corrupt("timestamp %v out of range", v)
	}
	return time.Unix(0, int64(ns)).Truncate(time.Microsecond).UTC(), true, nil
}

// insertTaskSQL writes a whole task; taskArgs gives its arguments, in
// order. Its parameters have no numbers: the driver then binds each by its
// position, without reading and parsing its name.
const insertTaskSQL = `INSERT INTO tasks (` + storedColumns + `)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

func taskArgs(t model.Task) []any {
	errs, err := encodeErrors(t.Errors)
	if err != nil {
		errs = "[]" // encoding plain structs of strings and numbers cannot fail
	}
	return []any{t.Queue, t.ID, blob(t.Payload), t.Priority, int64(t.State), t.Attempt, t.MaxAttempts,
		int64(t.Version), int64(t.ClaimToken), micros(t.EnqueuedAt), micros(t.RunAfter), micros(t.ClaimedAt),
		micros(t.Deadline), micros(t.FinishedAt), errs, blob(t.Result), int64(t.Timeout), uniqueKey(t.UniqueKey), micros(t.UniqueUntil)}
}

// uniqueKey stores a unique key as TEXT, none as NULL.
func uniqueKey(k string) any {
	if k == "" {
		return nil
	}
	return k
}

// blob stores a byte slice as a BLOB, nil as NULL.
func blob(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}
