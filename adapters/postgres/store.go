package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// Store is a core.Store kept in a PostgreSQL database, under one schema. It
// is safe for concurrent use by many goroutines, and any number of
// processes may open stores on the same schema.
type Store struct {
	pool     *pgxpool.Pool
	ownPool  bool
	schema   string
	clock    core.Clock // nil: the database's clock
	capacity int
	popMode  PopMode
	q        queries

	notifier *notifier
	groups   sync.Map // queue name → *group
	rows     queueRows

	mu     sync.RWMutex // held shared by every operation, exclusively by Close
	closed bool
}

var (
	_ core.Store      = (*Store)(nil)
	_ core.BatchStore = (*Store)(nil)
)

// PopMode selects how Pop claims Ready tasks. Both give the same results;
// they differ in the SQL that does the claim.
type PopMode uint8

const (
	// PopUpdateReturning claims the tasks with one UPDATE … RETURNING whose
	// subselect picks them with FOR UPDATE SKIP LOCKED.
	PopUpdateReturning PopMode = iota
	// PopSelectSkipLocked selects the first Ready tasks with SELECT … FOR
	// UPDATE SKIP LOCKED, then claims them with a second statement.
	PopSelectSkipLocked
)

// String names the pop mode.
func (m PopMode) String() string {
	switch m {
	case PopUpdateReturning:
		return "update-returning"
	case PopSelectSkipLocked:
		return "select-skip-locked"
	}
	return fmt.Sprintf("PopMode(%d)", uint8(m))
}

// DefaultSchema is the schema the store's tables live in unless WithSchema
// names another.
const DefaultSchema = "leasehold"

// Option configures Open and New.
type Option func(*config)

type config struct {
	schema   string
	clock    core.Clock
	capacity int
	popMode  PopMode
	notify   bool
}

// WithSchema names the schema (created if needed) that holds the store's
// tables, so tenants and tests can share one database; default
// DefaultSchema. The name is quoted as it is given.
func WithSchema(name string) Option { return func(c *config) { c.schema = name } }

// WithClock makes the store judge time by clock instead of the database's
// clock_timestamp(). It is meant for tests (with a core.FakeClock); in
// production the database's clock is the one every client agrees on.
func WithClock(clock core.Clock) Option { return func(c *config) { c.clock = clock } }

// WithCapacity bounds the pending (Scheduled, Ready and Running) tasks of
// each queue; Enqueue beyond it is ErrQueueFull. 0, the default, means
// unlimited. Every store of a schema must be given the same capacity.
func WithCapacity(n int) Option { return func(c *config) { c.capacity = max(n, 0) } }

// WithPopMode selects the Pop implementation (default PopUpdateReturning).
func WithPopMode(m PopMode) Option { return func(c *config) { c.popMode = m } }

// WithoutNotifications turns LISTEN/NOTIFY off: the store sends no
// notifications and is no core.Notifier's source of wake-ups, so Workers
// poll.
func WithoutNotifications() Option { return func(c *config) { c.notify = false } }

// Open connects to the database at url (a PostgreSQL connection string,
// postgres://user@host:port/db?…), creates or migrates the store's schema,
// and returns a store that owns its connection pool and closes it on Close.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres: %v", core.ErrInvalidArgument, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("leasehold/postgres: connect: %w", err)
	}
	s, err := newStore(ctx, pool, true, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// New returns a store on a pool the application owns (the one its own
// transactions use, for EnqueueTx and AckTx), after creating or migrating
// the store's schema. Close leaves the pool open.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: postgres: nil pool", core.ErrInvalidArgument)
	}
	return newStore(ctx, pool, false, opts)
}

