package sqlite

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/damagetest"
	"github.com/leasehold/leasehold/model"
)

// rowOf is the row a task is stored as, with each value of the type the
// driver reads back (integers as int64) and no quarantine.
func rowOf(t model.Task) [numColumns]any {
	var raw [numColumns]any
	for i, v := range taskArgs(t) {
		if n, ok := v.(int); ok {
			v = int64(n)
		}
		raw[i] = v
	}
	return raw
}

// FuzzDecodeTask damages columns of a stored row with values of any type
// the driver can hand back (NULL, an integer, a float, text, a blob): the
// decoding never panics, a row that does not decode is ErrCorrupt, and a
// row that does decodes to a sound task whose history the statements can
// append to, which stored again decodes to itself. The seeds are a Ready,
// a Running and a finished task; `make fuzz` runs it for a minute.
func FuzzDecodeTask(f *testing.F) {
	at := time.UnixMicro(1_700_000_000_000_000).UTC()
	bases := []model.Task{
		{Queue: "q", ID: "ready", Payload: []byte("p"), State: model.Ready, MaxAttempts: 3, Version: 1, EnqueuedAt: at},
		{Queue: "q", ID: "running", State: model.Running, Attempt: 2, MaxAttempts: 3, Version: 9, ClaimToken: 9,
			EnqueuedAt: at, ClaimedAt: at, Deadline: at.Add(time.Minute), Timeout: time.Second,
			Errors: []model.TaskError{{Attempt: 1, At: at, Message: "not \xffUTF-8", LeaseExpired: true}}},
		{Queue: "q", ID: "done", State: model.Succeeded, Attempt: 1, MaxAttempts: 1, Version: 4, ClaimToken: 3,
			EnqueuedAt: at, ClaimedAt: at, FinishedAt: at, Result: []byte("r"), UniqueKey: "k", UniqueUntil: at.Add(time.Hour)},
	}
	for i, b := range bases {
		if got, err := decodeTask(rowOf(b)); err != nil || !reflect.DeepEqual(got, b) {
			f.Fatalf("seed %d decodes to %+v, %v", i, got, err)
		}
		f.Add(uint8(i), uint32(0), int64(0), 0.0, "", []byte(nil))
	}
	f.Add(uint8(1), uint32(1<<colErrors), int64(2), 0.5, `[{"attempt":1,"message_bytes":"!!"}]`, []byte("[]"))
	f.Add(uint8(0), uint32(1<<colState|1<<colQuarantine), int64(6), 0.0, "set aside", []byte(nil))
	f.Add(uint8(1), uint32(1<<colErrors), int64(4), 0.0, "null", []byte(nil))  // text
	f.Add(uint8(2), uint32(1<<colErrors), int64(5), 0.0, "", []byte("[null]")) // a blob
	f.Fuzz(func(t *testing.T, base uint8, mask uint32, n int64, x float64, s string, b []byte) {
		raw := rowOf(bases[int(base)%len(bases)])
		for i := range raw {
			if mask&(1<<i) == 0 {
				continue
			}
			switch uint64(n+int64(i)) % 5 {
			case 0:
				raw[i] = nil
			case 1:
				raw[i] = n
			case 2:
				raw[i] = x
			case 3:
				raw[i] = s
			default:
				raw[i] = b
			}
		}
		task, err := decodeTask(raw)
		if err != nil {
			if !errors.Is(err, core.ErrCorrupt) {
				t.Fatalf("decodeTask(%v) = %v, want ErrCorrupt", raw, err)
			}
			return
		}
		if task.State == model.Quarantined {
			return
		}
		if why := unsound(task); why != "" {
			t.Fatalf("decodeTask(%v) = %+v: %s", raw, task, why)
		}
		if text, ok := raw[colErrors].(string); ok && !damagetest.Appendable([]byte(text)) ||
			!ok && !damagetest.Appendable(raw[colErrors].([]byte)) {
			t.Fatalf("decodeTask(%v) = %+v, but an error appended to its history would be lost", raw, task)
		}
		again, err := decodeTask(rowOf(task))
		if err != nil || !reflect.DeepEqual(again, task) {
			t.Fatalf("%v decoded to %+v, stored again to %+v, %v", raw, task, again, err)
		}
	})
}
