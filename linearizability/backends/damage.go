package backends

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/model"
)

// The Damage hooks of the backends (linearizability.Backend.Damage). Each
// damages one task record in one atomic step of its store, where no index
// of the record's state reads: the error history no longer parses, so the
// record keeps its state and its place in every index, and the store must
// find the damage when it reads the record. A hook answers
// model.ErrNotFound when there is no record and model.ErrInvalidTransition
// when the record is already damaged or set aside, as model.Queue.Damage
// does.

func notFound(queue, id string) error {
	return fmt.Errorf("%w: no record of %s/%s to damage", model.ErrNotFound, queue, id)
}

func alreadyDamaged(queue, id string) error {
	return fmt.Errorf("%w: the record of %s/%s is already damaged", model.ErrInvalidTransition, queue, id)
}

// memoryDamage damages through the memory store's own Damage.
func memoryDamage(s *memory.Store) func(ctx context.Context, queue, id string) error {
	return s.Damage
}

// redisDamageScript replaces the error history of the packed task at
// KEYS[1] (field 13) with a value that does not parse, in one script, and
// writes the record back in the form it found: the fields one after the
// other, or one array as earlier versions of the store packed them. A
// quarantine record ({'quarantined', reason, was}) or a value that does
// not unpack is already damaged.
var redisDamageScript = goredis.NewScript(`
local v = redis.pcall('GET', KEYS[1])
if not v then return 'not_found' end
if type(v) ~= 'string' then return 'damaged' end
local r = {pcall(cmsgpack.unpack, v)}
if not r[1] then return 'damaged' end
local a, array = {unpack(r, 2)}, false
if #a == 1 and type(a[1]) == 'table' then a, array = a[1], true end
if #a < 13 or a[1] == 'quarantined' or a[13] == 'garbage' then
  return 'damaged'
end
a[13] = 'garbage'
if array then v = cmsgpack.pack(a) else v = cmsgpack.pack(unpack(a)) end
redis.call('SET', KEYS[1], v)
return 'ok'
`)

// redisDamage damages task records of the stores with prefix on c.
func redisDamage(c goredis.UniversalClient, prefix string) func(ctx context.Context, queue, id string) error {
	keys, err := redis.New(c, redis.WithPrefix(prefix)) // names keys; sends nothing
	return func(ctx context.Context, queue, id string) error {
		if err != nil {
			return err
		}
		res, err := redisDamageScript.Run(ctx, c, []string{keys.TaskKey(queue, id)}).Text()
		switch {
		case err != nil:
			return fmt.Errorf("backends: damage %s/%s: %w", queue, id, err)
		case res == "not_found":
			return notFound(queue, id)
		case res == "damaged":
			return alreadyDamaged(queue, id)
		}
		return nil
	}
}

// sqliteDamageValue and postgresDamageValue are error histories that do not
// parse: not JSON, and a JSON object where an array belongs.
const (
	sqliteDamageValue   = `{not json`
	postgresDamageValue = `{"damaged": true}`
)

// sqliteDamage damages task records of the database at path, through a
// connection of its own that takes the write lock for the read and the
// write (opened at the first damage, closed by the returned close).
func sqliteDamage(path string) (damage func(ctx context.Context, queue, id string) error, close func() error) {
	var mu sync.Mutex
	var db *sql.DB
	damage = func(ctx context.Context, queue, id string) error {
		mu.Lock()
		defer mu.Unlock()
		if db == nil {
			d, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
			if err != nil {
				return err
			}
			d.SetMaxOpenConns(1)
			db = d
		}
		conn, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return err
		}
		err = func() error {
			var state int64
			var errs string
			err := conn.QueryRowContext(ctx, `SELECT state, CAST(errors AS TEXT) FROM tasks WHERE queue = ?1 AND id = ?2`, queue, id).Scan(&state, &errs)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				return notFound(queue, id)
			case err != nil:
				return err
			case state == int64(model.Quarantined) || errs == sqliteDamageValue:
				return alreadyDamaged(queue, id)
			}
			_, err = conn.ExecContext(ctx, `UPDATE tasks SET errors = ?3 WHERE queue = ?1 AND id = ?2`, queue, id, sqliteDamageValue)
			return err
		}()
		if err != nil {
			_, rbErr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
			return errors.Join(err, rbErr)
		}
		_, err = conn.ExecContext(ctx, "COMMIT")
		return err
	}
	close = func() error {
		mu.Lock()
		defer mu.Unlock()
		if db == nil {
			return nil
		}
		return db.Close()
	}
	return damage, close
}

// postgresDamage damages task records of the stores in schema, in a
// transaction that takes the queue's row lock first, as every write of the
// store does, then locks the row it reads. Without the queue's lock the
// damage held the task's row while a Pop ran, and the Pop's SKIP LOCKED
// passed over a Ready task that was not yet damaged, which no instant of
// the damage explains (a Pop that found the queue empty).
func postgresDamage(pool *pgxpool.Pool, schema string) func(ctx context.Context, queue, id string) error {
	tasks := pgx.Identifier{schema}.Sanitize() + ".tasks"
	queues := pgx.Identifier{schema}.Sanitize() + ".queues"
	return func(ctx context.Context, queue, id string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT 1 FROM `+queues+` WHERE name = $1 FOR UPDATE`, queue); err != nil {
				return err
			}
			var state int16
			var kind string
			err := tx.QueryRow(ctx, `SELECT state, jsonb_typeof(errors) FROM `+tasks+` WHERE queue = $1 AND id = $2 FOR UPDATE`, queue, []byte(id)).Scan(&state, &kind)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				return notFound(queue, id)
			case err != nil:
				return err
			case state == int16(model.Quarantined) || kind != "array":
				return alreadyDamaged(queue, id)
			}
			_, err = tx.Exec(ctx, `UPDATE `+tasks+` SET errors = $3 WHERE queue = $1 AND id = $2`, queue, []byte(id), postgresDamageValue)
			return err
		})
	}
}
