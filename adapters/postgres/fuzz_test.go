package postgres

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/leasehold/leasehold/internal/damagetest"
	"github.com/leasehold/leasehold/model"
)

// rawOf is the row a task is stored as (the columns of taskColumns, as
// PostgreSQL gives them back), with no quarantine.
func rawOf(tb testing.TB, t model.Task) rawTask {
	entries := make([]errorEntry, len(t.Errors))
	for k, e := range t.Errors {
		text, raw := messageArgs(e.Message)
		entries[k] = errorEntry{Attempt: e.Attempt, At: micros(e.At), Message: text, MessageBytes: raw,
			LeaseExpired: e.LeaseExpired, Cancelled: e.Cancelled}
	}
	errs, err := json.Marshal(entries)
	if err != nil {
		tb.Fatal(err)
	}
	var key []byte
	if t.UniqueKey != "" {
		key = []byte(t.UniqueKey)
	}
	return rawTask{queue: t.Queue, id: []byte(t.ID), payload: t.Payload, result: t.Result,
		priority: int32(t.Priority), attempt: int32(t.Attempt), state: int16(t.State),
		maxAttempts: int64(t.MaxAttempts), version: int64(t.Version), token: int64(t.ClaimToken), timeout: int64(t.Timeout),
		enqueuedAt: micros(t.EnqueuedAt), runAfter: micros(t.RunAfter), claimedAt: micros(t.ClaimedAt),
		deadline: micros(t.Deadline), finAt: micros(t.FinishedAt), errors: string(errs),
		uniqueKey: key, uniqueUntil: micros(t.UniqueUntil)}
}

// FuzzDecodeTask damages columns of a stored row with any value of the
// column's type (the database holds nothing else), NULL where the column
// allows it, and any text as the error history: the decoding never
// panics, a row that does not decode is ErrCorrupt, and a row that does
// decodes to a sound task whose history the statements can append to,
// which stored again decodes to itself. The seeds are a Ready, a Running
// and a finished task; `make fuzz` runs it for a minute.
func FuzzDecodeTask(f *testing.F) {
	bases := damagetest.Bases()
	for i, b := range bases {
		r := rawOf(f, b)
		if got, err := r.decode(); err != nil || !reflect.DeepEqual(got, b) {
			f.Fatalf("seed %d decodes to %+v, %v", i, got, err)
		}
		f.Add(uint8(i), uint32(0), int64(0), "", []byte(nil))
	}
	const (
		colState      = 4
		colEnqueuedAt = 9
		colErrors     = 14
		colQuarantine = 19
	)
	f.Add(uint8(1), uint32(1<<colErrors), int64(2), `[{"attempt":1,"message_bytes":"!!"}]`, []byte(nil))
	f.Add(uint8(1), uint32(1<<colErrors), int64(0), `null`, []byte(nil))
	f.Add(uint8(2), uint32(1<<colErrors), int64(0), `[null]`, []byte(nil))
	f.Add(uint8(0), uint32(1<<colState|1<<colQuarantine), int64(int(model.Quarantined)), "set aside", []byte(nil))
	// An enqueue time that is the zero time once decoded.
	f.Add(uint8(0), uint32(1<<colEnqueuedAt), zeroMicros, "", []byte(nil))
	if n := len(new(rawTask).appendDest(nil)); n != taskColumnCount {
		f.Fatalf("%d columns scanned, damageColumn damages %d", n, taskColumnCount)
	}
	f.Fuzz(func(t *testing.T, base uint8, mask uint32, n int64, s string, b []byte) {
		r := rawOf(t, bases[int(base)%len(bases)])
		// Column i takes n (of its type), or NULL when n is odd and the
		// column allows it; a text column takes s, a bytea column b.
		for i := range taskColumnCount {
			if mask&(1<<i) != 0 {
				damageColumn(&r, i, n, n%2 != 0, s, b)
			}
		}
		task, err := r.decode()
		damagetest.CheckDecoded(t, r, task, err, unsound, []byte(r.errors), func(task model.Task) (model.Task, error) {
			stored := rawOf(t, task)
			return stored.decode()
		})
	})
}

// taskColumnCount is the number of columns of taskColumns (damageColumn's
// i ranges over them).
const taskColumnCount = 20

// damageColumn sets column i of r (in the order of taskColumns) to n, of
// the column's type, or to NULL when null and the column allows it; a
// text column takes s, a bytea column b.
func damageColumn(r *rawTask, i int, n int64, null bool, s string, b []byte) {
	at := func(p **int64) {
		if null {
			*p = nil
		} else {
			*p = &n
		}
	}
	bytes := func(p *[]byte) {
		if null {
			*p = nil
		} else {
			*p = b
		}
	}
	switch i {
	case 0:
		r.queue = s
	case 1:
		r.id = b
	case 2:
		bytes(&r.payload)
	case 3:
		r.priority = int32(n)
	case 4:
		r.state = int16(n)
	case 5:
		r.attempt = int32(n)
	case 6:
		r.maxAttempts = n
	case 7:
		r.version = n
	case 8:
		r.token = n
	case 9:
		at(&r.enqueuedAt)
	case 10:
		at(&r.runAfter)
	case 11:
		at(&r.claimedAt)
	case 12:
		at(&r.deadline)
	case 13:
		at(&r.finAt)
	case 14:
		r.errors = s
	case 15:
		bytes(&r.result)
	case 16:
		r.timeout = n
	case 17:
		bytes(&r.uniqueKey)
	case 18:
		at(&r.uniqueUntil)
	case 19:
		if null {
			r.quarantine = nil
		} else {
			r.quarantine = &s
		}
	}
}
