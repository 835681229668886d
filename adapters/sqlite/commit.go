package sqlite

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// Group commit. With synchronous=FULL every commit waits for the disk, so
// the writes of a store are serialized on the writer connection and the
// operations waiting at one moment run in one transaction and commit
// together: one sync for the batch instead of one per operation. Each
// operation runs inside a savepoint of its own; one that fails is rolled
// back to its savepoint and changes nothing, and the others commit. An
// operation still returns only after the commit that made it durable.
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

// The transaction of a batch and the savepoint of one operation within it,
// prepared once on the writer connection like every other statement.
// BEGIN IMMEDIATE takes the write lock before anything is read.
const (
	sqlBegin      = `BEGIN IMMEDIATE`
	sqlCommit     = `COMMIT`
	sqlRollback   = `ROLLBACK`
	sqlSavepoint  = `SAVEPOINT op`
	sqlRelease    = `RELEASE op`
	sqlRollbackTo = `ROLLBACK TO op`
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
}

// submit runs j on the writer connection, in a batch with the operations
// waiting at the same time, and returns when j has finished.
func (s *Store) submit(j *job) {
	w := &s.writers
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
	// Yield once before collecting: an operation issued at the same moment
	// (a worker's next Pop beside the acknowledgement of its last task) is
	// then queued in time to share this transaction.
	runtime.Gosched()
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
// the model and ErrCorrupt are decided in Go after statements that succeeded,
// so rolling back to the operation's savepoint undoes exactly its changes.
// Any other error (from SQLite, or a panic) may have ended the transaction.
func contained(err error) bool {
	return model.Kind(err) != nil || errors.Is(err, core.ErrCorrupt)
}

// commitBatch runs the operations of jobs in one transaction and commits it.
// It finishes every job it can; when an operation fails in a way that may
// have ended the transaction, it rolls everything back, fails that
// operation, and returns the others to be run again in a new transaction.
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
		for _, j := range runnable {
			j.finish(fmt.Errorf("leasehold/sqlite: begin: %w", err))
		}
		return nil
	}
	rollback := func() { c.exec(sqlRollback) } // if it fails, the transaction is gone already
	t := tx{s: s, c: c}
	single := len(runnable) == 1
	done := make([]*job, 0, len(runnable))
	abort := func(failed *job, err error, rest []*job) []*job {
		rollback()
		failed.finish(err)
		return append(done, rest...)
	}
	for i, j := range runnable {
		if !single {
			if _, err := t.exec(sqlSavepoint); err != nil {
				return abort(j, fmt.Errorf("leasehold/sqlite: savepoint: %w", err), runnable[i+1:])
			}
		}
		now := model.Round(s.clock.Now())
		err := run(j, t, now)
		switch {
		case err == nil:
			if !single {
				if _, err := t.exec(sqlRelease); err != nil {
					return abort(j, fmt.Errorf("leasehold/sqlite: release savepoint: %w", err), runnable[i+1:])
				}
			}
			j.now = now
			done = append(done, j)
		case !contained(err):
			return abort(j, err, runnable[i+1:])
		case single:
			rollback()
			j.finish(err)
			return nil
		default:
			if _, rbErr := t.exec(sqlRollbackTo); rbErr != nil {
				return abort(j, err, runnable[i+1:])
			}
			if _, relErr := t.exec(sqlRelease); relErr != nil {
				return abort(j, err, runnable[i+1:])
			}
			j.finish(err)
		}
	}
	if _, err := c.exec(sqlCommit); err != nil {
		rollback() // a COMMIT that failed may leave the transaction open
		for _, j := range done {
			j.finish(fmt.Errorf("leasehold/sqlite: commit: %w", err))
		}
		return nil
	}
	if len(runnable) > 1 {
		s.grouped.Add(int64(len(done)))
	}
	for _, j := range done {
		j.finish(nil)
	}
	return nil
}

// run runs one operation, turning a panic into an error.
func run(j *job, t tx, now time.Time) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("leasehold/sqlite: internal error: %v", r)
		}
	}()
	return j.fn(t, now)
}
