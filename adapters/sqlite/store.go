package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/core"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Store is a core.Store kept in one SQLite database file. It is safe for
// concurrent use by many goroutines, and several processes may open the same
// file at once.
type Store struct {
	path     string
	clock    core.Clock
	capacity int
	popMode  PopMode

	w       *sql.DB // the writer's pool, for opening and migrating
	wc      *wconn  // the writer connection (see commit.go)
	writers writers
	r       *sql.DB // read-only pool for Get, List and Counts
	rstmts  stmtCache

	grouped atomic.Int64 // operations committed in a batch of more than one

	// The queues' sequences (seq.go), touched only by the writer's leader.
	owner           int64                // this store's owner value
	seq             map[string]*seqState // what is known of each queue's sequence
	txSeqs          seqs                 // the running transaction's
	dataVersion     uint32               // the pager's data version as the last transaction ended
	haveDataVersion bool
	foreignAt       time.Time     // when another connection's commit was last seen
	lazyAfter       time.Duration // see the constant

	mu     sync.RWMutex // held shared by every operation, exclusively by Close
	closed bool
}

var _ core.Store = (*Store)(nil)

// PopMode selects how Pop claims Ready tasks. Both give the same results;
// they differ in the SQL that does the claim.
type PopMode uint8

const (
	// PopReturning claims the tasks with one UPDATE … FROM … RETURNING
	// statement that picks them, stamps them and returns them.
	PopReturning PopMode = iota
	// PopSelectUpdate selects the first Ready tasks, then updates each one
	// with its state and version re-checked in the UPDATE's WHERE clause,
	// in the same transaction.
	PopSelectUpdate
)

// String names the pop mode.
func (m PopMode) String() string {
	switch m {
	case PopReturning:
		return "returning"
	case PopSelectUpdate:
		return "select-update"
	}
	return fmt.Sprintf("PopMode(%d)", uint8(m))
}

// Synchronous is SQLite's synchronous setting for the writer connection.
type Synchronous uint8

const (
	// SyncFull syncs the write-ahead log at every commit: an acknowledged
	// operation survives a crash of the process and of the host.
	SyncFull Synchronous = iota
	// SyncNormal syncs the log only at checkpoints: an acknowledged
	// operation survives a crash of the process, but the last ones may be
	// lost if the host loses power.
	SyncNormal
)

// DefaultBusyTimeout is how long a transaction waits for another process's
// write lock before it fails, unless WithBusyTimeout says otherwise.
const DefaultBusyTimeout = 10 * time.Second

// DefaultCheckpointPages is how many pages the write-ahead log grows to
// before the writer copies them into the database file (SQLite's
// wal_autocheckpoint), unless WithCheckpointPages says otherwise: about 32 MB
// of log with 4 KB pages. A checkpoint copies each page once however many
// commits rewrote it, and syncs the file, so a longer log costs fewer copies
// and syncs per operation; SQLite's own default is 1000.
const DefaultCheckpointPages = 8000

// DefaultLiteQueueMaxAttempts is the MaxAttempts given to messages imported
// from a LiteQueue database, unless WithLiteQueueMaxAttempts says otherwise.
const DefaultLiteQueueMaxAttempts = 3

// DefaultLiteQueueName names the queue that receives a LiteQueue database's
// messages when its file name does not give one (see WithLiteQueueName).
const DefaultLiteQueueName = "litequeue"

// Option configures Open.
type Option func(*config)

type config struct {
	clock          core.Clock
	capacity       int
	popMode        PopMode
	busyTimeout    time.Duration
	readers        int
	sync           Synchronous
	checkpoint     int
	legacyQueue    string
	legacyQueueSet bool
	legacyAttempts int
}

// WithClock makes the store judge time by c instead of core.SystemClock.
func WithClock(c core.Clock) Option { return func(cfg *config) { cfg.clock = c } }

// WithCapacity bounds the pending (Scheduled, Ready and Running) tasks of each
// queue; Enqueue beyond it is ErrQueueFull. 0, the default, means unlimited.
func WithCapacity(n int) Option { return func(cfg *config) { cfg.capacity = max(n, 0) } }

// WithPopMode selects the Pop implementation (default PopReturning).
func WithPopMode(m PopMode) Option { return func(cfg *config) { cfg.popMode = m } }

// WithBusyTimeout sets how long a transaction waits for the write lock held
// by another process (default DefaultBusyTimeout).
func WithBusyTimeout(d time.Duration) Option { return func(cfg *config) { cfg.busyTimeout = d } }

// WithReaders sets the size of the read-only connection pool (default: the
// number of CPUs, at least 2).
func WithReaders(n int) Option { return func(cfg *config) { cfg.readers = n } }

// WithSynchronous sets when commits reach the disk (default SyncFull).
func WithSynchronous(s Synchronous) Option { return func(cfg *config) { cfg.sync = s } }

// WithCheckpointPages sets how many pages the write-ahead log holds before
// the writer checkpoints it (default DefaultCheckpointPages; at least 1).
func WithCheckpointPages(n int) Option { return func(cfg *config) { cfg.checkpoint = n } }

