package postgres

import (
	"strings"
	"testing"
)

// TestAckManyProbedKeepsAckManysGuard checks that the pipelined AckBatch's
// statement is ackMany's, guard and stamping alike, with only its answer
// extended by the reasons for the claims it did not apply.
func TestAckManyProbedKeepsAckManysGuard(t *testing.T) {
	q := buildQueries(`"s"`)
	if !strings.HasSuffix(q.ackMany, ackManyFinal) {
		t.Fatalf("ackMany does not end with %q:\n%s", ackManyFinal, q.ackMany)
	}
	body := atTxNow(strings.TrimSuffix(q.ackMany, ackManyFinal), 5)
	if !strings.HasPrefix(q.ackManyProbedNow, body) {
		t.Fatalf("the pipelined statement does not begin with ackMany's:\n%s\nwant the prefix\n%s", q.ackManyProbedNow, body)
	}
	if n := strings.Count(q.ackManyProbedNow, "UPDATE "); n != 2 { // the tasks and the sequence
		t.Errorf("the pipelined statement has %d UPDATEs, want ackMany's 2:\n%s", n, q.ackManyProbedNow)
	}
}
