package sqlite

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Group commit. With synchronous=FULL every commit waits for the disk, so
// the writes of a store are serialized on the writer connection and the
// operations waiting at one moment run in one transaction and commit
// together: one sync for the batch instead of one per operation. An
// operation that is refused changes nothing (each one checks before it
// writes, and a guarded statement that refuses matches no row), so it needs
// no savepoint: the others go on and commit. One that fails after it has
// written undoes the whole transaction, and the others run again in a new
// one. An operation still returns only after the commit that made it
// durable.
//
// There is no committer goroutine: the caller of an operation that finds
// the writer idle becomes the leader and runs the transaction itself, with
// every operation queued by then; operations that arrive while it runs
// queue, and when it has committed it hands the lead to the oldest of them,
// whose goroutine runs the next batch. An operation with nothing to share
// its transaction with thus runs on its caller's goroutine, with no
// hand-off between threads.
//
// Atomicity and order are those of one transaction per operation: the
// operations of a batch were all in progress at once, the leader runs
// them one after the other in the order they arrived, each reading the
// clock when its turn comes, and each sees the effects of those before it.

// maxGroup bounds the operations committed together.
const maxGroup = 64

// The transaction of a batch, prepared once on the writer connection like
// every other statement. BEGIN IMMEDIATE takes the write lock before
// anything is read.
const (
	sqlBegin    = `BEGIN IMMEDIATE`
	sqlCommit   = `COMMIT`
	sqlRollback = `ROLLBACK`
)

// job is one write operation waiting for the writer connection.
type job struct {
	ctx context.Context
	fn  func(t tx, now time.Time) error
	// direct, when set, runs instead of fn on the writer connection outside
	// any transaction (VACUUM cannot run inside one).
	direct func(c *wconn) error

	now time.Time // the clock reading it ran with
	err error
	op  opState
	// wake receives once: when the job has finished, or, with lead set,
	// when its goroutine is to lead the next batch.
	wake chan struct{}
	lead bool
}

func newJob(ctx context.Context) *job { return &job{ctx: ctx, wake: make(chan struct{}, 1)} }

func (j *job) finish(err error) {
	j.err = err
	j.wake <- struct{}{}
}

// writers is the queue of the writer connection: the operations waiting
// for it and whether a leader holds it.
type writers struct {
	mu      sync.Mutex
	queue   []*job
	leading bool
	batch   []*job // the leader's batch, reused
	// submitting counts the operations between the start and the end of
	// submit: the leader yields before collecting only when another is
	// under way (see lead).
	submitting atomic.Int32
}

// submit runs j on the writer connection, in a batch with the operations
// waiting at the same time, and returns when j has finished.
func (s *Store) submit(j *job) {
	w := &s.writers
	w.submitting.Add(1)
	defer w.submitting.Add(-1)
	w.mu.Lock()
	w.queue = append(w.queue, j)
	if w.leading {
		w.mu.Unlock()
		<-j.wake
		if !j.lead {
			return // a leader ran it
		}
		// j leads now; it is the oldest in the queue.
	} else {
		w.leading = true
		w.mu.Unlock()
	}
	s.lead()
	<-j.wake // the batch has finished j
}

// lead runs one batch from the head of the queue, then passes the lead to
// the oldest operation still queued or leaves the writer idle.
func (s *Store) lead() {
	w := &s.writers
	// Yield once before collecting while another operation is under way:
	// one issued at the same moment (a worker's Pop beside the
	// acknowledgement of a task) is then queued in time to share this
	// transaction. Alone, the leader does not: a yield wakes another
	// thread of the Go runtime to look for work, which cost a lone
	// Enqueue a quarter of its CPU time.
	if w.submitting.Load() > 1 {
		runtime.Gosched()
	}
	w.mu.Lock()
	n := 0
	if w.queue[0].direct != nil {
		n = 1 // a direct job runs alone
	} else {
		for n < len(w.queue) && n < maxGroup && w.queue[n].direct == nil {
			n++
		}
	}
	batch := append(w.batch[:0], w.queue[:n]...)
	rest := copy(w.queue, w.queue[n:])
	clear(w.queue[rest:])
	w.queue = w.queue[:rest]
	w.mu.Unlock()

	if batch[0].direct != nil {
		j := batch[0]
		j.finish(s.direct(j))
	} else {
		for pending := batch; len(pending) > 0; {
			pending = s.commitBatch(s.wc, pending)
		}
	}
	clear(batch)
	w.batch = batch[:0]

	w.mu.Lock()
	if len(w.queue) == 0 {
		w.leading = false
	} else {
		next := w.queue[0]
		next.lead = true
		next.wake <- struct{}{}
	}
	w.mu.Unlock()
}

