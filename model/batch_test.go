package model_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/model"
)

func TestEnqueueBatchAnswersEachItemAsEnqueueWould(t *testing.T) {
	q := model.NewQueue(qname, 3)
	q, _, err := q.Enqueue(t0, model.EnqueueArgs{ID: "old", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	items := []model.EnqueueArgs{
		{ID: "a", MaxAttempts: 1},
		{ID: "old", MaxAttempts: 1},                            // exists
		{ID: "", MaxAttempts: 1},                               // invalid
		{ID: "a", MaxAttempts: 1},                              // added by an earlier item
		{ID: "b", MaxAttempts: 2, RunAfter: t0.Add(time.Hour)}, // scheduled
		{ID: "c", MaxAttempts: 1},                              // capacity 3 reached
	}
	next, got, err := q.EnqueueBatch(t0, items)
	if err != nil {
		t.Fatal(err)
	}
	want := []error{nil, model.ErrConflict, model.ErrInvalidArgument, model.ErrConflict, nil, model.ErrQueueFull}
	if len(got) != len(items) {
		t.Fatalf("%d answers for %d items", len(got), len(items))
	}
	// The same items one by one give the same answers and the same queue.
	seq := q
	for i, a := range items {
		n, task, serr := seq.Enqueue(t0, a)
		if model.Kind(got[i].Err) != want[i] || model.Kind(serr) != want[i] {
			t.Errorf("item %d: batch %v, single %v, want %v", i, got[i].Err, serr, want[i])
		}
		if serr == nil {
			seq = n
			if !task.Equal(got[i].Task) {
				t.Errorf("item %d: batch %+v, single %+v", i, got[i].Task, task)
			}
		}
	}
	if !next.Equal(seq) || next.Hash() != seq.Hash() {
		t.Error("the batch left another queue than the items one by one")
	}
	if err := model.Invariants(next); err != nil {
		t.Fatal(err)
	}
	if s := got[4].Task.State; s != model.Scheduled {
		t.Errorf("b is %v", s)
	}
}

func TestAckBatchAnswersEachItemAsAckWould(t *testing.T) {
	s := newScript(t)
	for _, id := range []string{"c", "a", "b", "d"} {
		s.enqueue(id, time.Time{}, 3)
	}
	// c's lease lapses and a broker takes it over and requeues it: c's claim
	// is stale.
	c := s.pop(time.Minute).Claim()
	rc := s.advance(time.Minute).claimExpired()
	q, _, err := s.q.Requeue(s.now, rc, 0, "")
	s.must(err, "Requeue")
	s.q = q
	a, b := s.pop(time.Minute).Claim(), s.pop(time.Minute).Claim()
	if a.TaskID != "a" || b.TaskID != "b" {
		t.Fatalf("popped %s and %s", a.TaskID, b.TaskID)
	}
	d := s.get("d") // Ready: a claim forged from its version
	forged := model.Claim{Queue: qname, TaskID: "d", Token: d.Version}
	items := []model.AckItem{
		{Claim: a, Result: []byte("A")},
		{Claim: c},                                      // stale
		{Claim: forged},                                 // forged
		{Claim: a, Result: []byte("A2")},                // duplicate: already succeeded
		{Claim: model.Claim{Queue: qname, TaskID: "b"}}, // token 0
		{Claim: model.Claim{Queue: qname, TaskID: "gone", Token: 1}},
		{Claim: b, Result: []byte("B")},
	}
	next, got, err := s.q.AckBatch(s.now, items)
	if err != nil {
		t.Fatal(err)
	}
	want := []error{nil, model.ErrStaleClaim, model.ErrStaleClaim, model.ErrInvalidTransition, model.ErrInvalidArgument, model.ErrStaleClaim, nil}
	seq := s.q
	for i, it := range items {
		n, task, serr := seq.Ack(s.now, it.Claim, it.Result)
		if model.Kind(got[i].Err) != want[i] || model.Kind(serr) != want[i] {
			t.Errorf("item %d: batch %v, single %v, want %v", i, got[i].Err, serr, want[i])
		}
		if serr == nil {
			seq = n
			if !task.Equal(got[i].Task) || task.State != model.Succeeded {
				t.Errorf("item %d: batch %+v, single %+v", i, got[i].Task, task)
			}
		}
	}
	var te *model.TransitionError
	if !errors.As(got[3].Err, &te) || te.Op != model.OpAck || te.State != model.Succeeded {
		t.Errorf("duplicate: %v, want a TransitionError naming Ack and succeeded", got[3].Err)
	}
	if !next.Equal(seq) {
		t.Error("the batch left another queue than the items one by one")
	}
	if r, _ := next.Get("a"); string(r.Result) != "A" {
		t.Errorf("a's result %q: the duplicate changed it", r.Result)
	}
	if err := model.Invariants(next); err != nil {
		t.Fatal(err)
	}
}

func TestBatchLevelErrorsChangeNothing(t *testing.T) {
	s := newScript(t)
	s.enqueue("a", time.Time{}, 3)
	c := s.pop(time.Minute).Claim()
	other := c
	other.Queue = "elsewhere"
	tooMany := make([]model.AckItem, model.MaxBatch+1)
	for i := range tooMany {
		tooMany[i] = model.AckItem{Claim: c}
	}
	enqTooMany := make([]model.EnqueueArgs, model.MaxBatch+1)
	for i := range enqTooMany {
		enqTooMany[i] = model.EnqueueArgs{ID: "x", MaxAttempts: 1}
	}
	for name, in := range map[string]model.Input{
		"no enqueue items":      {Op: model.OpEnqueueBatch, Now: s.now},
		"too many enqueues":     {Op: model.OpEnqueueBatch, Now: s.now, Batch: enqTooMany},
		"no acks":               {Op: model.OpAckBatch, Now: s.now, Acks: []model.AckItem{}},
		"too many acks":         {Op: model.OpAckBatch, Now: s.now, Acks: tooMany},
		"a claim of elsewhere":  {Op: model.OpAckBatch, Now: s.now, Acks: []model.AckItem{{Claim: c}, {Claim: other}}},
		"a claim with no queue": {Op: model.OpAckBatch, Now: s.now, Acks: []model.AckItem{{Claim: model.Claim{TaskID: "a", Token: c.Token}}}},
	} {
		next, out := model.Apply(s.q, in)
		if !errors.Is(out.Err, model.ErrInvalidArgument) || out.Items != nil {
			t.Errorf("%s: %v, %d items", name, out.Err, len(out.Items))
		}
		if !next.Equal(s.q) || next.Seq() != s.q.Seq() {
			t.Errorf("%s changed the queue", name)
		}
		if in.String() == "" {
			t.Errorf("%s: no description", name)
		}
	}
	// Exactly MaxBatch is allowed.
	_, out := model.Apply(s.q, model.Input{Op: model.OpAckBatch, Now: s.now, Acks: tooMany[:model.MaxBatch]})
	if out.Err != nil || len(out.Items) != model.MaxBatch || out.Items[0].Err != nil || !errors.Is(out.Items[1].Err, model.ErrInvalidTransition) {
		t.Errorf("MaxBatch acks: %v", out.Err)
	}
	if op, ok := model.BatchItemOp(model.OpAckBatch); !ok || op != model.OpAck {
		t.Error("BatchItemOp(AckBatch)")
	}
	if op, ok := model.BatchItemOp(model.OpEnqueueBatch); !ok || op != model.OpEnqueue {
		t.Error("BatchItemOp(EnqueueBatch)")
	}
	if _, ok := model.BatchItemOp(model.OpAck); ok {
		t.Error("Ack is not a batch")
	}
}
