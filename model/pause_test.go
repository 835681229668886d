package model_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/model"
)

// TestPause checks the paused flag: Pop claims nothing while it is set
// (arguments still checked), everything else goes on, Pause and Resume are
// idempotent and draw no version, and Counts reports the flag.
func TestPause(t *testing.T) {
	now := time.Unix(1_000_000, 0).UTC()
	q := model.NewQueue("q", 0)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	q, _, err = q.Enqueue(now, model.EnqueueArgs{ID: "run", MaxAttempts: 2})
	must(err)
	var ts []model.Task
	q, ts, err = q.Pop(now, time.Second, 1)
	must(err)
	running := ts[0]
	q, _, err = q.Enqueue(now, model.EnqueueArgs{ID: "ready", MaxAttempts: 2})
	must(err)
	q, _, err = q.Enqueue(now, model.EnqueueArgs{ID: "later", MaxAttempts: 2, RunAfter: now.Add(time.Second)})
	must(err)

	seq := q.Seq()
	p, flag := q.Pause()
	if !flag || !p.Paused() || !p.Counts().Paused || q.Paused() {
		t.Fatalf("Pause: flag %v, paused %v, counts %+v; the receiver paused %v", flag, p.Paused(), p.Counts(), q.Paused())
	}
	if p.Seq() != seq || p.Equal(q) {
		t.Fatalf("Pause drew a version (%d -> %d) or left the queue equal to the unpaused one", seq, p.Seq())
	}
	if again, flag := p.Pause(); !flag || !again.Equal(p) || again.Hash() != p.Hash() {
		t.Fatal("a second Pause changed something")
	}
	if p.Hash() == q.Hash() {
		t.Fatal("the paused queue hashes like the unpaused one")
	}

	// Pop claims nothing, but its arguments are still checked.
	if _, _, err := p.Pop(now, 0, 1); !errors.Is(err, model.ErrInvalidArgument) {
		t.Fatalf("paused Pop with lease 0: %v, want ErrInvalidArgument", err)
	}
	after, got, err := p.Pop(now, time.Second, 3)
	must(err)
	if len(got) != 0 || !after.Equal(p) {
		t.Fatalf("paused Pop claimed %d tasks", len(got))
	}

	// Everything else goes on.
	p, ids, err := p.Promote(now.Add(time.Second), 0)
	must(err)
	if len(ids) != 1 {
		t.Fatalf("paused Promote: %v, want [later]", ids)
	}
	p, _, err = p.Enqueue(now, model.EnqueueArgs{ID: "new", MaxAttempts: 1})
	must(err)
	p, ext, err := p.Extend(now, running.Claim(), time.Second)
	must(err)
	p, rcs, err := p.ClaimExpired(ext.Deadline, time.Second, 0)
	must(err)
	if len(rcs) != 1 {
		t.Fatalf("paused ClaimExpired: %d claims, want 1", len(rcs))
	}
	p, req, err := p.Requeue(ext.Deadline, rcs[0], 0, "")
	must(err)
	if req.State != model.Ready {
		t.Fatalf("requeued while paused: %v, want ready", req.State)
	}
	if _, got, _ := p.Pop(now, time.Second, 10); len(got) != 0 {
		t.Fatalf("paused Pop claimed %d tasks after the requeue", len(got))
	}
	if !p.Counts().Paused || p.Counts().Ready != 4 {
		t.Fatalf("counts while paused: %+v", p.Counts())
	}

	// Resume: Pop claims again, highest first as always.
	r, flag := p.Resume()
	if flag || r.Paused() || r.Counts().Paused {
		t.Fatalf("Resume: flag %v, paused %v", flag, r.Paused())
	}
	if again, _ := r.Resume(); !again.Equal(r) {
		t.Fatal("a second Resume changed something")
	}
	_, got, err = r.Pop(now, time.Second, 10)
	must(err)
	if len(got) != 4 {
		t.Fatalf("Pop after Resume: %d tasks, want 4", len(got))
	}
}

// TestPauseApply checks that Apply dispatches Pause and Resume and reports
// the flag.
func TestPauseApply(t *testing.T) {
	q := model.NewQueue("q", 0)
	q, out := model.Apply(q, model.Input{Op: model.OpPause})
	if out.Err != nil || !out.Paused || !q.Paused() {
		t.Fatalf("Apply(Pause): %+v", out)
	}
	q, out = model.Apply(q, model.Input{Op: model.OpCounts})
	if !out.Counts.Paused {
		t.Fatalf("Counts after Pause: %+v", out.Counts)
	}
	q, out = model.Apply(q, model.Input{Op: model.OpResume})
	if out.Err != nil || out.Paused || q.Paused() {
		t.Fatalf("Apply(Resume): %+v", out)
	}
}
