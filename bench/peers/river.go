package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// noopArgs is the job River runs: no arguments ("{}"), no work.
type noopArgs struct{}

// Kind names the job for River.
func (noopArgs) Kind() string { return "noop" }

// quietLogger keeps the libraries' informational lines off the output.
var quietLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// riverTarget is River at its defaults over either driver: an insert-only
// client (no Queues) to enqueue, a client with the default queue at
// MaxWorkers N to process. A job is done when River reports it completed.
type riverTarget[TTx any] struct {
	driver   riverdriver.Driver[TTx]
	schema   string
	cooldown time.Duration // FetchCooldown of the processing client; 0: River's default
	poll     time.Duration // FetchPollInterval of the processing client; 0: River's default
	insert   *river.Client[TTx]
	cleanup  func() error
}

func newRiver[TTx any](ctx context.Context, d riverdriver.Driver[TTx], schema string, cooldown time.Duration, cleanup func() error) (*riverTarget[TTx], error) {
	m, err := rivermigrate.New(d, &rivermigrate.Config{Schema: schema, Logger: quietLogger})
	if err != nil {
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, err
	}
	c, err := river.NewClient(d, &river.Config{Schema: schema, Logger: quietLogger})
	if err != nil {
		return nil, err
	}
	return &riverTarget[TTx]{driver: d, schema: schema, cooldown: cooldown, insert: c, cleanup: cleanup}, nil
}

func (r *riverTarget[TTx]) enqueue(ctx context.Context) error {
	_, err := r.insert.Insert(ctx, noopArgs{}, nil)
	return err
}

func (r *riverTarget[TTx]) fill(ctx context.Context, n int) error {
	for n > 0 {
		p := make([]river.InsertManyParams, min(n, 1000))
		for i := range p {
			p[i].Args = noopArgs{}
		}
		if _, err := r.insert.InsertMany(ctx, p); err != nil {
			return err
		}
		n -= len(p)
	}
	return nil
}

func (r *riverTarget[TTx]) process(ctx context.Context, workers, n int, finished func()) (int, error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error { return nil }))
	c, err := river.NewClient(r.driver, &river.Config{
		Schema:            r.schema,
		Logger:            quietLogger,
		FetchCooldown:     r.cooldown,
		FetchPollInterval: r.poll,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           ws,
	})
	if err != nil {
		return 0, err
	}
	events, unsubscribe := c.SubscribeConfig(&river.SubscribeConfig{
		Kinds:    []river.EventKind{river.EventKindJobCompleted},
		ChanSize: n + 1000, // never full, so no completion goes uncounted
	})
	defer unsubscribe()
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return 0, err
	}
	done := 0
	for done < n && err == nil {
		select {
		case <-events:
			done++
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	finished()
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownLimit)
	defer cancel()
	if serr := c.Stop(stop); serr != nil && err == nil {
		err = serr
	}
	return done, err
}

func (r *riverTarget[TTx]) close() error { return r.cleanup() }

// riverSchema is the PostgreSQL schema River runs in, created for each
// measurement and dropped after it and at the end of the run.
const riverSchema = "leasehold_peers_river"

// openRiverPostgres is River with riverpgxv5 with the processing client's
// FetchCooldown and FetchPollInterval (0: River's defaults).
func openRiverPostgres(cooldown, poll time.Duration) func(context.Context, *env) (target, error) {
	return func(ctx context.Context, e *env) (target, error) { return riverPostgres(ctx, e, cooldown, poll) }
}

func riverPostgres(ctx context.Context, e *env, cooldown, poll time.Duration) (target, error) {
	if err := dropRiverSchema(ctx, e.cfg.pgURL); err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, e.cfg.pgURL)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+riverSchema); err != nil {
		pool.Close()
		return nil, err
	}
	var version, syncCommit, fsync string
	if err := pool.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('synchronous_commit'), current_setting('fsync')").
		Scan(&version, &syncCommit, &fsync); err == nil {
		e.note("postgres/river", "PostgreSQL "+version+", synchronous_commit="+syncCommit+", fsync="+fsync)
	}
	cleanup := func() error {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return dropRiverSchema(ctx, e.cfg.pgURL)
	}
	t, err := newRiver[pgx.Tx](ctx, riverpgxv5.New(pool), riverSchema, cooldown, cleanup)
	if err != nil {
		return nil, errors.Join(err, cleanup())
	}
	t.poll = poll
	return t, nil
}

// leaseholdSchema is the schema of the leasehold-postgres cells, dropped
// before and after each.
const leaseholdSchema = "leasehold_bench"

// openLeaseholdPostgres is leasehold's PostgreSQL adapter at its defaults
// (postgres.Open: a pgxpool at pgx's defaults, notifications on), in a
// schema of its own on the database River uses.
func openLeaseholdPostgres(ctx context.Context, e *env) (target, error) {
	if err := dropSchema(ctx, e.cfg.pgURL, leaseholdSchema); err != nil {
		return nil, err
	}
	s, err := postgres.Open(ctx, e.cfg.pgURL, postgres.WithSchema(leaseholdSchema))
	if err != nil {
		return nil, err
	}
	t, err := newLeasehold(&droppingStore{Store: s, url: e.cfg.pgURL})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// droppingStore drops the cell's schema when it is closed.
type droppingStore struct {
	*postgres.Store
	url string
}

func (d *droppingStore) Close() error {
	err := d.Store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return errors.Join(err, dropSchema(ctx, d.url, leaseholdSchema))
}

func dropSchema(ctx context.Context, url, schema string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	return err
}

func dropRiverSchema(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+riverSchema+" CASCADE")
	return err
}
