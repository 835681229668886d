package model_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/model"
)

// damageFixture is a queue with one damaged task per state ("d-<state>")
// beside sound ones, at a clock where every Scheduled task is due and every
// Running one expired.
type damageFixture struct {
	t     *testing.T
	q     model.Queue
	now   time.Time
	claim map[string]model.Claim
}

func newDamageFixture(t *testing.T) *damageFixture {
	t.Helper()
	f := &damageFixture{t: t, q: model.NewQueue("q", 0), now: time.Unix(1_000_000, 0).UTC(), claim: map[string]model.Claim{}}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	enq := func(id string, runAfter time.Time) {
		var err error
		f.q, _, err = f.q.Enqueue(f.now, model.EnqueueArgs{ID: id, MaxAttempts: 3, RunAfter: runAfter})
		must(err)
	}
	pop := func() model.Task {
		var ts []model.Task
		var err error
		f.q, ts, err = f.q.Pop(f.now, time.Second, 1)
		must(err)
		return ts[0]
	}
	for _, id := range []string{"d-succeeded", "d-failed", "d-running", "s-running"} {
		enq(id, time.Time{})
		tk := pop()
		f.claim[id] = tk.Claim()
		var err error
		switch id {
		case "d-succeeded":
			f.q, _, err = f.q.Ack(f.now, tk.Claim(), nil)
		case "d-failed":
			f.q, _, err = f.q.Fail(f.now, tk.Claim(), "m")
		}
		must(err)
	}
	enq("d-ready", time.Time{})
	enq("s-ready", time.Time{})
	enq("d-scheduled", f.now.Add(time.Second))
	enq("s-scheduled", f.now.Add(time.Second))
	f.now = f.now.Add(2 * time.Second)
	for _, id := range []string{"d-scheduled", "d-ready", "d-running", "d-succeeded", "d-failed"} {
		var err error
		f.q, err = f.q.Damage(id)
		must(err)
	}
	if err := model.Invariants(f.q); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestDamageEventRefusals(t *testing.T) {
	f := newDamageFixture(t)
	if _, err := f.q.Damage("d-ready"); !errors.Is(err, model.ErrInvalidTransition) {
		t.Errorf("Damage twice: %v", err)
	}
	if _, err := f.q.Damage("nope"); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("Damage of no task: %v", err)
	}
	if _, err := f.q.Damage(""); !errors.Is(err, model.ErrInvalidArgument) {
		t.Errorf("Damage of an empty ID: %v", err)
	}
}

// TestNamedOpsOnADamagedRecordAreCorrupt: the worker's and broker's
// decisions and InspectRequeue on a damaged record are ErrCorrupt and
// change nothing; Enqueue of its ID is ErrConflict; Remove with a version
// is ErrConflict.
func TestNamedOpsOnADamagedRecordAreCorrupt(t *testing.T) {
	f := newDamageFixture(t)
	c := f.claim["d-running"]
	q := f.q
	next, _, err := q.Ack(f.now, c, nil)
	refused(t, "Ack", q, next, err, model.ErrCorrupt)
	next, _, err = q.Extend(f.now, c, time.Second)
	refused(t, "Extend", q, next, err, model.ErrCorrupt)
	next, items, err := q.AckBatch(f.now, []model.AckItem{{Claim: c}})
	if err != nil || !errors.Is(items[0].Err, model.ErrCorrupt) || !next.Equal(q) {
		t.Errorf("AckBatch item: %v, %+v", err, items)
	}
	next, _, err = q.Requeue(f.now, model.ReapClaim{Queue: "q", TaskID: "d-running", Version: c.Token}, 0, "")
	refused(t, "Requeue", q, next, err, model.ErrCorrupt)
	next, _, err = q.InspectRequeue("d-failed", 0)
	refused(t, "InspectRequeue", q, next, err, model.ErrCorrupt)
	next, _, err = q.Enqueue(f.now, model.EnqueueArgs{ID: "d-ready", MaxAttempts: 1})
	refused(t, "Enqueue of the ID", q, next, err, model.ErrConflict)
	next, _, err = q.Remove("d-ready", 5)
	refused(t, "Remove with a version", q, next, err, model.ErrConflict)
}

