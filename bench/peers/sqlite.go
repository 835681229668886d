package main

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river/riverdriver/riversqlite"
	"maragu.dev/goqite"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, the one leasehold's adapter uses

	"github.com/leasehold/leasehold/adapters/sqlite"
)

// matchedPragmas is the matched durability every system gets in the
// sqlite-normal group: the write-ahead log, synced at checkpoints only.
const matchedPragmas = "_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"

func openLeaseholdSQLite(normal bool) func(context.Context, *env) (target, error) {
	return func(_ context.Context, e *env) (target, error) {
		var opts []sqlite.Option
		if normal {
			opts = append(opts, sqlite.WithSynchronous(sqlite.SyncNormal))
		}
		s, err := sqlite.Open(e.newFile("leasehold"), opts...)
		if err != nil {
			return nil, err
		}
		return newLeasehold(s)
	}
}

// openSQLDB opens a database/sql pool of one connection on a file, as River
// (riversqlite's package doc) and goqite (its README) tell their users to,
// and records the journal mode and synchronous setting it got.
func openSQLDB(ctx context.Context, e *env, group, name, dsn string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	var mode string
	var sync int
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		db.Close()
		return nil, err
	}
	if err := db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
		db.Close()
		return nil, err
	}
	e.note(group+"/"+name, fmt.Sprintf("journal_mode=%s, synchronous=%s", mode, syncName(sync)))
	return db, nil
}

func syncName(n int) string {
	switch n {
	case 0:
		return "OFF"
	case 1:
		return "NORMAL"
	case 2:
		return "FULL"
	case 3:
		return "EXTRA"
	}
	return fmt.Sprint(n)
}

// openRiverSQLite is River with riversqlite. At its defaults the pool is
// sql.Open on the file with one connection, as riversqlite's doc says (so
// SQLite's own defaults: a rollback journal, synchronous=FULL).
func openRiverSQLite(normal bool, cooldown time.Duration) func(context.Context, *env) (target, error) {
	return func(ctx context.Context, e *env) (target, error) {
		dsn, group := e.newFile("river"), "sqlite"
		if normal {
			dsn, group = dsn+"?"+matchedPragmas, "sqlite-normal"
		}
		db, err := openSQLDB(ctx, e, group, "river", dsn)
		if err != nil {
			return nil, err
		}
		t, err := newRiver(ctx, riversqlite.New(db), "", cooldown, db.Close)
		if err != nil {
			db.Close()
		}
		return t, err
	}
}

// goqiteSchema is schema_sqlite.sql of goqite v0.4.0, which the library
// leaves to its user to create.
const goqiteSchema = `
create table goqite (
  id text primary key default ('m_' || lower(hex(randomblob(16)))),
  created text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  updated text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  queue text not null,
  body blob not null,
  timeout text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  received integer not null default 0,
  priority integer not null default 0
) strict;

create trigger goqite_updated_timestamp after update on goqite begin
  update goqite set updated = strftime('%Y-%m-%dT%H:%M:%fZ') where id = old.id;
end;

create index goqite_queue_priority_created_idx on goqite (queue, priority desc, created);
`

// goqiteTarget is goqite at its defaults (goqite.New with only DB and Name)
// on the pool its README sets up: WAL, a 5 s busy timeout, one connection.
// Workers are goroutines looping on Receive and Delete, the queue API; the
// jobs runner sleeps its poll interval (100 ms) whenever its limit of running
// jobs is reached, which at a limit of 1 caps it near 10 tasks/s.
type goqiteTarget struct {
	db *sql.DB
	q  *goqite.Queue
}

func openGoqite(normal bool) func(context.Context, *env) (target, error) {
	return func(ctx context.Context, e *env) (target, error) {
		dsn, group := e.newFile("goqite")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)", "sqlite"
		if normal {
			dsn, group = dsn+"&"+matchedPragmas, "sqlite-normal"
		}
		db, err := openSQLDB(ctx, e, group, "goqite", dsn)
		if err != nil {
			return nil, err
		}
		if _, err := db.ExecContext(ctx, goqiteSchema); err != nil {
			db.Close()
			return nil, err
		}
		return &goqiteTarget{db: db, q: goqite.New(goqite.NewOpts{DB: db, Name: queueName})}, nil
	}
}

func (g *goqiteTarget) enqueue(ctx context.Context) error {
	return g.q.Send(ctx, goqite.Message{Body: payload})
}

func (g *goqiteTarget) fill(ctx context.Context, n int) error {
	for n > 0 {
		tx, err := g.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		for range min(n, 1000) {
			if err := g.q.SendTx(ctx, tx, goqite.Message{Body: payload}); err != nil {
				_ = tx.Rollback()
				return err
			}
			n--
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

func (g *goqiteTarget) process(ctx context.Context, workers, n int, finished func()) (int, error) {
	var done atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil && done.Load() < int64(n) {
				m, err := g.q.Receive(ctx)
				if err == nil && m == nil {
					// Every remaining message is held by another worker.
					time.Sleep(time.Millisecond)
					continue
				}
				if err == nil {
					err = g.q.Delete(ctx, m.ID) // the no-op handler succeeded
				}
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						first = cmpOr(first, err)
						mu.Unlock()
					}
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	finished()
	return int(done.Load()), cmpOr(first, ctx.Err())
}

func (g *goqiteTarget) close() error { return g.db.Close() }

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
