package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"

	"modernc.org/sqlite"
)

// wconn is the writer connection: the driver's own connection, outside
// database/sql, with every statement prepared on it once, on first use, and
// kept. Only the leader of the writers (see commit.go) touches it, one at a
// time, so it needs no lock of its own, and a statement runs without
// database/sql's per-call bookkeeping (a transaction's copy of each
// statement, argument conversion, the connection's locks).
type wconn struct {
	conn  driver.Conn
	dc    driver.ConnPrepareContext
	fc    sqlite.FileControl // for the pager's data version (seq.go)
	stmts map[string]wstmt
}

// wstmt is a statement prepared on the writer connection. write is set for
// a statement that may change rows (anything but a SELECT or the control of
// a transaction), whose effect the operation running it records (opState).
type wstmt struct {
	st    driver.Stmt
	write bool
}

// writes reports whether q may change rows.
func writes(q string) bool {
	q = strings.ToUpper(strings.TrimSpace(q))
	for _, p := range []string{"SELECT", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "PRAGMA", "VACUUM", "EXPLAIN"} {
		if strings.HasPrefix(q, p) {
			return false
		}
	}
	return true
}

// opState is what the writer connection records of the operation it runs:
// whether a statement of it has changed a row, so a refusal after that
// must undo its transaction, and the damaged records its scans met.
type opState struct {
	wrote bool
	aside []*damagedError
}

func newWconn(dc driver.Conn) (*wconn, error) {
	p, ok := dc.(driver.ConnPrepareContext)
	if !ok {
		return nil, fmt.Errorf("leasehold/sqlite: driver connection %T cannot prepare with a context", dc)
	}
	fc, ok := dc.(sqlite.FileControl)
	if !ok {
		return nil, fmt.Errorf("leasehold/sqlite: driver connection %T has no file control", dc)
	}
	return &wconn{conn: dc, dc: p, fc: fc, stmts: map[string]wstmt{}}, nil
}

func (c *wconn) stmt(q string) (wstmt, error) {
	if st, ok := c.stmts[q]; ok {
		return st, nil
	}
	st, err := c.dc.PrepareContext(context.Background(), q)
	if err != nil {
		return wstmt{}, fmt.Errorf("leasehold/sqlite: prepare %q: %w", firstLine(q), err)
	}
	ws := wstmt{st: st, write: writes(q)}
	c.stmts[q] = ws
	return ws, nil
}

// dataVersion is the pager's data version of the main database: it
// changes with every commit of this connection and, when a transaction
// begins, with the commits of any other connection since.
func (c *wconn) dataVersion() (uint32, error) { return c.fc.FileControlDataVersion("main") }

// close closes every prepared statement, then the connection.
func (c *wconn) close() error {
	for q, st := range c.stmts {
		st.st.Close()
		delete(c.stmts, q)
	}
	return c.conn.Close()
}

// named turns arguments into the driver's values, as database/sql would for
// the types this package passes.
func named(args []any) ([]driver.NamedValue, error) {
	nv := make([]driver.NamedValue, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case int:
			a = int64(v)
		case uint64:
			a = int64(v)
		case nil, int64, string, []byte, bool, float64:
		default:
			return nil, fmt.Errorf("leasehold/sqlite: argument %d of type %T", i+1, a)
		}
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	return nv, nil
}

func (c *wconn) exec(q string, args ...any) (driver.Result, error) { return c.execFor(nil, q, args...) }

// execFor runs q for the operation op (nil: none), recording in op whether
// it changed a row.
func (c *wconn) execFor(op *opState, q string, args ...any) (driver.Result, error) {
	st, err := c.stmt(q)
	if err != nil {
		return nil, err
	}
	nv, err := named(args)
	if err != nil {
		return nil, err
	}
	res, err := st.st.(driver.StmtExecContext).ExecContext(context.Background(), nv)
	if op != nil && st.write {
		if err != nil {
			op.wrote = true // it may have changed rows before failing
		} else if n, rerr := res.RowsAffected(); rerr != nil || n > 0 {
			op.wrote = true
		}
	}
	return res, err
}

