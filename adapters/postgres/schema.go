package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/model"
)

// SchemaVersion is the version of the schema this build creates and uses.
// Open migrates an older schema forward and refuses a newer one.
const SchemaVersion = 7

// migrations[i] brings a schema at version i to version i+1. Each runs in
// the transaction that records its version in schema_version. "{s}" is the
// quoted schema name.
var migrations = []string{
	// 1: the queues' sequences and the tasks, with one index per ordered
	// operation.
	fmt.Sprintf(`
CREATE TABLE {s}.queues (
  name text COLLATE "C" PRIMARY KEY,
  seq  bigint NOT NULL CHECK (seq >= 0)
);
CREATE TABLE {s}.tasks (
  queue        text COLLATE "C" NOT NULL,
  id           bytea NOT NULL,
  payload      bytea,
  priority     integer NOT NULL,
  state        smallint NOT NULL,
  attempt      integer NOT NULL,
  max_attempts bigint NOT NULL,
  version      bigint NOT NULL,
  claim_token  bigint NOT NULL,
  enqueued_at  bigint,
  run_after    bigint,
  claimed_at   bigint,
  deadline     bigint,
  finished_at  bigint,
  errors       jsonb NOT NULL DEFAULT '[]',
  result       bytea,
  PRIMARY KEY (queue, id)
);
CREATE INDEX tasks_ready ON {s}.tasks (queue, priority DESC, version) WHERE state = %[2]d;
CREATE INDEX tasks_scheduled ON {s}.tasks (queue, run_after, id) WHERE state = %[1]d;
CREATE INDEX tasks_running ON {s}.tasks (queue, deadline, id) WHERE state = %[3]d;
CREATE INDEX tasks_finished ON {s}.tasks (queue, finished_at, id) WHERE state IN (%[4]d, %[5]d);
CREATE INDEX tasks_state ON {s}.tasks (queue, state, id);
`, model.Scheduled, model.Ready, model.Running, model.Succeeded, model.Failed),
	// 2: the attempt timeout stored with a task, in nanoseconds (0: none);
	// the tasks of version 1 have none.
	`ALTER TABLE {s}.tasks ADD COLUMN timeout_ns bigint NOT NULL DEFAULT 0;`,
	// 3: a record set aside (state Quarantined, in no partial index) keeps
	// why in quarantine.
	`ALTER TABLE {s}.tasks ADD COLUMN quarantine text`,
	// 4: the queue's paused flag: while it is set, Pop claims nothing.
	`ALTER TABLE {s}.queues ADD COLUMN paused boolean NOT NULL DEFAULT false;`,
	// 5: unique keys. A task keeps its key (NULL: none) and the end of its
	// hold (NULL: while pending); unique_keys names each key's last taker,
	// and deleting the taker deletes its entry (the trigger's WHEN skips a
	// task without a key).
	`
ALTER TABLE {s}.tasks ADD COLUMN unique_key bytea, ADD COLUMN unique_until bigint;
CREATE TABLE {s}.unique_keys (
  queue   text COLLATE "C" NOT NULL,
  key     bytea NOT NULL,
  task_id bytea NOT NULL,
  PRIMARY KEY (queue, key)
);
CREATE FUNCTION {s}.release_unique_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM {s}.unique_keys WHERE queue = OLD.queue AND key = OLD.unique_key AND task_id = OLD.id;
  RETURN NULL;
END $$;
CREATE TRIGGER tasks_release_key AFTER DELETE ON {s}.tasks
  FOR EACH ROW WHEN (OLD.unique_key IS NOT NULL) EXECUTE FUNCTION {s}.release_unique_key();
`,
	// 6: no index of every task by state. Each transition inserted an
	// entry into it (every change of a task stamps a new version, so none
	// is a HOT update), for List and Counts alone: a claim of 64 tasks
	// wrote 364 WAL records with it and 300 without. List now reads the
	// primary key (queue, id) in order, or its state's partial index,
	// Counts the partial index of each state, and tasks_other holds the
	// rows whose state is none of the five (set aside, or damaged), which
	// no transition enters or leaves.
	`DROP INDEX {s}.tasks_state;
CREATE INDEX tasks_other ON {s}.tasks (queue, id) WHERE state NOT IN (` + lifeStates() + `);`,
	// 7: unsure, which a statement that commits with its COMMIT calls on a
	// row it wrote and cannot vouch for (see soundSQL): it raises, so that
	// the statement, and the transaction with it, is undone.
	`
CREATE FUNCTION {s}.unsure(queue text, id bytea) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = '` + unsureCode + `',
    MESSAGE = format('leasehold: task %s of queue %s, as written, is not one the store can vouch for before its COMMIT', encode(id, 'escape'), queue);
END $$;
`,
}

// migrate creates the schema if needed and applies the migrations it lacks,
// under an advisory lock so that stores opening at once migrate it once.
func migrate(ctx context.Context, pool *pgxpool.Pool, name, quoted string) error {
	// The common case, a schema already at this version, costs one read.
	var current int
	if err := pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+quoted+`.schema_version`).Scan(&current); err == nil && current == SchemaVersion {
		return nil
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("leasehold/postgres: migrate %s: %w", name, err)
	}
	defer rollback(tx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('leasehold schema ' || $1))`, name); err != nil {
		return fmt.Errorf("leasehold/postgres: migrate %s: %w", name, err)
	}
	stmts := []string{
		`CREATE SCHEMA IF NOT EXISTS ` + quoted,
		`CREATE TABLE IF NOT EXISTS ` + quoted + `.schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
	}
	for _, q := range stmts {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("leasehold/postgres: migrate %s: %w", name, err)
		}
	}
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+quoted+`.schema_version`).Scan(&current); err != nil {
		return fmt.Errorf("leasehold/postgres: migrate %s: %w", name, err)
	}
	if current > SchemaVersion {
		return fmt.Errorf("leasehold/postgres: schema %s is at version %d, newer than this build's %d", name, current, SchemaVersion)
	}
	for v := current; v < SchemaVersion; v++ {
		if _, err := tx.Exec(ctx, strings.ReplaceAll(migrations[v], "{s}", quoted)); err != nil {
			return fmt.Errorf("leasehold/postgres: migrate %s to version %d: %w", name, v+1, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+quoted+`.schema_version (version) VALUES ($1)`, v+1); err != nil {
			return fmt.Errorf("leasehold/postgres: migrate %s to version %d: %w", name, v+1, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("leasehold/postgres: migrate %s: %w", name, err)
	}
	return nil
}

// CurrentSchemaVersion returns the version recorded in the schema_version
// table of the named schema, 0 when it has none.
func CurrentSchemaVersion(ctx context.Context, pool *pgxpool.Pool, schema string) (int, error) {
	var v int
	err := pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+pgx.Identifier{schema}.Sanitize()+`.schema_version`).Scan(&v)
	if err != nil && !isCode(err, "42P01") { // undefined_table
		return 0, err
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return v, nil
}
