package report

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/model"
)

// fixture is a history of the memory adapter with the
// lease-expiry-off-by-one mutant applied (fuzz/mutants), saved by
// `leasehold check` as the violation of seed 17; see testdata/README.md.
const fixture = "testdata/lease-expiry-off-by-one.json"

func TestTheOffByOneViolationIsExplained(t *testing.T) {
	h, err := linearizability.LoadHistory(fixture)
	if err != nil {
		t.Fatal(err)
	}
	v := linearizability.Check(h, 10*time.Second)
	d := Build(h, v, Options{Porcupine: "history.html"})
	if d.Result != "Illegal" {
		t.Fatalf("result %s, want Illegal", d.Result)
	}
	q := d.Queues[0]
	if q.Refused == nil {
		t.Fatalf("the first queue, %s, has no refused step", q.Name)
	}
	r := q.Refused
	// The lease's deadline is the store's now: the model takes it as lapsed,
	// the mutant does not.
	if !strings.Contains(r.Store, "ClaimExpired") || !strings.HasSuffix(r.Store, "→ none") {
		t.Errorf("store's answer %q: want a ClaimExpired that found none", r.Store)
	}
	if !strings.Contains(r.Model, "→ claim t1") {
		t.Errorf("model's answer %q: want a claim of t1", r.Model)
	}
	if !strings.Contains(r.Before, "t1 running") {
		t.Errorf("state before %q: want t1 running", r.Before)
	}
	hits := 0
	for _, s := range q.Steps {
		if s.Refused {
			hits++
			if s.N != r.Step || s.Actor != r.Actor {
				t.Errorf("highlighted step %d by %s, refusal names step %d by %s", s.N, s.Actor, r.Step, r.Actor)
			}
		}
	}
	if hits != 1 {
		t.Errorf("%d steps highlighted, want 1", hits)
	}
	// The refused ClaimExpired found nothing in the store; its mark is on
	// the lane of the task the model would have claimed.
	marked := 0
	for _, l := range q.Lanes {
		for _, m := range l.Marks {
			if m.Refused {
				marked++
				if l.Task != "t1" {
					t.Errorf("the refused step is marked on %s's lane", l.Task)
				}
			}
		}
	}
	if marked != 1 {
		t.Errorf("the refused step is marked on %d lanes, want 1", marked)
	}
	var lane *Lane
	for i := range q.Lanes {
		if q.Lanes[i].Task == "t1" {
			lane = &q.Lanes[i]
		}
	}
	if lane == nil || len(lane.Claims) == 0 {
		t.Fatalf("no claims on t1's lane: %+v", q.Lanes)
	}
	if c := lane.Claims[0]; c.Broker || !strings.HasPrefix(c.Holder, "worker ") || c.Token == 0 || c.Deadline == "" || c.Lease == "" {
		t.Errorf("t1's first claim %+v: want a worker's, with its token, lease and deadline", c)
	}
	if len(q.Steps) != countOps(h, q.Name) {
		t.Errorf("%d steps, the queue has %d operations", len(q.Steps), countOps(h, q.Name))
	}
	var b bytes.Buffer
	if err := Render(&b, d); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{`class="refusal"`, `href="history.html"`, "stale acks refused", "task t1"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	// Self-contained: nothing fetched at view time.
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*"(https?:)?//`).FindString(page); m != "" {
		t.Errorf("the page loads %s", m)
	}
}

func countOps(h *linearizability.History, queue string) int {
	n := 0
	for _, op := range h.Operations {
		if op.Input.Queue == queue {
			n++
		}
	}
	return n
}

// staleHistory records a worker whose lease lapsed, a broker that claims
// and requeues the task, the worker's late Ack (refused as stale) and an
// operator's Remove with the version it saw before (a conflict).
func staleHistory(t *testing.T) *linearizability.History {
	t.Helper()
	ctx := context.Background()
	clock := core.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rec := linearizability.NewRecorder()
	store := memory.New(memory.WithClock(rec.Clock(clock)))
	defer store.Close()
	epoch := clock.Now()
	producer, worker := rec.Client("producer 0", store), rec.Client("worker 1", store)
	broker, operator := rec.Client("broker 0", store), rec.Client("operator 0", store)
	enq, err := producer.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	pop, err := worker.Pop(ctx, core.PopParams{Queue: "q", Lease: 10 * time.Millisecond, N: 1})
	if err != nil || len(pop.Tasks) != 1 {
		t.Fatal(pop, err)
	}
	claim := core.Claim{Queue: "q", TaskID: "a", Token: pop.Tasks[0].ClaimToken, Attempt: pop.Tasks[0].Attempt, Deadline: pop.Tasks[0].Deadline}
	clock.Advance(20 * time.Millisecond)
	reap, err := broker.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "q", ClaimTTL: 5 * time.Millisecond})
	if err != nil || len(reap.Claims) != 1 {
		t.Fatal(reap, err)
	}
	if _, err := broker.Requeue(ctx, core.RequeueParams{ReapClaim: reap.Claims[0]}); err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Ack(ctx, core.AckParams{Claim: claim}); err == nil {
		t.Fatal("a stale Ack was accepted")
	}
	if _, err := operator.Remove(ctx, core.InspectParams{Queue: "q", ID: "a", Expect: enq.Task.Version}); err == nil {
		t.Fatal("a Remove of an old version was accepted")
	}
	return &linearizability.History{Format: linearizability.HistoryFormat, Adapter: "memory", Mode: linearizability.FakeTime,
		Epoch: epoch, Operations: rec.Operations()}
}

