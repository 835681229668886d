package postgres

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/model"
)

// errorEntry is one element of the JSON array in the errors column.
type errorEntry struct {
	Attempt int    `json:"attempt"`
	At      *int64 `json:"at"` // Unix microseconds; null for the zero time
	Message string `json:"message"`
	// MessageBytes holds the message's bytes in base64 when they cannot be
	// JSON text in PostgreSQL (not valid UTF-8, or holding a NUL); Message
	// then has U+FFFD in their place.
	MessageBytes *string `json:"message_bytes,omitempty"`
	LeaseExpired bool    `json:"lease_expired"`
	// Cancelled marks the entry an operator's Cancel recorded.
	Cancelled bool `json:"cancelled,omitempty"`
}

// messageArgs returns a message as the text and the raw bytes (base64, or
// nil when the text is the message) that appendError stores.
func messageArgs(m string) (text string, raw *string) {
	if utf8.ValidString(m) && !strings.ContainsRune(m, 0) {
		return m, nil
	}
	b64 := base64.StdEncoding.EncodeToString([]byte(m))
	return strings.ReplaceAll(strings.ToValidUTF8(m, "\uFFFD"), "\x00", "\uFFFD"), &b64
}

// micros encodes a time for the database: Unix microseconds, or NULL for the
// zero time (which must come back as the zero time, not 1970).
func micros(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	v := t.UnixMicro()
	return &v
}

// fromMicros decodes what micros encoded.
func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func fromNullMicros(v *int64) time.Time {
	if v == nil {
		return time.Time{}
	}
	return fromMicros(*v)
}

// rawTask is a task row as PostgreSQL gives it (taskColumns).
type rawTask struct {
	queue                                            string
	id, payload, result                              []byte
	priority, attempt                                int32
	state                                            int16
	maxAttempts, version, token, timeout             int64
	enqueuedAt, runAfter, claimedAt, deadline, finAt *int64
	errors                                           string
	uniqueKey                                        []byte
	uniqueUntil                                      *int64
	quarantine                                       *string
}

// appendDest appends the scan destinations of r's columns to dst.
func (r *rawTask) appendDest(dst []any) []any {
	return append(dst, &r.queue, &r.id, &r.payload, &r.priority, &r.state, &r.attempt, &r.maxAttempts, &r.version,
		&r.token, &r.enqueuedAt, &r.runAfter, &r.claimedAt, &r.deadline, &r.finAt, &r.errors, &r.result, &r.timeout, &r.uniqueKey, &r.uniqueUntil, &r.quarantine)
}

// rowScanner reads rows of taskColumns one after the other into one
// rawTask, with its scan destinations made once: a row's values are copied
// out of r by decode (pgx gives each row's bytes and strings new memory),
// so the next row may overwrite them. A batch of a hundred tasks so costs
// two allocations rather than two hundred.
type rowScanner struct {
	r    rawTask
	dest []any
}

// newRowScanner returns a scanner whose rows have the columns of extra
// first (read into what they point at), then taskColumns.
func newRowScanner(extra ...any) *rowScanner {
	s := &rowScanner{}
	s.dest = s.r.appendDest(append(make([]any, 0, len(extra)+20), extra...))
	return s
}

// scan reads the current row of rows.
func (s *rowScanner) scan(rows pgx.Rows) error { return rows.Scan(s.dest...) }