// WithLiteQueueName names the queue that receives the messages when Open
// migrates a LiteQueue database. By default it is the LiteQueue queue name
// taken from the file name ("<name>.queue.sqlite3"), or DefaultLiteQueueName.
func WithLiteQueueName(name string) Option {
	return func(cfg *config) { cfg.legacyQueue, cfg.legacyQueueSet = name, true }
}

// WithLiteQueueMaxAttempts sets the MaxAttempts of the tasks Open imports
// from a LiteQueue database (default DefaultLiteQueueMaxAttempts).
func WithLiteQueueMaxAttempts(n int) Option {
	return func(cfg *config) { cfg.legacyAttempts = n }
}

// Open opens (creating it if needed) the leasehold database at path, brings
// its schema up to date, and returns a store on it. A database created by
// LiteQueue is migrated in place (see the package documentation). The store
// holds connections and a goroutine until Close.
func Open(path string, opts ...Option) (*Store, error) {
	cfg := config{
		clock:          core.SystemClock{},
		busyTimeout:    DefaultBusyTimeout,
		readers:        max(runtime.NumCPU(), 2),
		legacyAttempts: DefaultLiteQueueMaxAttempts,
		checkpoint:     DefaultCheckpointPages,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkConfig(path, &cfg); err != nil {
		return nil, err
	}
	common := fmt.Sprintf("_pragma=busy_timeout(%d)", cfg.busyTimeout.Milliseconds())
	syncMode := "FULL"
	if cfg.sync == SyncNormal {
		syncMode = "NORMAL"
	}
	wdsn := path + "?" + common + "&_txlock=immediate&_pragma=journal_mode(WAL)&_pragma=synchronous(" + syncMode + ")" +
		fmt.Sprintf("&_pragma=wal_autocheckpoint(%d)", cfg.checkpoint)
	w, err := sql.Open("sqlite", wdsn)
	if err != nil {
		return nil, fmt.Errorf("leasehold/sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := migrate(w, path, cfg); err != nil {
		w.Close()
		return nil, err
	}
	r, err := sql.Open("sqlite", path+"?"+common+"&_query_only=1")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("leasehold/sqlite: open %s: %w", path, err)
	}
	r.SetMaxOpenConns(cfg.readers)
	r.SetMaxIdleConns(cfg.readers)
	// The writer connection is the driver's own, opened with the same
	// settings as the pool's and driven directly (see wconn).
	dc, err := w.Driver().Open(wdsn)
	if err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("leasehold/sqlite: open %s: %w", path, err)
	}
	wc, err := newWconn(dc)
	if err != nil {
		dc.Close()
		r.Close()
		w.Close()
		return nil, err
	}
	s := &Store{path: path, clock: cfg.clock, capacity: cfg.capacity, popMode: cfg.popMode, w: w, wc: wc, r: r,
		owner: newOwner(), seq: map[string]*seqState{}, txSeqs: seqs{m: map[string]*seqState{}}, lazyAfter: lazyAfter}
	s.rstmts.db = r
	return s, nil
}

// stmtCache holds the statements prepared on the readers' pool, each
// prepared once, when an operation first needs it.
type stmtCache struct {
	db *sql.DB
	m  sync.Map   // query -> *sql.Stmt
	mu sync.Mutex // serializes preparing
}

func (c *stmtCache) lookup(q string) *sql.Stmt {
	if st, ok := c.m.Load(q); ok {
		return st.(*sql.Stmt)
	}
	return nil
}

// prepare makes sure every query in qs is prepared.
func (c *stmtCache) prepare(ctx context.Context, qs ...string) error {
	for _, q := range qs {
		if c.lookup(q) != nil {
			continue
		}
		c.mu.Lock()
		if c.lookup(q) == nil {
			st, err := c.db.PrepareContext(ctx, q)
			if err != nil {
				c.mu.Unlock()
				return fmt.Errorf("leasehold/sqlite: prepare %q: %w", firstLine(q), err)
			}
			c.m.Store(q, st)
		}
		c.mu.Unlock()
	}
	return nil
}

func (c *stmtCache) close() {
	c.m.Range(func(_, st any) bool {
		st.(*sql.Stmt).Close()
		return true
	})
}