func newStore(ctx context.Context, pool *pgxpool.Pool, own bool, opts []Option) (*Store, error) {
	cfg := config{schema: DefaultSchema, notify: true}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.schema == "" || len(cfg.schema) > 63 || strings.ContainsRune(cfg.schema, 0):
		return nil, fmt.Errorf("%w: postgres: schema name %q must have 1..63 bytes and no NUL", core.ErrInvalidArgument, cfg.schema)
	case cfg.popMode != PopUpdateReturning && cfg.popMode != PopSelectSkipLocked:
		return nil, fmt.Errorf("%w: postgres: unknown pop mode %d", core.ErrInvalidArgument, cfg.popMode)
	}
	s := &Store{pool: pool, ownPool: own, schema: cfg.schema, clock: cfg.clock, capacity: cfg.capacity,
		popMode: cfg.popMode, q: buildQueries(pgx.Identifier{cfg.schema}.Sanitize())}
	if err := migrate(ctx, pool, s.schema, s.q.schema); err != nil {
		return nil, err
	}
	if cfg.notify {
		s.notifier = newNotifier(s)
	}
	return s, nil
}

// Pool returns the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the name of the schema the store's tables live in.
func (s *Store) Schema() string { return s.schema }

// String names the store.
func (s *Store) String() string {
	return fmt.Sprintf("postgres store, schema %s (pop %v)", s.schema, s.popMode)
}

// Close stops the store's listener and, for a store made by Open, closes
// its pool. It waits for operations in progress; later operations return
// core.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.notifier != nil {
		s.notifier.close()
	}
	if s.ownPool {
		s.pool.Close()
	}
	return nil
}

// DropSchema drops the store's schema with everything in it and closes the
// store. It is meant for tests and tools that made a schema of their own.
func (s *Store) DropSchema(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+s.q.schema+` CASCADE`)
	return errors.Join(err, s.Close())
}

// enter checks what every operation checks first, in the model store's
// order: the context, the queue name, that the store is open, then the
// operation's own arguments. On success the caller holds s.mu shared and
// must call s.mu.RUnlock.
func (s *Store) enter(ctx context.Context, queue string, validate func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := core.ValidateQueueName(queue); err != nil {
		return err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return core.ErrClosed
	}
	if validate != nil {
		if err := validate(); err != nil {
			s.mu.RUnlock()
			return err
		}
	}
	return nil
}

// querier is what an operation sends its statements through: the
// caller's transaction (a pgx.Tx), or a pool connection on which the
// operation began its own.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// lockFlags say what an operation does when it takes its queue's lock.
type lockFlags uint8

const (
	// lockNotify notifies the queue's listeners when the operation
	// commits: it may make a task Ready (a notification for an operation
	// that then does not is a wake-up for nothing, which costs a Pop).
	lockNotify lockFlags = 1 << iota
)

// notify notifies the queue's listeners when the transaction commits.
func (o *opTx) notify() error {
	if o.s.notifier == nil {
		return nil
	}
	_, err := o.tx.Exec(o.ctx, o.s.q.notify, o.s.notifier.channel, o.queue)
	return err
}

// op is one write operation's view of its transaction: the queue it holds
// locked, the instant it takes effect, and whether the queue has a row (a
// queue without one has no task).
type opTx struct {
	s     *Store
	ctx   context.Context
	tx    querier
	begin bool // the lock's round trip starts the transaction
	queue string
	now   time.Time
	seq   int64
	has   bool
	// paused is the queue's paused flag, read under its lock.
	paused bool
	// setAside lists the damaged rows the running operation's scan set
	// aside in this transaction, before its step runs again (scanWrite).
	setAside []string

	// pipe queues statements to follow the lock's, and piped reads their
	// results (nil: none).
	pipe  func(b *pgx.Batch)
	piped func(res pgx.BatchResults) error
	// final: the transaction's COMMIT goes with the lock's round trip, after pipe's statements (every operation of the
	// transaction is piped and final); release is called once COMMIT is
	// answered.
	final   bool
	release func()
}

