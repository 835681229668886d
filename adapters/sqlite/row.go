package sqlite

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// taskColumns are the columns of a task row in the order decodeTask reads
// them. qualifiedColumns are the same, named through the table, for
// statements that join it with something else.
// storedColumns are those a task written from Go fills (insertTaskSQL);
// the last column, quarantine, is set only when a record is set aside.
const (
	storedColumns    = `queue, id, payload, priority, state, attempt, max_attempts, version, claim_token, enqueued_at, run_after, claimed_at, deadline, finished_at, errors, result, timeout_ns, unique_key, unique_until`
	taskColumns      = storedColumns + `, quarantine`
	qualifiedColumns = `tasks.queue, tasks.id, tasks.payload, tasks.priority, tasks.state, tasks.attempt, tasks.max_attempts, tasks.version, tasks.claim_token, tasks.enqueued_at, tasks.run_after, tasks.claimed_at, tasks.deadline, tasks.finished_at, tasks.errors, tasks.result, tasks.timeout_ns, tasks.unique_key, tasks.unique_until, tasks.quarantine`
	numColumns       = 20
)

// The index of each column in taskColumns.
const (
	colQueue = iota
	colID
	colPayload
	colPriority
	colState
	colAttempt
	colMaxAttempts
	colVersion
	colClaimToken
	colEnqueuedAt
	colRunAfter
	colClaimedAt
	colDeadline
	colFinishedAt
	colErrors
	colResult
	colTimeout
	colUniqueKey
	colUniqueUntil
	colQuarantine
)

// returned is the RETURNING list of a statement that sets some columns of
// the task it changes to values the caller knows: the other columns of
// taskColumns, which the caller puts beside those values (scanReturned),
// so a row costs only the columns it does not know to decode and copy.
type returned struct {
	list string // the columns returned, comma-separated
	at   []int  // the index in taskColumns of each
	// tokenIsVersion is set for a statement that stamps each claim's token
	// with its version: claim_token is the version returned.
	tokenIsVersion bool
}

// returning is the RETURNING list of the task columns but those known.
func returning(known ...int) returned {
	var r returned
	var names []string
	for i, name := range strings.Split(taskColumns, ", ") {
		if !slices.Contains(known, i) {
			names = append(names, name)
			r.at = append(r.at, i)
		}
	}
	if len(r.at)+len(known) != numColumns {
		panic("leasehold/sqlite: a known column is not a task column")
	}
	r.list = strings.Join(names, ", ")
	return r
}

