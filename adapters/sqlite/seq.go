package sqlite

import (
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"time"
)

// The queue's sequence.
//
// Every transition stamps its task with the queue's next sequence value,
// and a value is never issued twice: not after a Remove or a Prune, a
// rollback, a crash, or while other connections (other processes, the
// caller's own transaction of EnqueueTx) write the same file. The sequence
// lives in the queues row (seq), but a store that writes the file alone
// does not rewrite that row at every commit, which cost a page of the log
// per transaction (a fifth of a worker's transaction). The true sequence is
// derived from the data every transition writes anyway:
//
//	sequence = max(queues.seq, the largest version of the queue's tasks)
//
// which holds because each value drawn is the version of the task stamped
// with it until that task is stamped again (with a larger value) or
// deleted, and every deletion (Remove, Prune) first writes the sequence to
// the row. A store that writes the row with its owner column naming itself
// may then draw values without writing the row again: it keeps the
// sequence in memory, exact as long as no other connection has committed
// (the pager's data version, read as each transaction begins and ends,
// tells). Any other
// writer that finds the row owned by someone else reads the largest version
// of the queue's tasks once (a scan of the queue) and from then on writes
// the row at every commit that draws, with owner 0: the row is exact again.
// A store that has seen another connection commit in the last second
// writes the row too (owner 0), so that connections taking turns on one
// file never scan; Close gives the row back exact. A rollback discards the
// values drawn in memory with the rest of the transaction: they are
// published only once the commit succeeded.
//
// What is read is checked, as before: a sequence that is not an integer,
// or a missing row while the queue has tasks, is ErrCorrupt.

// lazyAfter is how long after another connection's last commit the store
// goes on writing the sequence row at each commit that draws.
const lazyAfter = time.Second

// seqState is what is known of one queue's sequence: the last value drawn
// and the queue's row as the store's connection last read or wrote it.
type seqState struct {
	last     int64 // the last value drawn
	hasRow   bool  // the queue has a row
	rowSeq   int64 // its seq column
	rowOwner int64 // its owner column (0: seq is exact)
	// In a transaction: dirty when it drew values, persist when the row
	// must hold the exact sequence at its commit (a deletion follows).
	dirty, persist bool
	// Of the store: verified while no other connection has committed since
	// it was read.
	verified bool
}

// seqs is the sequence state of one transaction: a tentative copy of the
// store's, published when the transaction commits.
type seqs struct {
	// caller is set for the caller's transaction (EnqueueTx): nothing is
	// kept between calls, and the row is written at each draw.
	caller bool
	m      map[string]*seqState
}

// newOwner draws the store's owner value: random, never 0.
func newOwner() int64 {
	for {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return time.Now().UnixNano() | 1
		}
		if v := int64(binary.LittleEndian.Uint64(b[:]) >> 1); v != 0 {
			return v
		}
	}
}

// base returns the queue's sequence, the last value drawn, for an
// operation that then stamps tasks with the values after it and calls
// advance. It reads (and checks) the queue's row only when the store's
// memory of it is not known to be current.
func (t tx) base(queue string) (int64, error) {
	if e := t.sq.m[queue]; e != nil {
		return e.last, nil
	}
	if !t.sq.caller {
		if c := t.s.seq[queue]; c != nil && c.verified {
			e := *c
			e.dirty, e.persist = false, false
			t.sq.m[queue] = &e
			return e.last, nil
		}
	}
	e, err := t.loadSeq(queue)
	if err != nil {
		return 0, err
	}
	t.sq.m[queue] = e
	return e.last, nil
}

// loadSeq reads the queue's row and derives its sequence.
func (t tx) loadSeq(queue string) (*seqState, error) {
	var raw, owner any
	var isInt bool
	switch err := t.queryRow(sqlSeq, queue).Scan(&raw, &isInt, &owner); {
	case errors.Is(err, sql.ErrNoRows):
		var one int
		switch err := t.queryRow(sqlAnyTask, queue).Scan(&one); {
		case err == nil:
			return nil, corrupt("queue %q has tasks but no sequence", queue)
		case !errors.Is(err, sql.ErrNoRows):
			return nil, err
		}
		return &seqState{}, nil
	case err != nil:
		return nil, err
	}
	seq, ok := raw.(int64)
	if !ok || !isInt {
		return nil, corrupt("queue %q: the sequence %v is not an integer", queue, abbreviate(raw))
	}
	e := &seqState{last: seq, hasRow: true, rowSeq: seq}
	switch o, ok := owner.(int64); {
	case ok && o == 0:
		return e, nil // exact
	case ok && !t.sq.caller && o == t.s.owner:
		// Still this store's: no other writer drew since, and its memory
		// holds the values drawn past the row.
		e.rowOwner = o
		if c := t.s.seq[queue]; c != nil && c.rowOwner == o {
			e.last = max(e.last, c.last)
			return e, nil
		}
	case ok:
		e.rowOwner = o
	default:
		e.rowOwner = -1 // not an integer: read the tasks, and write the row back exact
	}
	var top any
	if err := t.queryRow(sqlTopVersion, queue).Scan(&top); err != nil {
		return nil, err
	}
	if v, ok := top.(int64); ok {
		e.last = max(e.last, v)
	}
	return e, nil
}