// write performs one write operation in a transaction of its own: it locks
// the queue's row (every write of a queue holds it until it commits, which
// is what orders them and keeps the sequence without gaps), reads the clock
// and runs fn. If fn fails nothing it did is kept.
//
// Writes of one queue that arrive while a transaction of that queue is in
// progress in this store would wait for its lock anyway; they wait in the
// store instead, and the next transaction runs all of them, one after the
// other, under one lock, one clock reading and one COMMIT (see group).
func (s *Store) write(ctx context.Context, queue string, flags lockFlags, validate func() error, fn func(o *opTx) error) (time.Time, error) {
	return s.writePiped(ctx, queue, flags, validate, fn, nil)
}

// writePiped is write for an operation that can also send its statements
// with the lock, in the same round trip: pipe queues them on b and returns
// the function that reads their results. When the operation's transaction
// runs another operation before it that cannot, fn runs instead.
func (s *Store) writePiped(ctx context.Context, queue string, flags lockFlags, validate func() error, fn func(o *opTx) error, pipe pipeFunc) (time.Time, error) {
	return s.submit(ctx, queue, validate, &call{ctx: ctx, flags: flags, fn: fn, pipe: pipe, done: make(chan struct{})})
}

// writeFinal is writePiped for an operation whose piped statements decide
// it whole in the database: what they refuse they write nothing for, and
// nothing they find makes the store undo what they wrote (no row they read
// back can be damaged). A transaction of such operations alone sends its
// COMMIT with them, and so costs one round trip (see opTx.final).
func (s *Store) writeFinal(ctx context.Context, queue string, flags lockFlags, validate func() error, fn func(o *opTx) error, pipe pipeFunc) (time.Time, error) {
	return s.submit(ctx, queue, validate, &call{ctx: ctx, flags: flags, fn: fn, pipe: pipe, final: true, done: make(chan struct{})})
}

// submit runs c in the next transaction of its queue.
func (s *Store) submit(ctx context.Context, queue string, validate func() error, c *call) (time.Time, error) {
	if err := s.enter(ctx, queue, validate); err != nil {
		return time.Time{}, err
	}
	defer s.mu.RUnlock()
	g := s.group(queue)
	g.mu.Lock()
	for g.gone {
		// Its last transaction ended and it was dropped: take the new one.
		g.mu.Unlock()
		g = s.group(queue)
		g.mu.Lock()
	}
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		s.lead(g, queue, c)
		return c.now, c.err
	}
	g.waiting = append(g.waiting, c)
	g.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		g.mu.Lock()
		if i := slices.Index(g.waiting, c); i >= 0 {
			// Not taken into a transaction yet: it never happens.
			g.waiting = slices.Delete(g.waiting, i, i+1)
			g.mu.Unlock()
			return time.Time{}, ctx.Err()
		}
		g.mu.Unlock()
		<-c.done
	}
	if c.lead {
		s.lead(g, queue, c)
	}
	return c.now, c.err
}

// queueRows names the queues whose row a store has seen, locked, with a
// sequence past 0 (see opTx.lock). It is bounded: past maxQueueRows names
// it starts again, empty, which costs each queue one more INSERT of its
// row.
type queueRows struct {
	m sync.Map // queue name → struct{}
	n atomic.Int64
}

// maxQueueRows bounds the names a queueRows holds.
const maxQueueRows = 4096

func (r *queueRows) has(queue string) bool {
	_, ok := r.m.Load(queue)
	return ok
}

func (r *queueRows) add(queue string) {
	if _, loaded := r.m.LoadOrStore(queue, struct{}{}); !loaded && r.n.Add(1) > maxQueueRows {
		r.m.Clear()
		r.n.Store(0)
	}
}

func (r *queueRows) forget(queue string) {
	if _, loaded := r.m.LoadAndDelete(queue); loaded {
		r.n.Add(-1)
	}
}

// errQueueRowGone: a transaction that counted on its queue's row found
// none, and wrote nothing (see opTx.lock).
var errQueueRowGone = errors.New("leasehold/postgres: the queue's row is gone")

// maxGroup bounds the writes one transaction runs.
const maxGroup = 64

