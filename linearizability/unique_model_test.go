package linearizability

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/model"
)

func keyed(id, key string, d time.Duration) Input {
	return Input{Op: model.OpEnqueue, Enqueue: &model.EnqueueArgs{ID: id, MaxAttempts: 3, UniqueKey: key, UniqueFor: d}}
}

// A refused Enqueue with a unique key carries no clock reading, but its
// answer may depend on one: the checker judges it at the readings taken
// within the call, and the holder it names must be the model's.
func TestCheckerJudgesAKeyedRefusalAtTheReadingsOfItsCall(t *testing.T) {
	held := func(cands []time.Time, holder string) porcupine.CheckResult {
		b := newBuilder(t)
		b.do(0, 0, 1, keyed("a", "k", time.Millisecond))
		dup := b.do(0, 2, 3, keyed("b", "k", 0))
		dup.Output = Output{}
		dup.Output.setError(&model.DuplicateError{Key: "k", TaskID: holder})
		dup.Input.NowCandidates = cands
		return b.check()
	}
	now := FakeEpoch
	if got := held([]time.Time{now, now.Add(time.Millisecond)}, "a"); got != porcupine.Ok {
		t.Errorf("a duplicate within the period: %v, want Ok", got)
	}
	if got := held([]time.Time{now.Add(time.Millisecond)}, "a"); got != porcupine.Illegal {
		t.Errorf("a duplicate judged only after the period ended: %v, want Illegal", got)
	}
	if got := held([]time.Time{now}, "b"); got != porcupine.Illegal {
		t.Errorf("a duplicate naming the wrong holder: %v, want Illegal", got)
	}
}