// advance records that the operation has stamped tasks of the queue with
// the values up to last (base must have been called). Like a statement
// that changed a row, it must be undone if the operation then fails: it
// counts as a write of the operation.
func (t tx) advance(queue string, last int64) error {
	e := t.sq.m[queue]
	if e == nil || last < e.last {
		return corrupt("queue %q: a task stamped with %d behind the sequence", queue, last)
	}
	e.last = last
	e.dirty = true
	t.op.wrote = true
	if t.sq.caller {
		return t.writeSeq(queue, e, 0)
	}
	return nil
}

// persistSeq makes the queue's row hold the exact sequence at the commit,
// for an operation that deletes tasks (one of which may hold the last value
// drawn).
func (t tx) persistSeq(queue string) error {
	if _, err := t.base(queue); err != nil {
		return err
	}
	e := t.sq.m[queue]
	e.persist = true
	if t.sq.caller {
		return t.writeSeq(queue, e, 0)
	}
	return nil
}

// writeSeq writes the queue's row: seq the last value drawn, and owner.
func (t tx) writeSeq(queue string, e *seqState, owner int64) error {
	if _, err := t.exec(sqlSetSeq, queue, e.last, owner); err != nil {
		return err
	}
	e.hasRow, e.rowSeq, e.rowOwner = true, e.last, owner
	return nil
}

// flushSeqs writes, before the commit, the rows whose sequence the
// transaction must leave in the file: the rows it drew from while another
// connection writes the file too (owner 0, exact), a first draw of this
// store (owner: the store; later draws need no write), a row that must be
// exact before a deletion.
func (s *Store) flushSeqs(t tx) error {
	owner := s.owner
	if s.shared() {
		owner = 0
	}
	for q, e := range t.sq.m {
		switch {
		case !e.dirty && !e.persist:
			continue
		case e.persist && e.hasRow && e.rowOwner == 0 && e.rowSeq == e.last:
			continue // exact already
		case !e.persist && owner != 0 && e.hasRow && e.rowOwner == owner:
			continue // this store's: the values drawn past seq are in its memory
		}
		if err := t.writeSeq(q, e, owner); err != nil {
			return err
		}
	}
	return nil
}

// publishSeqs keeps the sequence state of a transaction that committed.
func (s *Store) publishSeqs(t tx) {
	for q, e := range t.sq.m {
		c := s.seq[q]
		if c == nil {
			c = &seqState{}
			s.seq[q] = c
		}
		*c = *e
		c.dirty, c.persist, c.verified = false, false, true
	}
}

// shared reports whether the store has seen another connection commit in
// the last lazyAfter.
func (s *Store) shared() bool {
	return !s.foreignAt.IsZero() && time.Since(s.foreignAt) < s.lazyAfter
}

// checkDataVersion notes, in a transaction just begun, whether another
// connection has committed since the store's last transaction: what the
// store remembers of the sequences is then to be read again. It compares
// the pager's data version, which counts this connection's commits too,
// with its value when the store's last transaction ended (noteDataVersion):
// the commits of others are counted when a transaction begins.
func (s *Store) checkDataVersion(c *wconn) error {
	dv, err := c.dataVersion()
	if err != nil {
		return err
	}
	if s.haveDataVersion && dv == s.dataVersion {
		return nil
	}
	if s.haveDataVersion {
		s.foreignAt = time.Now()
	}
	s.forgetSeqs()
	return nil
}

// noteDataVersion keeps the pager's data version as a transaction of the
// store ends (committed or rolled back). When it cannot be read, the next
// transaction reads the rows again.
func (s *Store) noteDataVersion(c *wconn) {
	dv, err := c.dataVersion()
	s.dataVersion, s.haveDataVersion = dv, err == nil
	if err != nil {
		s.forgetSeqs()
	}
}

// forgetSeqs marks what the store remembers of the sequences as to be read
// again.
func (s *Store) forgetSeqs() {
	for _, e := range s.seq {
		e.verified = false
	}
}

// releaseSeqs writes the exact sequence back to the rows this store owns,
// with owner 0, so that the next writer need not read the queue's tasks.
// It runs at Close, with no operation in progress; if it fails, the rows
// stay owned and the next writer derives the sequence from the tasks.
func (s *Store) releaseSeqs() {
	var owned []string
	for q, e := range s.seq {
		if e.hasRow && e.rowOwner == s.owner {
			owned = append(owned, q)
		}
	}
	if len(owned) == 0 {
		return
	}
	if _, err := s.wc.exec(sqlBegin); err != nil {
		return
	}
	for _, q := range owned {
		if _, err := s.wc.exec(sqlReleaseSeq, q, s.seq[q].last, s.owner); err != nil {
			s.wc.exec(sqlRollback)
			return
		}
	}
	if _, err := s.wc.exec(sqlCommit); err != nil {
		s.wc.exec(sqlRollback)
	}
}
