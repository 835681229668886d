package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/spec"
)

var popModes = []sqlite.PopMode{sqlite.PopReturning, sqlite.PopSelectUpdate}

// harness makes stores on fresh database files with the given pop mode.
// They commit with synchronous=NORMAL: the semantics are the same, the suite
// runs faster, and durability has its own test (a process killed mid-batch,
// with the default synchronous=FULL).
func harness(mode sqlite.PopMode) spec.Harness {
	var paths sync.Map // *sqlite.Store -> its database file
	return spec.Harness{
		Name: "sqlite/" + mode.String(),
		New: func(tb testing.TB, clock core.Clock, capacity int) core.Store {
			path := filepath.Join(tb.TempDir(), "leasehold.db")
			s := openStore(tb, path,
				sqlite.WithClock(clock), sqlite.WithCapacity(capacity), sqlite.WithPopMode(mode),
				sqlite.WithSynchronous(sqlite.SyncNormal))
			paths.Store(s, path)
			return s
		},
		// A row's error history that is not JSON: every column its state's
		// index reads stays as it was.
		Damage: func(tb testing.TB, s core.Store, queue, id string) {
			tb.Helper()
			path, ok := paths.Load(s)
			if !ok {
				tb.Fatalf("Damage: not a store of this harness")
			}
			execSQL(tb, rawDB(tb, path.(string)), `UPDATE tasks SET errors = '{not json' WHERE queue = ?1 AND id = ?2`, queue, id)
		},
		// The application's own connections to the store's file, whose
		// transactions begin IMMEDIATE as EnqueueTx asks; SQLite has no
		// AckTx.
		Tx: &spec.TxHarness{Open: func(tb testing.TB, s core.Store) spec.TxDB {
			tb.Helper()
			path, ok := paths.Load(s)
			if !ok {
				tb.Fatalf("Tx: not a store of this harness")
			}
			db, err := sql.Open("sqlite", path.(string)+"?_pragma=busy_timeout(10000)&_txlock=immediate")
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { db.Close() })
			if _, err := db.Exec(`CREATE TABLE app_rows (key TEXT PRIMARY KEY)`); err != nil {
				tb.Fatal(err)
			}
			return sqliteApp{s: s.(*sqlite.Store), db: db}
		}},
		// Stores that wait 20ms for the write lock, which another
		// connection holds as another process writing would.
		Busy: &spec.BusyHarness{
			New: func(tb testing.TB, clock core.Clock, capacity int) core.Store {
				path := filepath.Join(tb.TempDir(), "leasehold.db")
				s := openStore(tb, path,
					sqlite.WithClock(clock), sqlite.WithCapacity(capacity), sqlite.WithPopMode(mode),
					sqlite.WithSynchronous(sqlite.SyncNormal), sqlite.WithBusyTimeout(20*time.Millisecond))
				paths.Store(s, path)
				return s
			},
			Hold: func(tb testing.TB, s core.Store) func() {
				tb.Helper()
				path, ok := paths.Load(s)
				if !ok {
					tb.Fatalf("Busy: not a store of this harness")
				}
				conn, err := rawDB(tb, path.(string)).Conn(context.Background())
				if err != nil {
					tb.Fatal(err)
				}
				if _, err := conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
					tb.Fatal(err)
				}
				return func() {
					if _, err := conn.ExecContext(context.Background(), `ROLLBACK`); err != nil {
						tb.Error(err)
					}
					conn.Close()
				}
			},
		},
	}
}

// sqliteApp is an application's side of a store's database file.
type sqliteApp struct {
	s  *sqlite.Store
	db *sql.DB
}

func (a sqliteApp) Begin(ctx context.Context) (spec.AppTx, error) {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return sqliteAppTx{s: a.s, tx: tx}, nil
}

func (a sqliteApp) HasRow(ctx context.Context, key string) (bool, error) {
	var n int
	err := a.db.QueryRowContext(ctx, `SELECT count(*) FROM app_rows WHERE key = ?`, key).Scan(&n)
	return n > 0, err
}

// sqliteAppTx is an open transaction of the application, in which the store
// enqueues (a spec.TxBatcher).
type sqliteAppTx struct {
	s  *sqlite.Store
	tx *sql.Tx
}

func (t sqliteAppTx) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	return t.s.EnqueueTx(ctx, t.tx, p)
}

func (t sqliteAppTx) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	return t.s.EnqueueBatchTx(ctx, t.tx, p)
}

func (t sqliteAppTx) Write(ctx context.Context, key string) error {
	_, err := t.tx.ExecContext(ctx, `INSERT INTO app_rows (key) VALUES (?)`, key)
	return err
}

func (t sqliteAppTx) Commit(context.Context) error   { return t.tx.Commit() }
func (t sqliteAppTx) Rollback(context.Context) error { return t.tx.Rollback() }

var _ spec.TxBatcher = sqliteAppTx{}

// openStore opens a store and closes it when the test ends.
func openStore(tb testing.TB, path string, opts ...sqlite.Option) *sqlite.Store {
	tb.Helper()
	s, err := sqlite.Open(path, opts...)
	if err != nil {
		tb.Fatalf("Open(%s): %v", path, err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	for _, mode := range popModes {
		t.Run(mode.String(), func(t *testing.T) { spec.Run(t, harness(mode)) })
	}
}

func TestDifferential(t *testing.T) {
	for _, mode := range popModes {
		t.Run(mode.String(), func(t *testing.T) { spec.Differential(t, harness(mode)) })
	}
}