func TestALinearizableHistoryShowsItsClaimsAndGuards(t *testing.T) {
	h := staleHistory(t)
	v := linearizability.Check(h, 10*time.Second)
	d := Build(h, v, Options{})
	if d.Result != "Ok" || len(d.Queues) != 1 {
		t.Fatalf("result %s, %d queues", d.Result, len(d.Queues))
	}
	q := d.Queues[0]
	if q.Refused != nil || q.Unplaced != 0 {
		t.Errorf("a linearizable queue with a refusal %+v or %d unplaced steps", q.Refused, q.Unplaced)
	}
	want := map[string]int{"stale acks refused": 1, "stale broker decisions dropped": 0, "operator conflicts": 1, "indeterminate calls": 0}
	for _, b := range d.Bars {
		if n, ok := want[b.Label]; ok && b.Count != n {
			t.Errorf("%s: %d, want %d", b.Label, b.Count, n)
		}
	}
	if len(q.Lanes) != 1 {
		t.Fatalf("%d lanes, want one for task a", len(q.Lanes))
	}
	l := q.Lanes[0]
	if len(l.Claims) != 2 {
		t.Fatalf("claims %+v: want the worker's, then the broker's", l.Claims)
	}
	w, b := l.Claims[0], l.Claims[1]
	if w.Broker || w.Holder != "worker 1" || w.Lease != "10ms" || w.Deadline != "+10ms" || !b.Broker || b.Holder != "broker 0" {
		t.Errorf("claims %+v", l.Claims)
	}
	// A lapsed lease does not end the worker's claim: the broker's Requeue
	// ends both.
	if w.To != b.To || b.To != b.From+1 || w.From >= b.From {
		t.Errorf("worker claim %d..%d, broker claim %d..%d", w.From, w.To, b.From, b.To)
	}
	var outcomes []string
	for _, m := range l.Marks {
		outcomes = append(outcomes, m.Op+" "+m.Outcome+" "+m.Kind)
	}
	got := strings.Join(outcomes, ", ")
	if got != "Enqueue accepted , Pop accepted , ClaimExpired accepted , Requeue accepted , Ack refused stale_claim, Remove refused conflict" {
		t.Errorf("marks: %s", got)
	}
	for i, s := range q.Steps {
		if s.N != i+1 {
			t.Errorf("step %d numbered %d", i, s.N)
		}
	}
}

// A transaction is drawn on the lanes of the tasks its ops touch: the
// stale history with its Enqueue made in a committed transaction reads as
// before.
func TestATransactionIsDrawnOnItsTasksLanes(t *testing.T) {
	h := staleHistory(t)
	op := &h.Operations[0]
	if op.Input.Op != model.OpEnqueue {
		t.Fatalf("the first op is %v", op.Input.Op)
	}
	op.Input = linearizability.Input{Queue: op.Input.Queue, Op: op.Input.Op, Tx: &linearizability.TxInput{Ops: []linearizability.Input{op.Input}, Commit: true}}
	op.Output = linearizability.Output{Tx: []linearizability.Output{op.Output}}
	v := linearizability.Check(h, 10*time.Second)
	d := Build(h, v, Options{})
	if d.Result != "Ok" || len(d.Queues) != 1 || len(d.Queues[0].Lanes) != 1 {
		t.Fatalf("result %s, %d queues", d.Result, len(d.Queues))
	}
	l := d.Queues[0].Lanes[0]
	if len(l.Marks) != 6 || l.Marks[0].Op != "Enqueue" || len(l.Claims) != 2 {
		t.Errorf("lane %s: marks %+v, claims %+v", l.Task, l.Marks, l.Claims)
	}
}