// queryFor runs q for the operation op (nil: none). A statement that may
// change rows and returns them (RETURNING) counts as having changed a row
// once it has returned one, or when it is closed before its end.
func (c *wconn) queryFor(op *opState, q string, args ...any) (*rows, error) {
	st, err := c.stmt(q)
	if err != nil {
		return nil, err
	}
	nv, err := named(args)
	if err != nil {
		return nil, err
	}
	if !st.write {
		op = nil
	}
	dr, err := st.st.(driver.StmtQueryContext).QueryContext(context.Background(), nv)
	if err != nil {
		if op != nil {
			op.wrote = true
		}
		return nil, err
	}
	return &rows{dr: dr, vals: make([]driver.Value, len(dr.Columns())), op: op}, nil
}

// rows iterates over the rows of a query on the writer connection, like
// sql.Rows.
type rows struct {
	dr     driver.Rows
	sr     *sql.Rows // instead of dr, for a caller's transaction (sqlTx)
	svals  []any     // sr's row
	ptrs   []any     // &svals[i], for sr.Scan
	vals   []driver.Value
	err    error
	closed bool
	// op, for a statement that changes rows, is told when it has: seen
	// is set once a row came back, ended when the rows ran out.
	op          *opState
	seen, ended bool
}

// Next advances to the next row; at the end, or on an error (see Err), it
// closes the rows and returns false.
func (r *rows) Next() bool {
	if r.closed {
		return false
	}
	if r.sr != nil {
		if !r.sr.Next() {
			r.err = r.sr.Err()
			r.ended = r.err == nil
			r.Close()
			return false
		}
		if err := r.sr.Scan(r.ptrs...); err != nil {
			r.err = err
			r.Close()
			return false
		}
		for i, v := range r.svals {
			r.vals[i] = v
		}
		r.seen = true
		return true
	}
	if err := r.dr.Next(r.vals); err != nil {
		if !errors.Is(err, io.EOF) {
			r.err = err
		} else {
			r.ended = true
		}
		r.Close()
		return false
	}
	r.seen = true
	return true
}

// Scan copies the current row's columns into dest.
func (r *rows) Scan(dest ...any) error {
	if r.closed {
		return errors.New("leasehold/sqlite: Scan after the last row")
	}
	if len(dest) != len(r.vals) {
		return fmt.Errorf("leasehold/sqlite: Scan of %d columns into %d values", len(r.vals), len(dest))
	}
	for i, d := range dest {
		if err := assign(d, r.vals[i]); err != nil {
			return fmt.Errorf("leasehold/sqlite: column %d: %w", i, err)
		}
	}
	return nil
}

// Close ends the query; it is safe to call more than once.
func (r *rows) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	if r.op != nil && (r.seen || !r.ended) {
		r.op.wrote = true
	}
	if r.sr != nil {
		return r.sr.Close()
	}
	return r.dr.Close()
}

// Err is the error that ended the iteration, nil at the end of the rows.
func (r *rows) Err() error { return r.err }

// row is the first row of a query, like sql.Row.
type row struct {
	rows *rows
	err  error
}

// Scan copies the first row into dest, or returns sql.ErrNoRows.
func (r row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	return r.rows.Scan(dest...)
}

// assign stores a driver value in one of the destinations this package
// scans into.
func assign(dest any, v driver.Value) error {
	switch d := dest.(type) {
	case *any:
		*d = v
		return nil
	case *int64:
		if n, ok := v.(int64); ok {
			*d = n
			return nil
		}
	case *int:
		if n, ok := v.(int64); ok {
			*d = int(n)
			return nil
		}
	case *bool:
		switch b := v.(type) {
		case int64:
			*d = b != 0
			return nil
		case bool:
			*d = b
			return nil
		}
	case *string:
		switch s := v.(type) {
		case string:
			*d = s
			return nil
		case []byte:
			*d = string(s)
			return nil
		}
	}
	return fmt.Errorf("cannot store %T %v in %T", v, abbreviate(v), dest)
}