// scanReturned reads every row of rows, the columns of ret, as a task row
// whose other columns hold the values in known, and closes rows.
func scanReturned(ret returned, known *[numColumns]any, rows *rows, err error) ([]model.Task, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []model.Task
	var got [numColumns]any
	dest := make([]any, len(ret.at))
	for i := range dest {
		dest[i] = &got[i]
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		raw := *known
		for i, at := range ret.at {
			raw[at] = got[i]
		}
		if ret.tokenIsVersion {
			raw[colClaimToken] = raw[colVersion]
		}
		t, err := decodeTask(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// errorEntry is one element of the JSON array in the errors column.
type errorEntry struct {
	Attempt int    `json:"attempt"`
	At      *int64 `json:"at"` // Unix microseconds; null for the zero time
	Message string `json:"message"`
	// MessageBytes holds the message's bytes in base64 when they are not
	// valid UTF-8 (Message then has U+FFFD in place of the invalid ones).
	MessageBytes *string `json:"message_bytes,omitempty"`
	LeaseExpired bool    `json:"lease_expired"`
	// Cancelled marks the entry an operator's Cancel recorded.
	Cancelled bool `json:"cancelled,omitempty"`
}

// messageArgs returns a message as the text and the raw bytes (base64, or
// nil when the text is the message) that appendError stores.
func messageArgs(m string) (text string, raw any) {
	if utf8.ValidString(m) {
		return m, nil
	}
	return strings.ToValidUTF8(m, "\uFFFD"), base64.StdEncoding.EncodeToString([]byte(m))
}

// micros encodes a time for the database: Unix microseconds, or NULL for the
// zero time (which must come back as the zero time, not 1970).
func micros(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

// fromMicros decodes what micros encoded.
func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

// scanTask reads one task row (taskColumns) from rows.
func scanTask(rows interface{ Scan(...any) error }) (model.Task, error) {
	var raw [numColumns]any
	var dest [numColumns]any
	for i := range raw {
		dest[i] = &raw[i]
	}
	if err := rows.Scan(dest[:]...); err != nil {
		return model.Task{}, err
	}
	return decodeTask(raw)
}

// decodeTask turns the raw column values of a task row into a Task, or
// returns an error wrapping core.ErrCorrupt naming the column that does not
// parse. database/sql has already copied every byte slice it hands us.
func decodeTask(raw [numColumns]any) (model.Task, error) {
	var t model.Task
	d := decoder{raw: raw[:]}
	t.Queue = d.text(0, "queue")
	t.ID = d.text(1, "id")
	if d.err == nil && !validState(raw[4]) {
		return quarantinedTask(t.Queue, t.ID, raw[4], raw[19]), nil
	}
	t.Payload = d.bytes(2, "payload")
	t.Priority = d.int(3, "priority", model.MinPriority, model.MaxPriority)
	t.State = model.State(d.int(4, "state", int64(model.Scheduled), int64(model.Failed)))
	t.Attempt = d.int(5, "attempt", 0, math.MaxInt32)
	t.MaxAttempts = d.int(6, "max_attempts", 1, math.MaxInt)
	t.Version = uint64(d.int(7, "version", 1, math.MaxInt64))
	t.ClaimToken = uint64(d.int(8, "claim_token", 0, math.MaxInt64))
	t.EnqueuedAt = d.time(9, "enqueued_at")
	t.RunAfter = d.time(10, "run_after")
	t.ClaimedAt = d.time(11, "claimed_at")
	t.Deadline = d.time(12, "deadline")
	t.FinishedAt = d.time(13, "finished_at")
	t.Errors = d.errors(14, "errors")
	t.Result = d.bytes(15, "result")
	t.Timeout = time.Duration(d.int(16, "timeout_ns", 0, int64(model.MaxDuration)))
	if raw[17] != nil {
		t.UniqueKey = d.text(17, "unique_key")
	}
	t.UniqueUntil = d.time(18, "unique_until")
	if d.err != nil {
		if t.ID != "" && t.Queue != "" {
			return model.Task{}, &damagedError{queue: t.Queue, id: t.ID, reason: d.err.Error()}
		}
		return model.Task{}, corrupt("task %q in queue %q: %v", t.ID, t.Queue, d.err)
	}
	if why := unsound(t); why != "" {
		return model.Task{}, &damagedError{queue: t.Queue, id: t.ID, reason: fmt.Sprintf("%v task: %s", t.State, why)}
	}
	return t, nil
}

// stateQuarantined is the state column of a record set aside.
const stateQuarantined = int64(model.Quarantined)

// validState reports whether a state column holds one of the five states
// of a task's life; a record set aside (6) or one whose state is anything
// else is reported as Quarantined.
func validState(v any) bool {
	n, ok := v.(int64)
	return ok && n >= int64(model.Scheduled) && n <= int64(model.Failed)
}

// quarantinedTask is a record set aside as the store reports it: its queue,
// ID and why. reason is the quarantine column (nil when the state column
// itself is what does not parse).
func quarantinedTask(queue, id string, state, reason any) model.Task {
	why, _ := reason.(string)
	if b, ok := reason.([]byte); ok {
		why = string(b)
	}
	if n, ok := state.(int64); !ok || n != stateQuarantined || why == "" {
		why = fmt.Sprintf("column state (%T %v): not a state", state, abbreviate(state))
	}
	return model.Task{Queue: queue, ID: id, State: model.Quarantined, Quarantine: why}
}

// damagedError is the error of a task row that does not decode, naming it,
// so that an operation that scans can set it aside. It wraps
// core.ErrCorrupt.
type damagedError struct {
	queue, id, reason string
}

func (e *damagedError) Error() string {
	return fmt.Sprintf("%v: task %q in queue %q: %s", core.ErrCorrupt, e.id, e.queue, e.reason)
}

func (e *damagedError) Unwrap() error { return core.ErrCorrupt }

// unsound checks that the fields of a decoded task agree with its state, as
// the model's invariants require of every task (a Running task holds a
// token, a claim time and a deadline; a queued one none of them; a finished
// one a finish time and no deadline), and returns what is wrong, or "".
func unsound(t model.Task) string {
	switch {
	case t.ClaimToken > t.Version:
		return fmt.Sprintf("claim token %d ahead of version %d", t.ClaimToken, t.Version)
	case t.State == model.Running && (t.ClaimToken == 0 || t.ClaimedAt.IsZero() || t.Deadline.IsZero()):
		return fmt.Sprintf("running without a claim (token %d, claimed %v, deadline %v)", t.ClaimToken, t.ClaimedAt, t.Deadline)
	case t.State == model.Running && t.Attempt < 1:
		return fmt.Sprintf("running with attempt %d", t.Attempt)
	case (t.State == model.Ready || t.State == model.Scheduled) && (t.ClaimToken != 0 || !t.ClaimedAt.IsZero() || !t.Deadline.IsZero()):
		return fmt.Sprintf("queued with a claim (token %d, claimed %v, deadline %v)", t.ClaimToken, t.ClaimedAt, t.Deadline)
	case t.State == model.Scheduled && t.RunAfter.IsZero():
		return "scheduled without a run-after time"
	case t.State.Terminal() && (t.FinishedAt.IsZero() || !t.Deadline.IsZero()):
		return fmt.Sprintf("finished at %v with deadline %v", t.FinishedAt, t.Deadline)
	case !t.State.Terminal() && !t.FinishedAt.IsZero():
		return fmt.Sprintf("not finished but finished at %v", t.FinishedAt)
	}
	return ""
}

// decoder converts column values, keeping the first error.
type decoder struct {
	raw []any
	err error
}

func (d *decoder) fail(col string, v any, why string) {
	if d.err == nil {
		d.err = fmt.Errorf("column %s (%T %v): %s", col, v, abbreviate(v), why)
	}
}

func (d *decoder) text(i int, col string) string {
	switch v := d.raw[i].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	default:
		d.fail(col, v, "not text")
		return ""
	}
}

func (d *decoder) bytes(i int, col string) []byte {
	switch v := d.raw[i].(type) {
	case nil:
		return nil
	case []byte:
		if len(v) == 0 {
			return nil
		}
		return v
	case string:
		if v == "" {
			return nil
		}
		return []byte(v)
	default:
		d.fail(col, v, "not a blob")
		return nil
	}
}

func (d *decoder) int(i int, col string, lo, hi int64) int {
	v, ok := d.raw[i].(int64)
	if !ok {
		d.fail(col, d.raw[i], "not an integer")
		return 0
	}
	if v < lo || v > hi {
		d.fail(col, v, fmt.Sprintf("outside %d..%d", lo, hi))
		return 0
	}
	return int(v)
}

func (d *decoder) time(i int, col string) time.Time {
	switch v := d.raw[i].(type) {
	case nil:
		return time.Time{}
	case int64:
		return fromMicros(v)
	default:
		d.fail(col, v, "not a time in Unix microseconds")
		return time.Time{}
	}
}

func (d *decoder) errors(i int, col string) []model.TaskError {
	var text []byte
	switch v := d.raw[i].(type) {
	case string:
		if v == "[]" {
			return nil // no errors (most rows): no JSON decoder, no copy
		}
		text = []byte(v)
	case []byte:
		if string(v) == "[]" {
			return nil
		}
		text = v
	default:
		d.fail(col, v, "not JSON text")
		return nil
	}
	// Pointers, so that a null entry is told from an empty object; JSON
	// null as a whole leaves entries nil, an empty array does not. Either
	// null would otherwise decode as a sound history, and a write that
	// appends to it (which leaves a column that is not an array as it is)
	// would lose its entry.
	var entries []*errorEntry
	if err := json.Unmarshal(text, &entries); err != nil {
		d.fail(col, string(text), "not a JSON array of errors: "+err.Error())
		return nil
	}
	if entries == nil {
		d.fail(col, string(text), "not a JSON array of errors")
		return nil
	}
	if len(entries) == 0 {
		return nil
	}
	out := make([]model.TaskError, len(entries))
	for k, e := range entries {
		if e == nil {
			d.fail(col, string(text), fmt.Sprintf("error %d is null", k))
			return nil
		}
		out[k] = model.TaskError{Attempt: e.Attempt, Message: e.Message, LeaseExpired: e.LeaseExpired, Cancelled: e.Cancelled}
		if e.MessageBytes != nil {
			b, err := base64.StdEncoding.DecodeString(*e.MessageBytes)
			if err != nil {
				d.fail(col, *e.MessageBytes, "message bytes not in base64")
				return nil
			}
			out[k].Message = string(b)
		}
		if e.At != nil {
			out[k].At = fromMicros(*e.At)
		}
	}
	return out
}

// encodeErrors is the JSON of an error history, for rows written from Go.
func encodeErrors(errs []model.TaskError) (string, error) {
	if len(errs) == 0 {
		return "[]", nil // every new task: no encoder
	}
	entries := make([]errorEntry, len(errs))
	for k, e := range errs {
		text, raw := messageArgs(e.Message)
		entries[k] = errorEntry{Attempt: e.Attempt, Message: text, LeaseExpired: e.LeaseExpired, Cancelled: e.Cancelled}
		if raw != nil {
			b64 := raw.(string)
			entries[k].MessageBytes = &b64
		}
		if !e.At.IsZero() {
			at := e.At.UnixMicro()
			entries[k].At = &at
		}
	}
	b, err := json.Marshal(entries)
	return string(b), err
}

func abbreviate(v any) any {
	switch v := v.(type) {
	case string:
		if len(v) > 40 {
			return v[:40] + "…"
		}
	case []byte:
		if len(v) > 40 {
			return string(v[:40]) + "…"
		}
		return string(v)
	}
	return v
}

// rowIter is what scanTasks reads: *sql.Rows from the readers' pool, or
// *rows from the writer connection.
type rowIter interface {
	Next() bool
	Scan(dest ...any) error
	Close() error
	Err() error
}

// scanTasks reads every row of rows as a task and closes rows.
func scanTasks[R rowIter](rows R, err error) ([]model.Task, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []model.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}