// decode turns a row into a Task, or returns a *damagedError (wrapping
// core.ErrCorrupt) saying what does not hold: a value out of its range, an
// error history that is not a JSON array of entries, or fields that
// disagree with the state. A record set aside is a quarantined Task.
func (r *rawTask) decode() (model.Task, error) {
	if r.state == int16(model.Quarantined) && r.quarantine != nil && *r.quarantine != "" {
		return model.Task{Queue: r.queue, ID: string(r.id), State: model.Quarantined, Quarantine: *r.quarantine}, nil
	}
	t := model.Task{
		Queue: r.queue, ID: string(r.id), Payload: nilIfEmpty(r.payload), Priority: int(r.priority),
		State: model.State(r.state), Attempt: int(r.attempt), MaxAttempts: int(r.maxAttempts),
		Version: uint64(r.version), ClaimToken: uint64(r.token),
		EnqueuedAt: fromNullMicros(r.enqueuedAt), RunAfter: fromNullMicros(r.runAfter),
		ClaimedAt: fromNullMicros(r.claimedAt), Deadline: fromNullMicros(r.deadline),
		FinishedAt: fromNullMicros(r.finAt), Result: nilIfEmpty(r.result), Timeout: time.Duration(r.timeout),
		UniqueKey: string(r.uniqueKey), UniqueUntil: fromNullMicros(r.uniqueUntil),
	}
	bad := func(format string, args ...any) (model.Task, error) {
		return model.Task{}, &damagedError{queue: t.Queue, id: t.ID, reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case r.state < int16(model.Scheduled) || r.state > int16(model.Failed):
		return bad("state %d", r.state)
	case r.priority < model.MinPriority || r.priority > model.MaxPriority:
		return bad("priority %d", r.priority)
	case r.attempt < 0:
		return bad("attempt %d", r.attempt)
	case r.maxAttempts < 1:
		return bad("max attempts %d", r.maxAttempts)
	case r.version < 1:
		return bad("version %d", r.version)
	case r.token < 0:
		return bad("claim token %d", r.token)
	case t.EnqueuedAt.IsZero(): // NULL, or the one value that decodes to the zero time
		return bad("no enqueue time")
	case r.timeout < 0 || r.timeout > int64(model.MaxDuration):
		return bad("attempt timeout %d ns", r.timeout)
	}
	errs, err := decodeErrors(r.errors)
	if err != nil {
		return bad("errors %.40q: %v", r.errors, err)
	}
	t.Errors = errs
	if why := unsound(t); why != "" {
		return bad("(%v) %s", t.State, why)
	}
	return t, nil
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func decodeErrors(text string) ([]model.TaskError, error) {
	if text == "[]" {
		return nil, nil // most tasks have no error: what the decoder below answers for it
	}
	// Pointers, so that a null entry is told from an empty object; JSON
	// null as a whole leaves entries nil, an empty array does not. Either
	// null would otherwise decode as a sound history, and a write that
	// appends to it (which leaves a column that is not an array as it is)
	// would lose its entry.
	var entries []*errorEntry
	if err := json.Unmarshal([]byte(text), &entries); err != nil {
		return nil, fmt.Errorf("not a JSON array of errors: %v", err)
	}
	if entries == nil {
		return nil, fmt.Errorf("not a JSON array of errors: null")
	}
	if len(entries) == 0 {
		return nil, nil
	}
	out := make([]model.TaskError, len(entries))
	for k, e := range entries {
		if e == nil {
			return nil, fmt.Errorf("error %d is null", k)
		}
		out[k] = model.TaskError{Attempt: e.Attempt, Message: e.Message, LeaseExpired: e.LeaseExpired, Cancelled: e.Cancelled}
		if e.MessageBytes != nil {
			b, err := base64.StdEncoding.DecodeString(*e.MessageBytes)
			if err != nil {
				return nil, fmt.Errorf("message bytes not in base64")
			}
			out[k].Message = string(b)
		}
		if e.At != nil {
			out[k].At = fromMicros(*e.At)
		}
	}
	return out, nil
}

// unsound checks that the fields of a decoded task agree with its state, as
// the model's invariants require of every task, and returns what is wrong,
// or "".
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

// scanTasks reads every row of rows as a task and closes rows.
func scanTasks(rows pgx.Rows, err error) ([]model.Task, error) {
	return scanTasksN(rows, err, 0)
}

// scanTasksN is scanTasks for rows that are expected to number up to n:
// the tasks' slice is made for n once the first row comes (none for no
// row, as for an idle Worker's Pop).
func scanTasksN(rows pgx.Rows, err error, n int) ([]model.Task, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []model.Task
	s := newRowScanner()
	for rows.Next() {
		if out == nil && n > 0 {
			out = make([]model.Task, 0, n)
		}
		if err := s.scan(rows); err != nil {
			return nil, err
		}
		t, err := s.r.decode()
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}
