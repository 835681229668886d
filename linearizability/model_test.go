package linearizability

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// builder writes histories by hand. do runs an op on its own copy of the
// model, so the output it records is the right one; a test then makes
// operations overlap, or changes an output into a wrong one.
type builder struct {
	t   *testing.T
	q   model.Queue
	now time.Time
	h   History
}

func newBuilder(t *testing.T) *builder {
	return &builder{t: t, q: model.NewQueue("q", 0), now: FakeEpoch,
		// Room enough that the pointers do returns stay valid.
		h: History{Format: HistoryFormat, Epoch: FakeEpoch, Operations: make([]Operation, 0, 64)}}
}

// do applies in at b.now and records it for client from call to ret.
func (b *builder) do(client int, call, ret int64, in Input) *Operation {
	in.Queue = "q"
	next, m := model.Apply(b.q, in.modelInput(b.now))
	b.q = next
	out := Output{Now: b.now}
	if m.Err != nil {
		out = Output{}
		out.setError(m.Err)
	} else {
		if m.Task.ID != "" {
			t := m.Task
			out.Task = &t
		}
		out.Tasks, out.IDs, out.Claims, out.Next = m.Tasks, m.IDs, m.ReapClaims, m.Next
		out.Items = itemOutputs(m.Items)
		if in.Op == model.OpCounts {
			out.Counts = &m.Counts
		}
		if in.Op == model.OpGet || in.Op == model.OpList || in.Op == model.OpCounts {
			out.Now = time.Time{}
		}
	}
	if len(b.h.Operations) == cap(b.h.Operations) {
		b.t.Fatal("builder: too many operations")
	}
	b.h.Operations = append(b.h.Operations, Operation{Client: client, Call: call, Return: ret, Input: in, Output: out})
	return &b.h.Operations[len(b.h.Operations)-1]
}

func (b *builder) advance(d time.Duration) { b.now = b.now.Add(d) }

func (b *builder) check() porcupine.CheckResult {
	b.t.Helper()
	v := Check(&b.h, 10*time.Second)
	if v.Result == porcupine.Unknown {
		b.t.Fatalf("check timed out")
	}
	return v.Result
}

func enqueue(id string) Input {
	return Input{Op: model.OpEnqueue, Enqueue: &model.EnqueueArgs{ID: id, MaxAttempts: 3}}
}

func pop(lease time.Duration) Input { return Input{Op: model.OpPop, Lease: lease, Limit: 1} }

func ack(id string, token uint64) Input {
	return Input{Op: model.OpAck, Claim: &ClaimRef{TaskID: id, Token: token}, Result: []byte("ok")}
}

func retry(id string, token uint64) Input {
	return Input{Op: model.OpRetry, Claim: &ClaimRef{TaskID: id, Token: token}, Message: "again"}
}

func claimExpired(ttl time.Duration) Input {
	return Input{Op: model.OpClaimExpired, Lease: ttl}
}

func requeue(id string, version uint64) Input {
	return Input{Op: model.OpRequeue, ReapClaim: &ClaimRef{TaskID: id, Version: version}}
}

// staleAck is the SQLite seed: A pops, the task is retried and B pops it,
// then A acks with its old token.
func staleAck(t *testing.T, wrong bool) porcupine.CheckResult {
	b := newBuilder(t)
	b.do(0, 0, 1, enqueue("a"))
	a := b.do(1, 2, 3, pop(time.Second)).Output.Tasks[0]
	b.do(1, 4, 5, retry("a", a.ClaimToken))
	b.do(2, 6, 7, pop(time.Second))
	last := b.do(1, 8, 9, ack("a", a.ClaimToken))
	if last.Output.Err != "stale_claim" {
		t.Fatalf("the model let the stale ack through: %+v", last.Output)
	}
	if wrong { // the store let it through
		task := b.h.Operations[3].Output.Tasks[0]
		task.State, task.Version, task.Result, task.FinishedAt, task.Deadline = model.Succeeded, task.Version+1, []byte("ok"), b.now, time.Time{}
		last.Output = Output{Now: b.now, Task: &task}
	}
	return b.check()
}

func TestCheckerRejectsAStaleAckThatSucceeded(t *testing.T) {
	if got := staleAck(t, false); got != porcupine.Ok {
		t.Errorf("the right history: %v, want Ok", got)
	}
	if got := staleAck(t, true); got != porcupine.Illegal {
		t.Errorf("the stale ack succeeded: %v, want Illegal", got)
	}
}

