package backends

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/linearizability"
)

// appTable is the application's own table in a history's database, which
// its transactions write beside their tasks.
const appTable = "leasehold_check_app_rows"

// sqliteApp is the application's side of a SQLite history: its own
// *sql.DBs on the store's file, one whose transactions begin IMMEDIATE and
// one whose begin DEFERRED, opened when a client first needs them.
type sqliteApp struct {
	path string

	mu                  sync.Mutex
	immediate, deferred *sql.DB
}

func (a *sqliteApp) db(immediate bool) (*sql.DB, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := &a.deferred
	lock := "deferred"
	if immediate {
		p, lock = &a.immediate, "immediate"
	}
	if *p == nil {
		db, err := sql.Open("sqlite", a.path+"?_pragma=busy_timeout(10000)&_txlock="+lock)
		if err != nil {
			return nil, err
		}
		*p = db
	}
	return *p, nil
}

func (a *sqliteApp) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var err error
	for _, db := range []*sql.DB{a.immediate, a.deferred} {
		if db != nil {
			err = errors.Join(err, db.Close())
		}
	}
	a.immediate, a.deferred = nil, nil
	return err
}

// BeginTx implements linearizability.TxStore: a transaction of the
// application's own connection to the database file.
func (s *SQLiteStore) BeginTx(ctx context.Context, immediate bool) (linearizability.AppTx, error) {
	db, err := s.app.db(immediate)
	if err != nil {
		return nil, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &sqliteTx{s: s.Store, tx: tx}, nil
}

// HasRow implements linearizability.TxStore.
func (s *SQLiteStore) HasRow(ctx context.Context, key string) (bool, error) {
	db, err := s.app.db(false)
	if err != nil {
		return false, err
	}
	var n int
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM `+appTable+` WHERE key = ?`, key).Scan(&n)
	return n > 0, err
}

type sqliteTx struct {
	s  *sqlite.Store
	tx *sql.Tx
}

func (t *sqliteTx) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	return t.s.EnqueueTx(ctx, t.tx, p)
}

func (t *sqliteTx) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	return t.s.EnqueueBatchTx(ctx, t.tx, p)
}

func (t *sqliteTx) Ack(context.Context, core.AckParams) (core.TaskResult, error) {
	return core.TaskResult{}, fmt.Errorf("sqlite has no AckTx: %w", errors.ErrUnsupported)
}

func (t *sqliteTx) Write(ctx context.Context, key string) error {
	_, err := t.tx.ExecContext(ctx, `INSERT INTO `+appTable+` (key) VALUES (?)`, key)
	return err
}

func (t *sqliteTx) Commit(context.Context) error   { return t.tx.Commit() }
func (t *sqliteTx) Rollback(context.Context) error { return t.tx.Rollback() }

// createSQLiteApp creates the application's table in the database at path.
func createSQLiteApp(path string) error {
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	_, err = db.Exec(`CREATE TABLE IF NOT EXISTS ` + appTable + ` (key TEXT PRIMARY KEY)`)
	return errors.Join(err, db.Close())
}

// sharedStore is a PostgreSQL Store two clients use: the backend closes
// it, after both. Its transactions are the application's, on the pool the
// run shares, writing a table of its own in the history's schema.
type sharedStore struct {
	*postgres.Store
	pool  *pgxpool.Pool
	table string // the application's table, schema-qualified
}

// Close leaves the store open for the client that shares it.
func (sharedStore) Close() error { return nil }

// BeginTx implements linearizability.TxStore: a transaction of the pool
// at PostgreSQL's default isolation, READ COMMITTED.
func (s sharedStore) BeginTx(ctx context.Context, _ bool) (linearizability.AppTx, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &pgTx{s: s, tx: tx}, nil
}

// HasRow implements linearizability.TxStore.
func (s sharedStore) HasRow(ctx context.Context, key string) (bool, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.table+` WHERE key = $1`, key).Scan(&n)
	return n > 0, err
}

type pgTx struct {
	s  sharedStore
	tx pgx.Tx
}

func (t *pgTx) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	return t.s.EnqueueTx(ctx, t.tx, p)
}

func (t *pgTx) EnqueueBatch(context.Context, core.EnqueueBatchParams) (core.BatchResult, error) {
	return core.BatchResult{}, fmt.Errorf("postgres has no EnqueueBatchTx: %w", errors.ErrUnsupported)
}

func (t *pgTx) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	return t.s.AckTx(ctx, t.tx, p)
}

func (t *pgTx) Write(ctx context.Context, key string) error {
	_, err := t.tx.Exec(ctx, `INSERT INTO `+t.s.table+` (key) VALUES ($1)`, key)
	return err
}

func (t *pgTx) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t *pgTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

var (
	_ linearizability.TxStore = (*SQLiteStore)(nil)
	_ linearizability.TxStore = sharedStore{}
)
