package sqlite

import (
	"reflect"
	"testing"

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
	bases := damagetest.Bases()
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
		history, _ := raw[colErrors].([]byte)
		if text, ok := raw[colErrors].(string); ok {
			history = []byte(text)
		}
		damagetest.CheckDecoded(t, raw, task, err, unsound, history, func(task model.Task) (model.Task, error) {
			return decodeTask(rowOf(task))
		})
	})
}