// TestReadsShowADamagedRecordAsQuarantinedAndWriteNothing.
func TestReadsShowADamagedRecordAsQuarantinedAndWriteNothing(t *testing.T) {
	f := newDamageFixture(t)
	got, err := f.q.Get("d-ready")
	if err != nil || got.State != model.Quarantined || got.Quarantine == "" || got.Version != 0 {
		t.Errorf("Get of a damaged record: %+v, %v", got, err)
	}
	ts, _, err := f.q.List(model.Ready, "", 10)
	if err != nil || len(ts) != 1 || ts[0].ID != "s-ready" {
		t.Errorf("List(ready) with a damaged record: %+v, %v", ts, err)
	}
	if c := f.q.Counts(); c.Ready != 2 || c.Quarantined != 0 {
		t.Errorf("Counts before a scan met it: %+v", c)
	}
}

// TestScansSetDamagedRecordsAside: Promote, Pop, ClaimExpired and
// RecoverExpired set aside the damaged records they reach, go on with the
// sound ones, and the records set aside are then Quarantined: listed and
// counted, refused to every claim, removable only with expect 0.
func TestScansSetDamagedRecordsAside(t *testing.T) {
	f := newDamageFixture(t)
	q, ids, err := f.q.Promote(f.now, 1)
	if err != nil || len(ids) != 1 || ids[0] != "s-scheduled" {
		t.Fatalf("Promote: %v, %v", ids, err)
	}
	seq := q.Seq()
	q, ts, err := q.Pop(f.now, time.Second, 1)
	if err != nil || len(ts) != 1 || ts[0].ID != "s-ready" || ts[0].Version != seq+1 {
		t.Fatalf("Pop: %+v, %v (seq %d)", ts, err, seq)
	}
	q, rcs, err := q.ClaimExpired(f.now, time.Second, 0)
	if err != nil || len(rcs) != 1 || rcs[0].TaskID != "s-running" {
		t.Fatalf("ClaimExpired: %+v, %v", rcs, err)
	}
	if err := model.Invariants(q); err != nil {
		t.Fatal(err)
	}
	if c := q.Counts(); c.Quarantined != 3 || c.Scheduled != 0 || c.Ready != 1 || c.Running != 2 {
		t.Errorf("Counts after the scans: %+v", c)
	}
	list, _, err := q.List(model.Quarantined, "", 10)
	if err != nil || len(list) != 3 || list[0].ID != "d-ready" || list[1].ID != "d-running" || list[2].ID != "d-scheduled" {
		t.Errorf("List(quarantined): %+v, %v", list, err)
	}
	c := f.claim["d-running"]
	next, _, err := q.Ack(f.now, c, nil)
	refused(t, "Ack of a quarantined record", q, next, err, model.ErrStaleClaim)
	next, _, err = q.InspectRequeue("d-ready", 0)
	refused(t, "InspectRequeue of a quarantined record", q, next, err, model.ErrInvalidTransition)
	next, _, err = q.Remove("d-ready", 1)
	refused(t, "Remove of a quarantined record with a version", q, next, err, model.ErrConflict)
	q, gone, err := q.Remove("d-ready", 0)
	if err != nil || gone.State != model.Quarantined || gone.ID != "d-ready" {
		t.Errorf("Remove of a quarantined record: %+v, %v", gone, err)
	}
	// Removed by the operator: a damaged one, too, and Prune deletes the
	// damaged finished ones.
	q, gone, err = q.Remove("d-succeeded", 0)
	if err != nil || gone.State != model.Quarantined {
		t.Errorf("Remove of a damaged record: %+v, %v", gone, err)
	}
	q, ids, err = q.Prune([]model.State{model.Failed}, f.now.Add(time.Hour), 0)
	if err != nil || len(ids) != 1 || ids[0] != "d-failed" {
		t.Errorf("Prune: %v, %v", ids, err)
	}
	if err := model.Invariants(q); err != nil {
		t.Fatal(err)
	}
	// RecoverExpired reaches the same as ClaimExpired.
	q2, out, err := f.q.RecoverExpired(f.now, 0, 0)
	if err != nil || len(out) != 1 || out[0].ID != "s-running" || q2.Counts().Quarantined != 1 {
		t.Errorf("RecoverExpired: %+v, %v, %+v", out, err, q2.Counts())
	}
}
