package redis

import (
	"errors"
	"reflect"
	"testing"

	"github.com/leasehold/leasehold/core"
)

// FuzzDecodeTask feeds decodeTask any bytes as a task's packed value: it
// never panics, a value that does not decode is ErrCorrupt, and one that
// does decodes again, packed anew from its values, to the same task (so
// nothing is lost or read twice between the wire and the Task). The seeds
// are records of each layout and form; `make fuzz` runs it for a minute.
func FuzzDecodeTask(f *testing.F) {
	ready := []any{"p", int64(0), "ready", int64(0), int64(1), int64(3), int64(0), int64(1000), false, false, false, false, "", "", ""}
	running := []any{"", int64(-5), "running", int64(2), int64(3), int64(9), int64(9), int64(1000), int64(900), int64(1100), int64(2100), false,
		"1 1050 1 4:lost", "", "3153600000000000000"}
	failed := []any{"x", int64(7), "failed", int64(3), int64(3), int64(12), int64(11), int64(-1000), false, int64(1), int64(2), int64(3),
		"1 1 0 1:a2 2 2 0:", "r", "1", "key", false}
	for _, fields := range [][]any{ready, ready[:14], running, failed, {"quarantined", "index entry without its task", ""}} {
		for _, packed := range []string{PackValues(fields), PackArray(fields)} {
			// The seeds decode, so that the round trip below runs.
			if _, err := decodeTask("q", []string{"t1", packed}); err != nil {
				f.Fatalf("seed %v: %v", fields, err)
			}
			f.Add("t1", []byte(packed))
		}
	}
	f.Add("", []byte(nil))
	f.Add("t\x00", []byte("\xdc\xff\xff"))
	f.Fuzz(func(t *testing.T, id string, packed []byte) {
		task, err := decodeTask("q", []string{id, string(packed)})
		if err != nil {
			if !errors.Is(err, core.ErrCorrupt) {
				t.Fatalf("decodeTask(%q) = %v, want ErrCorrupt", packed, err)
			}
			return
		}
		values, ok := unpackValues(string(packed))
		if !ok {
			t.Fatalf("decodeTask accepted %q, which unpackValues refuses", packed)
		}
		again, err := decodeTask("q", []string{id, PackValues(values)})
		if err != nil || !reflect.DeepEqual(again, task) {
			t.Fatalf("%q decoded to %+v, its values packed anew to %+v, %v", packed, task, again, err)
		}
	})
}
