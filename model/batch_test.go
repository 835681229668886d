package model_test

import (
	"errors"
	"slices"
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

func TestAckBatchPopIsAckBatchThenPop(t *testing.T) {
	s := newScript(t)
	s.enqueue("a", time.Time{}, 3)
	s.enqueue("b", time.Time{}, 3)
	a := s.pop(time.Minute).Claim()
	// The queue now holds, besides a (Running), b (Ready, older) and, after
	// these, c of a higher priority, d of a lower one, and e, damaged.
	q, _, err := s.q.Enqueue(s.now, model.EnqueueArgs{ID: "c", Priority: 1, MaxAttempts: 1})
	s.must(err, "Enqueue c")
	q, _, err = q.Enqueue(s.now, model.EnqueueArgs{ID: "d", Priority: -1, MaxAttempts: 1})
	s.must(err, "Enqueue d")
	q, _, err = q.Enqueue(s.now, model.EnqueueArgs{ID: "e", MaxAttempts: 1})
	s.must(err, "Enqueue e")
	q, err = q.Damage("e")
	s.must(err, "Damage e")
	s.q = q
	stale := model.Claim{Queue: qname, TaskID: "b", Token: 99}
	items := []model.AckItem{{Claim: a, Result: []byte("A")}, {Claim: stale}, {Claim: a}}
	for _, n := range []int{1, 2, 3, model.MaxBatch} {
		next, got, claimed, err := s.q.AckBatchPop(s.now, items, time.Minute, n)
		if err != nil {
			t.Fatal(err)
		}
		// The same as the acks, then a Pop, one after the other.
		acked, want, err := s.q.AckBatch(s.now, items)
		if err != nil {
			t.Fatal(err)
		}
		popped, wantClaimed, err := acked.Pop(s.now, time.Minute, n)
		if err != nil {
			t.Fatal(err)
		}
		if !next.Equal(popped) || next.Hash() != popped.Hash() || next.Seq() != popped.Seq() {
			t.Errorf("n=%d: the step left another queue than AckBatch then Pop", n)
		}
		if len(got) != len(want) {
			t.Fatalf("n=%d: %d answers for %d items", n, len(got), len(want))
		}
		for i := range got {
			if model.Kind(got[i].Err) != model.Kind(want[i].Err) || !got[i].Task.Equal(want[i].Task) {
				t.Errorf("n=%d item %d: %+v, want %+v", n, i, got[i], want[i])
			}
		}
		if model.Kind(got[1].Err) != model.ErrStaleClaim || model.Kind(got[2].Err) != model.ErrInvalidTransition {
			t.Errorf("n=%d: the stale and duplicate items: %v, %v", n, got[1].Err, got[2].Err)
		}
		var ids []string
		for i, c := range claimed {
			ids = append(ids, c.ID)
			if !c.Equal(wantClaimed[i]) || c.State != model.Running || c.ClaimToken != c.Version || !c.ClaimedAt.Equal(s.now) {
				t.Errorf("n=%d: claimed %+v, want %+v", n, c, wantClaimed[i])
			}
			if c.ID == "a" {
				t.Errorf("n=%d: the pop claimed the task the acks decided", n)
			}
		}
		// Pop order: c (priority 1), then b, then d; e is set aside on the way.
		wantIDs := []string{"c", "b", "d"}[:min(n, 3)]
		if !slices.Equal(ids, wantIDs) {
			t.Errorf("n=%d: claimed %v, want %v", n, ids, wantIDs)
		}
		if e, _ := next.Get("e"); n >= 3 && e.State != model.Quarantined {
			t.Errorf("n=%d: the damaged e is %v, want set aside", n, e.State)
		}
		if err := model.Invariants(next); err != nil {
			t.Fatal(err)
		}
		// The tokens of the pop are drawn after the acks' versions.
		if ta, _ := next.Get("a"); claimed[0].Version <= ta.Version {
			t.Errorf("n=%d: the pop's token %d is not after the ack's version %d", n, claimed[0].Version, ta.Version)
		}
	}
	// No pop: AckBatch exactly.
	next, got, claimed, err := s.q.AckBatchPop(s.now, items, 0, 0)
	acked, want, _ := s.q.AckBatch(s.now, items)
	if err != nil || claimed != nil || !next.Equal(acked) || len(got) != len(want) {
		t.Errorf("n=0: %v, claimed %v", err, claimed)
	}
}

func TestAckBatchPopThroughApply(t *testing.T) {
	s := newScript(t)
	s.enqueue("a", time.Time{}, 3)
	s.enqueue("b", time.Time{}, 3)
	a := s.pop(time.Minute).Claim()
	in := model.Input{Op: model.OpAckBatch, Now: s.now, Acks: []model.AckItem{{Claim: a}}, Lease: time.Minute, Limit: 2}
	next, out := model.Apply(s.q, in)
	if out.Err != nil || len(out.Items) != 1 || out.Items[0].Err != nil || len(out.Tasks) != 1 || out.Tasks[0].ID != "b" {
		t.Fatalf("apply: %+v", out)
	}
	if c := next.Counts(); c.Succeeded != 1 || c.Running != 1 || c.Ready != 0 {
		t.Errorf("counts %+v", c)
	}
	if in.String() != "AckBatch(a token=3; pop n=2)" {
		t.Errorf("description %q", in.String())
	}
	// Nothing Ready: the acks alone, no task claimed, no error.
	_, out = model.Apply(next, model.Input{Op: model.OpAckBatch, Now: s.now, Acks: []model.AckItem{{Claim: out.Tasks[0].Claim()}}, Lease: time.Minute, Limit: 1})
	if out.Err != nil || out.Items[0].Err != nil || len(out.Tasks) != 0 {
		t.Errorf("an empty pop: %+v", out)
	}
}

func TestAckBatchPopArgumentsRefuseTheWholeStep(t *testing.T) {
	s := newScript(t)
	s.enqueue("a", time.Time{}, 3)
	s.enqueue("b", time.Time{}, 3)
	c := s.pop(time.Minute).Claim()
	acks := []model.AckItem{{Claim: c}}
	for name, in := range map[string]model.Input{
		"negative pop":      {Limit: -1, Lease: time.Minute},
		"pop over MaxBatch": {Limit: model.MaxBatch + 1, Lease: time.Minute},
		"no lease":          {Limit: 1},
		"negative lease":    {Limit: 1, Lease: -time.Second},
	} {
		in.Op, in.Now, in.Acks = model.OpAckBatch, s.now, acks
		next, out := model.Apply(s.q, in)
		if !errors.Is(out.Err, model.ErrInvalidArgument) || out.Items != nil || out.Tasks != nil {
			t.Errorf("%s: %v, %d items, %d tasks", name, out.Err, len(out.Items), len(out.Tasks))
		}
		if !next.Equal(s.q) || next.Seq() != s.q.Seq() {
			t.Errorf("%s changed the queue", name)
		}
		if err := model.ValidateAckPop(in.Lease, in.Limit); !errors.Is(err, model.ErrInvalidArgument) {
			t.Errorf("%s: ValidateAckPop %v", name, err)
		}
	}
	// With no pop the lease is not read.
	if err := model.ValidateAckPop(-time.Second, 0); err != nil {
		t.Errorf("no pop: %v", err)
	}
}