// group is the writes of one queue waiting in this store while a
// transaction of that queue runs (busy); the caller that finds it idle
// leads the next transaction.
type group struct {
	mu      sync.Mutex
	busy    bool
	gone    bool // dropped from the store's map: idle, and used no more
	waiting []*call
}

// pipeFunc queues an operation's statements on b, to follow the lock's in
// one round trip; they take the transaction's clock reading from the
// server (txNow). The function it returns reads their results, in order,
// once o.now is known.
type pipeFunc func(o *opTx, b *pgx.Batch) func(res pgx.BatchResults) error

// call is one write waiting for, or running in, a group's transaction.
type call struct {
	ctx   context.Context
	flags lockFlags
	fn    func(o *opTx) error
	pipe  pipeFunc      // nil: fn only
	final bool          // pipe's statements may commit before their results are read (writeFinal)
	done  chan struct{} // closed once now and err are set, or lead
	lead  bool          // the call leads the next transaction itself
	now   time.Time
	err   error
}

func (c *call) answer(now time.Time, err error) {
	if err != nil {
		now = time.Time{}
	}
	c.now, c.err = now, err
}

// group returns the queue's group, made on first use.
func (s *Store) group(queue string) *group {
	if g, ok := s.groups.Load(queue); ok {
		return g.(*group)
	}
	g, _ := s.groups.LoadOrStore(queue, &group{})
	return g.(*group)
}

// lead runs first and the writes waiting behind it (up to maxGroup) in one
// transaction, answers them, and hands the group to the next waiter, or
// drops it, so that a store keeps nothing for the queues it is not
// writing.
func (s *Store) lead(g *group, queue string, first *call) {
	g.mu.Lock()
	n := min(len(g.waiting), maxGroup-1)
	calls := append([]*call{first}, g.waiting[:n]...)
	g.waiting = slices.Delete(g.waiting, 0, n)
	g.mu.Unlock()
	released := false
	release := func() {
		if released {
			return
		}
		released = true
		g.mu.Lock()
		if len(g.waiting) > 0 {
			next := g.waiting[0]
			g.waiting = slices.Delete(g.waiting, 0, 1)
			next.lead = true
			close(next.done)
		} else {
			g.busy, g.gone = false, true
			s.groups.CompareAndDelete(queue, g)
		}
		g.mu.Unlock()
	}
	s.runGroup(queue, calls, release)
	release()
	for _, c := range calls[1:] {
		close(c.done)
	}
}

// hangUp closes conn's socket now, so that the server ends its session and
// rolls back the transaction it holds, with the queue's lock. A statement
// whose context ends mid-way makes pgx give the connection up and close it
// in the background, by a Terminate message. After a write cut short, the
// server takes that message as more of the half-sent one (and over TLS it
// may not go out at all: a write cut by the deadline leaves the stream
// unwritable), and pgx then waits up to 15 s for the server to close first,
// while the server, waiting for the client, keeps the transaction open and
// every other transaction of the queue waits behind its lock.
func hangUp(ctx context.Context, conn *pgx.Conn) {
	_ = conn.Close(ctx) // nothing when pgx has given the connection up already
	if nc := conn.PgConn().Conn(); nc != nil {
		_ = nc.Close()
	}
}

// commit commits the transaction on conn and calls release once the
// COMMIT is answered: the queue's lock is free then, and the next
// transaction of the queue may begin.
func (s *Store) commit(ctx context.Context, conn *pgxpool.Conn, release func()) error {
	tag, err := conn.Exec(ctx, "COMMIT")
	if err != nil && conn.Conn().IsClosed() {
		hangUp(ctx, conn.Conn())
	}
	release()
	if err != nil {
		return fmt.Errorf("leasehold/postgres: commit: %w", err)
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("leasehold/postgres: commit: the transaction was rolled back (%s)", tag)
	}
	return nil
}

