package postgres

import (
	"fmt"
	"strings"
	"testing"
)

// TestAckManyProbedKeepsAckManysGuard checks that the pipelined AckBatch's
// statement is ackMany's, guard and stamping alike, with only its answer
// extended by the reasons for the claims it did not apply.
func TestAckManyProbedKeepsAckManysGuard(t *testing.T) {
	q := buildQueries(`"s"`)
	if !strings.HasSuffix(q.ackMany, changedRows) {
		t.Fatalf("ackMany does not end with %q:\n%s", changedRows, q.ackMany)
	}
	body := atTxNow(strings.TrimSuffix(q.ackMany, changedRows), 5)
	if !strings.HasPrefix(q.ackManyProbedNow, body) {
		t.Fatalf("the pipelined statement does not begin with ackMany's:\n%s\nwant the prefix\n%s", q.ackManyProbedNow, body)
	}
	if n := strings.Count(q.ackManyProbedNow, "UPDATE "); n != 2 { // the tasks and the sequence
		t.Errorf("the pipelined statement has %d UPDATEs, want ackMany's 2:\n%s", n, q.ackManyProbedNow)
	}
}

// TestQueueRowsAreBounded: a store remembers the rows of at most
// maxQueueRows queues; past that it starts again, empty.
func TestQueueRowsAreBounded(t *testing.T) {
	var r queueRows
	for i := range maxQueueRows {
		r.add(fmt.Sprintf("q%d", i))
	}
	r.add("q0") // known already: not counted again
	if !r.has("q0") || !r.has(fmt.Sprintf("q%d", maxQueueRows-1)) || r.n.Load() != maxQueueRows {
		t.Fatalf("after %d queues: has q0 %v, counted %d", maxQueueRows, r.has("q0"), r.n.Load())
	}
	r.forget("q1")
	r.forget("q1")
	if r.has("q1") || r.n.Load() != maxQueueRows-1 {
		t.Fatalf("after forgetting q1 twice: has it %v, counted %d", r.has("q1"), r.n.Load())
	}
	r.add("q1")
	r.add("one more")
	if r.has("q0") || r.has("one more") || r.n.Load() != 0 {
		t.Fatalf("past the bound: has q0 %v, has the last %v, counted %d; want an empty set", r.has("q0"), r.has("one more"), r.n.Load())
	}
	r.add("q0")
	if !r.has("q0") || r.n.Load() != 1 {
		t.Fatalf("after starting again: has q0 %v, counted %d", r.has("q0"), r.n.Load())
	}
}