func TestCheckerRejectsADoublePop(t *testing.T) {
	b := newBuilder(t)
	b.do(0, 0, 1, enqueue("a"))
	first := b.do(1, 2, 10, pop(time.Second))
	second := b.do(2, 3, 11, pop(time.Second)) // concurrent with the first
	if len(first.Output.Tasks) != 1 || len(second.Output.Tasks) != 0 {
		t.Fatalf("the model popped %d then %d tasks", len(first.Output.Tasks), len(second.Output.Tasks))
	}
	if got := b.check(); got != porcupine.Ok {
		t.Errorf("one pop gets the task: %v, want Ok", got)
	}
	// Either pop may have been first: swap the answers.
	first.Output.Tasks, second.Output.Tasks = nil, first.Output.Tasks
	if got := b.check(); got != porcupine.Ok {
		t.Errorf("the other pop gets the task: %v, want Ok", got)
	}
	// Both get it.
	first.Output.Tasks = second.Output.Tasks
	if got := b.check(); got != porcupine.Illegal {
		t.Errorf("both pops got the task: %v, want Illegal", got)
	}
}

// requeueAfterAck is the Redis seed: the lease lapses, a broker claims the
// task, the worker acks, then the broker requeues.
func requeueAfterAck(t *testing.T, wrong bool) porcupine.CheckResult {
	b := newBuilder(t)
	b.do(0, 0, 1, enqueue("a"))
	a := b.do(1, 2, 3, pop(time.Millisecond)).Output.Tasks[0]
	b.advance(time.Millisecond)
	rc := b.do(2, 4, 5, claimExpired(time.Second)).Output.Claims[0]
	b.do(1, 6, 7, ack("a", a.ClaimToken))
	last := b.do(2, 8, 9, requeue("a", rc.Version))
	if last.Output.Err != "stale_claim" {
		t.Fatalf("the model let the stale requeue through: %+v", last.Output)
	}
	if wrong {
		task := rc.Task
		task.State, task.Version, task.ClaimToken, task.Deadline, task.ClaimedAt = model.Ready, task.Version+2, 0, time.Time{}, time.Time{}
		task.Errors = []model.TaskError{{Attempt: 1, At: b.now, Message: model.LeaseExpiredMessage, LeaseExpired: true}}
		last.Output = Output{Now: b.now, Task: &task}
	}
	return b.check()
}

func TestCheckerRejectsABrokerRequeueAfterAnAck(t *testing.T) {
	if got := requeueAfterAck(t, false); got != porcupine.Ok {
		t.Errorf("the right history: %v, want Ok", got)
	}
	if got := requeueAfterAck(t, true); got != porcupine.Illegal {
		t.Errorf("the requeue after the ack succeeded: %v, want Illegal", got)
	}
}

func TestCheckerAcceptsConcurrentDecisionsInEitherOrder(t *testing.T) {
	for _, ackFirst := range []bool{true, false} {
		b := newBuilder(t)
		b.do(0, 0, 1, enqueue("a"))
		a := b.do(1, 2, 3, pop(time.Millisecond)).Output.Tasks[0]
		b.advance(time.Millisecond)
		rc := b.do(2, 4, 5, claimExpired(time.Second)).Output.Claims[0]
		// The ack and the requeue overlap; the model ran them in one order.
		if ackFirst {
			b.do(1, 6, 9, ack("a", a.ClaimToken))
			b.do(2, 7, 8, requeue("a", rc.Version))
		} else {
			b.do(2, 7, 8, requeue("a", rc.Version))
			b.do(1, 6, 9, ack("a", a.ClaimToken))
		}
		if got := b.check(); got != porcupine.Ok {
			t.Errorf("ack first %v: %v, want Ok", ackFirst, got)
		}
	}
}

func TestCheckerRejectsAWrongField(t *testing.T) {
	b := newBuilder(t)
	b.do(0, 0, 1, enqueue("a"))
	a := b.do(1, 2, 3, pop(time.Millisecond)).Output.Tasks[0]
	r := b.do(1, 4, 5, retry("a", a.ClaimToken))
	if got := b.check(); got != porcupine.Ok {
		t.Fatalf("the right history: %v, want Ok", got)
	}
	r.Output.Task.ClaimedAt = a.ClaimedAt // retry kept the old lock timestamp
	if got := b.check(); got != porcupine.Illegal {
		t.Errorf("retry kept ClaimedAt: %v, want Illegal", got)
	}
}