// runGroup runs calls in one transaction, in order, and answers each. A
// call refused by the model's rules (which changes nothing) does not stop
// the others. Any other failure before COMMIT (a damaged row, the
// transport) rolls the transaction back, so none of the calls happened, and
// each is then run again in a transaction of its own, which gives it its
// own answer.

func (s *Store) runGroup(queue string, calls []*call, release func()) {
	ctx := calls[0].ctx
	if len(calls) > 1 {
		// The statements serve every call: they stop when every caller
		// has given up.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		var left atomic.Int32
		left.Store(int32(len(calls)))
		for _, c := range calls {
			stop := context.AfterFunc(c.ctx, func() {
				if left.Add(-1) == 0 {
					cancel()
				}
			})
			defer stop()
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		for _, c := range calls {
			c.answer(time.Time{}, fmt.Errorf("leasehold/postgres: %w", err))
		}
		return
	}
	// A connection given back inside a transaction (a COMMIT or ROLLBACK
	// that did not arrive) is closed by the pool, never reused.
	defer conn.Release()
	var flags lockFlags
	for _, c := range calls {
		flags |= c.flags
	}
	// BEGIN goes to the server with the lock, in one round trip, and so do
	// the statements of the calls up to the first that cannot be sent
	// before the clock is read.
	o := &opTx{s: s, ctx: ctx, tx: conn, queue: queue, begin: true}
	errs := make([]error, len(calls))
	piped := 0
	for piped < len(calls) && calls[piped].pipe != nil {
		piped++
	}
	o.final = piped == len(calls) && !slices.ContainsFunc(calls, func(c *call) bool { return !c.final })
	o.release = release
	if piped > 0 {
		reads := make([]func(pgx.BatchResults) error, piped)
		o.pipe = func(b *pgx.Batch) {
			for i, c := range calls[:piped] {
				reads[i] = c.pipe(o, b)
			}
		}
		o.piped = func(res pgx.BatchResults) error {
			for i, read := range reads {
				err := o.call(func(*opTx) error { return read(res) })
				if err != nil && !refusal(err) {
					return err
				}
				errs[i] = err
			}
			return nil
		}
	}
	err = o.run(flags, func(o *opTx) error {
		for i, c := range calls {
			if i < piped {
				continue
			}
			err := o.call(c.fn)
			if err != nil && !refusal(err) {
				return err
			}
			errs[i] = err
		}
		return nil
	})
	if err != nil {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, rerr := conn.Exec(rctx, "ROLLBACK"); rerr != nil {
			hangUp(rctx, conn.Conn())
		}
		if errors.Is(err, errQueueRowGone) {
			// Nothing was written: the same calls, in a transaction
			// that makes the row again if it may.
			conn.Release()
			s.runGroup(queue, calls, release)
			return
		}
		if len(calls) == 1 || o.final && !serverError(err) {
			// A COMMIT that went with the statements may have run: the
			// calls are not run again, and none is answered as refused.
			// (The server's error answer to one of them means it did not:
			// the server skips what follows an error in the round trip.)
			for _, c := range calls {
				c.answer(time.Time{}, err)
			}
			return
		}
		conn.Release()
		for _, c := range calls {
			s.runGroup(queue, []*call{c}, func() {})
		}
		return
	}
	if !o.final {
		err = s.commit(ctx, conn, release)
	}
	if err != nil {
		for i, c := range calls {
			// A refused call changed nothing, whatever became of the others.
			c.answer(o.now, cmp.Or(errs[i], err))
		}
		return
	}
	for i, c := range calls {
		c.answer(o.now, errs[i])
	}
}

// serverError reports whether err is the server's error answer to a
// statement (or to the COMMIT itself), rather than a transport failure.
func serverError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}

// refusal reports whether err is one of the model's refusals, after which
// the operation has written nothing: ErrCorrupt is not, as the row that
// could not be read may have been written by the failed statement.
func refusal(err error) bool {
	k := model.Kind(err)
	return k != nil && k != core.ErrCorrupt
}

