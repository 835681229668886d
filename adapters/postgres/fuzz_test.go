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
	f.Add(uint8(0), uint32(1<<colEnqueuedAt), int64(-62135596800000000), "", []byte(nil))
	f.Fuzz(func(t *testing.T, base uint8, mask uint32, n int64, s string, b []byte) {
		r := rawOf(t, bases[int(base)%len(bases)])
		// Column i takes n (of its type), or NULL when n is odd and the
		// column allows it; a text column takes s, a bytea column b.
		null := n%2 != 0
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
		cols := []func(){
			func() { r.queue = s },
			func() { r.id = b },
			func() { bytes(&r.payload) },
			func() { r.priority = int32(n) },
			func() { r.state = int16(n) },
			func() { r.attempt = int32(n) },
			func() { r.maxAttempts = n },
			func() { r.version = n },
			func() { r.token = n },
			func() { at(&r.enqueuedAt) },
			func() { at(&r.runAfter) },
			func() { at(&r.claimedAt) },
			func() { at(&r.deadline) },
			func() { at(&r.finAt) },
			func() { r.errors = s },
			func() { bytes(&r.result) },
			func() { r.timeout = n },
			func() { bytes(&r.uniqueKey) },
			func() { at(&r.uniqueUntil) },
			func() {
				if null {
					r.quarantine = nil
				} else {
					r.quarantine = &s
				}
			},
		}
		if len(cols) != len(r.appendDest(nil)) {
			t.Fatalf("%d columns damaged, %d scanned", len(cols), len(r.appendDest(nil)))
		}
		for i, damage := range cols {
			if mask&(1<<i) != 0 {
				damage()
			}
		}
		task, err := r.decode()
		damagetest.CheckDecoded(t, r, task, err, unsound, []byte(r.errors), func(task model.Task) (model.Task, error) {
			stored := rawOf(t, task)
			return stored.decode()
		})
	})
}