func TestCheckerComparesTransitionErrorsByOpAndState(t *testing.T) {
	b := newBuilder(t)
	b.do(0, 0, 1, enqueue("a"))
	a := b.do(1, 2, 3, pop(time.Second)).Output.Tasks[0]
	b.do(1, 4, 5, ack("a", a.ClaimToken))
	again := b.do(1, 6, 7, ack("a", a.ClaimToken))
	if again.Output.Err != "invalid_transition" || again.Output.ErrState != model.Succeeded {
		t.Fatalf("second ack: %+v", again.Output)
	}
	if got := b.check(); got != porcupine.Ok {
		t.Fatalf("the right history: %v, want Ok", got)
	}
	again.Output.ErrState = model.Failed
	if got := b.check(); got != porcupine.Illegal {
		t.Errorf("wrong state in the transition error: %v, want Illegal", got)
	}
	again.Output.ErrState, again.Output.Err = model.Succeeded, "stale_claim"
	if got := b.check(); got != porcupine.Illegal {
		t.Errorf("wrong error kind: %v, want Illegal", got)
	}
}

func TestCheckerTriesBothOutcomesOfAnIndeterminateOp(t *testing.T) {
	for _, happened := range []bool{true, false} {
		b := newBuilder(t)
		enq := b.do(0, 0, 1, enqueue("a"))
		if !happened {
			b.q = model.NewQueue("q", 0)
		}
		enq.Output = Output{Indeterminate: true, ErrText: "connection reset"}
		enq.Return = math.MaxInt64
		enq.Input.NowCandidates = []time.Time{b.now.Add(-time.Millisecond), b.now, b.now.Add(time.Millisecond)}
		b.do(1, 2, 3, pop(time.Second))
		if got := b.check(); got != porcupine.Ok {
			t.Errorf("enqueue happened %v: %v, want Ok", happened, got)
		}
	}
	// A pop that shows the task enqueued at a time no reading of the clock
	// gave is not explained by the indeterminate enqueue.
	b := newBuilder(t)
	enq := b.do(0, 0, 1, enqueue("a"))
	enq.Output = Output{Indeterminate: true, ErrText: "connection reset"}
	enq.Return = math.MaxInt64
	enq.Input.NowCandidates = []time.Time{b.now.Add(time.Millisecond)}
	b.do(1, 2, 3, pop(time.Second))
	if got := b.check(); got != porcupine.Illegal {
		t.Errorf("enqueued at an instant the clock never read: %v, want Illegal", got)
	}
}

// TestCheckerTakesABusyAnswerAsACallThatDidNotRun checks "busy"
// (core.ErrBusy) as an op that changed nothing: a later pop that finds the
// queue empty is right, one that finds the task the busy enqueue named is
// not.
func TestCheckerTakesABusyAnswerAsACallThatDidNotRun(t *testing.T) {
	for _, ran := range []bool{false, true} {
		b := newBuilder(t)
		enq := b.do(0, 0, 1, enqueue("a"))
		if !ran {
			b.q = model.NewQueue("q", 0)
		}
		enq.Output = Output{}
		enq.Output.setError(fmt.Errorf("begin: %w", core.ErrBusy))
		if enq.Output.Err != "busy" || enq.Output.Indeterminate {
			t.Fatalf("ErrBusy recorded as %+v, want the kind busy", enq.Output)
		}
		b.do(1, 2, 3, pop(time.Second))
		want := porcupine.Ok
		if ran {
			want = porcupine.Illegal
		}
		if got := b.check(); got != want {
			t.Errorf("a busy enqueue whose task a pop then claimed=%v: %v, want %v", ran, got, want)
		}
	}
}

func TestCheckerPartitionsByQueue(t *testing.T) {
	b := newBuilder(t)
	b.do(0, 0, 1, enqueue("a"))
	other := b.do(1, 2, 3, Input{Op: model.OpCounts})
	other.Input.Queue = "r" // the same op on another queue sees it empty
	other.Output.Counts = &model.Counts{}
	if got := b.check(); got != porcupine.Ok {
		t.Errorf("queues apart: %v, want Ok", got)
	}
	other.Output.Counts = &model.Counts{Ready: 1}
	if got := b.check(); got != porcupine.Illegal {
		t.Errorf("a task in another queue counted: %v, want Illegal", got)
	}
}

func TestHistoryRoundTripsThroughJSONAndVisualizes(t *testing.T) {
	dir := t.TempDir()
	for _, wrong := range []bool{false, true} {
		b := newBuilder(t)
		b.do(0, 0, 1, enqueue("a"))
		a := b.do(1, 2, 3, pop(time.Millisecond)).Output.Tasks[0]
		b.advance(time.Millisecond)
		rc := b.do(2, 4, 5, claimExpired(time.Second)).Output.Claims[0]
		b.do(1, 6, 7, ack("a", a.ClaimToken))
		last := b.do(2, 8, 9, requeue("a", rc.Version))
		if wrong {
			last.Output = Output{Now: b.now, Task: &rc.Task}
		}
		b.h.Events = []Event{{At: 4, Text: "clock +1ms"}}
		v := Check(&b.h, time.Second)
		out, err := SaveFailure(dir, &b.h, nil, v)
		if err != nil {
			t.Fatal(err)
		}
		h, err := LoadHistory(filepath.Join(out, "history.json"))
		if err != nil {
			t.Fatal(err)
		}
		if again := Check(h, time.Second); again.Result != v.Result {
			t.Errorf("wrong %v: replayed %v, checked %v", wrong, again.Result, v.Result)
		}
	}
}