// direct runs a direct job, turning a panic into an error.
func (s *Store) direct(j *job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("leasehold/sqlite: internal error: %v", r)
		}
	}()
	if err := j.ctx.Err(); err != nil {
		return err
	}
	return j.direct(s.wc)
}

// contained reports whether err leaves the transaction usable: the errors of
// the model and ErrCorrupt are decided in Go after statements that
// succeeded, so an operation that has changed no row by then leaves the
// transaction as it found it. Any other error (from SQLite, or a panic) may
// have ended the transaction.
func contained(err error) bool {
	return model.Kind(err) != nil || errors.Is(err, core.ErrCorrupt)
}

// commitBatch runs the operations of jobs in one transaction and commits it.
// An operation runs without a savepoint of its own: one that is refused
// before it has changed a row (the guarded statements refuse by matching
// none) is answered and the others go on. When an operation fails after it
// has changed a row, or in a way that may have ended the transaction,
// commitBatch rolls everything back, fails that operation, and returns the
// others to be run again in a new transaction; when a scan of an operation
// met a damaged record, it is returned with them, to run again with the
// record set aside first (tx.settingAside).
func (s *Store) commitBatch(c *wconn, jobs []*job) (again []*job) {
	runnable := jobs[:0:0]
	for _, j := range jobs {
		if err := j.ctx.Err(); err != nil {
			j.finish(err) // never started
			continue
		}
		runnable = append(runnable, j)
	}
	if len(runnable) == 0 {
		return nil
	}
	// An operation's own context does not reach the statements: it must
	// not interrupt the others' transaction.
	if _, err := c.exec(sqlBegin); err != nil {
		err = beginError(err)
		for _, j := range runnable {
			j.finish(err)
		}
		return nil
	}
	rollback := func() { c.exec(sqlRollback) } // if it fails, the transaction is gone already
	defer s.noteDataVersion(c)                 // once the transaction has ended, whichever way
	if err := s.checkDataVersion(c); err != nil {
		rollback()
		for _, j := range runnable {
			j.finish(fmt.Errorf("leasehold/sqlite: data version: %w", err))
		}
		return nil
	}
	sq := &s.txSeqs
	clear(sq.m)
	done := make([]*job, 0, len(runnable))
	for i := 0; i < len(runnable); i++ {
		j := runnable[i]
		j.op.wrote = false
		t := tx{s: s, c: c, op: &j.op, sq: sq}
		now := model.Round(s.clock.Now())
		err := run(j, t, now)
		var redo *redoError
		switch {
		case err == nil:
			j.now = now
			done = append(done, j)
		case errors.As(err, &redo):
			j.op.aside = append(j.op.aside, redo.d)
			if !j.op.wrote {
				i-- // nothing to undo: run it again now
				continue
			}
			rollback()
			return append(done, runnable[i:]...)
		case !contained(err) || j.op.wrote:
			rollback()
			j.finish(err)
			return append(done, runnable[i+1:]...)
		default:
			j.finish(err) // refused, and it changed nothing
		}
	}
	if len(done) == 0 {
		rollback() // nothing to commit
		return nil
	}
	if err := s.flushSeqs(tx{s: s, c: c, op: &opState{}, sq: sq}); err != nil {
		rollback()
		for _, j := range done {
			j.finish(fmt.Errorf("leasehold/sqlite: writing the sequence: %w", err))
		}
		return nil
	}
	if _, err := c.exec(sqlCommit); err != nil {
		rollback() // a COMMIT that failed may leave the transaction open
		for _, j := range done {
			j.finish(fmt.Errorf("leasehold/sqlite: commit: %w", err))
		}
		return nil
	}
	s.publishSeqs(tx{sq: sq})
	if len(runnable) > 1 {
		s.grouped.Add(int64(len(done)))
	}
	for _, j := range done {
		j.finish(nil)
	}
	return nil
}

// beginError is the error of the operations of a transaction whose BEGIN
// IMMEDIATE failed: none of them ran. When the write lock stayed with
// another connection past the busy timeout (SQLITE_BUSY), that is
// core.ErrBusy, a definite answer: the caller may make the call again.
func beginError(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY {
		return fmt.Errorf("leasehold/sqlite: begin: %w: %w", core.ErrBusy, err)
	}
	return fmt.Errorf("leasehold/sqlite: begin: %w", err)
}

// redoError is what a scan returns when it meets a damaged record: the
// operation runs again from its start with the record set aside first.
type redoError struct{ d *damagedError }

func (e *redoError) Error() string { return e.d.Error() }

func (e *redoError) Unwrap() error { return e.d }

// run runs one operation, turning a panic into an error.
func run(j *job, t tx, now time.Time) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("leasehold/sqlite: internal error: %v", r)
		}
	}()
	return j.fn(t, now)
}
