package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// Group commit. With synchronous=FULL every commit waits for the disk, so
// the writes of a store go through one goroutine, the committer, which runs
// the operations waiting at that moment in one transaction and commits them
// together: one sync for the batch instead of one per operation. Each
// operation runs inside a savepoint of its own; one that fails is rolled
// back to its savepoint and changes nothing, and the others commit. An
// operation still returns only after the commit that made it durable.
//
// Atomicity and order are those of one transaction per operation: the
// operations of a batch were all in progress at once, the committer runs
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

// job is one write operation waiting for the committer.
type job struct {
	ctx context.Context
	fn  func(t tx, now time.Time) error
	// direct, when set, runs instead of fn on the writer connection outside
	// any transaction (VACUUM cannot run inside one).
	direct func(c *wconn) error

	now  time.Time // the clock reading it ran with
	err  error
	done chan struct{}
}

func (j *job) finish(err error) {
	j.err = err
	close(j.done)
}

// commitLoop is the committer: it holds the writer connection, takes the
// operations waiting and runs them in one transaction, until Close closes
// s.jobs.
func (s *Store) commitLoop(conn *sql.Conn) {
	defer close(s.loopDone)
	defer conn.Close()
	err := conn.Raw(func(dc any) error {
		c, err := newWconn(dc)
		if err != nil {
			return err
		}
		defer c.close()
		s.serve(c)
		return nil
	})
	if err != nil {
		for j := range s.jobs {
			j.finish(fmt.Errorf("leasehold/sqlite: writer connection: %w", err))
		}
	}
}

// serve runs the operations of s.jobs on c until s.jobs is closed.
func (s *Store) serve(c *wconn) {
	batch := make([]*job, 0, maxGroup)
	for first := range s.jobs {
		if first.direct != nil {
			first.finish(first.direct(c))
			continue
		}
		batch = append(batch[:0], first)
		// Yield once before collecting: an operation issued at the same
		// moment (a worker's next Pop beside the acknowledgement of its
		// last task) is then queued in time to share this transaction.
		runtime.Gosched()
		var after *job // a direct job that ended the collection
	collect:
		for len(batch) < maxGroup {
			select {
			case j, ok := <-s.jobs:
				if !ok {
					break collect
				}
				if j.direct != nil {
					after = j
					break collect
				}
				batch = append(batch, j)
			default:
				break collect
			}
		}
		for pending := batch; len(pending) > 0; {
			pending = s.commitBatch(c, pending)
		}
		if after != nil {
			after.finish(after.direct(c))
		}
	}
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
		close(j.done)
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