// writeIn performs one write operation inside the caller's transaction, in
// a savepoint, so an operation that fails leaves the caller's transaction
// as it was.
func (s *Store) writeIn(ctx context.Context, outer pgx.Tx, queue string, flags lockFlags, validate func() error, fn func(o *opTx) error) (_ time.Time, err error) {
	if outer == nil {
		return time.Time{}, fmt.Errorf("%w: postgres: nil transaction", core.ErrInvalidArgument)
	}
	if err := s.enter(ctx, queue, validate); err != nil {
		return time.Time{}, err
	}
	defer s.mu.RUnlock()
	defer func() {
		// The caller's transaction may hold the queue's lock now: when
		// pgx gave its connection up, the server must hear of it at once.
		if err != nil && outer.Conn().IsClosed() {
			hangUp(ctx, outer.Conn())
		}
	}()
	// The queue's row lock is taken in the caller's transaction itself,
	// before the savepoint: a lock taken inside a savepoint is released
	// when a refusal rolls back to it, and the transaction must hold the
	// queue from its first operation to its end (a committed transaction
	// is its operations at one instant), whether an operation was refused
	// or not. A queue without a row gets its (empty) row here, in the
	// caller's transaction, so that there is a row to hold.
	b := &pgx.Batch{}
	b.Queue(s.q.ensureQueue, queue)
	b.Queue(s.q.lock, queue)
	if err := outer.SendBatch(ctx, b).Close(); err != nil {
		return time.Time{}, fmt.Errorf("leasehold/postgres: lock the queue: %w", err)
	}
	sp, err := outer.Begin(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("leasehold/postgres: savepoint: %w", err)
	}
	o := &opTx{s: s, ctx: ctx, tx: sp, queue: queue}
	if err := o.run(flags, fn); err != nil {
		if rerr := sp.Rollback(ctx); rerr != nil {
			return time.Time{}, errors.Join(err, fmt.Errorf("leasehold/postgres: rollback to savepoint: %w", rerr))
		}
		return time.Time{}, err
	}
	if err := sp.Commit(ctx); err != nil {
		return time.Time{}, fmt.Errorf("leasehold/postgres: release savepoint: %w", err)
	}
	return o.now, nil
}

func rollback(tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx) // a failed rollback closes the connection, which ends the transaction
}

// run locks the queue, reads the clock and runs fn, turning a panic into an
// error.
func (o *opTx) run(flags lockFlags, fn func(o *opTx) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("leasehold/postgres: internal error: %v", r)
		}
	}()
	if err := o.lock(flags); err != nil {
		return err
	}
	return fn(o)
}

// call runs one operation's fn, turning a panic into an error.
func (o *opTx) call(fn func(o *opTx) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("leasehold/postgres: internal error: %v", r)
		}
	}()
	return fn(o)
}