func TestDescriptionsAreReadable(t *testing.T) {
	b := newBuilder(t)
	b.do(0, 0, 1, enqueue("a"))
	op := b.do(1, 2, 3, pop(2*time.Millisecond))
	got := describeOp(&op.Input, &op.Output, FakeEpoch)
	want := "q Pop(n=1 lease=2ms) @+0ms → a running v2 attempt=1/3 token=2 deadline=+2ms"
	if got != want {
		t.Errorf("describeOp:\n got %s\nwant %s", got, want)
	}
	if got, want := describeQueue(b.q, FakeEpoch), "q seq=2: [a running v2 attempt=1/3 token=2 deadline=+2ms]"; got != want {
		t.Errorf("describeQueue:\n got %s\nwant %s", got, want)
	}
}

// TestCheckFindsTheWitnessWhereLostCallsDidNotHappen checks two histories
// of a Redis failover (WithReplicaAcks) whose Enqueues met the dead master
// and got no answer; checked whole, each holds so many possible states
// (each lost Enqueue at each of the 50-odd clock readings it may have
// taken) that the check ran out of six minutes (the first) and of a
// minute (the second). The first is linearizable without its four lost
// calls; the second is not without both of its two (one of them took
// effect: a later version shows it), but is with either one.
func TestCheckFindsTheWitnessWhereLostCallsDidNotHappen(t *testing.T) {
	for _, c := range []struct {
		file      string
		ops, lost int
	}{{"failover-lost-enqueues.json.gz", 304, 4}, {"failover-one-lost-enqueue-seen.json.gz", 293, 2}} {
		h := loadGzipped(t, filepath.Join("testdata", c.file))
		if n := h.Indeterminate(); n != c.lost || len(h.Operations) != c.ops {
			t.Fatalf("%s: %d operations, %d indeterminate; want %d and %d", c.file, len(h.Operations), n, c.ops, c.lost)
		}
		// A minute: the race detector makes the check of the second
		// several times slower (about 6 s here); the whole history
		// outran a minute without the race detector.
		v := Check(h, time.Minute)
		if v.Result != porcupine.Ok || !v.WithoutIndeterminate {
			t.Errorf("%s: Check = %v (without lost calls: %v) in %v, want Ok without them", c.file, v.Result, v.WithoutIndeterminate, v.Elapsed)
		}
	}
}

// loadGzipped reads a gzipped history.json.
func loadGzipped(t *testing.T, path string) *History {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var h History
	if err := json.NewDecoder(z).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return &h
}

// TestCheckTakesTheLostCallsIntoAccountWhenSeen: a lost Enqueue whose task
// a Pop then claims took effect, so the history without it is not
// linearizable and the whole one is checked (Ok); a transaction whose
// commit's answer was lost is never left out, since its statements'
// answers must fit the state it met (one that no state explains is
// Illegal, though the history without it would be Ok).
func TestCheckTakesTheLostCallsIntoAccountWhenSeen(t *testing.T) {
	b := newBuilder(t)
	enq := b.do(0, 0, 1, enqueue("a"))
	enq.Output = Output{Indeterminate: true, ErrText: "connection reset"}
	enq.Input.NowCandidates = []time.Time{b.now}
	b.do(1, 2, 3, pop(time.Second))
	if v := Check(&b.h, 10*time.Second); v.Result != porcupine.Ok || v.WithoutIndeterminate {
		t.Errorf("a lost Enqueue whose task was claimed: %v (without the lost call: %v), want Ok with it", v.Result, v.WithoutIndeterminate)
	}

	b = newBuilder(t)
	b.do(0, 0, 1, enqueue("a"))
	tx := b.tx(1, 2, 3, true, "", false, enqueue("a"))
	tx.Output.Indeterminate = true
	tx.Output.Tx[0] = Output{Now: b.now, Task: &model.Task{Queue: "q", ID: "a", State: model.Ready, Version: 9, MaxAttempts: 3, EnqueuedAt: b.now}}
	if v := Check(&b.h, 10*time.Second); v.Result != porcupine.Illegal {
		t.Errorf("a transaction, its commit's answer lost, whose Enqueue of a taken ID was answered with a task: %v, want Illegal", v.Result)
	}
}
