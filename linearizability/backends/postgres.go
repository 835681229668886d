package backends

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/linearizability"
)

// Postgres returns the factory of PostgreSQL stores with the given Pop
// implementation on the database at url, and a cleanup that drops every
// schema the factory made (call it when the run ends). Each history works
// in a schema of its own: a schema of this run not in use, emptied when its
// history ended, or a new one ("leasehold_check_<run>_<n>"). The clients of
// a history share Stores two by two: each pair is a Store of its own on that
// schema (as another process would be), over one pool the run shares, so
// the histories have writes of one queue from different stores, which meet
// at the queue's lock, and from one store, which may share a transaction. The stores judge time by the
// harness's clock (WithClock), not the server's: the checker must know the
// clock readings an indeterminate op may have used.
//
// The run's connections are late now and then (see stallTracer), as a
// connection of a loaded process is: the statements of one op then meet
// those of another op at the server in orders a quiet machine rarely shows.
func Postgres(url string, mode postgres.PopMode) (linearizability.Factory, func() error, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, fmt.Errorf("backends: postgres URL: %w", err)
	}
	cfg.MaxConns = 32
	cfg.ConnConfig.Tracer = stallTracer{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("backends: postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("backends: postgres: %w", err)
	}
	run := time.Now().UnixNano()
	var mu sync.Mutex
	var free, all []string
	take := func() string {
		mu.Lock()
		defer mu.Unlock()
		if n := len(free); n > 0 {
			s := free[n-1]
			free = free[:n-1]
			return s
		}
		s := fmt.Sprintf("leasehold_check_%x_%d", run, historySeq.Add(1))
		all = append(all, s)
		return s
	}
	give := func(schema string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		q := pgx.Identifier{schema}.Sanitize()
		if _, err := pool.Exec(ctx, "DELETE FROM "+q+".tasks; DELETE FROM "+q+".queues; DELETE FROM "+q+"."+appTable); err != nil {
			return fmt.Errorf("backends: empty schema %s: %w", schema, err)
		}
		mu.Lock()
		free = append(free, schema)
		mu.Unlock()
		return nil
	}
	cleanup := func() error {
		mu.Lock()
		defer mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var err error
		for _, s := range all {
			if _, e := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); e != nil {
				err = errors.Join(err, fmt.Errorf("backends: drop schema %s: %w", s, e))
			}
		}
		all, free = nil, nil
		pool.Close()
		return err
	}
	factory := func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
		schema := take()
		opts := []postgres.Option{postgres.WithSchema(schema), postgres.WithClock(clock),
			postgres.WithCapacity(capacity), postgres.WithPopMode(mode)}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		first, err := postgres.New(ctx, pool, opts...) // creates the schema once
		if err != nil {
			return nil, err
		}
		table := pgx.Identifier{schema, appTable}.Sanitize()
		if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (key text PRIMARY KEY)`); err != nil {
			return nil, errors.Join(fmt.Errorf("backends: application table: %w", err), first.Close())
		}
		var hmu sync.Mutex
		stores := []*postgres.Store{first}
		clients := 0
		return &linearizability.Backend{
			Client: func() (core.Store, error) {
				hmu.Lock()
				defer hmu.Unlock()
				clients++
				if clients <= 2*len(stores) {
					return sharedStore{Store: stores[len(stores)-1], pool: pool, table: table}, nil
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				s, err := postgres.New(ctx, pool, opts...)
				if err != nil {
					return nil, err
				}
				stores = append(stores, s)
				return sharedStore{Store: s, pool: pool, table: table}, nil
			},
			Close: func() error {
				hmu.Lock()
				defer hmu.Unlock()
				var err error
				for _, s := range stores {
					err = errors.Join(err, s.Close())
				}
				return errors.Join(err, give(schema))
			},
			Damage: postgresDamage(pool, schema),
		}, nil
	}
	return factory, cleanup, nil
}

// The stalls of stallTracer: one transaction in stallOdds waits a random
// time below maxStall before its first round trip (BEGIN and the queue's
// lock) is sent, and the answer of one SELECT run outside a transaction in
// stallOdds reaches its caller as late.
const (
	stallOdds = 2
	maxStall  = 6 * time.Millisecond
)

// stallTracer delays the run's statements at two points, as a connection
// of a loaded process is late: before the round trip that begins a
// transaction (BEGIN with the statements sent with it), and after a SELECT
// of its own (a read, which is one statement). The stalls fall between the
// steps of an operation that reads outside its transaction and then writes
// in one, and reorder the transactions of different stores at the queue's
// lock; the statements inside a transaction go out at once, so a stall
// does not lengthen the time a transaction holds its locks.
type stallTracer struct{}

func stall(ctx context.Context) {
	if rand.IntN(stallOdds) != 0 {
		return
	}
	t := time.NewTimer(rand.N(maxStall))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// TraceQueryStart does nothing.
func (stallTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd stalls the answer of a SELECT run outside a transaction,
// now and then.
func (stallTracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if data.Err == nil && data.CommandTag.Select() && conn.PgConn().TxStatus() == 'I' {
		stall(ctx)
	}
}

// TraceBatchStart stalls a batch that begins a transaction, now and then.
func (stallTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if data.Batch != nil && len(data.Batch.QueuedQueries) > 0 && data.Batch.QueuedQueries[0].SQL == "BEGIN" {
		stall(ctx)
	}
	return ctx
}

// TraceBatchQuery does nothing.
func (stallTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd does nothing.
func (stallTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