// lock takes the queue's row lock, then reads the sequence, the clock and
// whether the queue has tasks, in one round trip (the statements of a batch
// run one after the other, so the clock is read once the lock is held).
// The row is made if it is missing.
func (o *opTx) lock(flags lockFlags) error {
	// Every operation makes the row if it is missing: an INSERT that meets
	// a row another transaction is inserting waits for it, so even the
	// first operations of a queue take its lock in turn.
	//
	// A transaction of the store's own on a queue whose row it has seen
	// with a sequence past 0 (rows) sends neither the INSERT that makes a
	// missing row nor the check for tasks of a queue without a sequence:
	// the lock's own statement says whether the sequence is 0 and tasks
	// exist, and a row gone since (which no write of the store does) sends
	// the transaction's calls again, with both (errQueueRowGone).
	known := o.begin && o.s.rows.has(o.queue)
	b := &pgx.Batch{}
	if o.begin {
		b.Queue("BEGIN")
	}
	switch {
	case known:
	case o.final:
		b.Queue(o.s.q.ensureQueueFinal, o.queue)
	default:
		b.Queue(o.s.q.ensureQueue, o.queue)
	}
	b.Queue(o.s.q.lock, o.queue)
	var clientNow *int64 // the database's clock, read after the lock
	if o.s.clock != nil {
		// An injected clock is read before the round trip, after every
		// operation of the transaction was called.
		clientNow = micros(model.Round(o.s.clock.Now()))
	}
	if o.begin {
		b.Queue(o.s.q.dbNowOwn, clientNow)
	} else {
		b.Queue(o.s.q.dbNow, clientNow)
	}
	if !known {
		b.Queue(o.s.q.anyTask, o.queue)
	}
	notify := flags&lockNotify != 0 && o.s.notifier != nil
	if notify {
		b.Queue(o.s.q.notify, o.s.notifier.channel, o.queue)
	}
	if o.pipe != nil {
		o.pipe(b)
	}
	if o.final {
		b.Queue("COMMIT")
	}
	res := o.tx.SendBatch(o.ctx, b)
	defer res.Close()
	if o.begin {
		if _, err := res.Exec(); err != nil {
			return err
		}
	}
	if !known {
		if _, err := res.Exec(); err != nil {
			return err
		}
	}
	var any bool // the queue has tasks while its sequence is missing or 0
	switch err := res.QueryRow().Scan(&o.seq, &o.paused, &any); {
	case errors.Is(err, pgx.ErrNoRows):
		o.has = false
	case err != nil:
		return err
	default:
		o.has = true
	}
	if known && !o.has {
		// Nothing it sent is kept: a transaction that does not commit
		// with its statements is rolled back (runGroup), and the
		// statements sent with a COMMIT need the row's sequence: without
		// it, an Enqueue's INSERT adds no row (the queue has tasks) or
		// fails (it has none), and the COMMIT then rolls back; a Pop's or
		// an AckBatch's changes no row (popNowFinal, ackManyProbedFinal).
		o.s.rows.forget(o.queue)
		return errQueueRowGone
	}
	if o.has && o.seq > 0 && o.begin {
		o.s.rows.add(o.queue)
	}
	var dbNow int64
	if err := res.QueryRow().Scan(&dbNow); err != nil {
		return err
	}
	if !known {
		if err := res.QueryRow().Scan(&any); err != nil {
			return err
		}
	}
	if notify {
		if _, err := res.Exec(); err != nil {
			return err
		}
	}
	o.now = fromMicros(dbNow)
	if (!o.has || o.seq == 0) && any {
		// A queue without a row, or whose sequence has not started, must
		// have no task, else its row was lost or reset.
		return corrupt("queue %q has tasks but its sequence is missing or reset", o.queue)
	}
	if o.piped != nil {
		if err := o.piped(res); err != nil {
			var d *damagedError
			var di *damagedItem
			if o.final && (errors.As(err, &d) || errors.As(err, &di)) {
				// The statements vouched for every row they wrote
				// (soundSQL), and their COMMIT has run: the transaction
				// is not undone, nor the operation run again, as a
				// damaged row read before a COMMIT makes it.
				return fmt.Errorf("leasehold/postgres: internal error: a row written by statements sent with their COMMIT does not decode, and the transaction may have committed: %v", err)
			}
			return err
		}
	}
	if o.final {
		tag, err := res.Exec()
		o.release()
		if err != nil {
			return fmt.Errorf("leasehold/postgres: commit: %w", err)
		}
		if tag.String() != "COMMIT" {
			return fmt.Errorf("leasehold/postgres: commit: the transaction was rolled back (%s)", tag)
		}
	}
	return res.Close()
}

// read runs fn for a read operation, on the pool: every read is one
// statement, so it sees one committed state.
func (s *Store) read(ctx context.Context, queue string, validate func() error, fn func() error) (err error) {
	if err := s.enter(ctx, queue, validate); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("leasehold/postgres: internal error: %v", r)
		}
	}()
	return fn()
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{core.ErrCorrupt}, args...)...)
}

// isCode reports whether err is a PostgreSQL error with the given SQLSTATE.
func isCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}
