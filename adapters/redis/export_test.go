package redis

import (
	"encoding/binary"
	"fmt"
	"math"
)

// StoredFields names the values of a packed task, in order, for tests that
// read or damage stored tasks.
var StoredFields = []string{"payload", "priority", "state", "attempt", "max_attempts",
	"version", "token", "enqueued_at", "run_after", "claimed_at", "deadline",
	"finished_at", "errors", "result", "timeout"}

// UnpackValues decodes a packed task, of either form (lua/lib.lua).
func UnpackValues(b string) ([]any, bool) { return unpackValues(b) }

// PackValues encodes values (string, int64, int, float64, bool) as the
// store packs a task: as cmsgpack packs them given as arguments, one after
// the other.
func PackValues(values []any) string { return string(appendValues(nil, values)) }

// PackArray encodes values as cmsgpack packs a Lua list of them: the form
// in which earlier versions of the store packed a task.
func PackArray(values []any) string {
	var out []byte
	if n := len(values); n <= 15 {
		out = append(out, 0x90|byte(n))
	} else {
		out = append(out, 0xdc)
		out = binary.BigEndian.AppendUint16(out, uint16(n))
	}
	return string(appendValues(out, values))
}

func appendValues(out []byte, values []any) []byte {
	for _, v := range values {
		switch v := v.(type) {
		case string:
			switch l := len(v); {
			case l < 32:
				out = append(out, 0xa0|byte(l))
			case l <= 0xff:
				out = append(out, 0xd9, byte(l))
			case l <= 0xffff:
				out = append(out, 0xda)
				out = binary.BigEndian.AppendUint16(out, uint16(l))
			default:
				out = append(out, 0xdb)
				out = binary.BigEndian.AppendUint32(out, uint32(l))
			}
			out = append(out, v...)
		case int:
			out = append(out, 0xd3)
			out = binary.BigEndian.AppendUint64(out, uint64(v))
		case int64:
			out = append(out, 0xd3)
			out = binary.BigEndian.AppendUint64(out, uint64(v))
		case uint64:
			out = append(out, 0xcf)
			out = binary.BigEndian.AppendUint64(out, v)
		case float64:
			out = append(out, 0xcb)
			out = binary.BigEndian.AppendUint64(out, math.Float64bits(v))
		case bool:
			if v {
				out = append(out, 0xc3)
			} else {
				out = append(out, 0xc2)
			}
		default:
			panic(fmt.Sprintf("PackValues: %T", v))
		}
	}
	return out
}

// Batched returns how many Enqueue calls the store has sent in a batch of
// several.
func Batched(s *Store) uint64 { return s.batched.Load() }

// HoldEnqueues takes the flight of queue's Enqueue calls, as a call on its
// way to the server would: calls made meanwhile wait. waiting reports how
// many wait; release ends the flight, and those that wait go out together.
func HoldEnqueues(s *Store, queue string) (waiting func() int, release func()) {
	g := s.group(queue)
	g.mu.Lock()
	g.flights++
	g.mu.Unlock()
	waiting = func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.waiting)
	}
	return waiting, func() { s.land(g, queue) }
}

// EnqueueGroups returns the number of queues whose Enqueue state the store
// keeps.
func EnqueueGroups(s *Store) int {
	n := 0
	s.enqueues.Range(func(any, any) bool { n++; return true })
	return n
}

// RegistryKey is the key of a queue's registry, the set of every ID it
// holds a record of (see akey in lua/lib.lua).
func RegistryKey(s *Store, queue string) string { return s.prefix + "{" + queue + "}:all" }