func checkConfig(path string, cfg *config) error {
	switch {
	case path == "" || path == ":memory:" || strings.HasPrefix(path, "file:"):
		return fmt.Errorf("%w: sqlite: path %q: give the path of a database file (for an in-memory store use adapters/memory)", core.ErrInvalidArgument, path)
	case strings.ContainsAny(path, "?#"):
		return fmt.Errorf("%w: sqlite: path %q must not contain '?' or '#'", core.ErrInvalidArgument, path)
	case cfg.clock == nil:
		return fmt.Errorf("%w: sqlite: nil clock", core.ErrInvalidArgument)
	case cfg.popMode != PopReturning && cfg.popMode != PopSelectUpdate:
		return fmt.Errorf("%w: sqlite: unknown pop mode %d", core.ErrInvalidArgument, cfg.popMode)
	case cfg.sync != SyncFull && cfg.sync != SyncNormal:
		return fmt.Errorf("%w: sqlite: unknown synchronous setting %d", core.ErrInvalidArgument, cfg.sync)
	case cfg.checkpoint < 1:
		return fmt.Errorf("%w: sqlite: checkpoint pages %d < 1", core.ErrInvalidArgument, cfg.checkpoint)
	case cfg.busyTimeout < 0 || cfg.readers < 1:
		return fmt.Errorf("%w: sqlite: busy timeout %v, readers %d", core.ErrInvalidArgument, cfg.busyTimeout, cfg.readers)
	case cfg.legacyAttempts < 1:
		return fmt.Errorf("%w: sqlite: LiteQueue max attempts %d < 1", core.ErrInvalidArgument, cfg.legacyAttempts)
	}
	if !cfg.legacyQueueSet {
		cfg.legacyQueue = DefaultLiteQueueName
		base := filepath.Base(path)
		if name, ok := strings.CutSuffix(base, ".queue.sqlite3"); ok && core.ValidateQueueName(name) == nil {
			cfg.legacyQueue = name
		}
	}
	if err := core.ValidateQueueName(cfg.legacyQueue); err != nil {
		return fmt.Errorf("sqlite: LiteQueue queue name: %w", err)
	}
	return nil
}

// Close closes the database. It waits for operations in progress; later
// operations return core.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	// Every operation has returned: none holds or waits for the writer.
	s.releaseSeqs()
	return s.closeDBs()
}

func (s *Store) closeDBs() error {
	s.rstmts.close()
	return errors.Join(s.wc.close(), s.r.Close(), s.w.Close())
}

// Vacuum rebuilds the database file to return the space of deleted tasks to
// the file system. It takes the write lock for as long as it runs.
func (s *Store) Vacuum(ctx context.Context) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return core.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	j := newJob(ctx)
	j.direct = func(c *wconn) error {
		_, err := c.exec("VACUUM")
		return err
	}
	s.submit(j)
	if j.err != nil {
		return fmt.Errorf("leasehold/sqlite: vacuum: %w", j.err)
	}
	return nil
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// String names the store.
func (s *Store) String() string { return fmt.Sprintf("sqlite store %s (pop %v)", s.path, s.popMode) }

// tx is one write transaction: on the writer connection, or the caller's
// own (EnqueueTx).
type tx struct {
	s  *Store
	c  stmtRunner
	op *opState // of the operation running
	sq *seqs    // the transaction's sequences (seq.go)
}

// stmtRunner runs the statements of a transaction: *wconn, or sqlTx for a
// caller's *sql.Tx.
type stmtRunner interface {
	execFor(op *opState, q string, args ...any) (driver.Result, error)
	queryFor(op *opState, q string, args ...any) (*rows, error)
}

func (t tx) query(q string, args ...any) (*rows, error) { return t.c.queryFor(t.op, q, args...) }

func (t tx) exec(q string, args ...any) (driver.Result, error) { return t.c.execFor(t.op, q, args...) }

func (t tx) queryRow(q string, args ...any) row {
	r, err := t.c.queryFor(t.op, q, args...)
	return row{rows: r, err: err}
}

// enter checks what every operation checks first, in the model store's order:
// the context, the queue name, that the store is open, then the operation's
// own arguments. On success the caller holds s.mu shared and must call
// s.mu.RUnlock.
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

// write performs one write operation: fn runs inside a BEGIN IMMEDIATE
// transaction on the writer connection (see commit.go), with now read from the clock
// once the write lock is held, so it is the instant the operation takes
// effect. If fn returns an error, nothing it did is kept. fn may run more
// than once (in a new transaction, when another operation's
// failure aborted the first), so fn must set its results afresh each time.
func (s *Store) write(ctx context.Context, queue string, validate func() error, fn func(t tx, now time.Time) error) (time.Time, error) {
	if err := s.enter(ctx, queue, validate); err != nil {
		return time.Time{}, err
	}
	defer s.mu.RUnlock()
	j := newJob(ctx)
	j.fn = fn
	s.submit(j)
	if j.err != nil {
		return time.Time{}, j.err
	}
	return j.now, nil
}

// read runs fn against the read-only pool. Every read is one statement, so it
// sees one committed state of the database.
func (s *Store) read(ctx context.Context, queue string, validate func() error, q string, fn func(st *sql.Stmt) error) (err error) {
	if err := s.enter(ctx, queue, validate); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("leasehold/sqlite: internal error: %v", r)
		}
	}()
	if err := s.rstmts.prepare(ctx, q); err != nil {
		return err
	}
	return fn(s.rstmts.lookup(q))
}

func firstLine(q string) string {
	q = strings.TrimSpace(q)
	if i := strings.IndexByte(q, '\n'); i >= 0 {
		return q[:i] + " …"
	}
	return q
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{core.ErrCorrupt}, args...)...)
}
