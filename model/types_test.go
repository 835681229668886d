package model_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/model"
)

// Task.Equal decides every comparison of the conformance suite, so it must
// notice a change in any field, and compare times as instants.
func TestTaskEqualSeesEveryField(t *testing.T) {
	base := model.Task{
		Queue: "q", ID: "t", Payload: []byte("p"), Priority: 1, State: model.Running, Attempt: 2, MaxAttempts: 3,
		Version: 7, ClaimToken: 6, EnqueuedAt: t0, RunAfter: t0.Add(1), ClaimedAt: t0.Add(2), Deadline: t0.Add(3),
		FinishedAt: t0.Add(4), Result: []byte("r"),
		Errors: []model.TaskError{{Attempt: 1, At: t0, Message: "m", LeaseExpired: true}},
	}
	clone := func() model.Task {
		c := base
		c.Payload = []byte("p")
		c.Result = []byte("r")
		c.Errors = append([]model.TaskError(nil), base.Errors...)
		return c
	}
	if !base.Equal(clone()) {
		t.Fatal("a task is not equal to its copy")
	}
	in := time.FixedZone("elsewhere", 3*3600)
	moved := clone()
	moved.EnqueuedAt, moved.Deadline = base.EnqueuedAt.In(in), base.Deadline.In(in)
	if !base.Equal(moved) {
		t.Error("the same instants in another zone are not equal")
	}
	changes := map[string]func(*model.Task){
		"Queue":         func(c *model.Task) { c.Queue = "r" },
		"ID":            func(c *model.Task) { c.ID = "u" },
		"Payload":       func(c *model.Task) { c.Payload = []byte("P") },
		"Priority":      func(c *model.Task) { c.Priority = 2 },
		"State":         func(c *model.Task) { c.State = model.Ready },
		"Attempt":       func(c *model.Task) { c.Attempt = 3 },
		"MaxAttempts":   func(c *model.Task) { c.MaxAttempts = 4 },
		"Version":       func(c *model.Task) { c.Version = 8 },
		"ClaimToken":    func(c *model.Task) { c.ClaimToken = 5 },
		"EnqueuedAt":    func(c *model.Task) { c.EnqueuedAt = c.EnqueuedAt.Add(time.Microsecond) },
		"RunAfter":      func(c *model.Task) { c.RunAfter = time.Time{} },
		"ClaimedAt":     func(c *model.Task) { c.ClaimedAt = time.Unix(0, 0) },
		"Deadline":      func(c *model.Task) { c.Deadline = c.Deadline.Add(-1) },
		"FinishedAt":    func(c *model.Task) { c.FinishedAt = time.Time{} },
		"Result":        func(c *model.Task) { c.Result = nil },
		"Errors":        func(c *model.Task) { c.Errors = nil },
		"Error.Attempt": func(c *model.Task) { c.Errors[0].Attempt = 2 },
		"Error.At":      func(c *model.Task) { c.Errors[0].At = c.Errors[0].At.Add(time.Microsecond) },
		"Error.Message": func(c *model.Task) { c.Errors[0].Message = "n" },
		"Error.Lease":   func(c *model.Task) { c.Errors[0].LeaseExpired = false },
	}
	for field, change := range changes {
		c := clone()
		change(&c)
		if base.Equal(c) || c.Equal(base) {
			t.Errorf("Equal misses a change of %s", field)
		}
	}
	// The zero time is not the Unix epoch: a store that writes "unset" as 0
	// seconds and reads it back as 1970 is caught.
	zero, epoch := clone(), clone()
	zero.RunAfter, epoch.RunAfter = time.Time{}, time.Unix(0, 0).UTC()
	if zero.Equal(epoch) {
		t.Error("Equal confuses the zero time with 1970")
	}
	// A nil and an empty payload are the same bytes.
	a, b := clone(), clone()
	a.Payload, b.Payload = nil, []byte{}
	if !a.Equal(b) {
		t.Error("nil and empty payloads differ")
	}
}

func TestTaskCountsLeaseLossesApartFromHandlerFailures(t *testing.T) {
	task := model.Task{Errors: []model.TaskError{{LeaseExpired: true}, {}, {LeaseExpired: true}, {}}}
	if task.LeaseLosses() != 2 || task.HandlerFailures() != 2 {
		t.Errorf("lease losses %d, handler failures %d", task.LeaseLosses(), task.HandlerFailures())
	}
	c := model.Task{Queue: "q", ID: "t", ClaimToken: 4, Attempt: 2, Deadline: t0}.Claim()
	if c != (model.Claim{Queue: "q", TaskID: "t", Token: 4, Attempt: 2, Deadline: t0}) {
		t.Errorf("Claim() = %+v", c)
	}
}

func TestErrorKinds(t *testing.T) {
	kinds := []error{model.ErrStaleClaim, model.ErrNotFound, model.ErrInvalidTransition, model.ErrInvalidArgument, model.ErrConflict, model.ErrQueueFull}
	for _, k := range kinds {
		wrapped := fmt.Errorf("context: %w", fmt.Errorf("detail: %w", k))
		if model.Kind(wrapped) != k {
			t.Errorf("Kind(%v) = %v", wrapped, model.Kind(wrapped))
		}
	}
	if model.Kind(nil) != nil || model.Kind(errors.New("other")) != nil {
		t.Error("Kind of nil or of a foreign error is not nil")
	}
	te := &model.TransitionError{Op: model.OpAck, State: model.Failed}
	if model.Kind(te) != model.ErrInvalidTransition || !errors.Is(te, model.ErrInvalidTransition) {
		t.Error("a TransitionError is not an invalid transition")
	}
	if msg := te.Error(); !strings.Contains(msg, "Ack") || !strings.Contains(msg, "failed") {
		t.Errorf("TransitionError text %q names neither op nor state", msg)
	}
}

func TestNamesRoundTrip(t *testing.T) {
	for _, s := range model.States {
		text, err := s.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back model.State
		if err := back.UnmarshalText(text); err != nil || back != s || !s.Valid() {
			t.Errorf("state %v: %q → %v, %v", s, text, back, err)
		}
		if p, err := model.ParseState(s.String()); err != nil || p != s {
			t.Errorf("ParseState(%q) = %v, %v", s, p, err)
		}
		if s.Terminal() != (s == model.Succeeded || s == model.Failed) {
			t.Errorf("%v.Terminal() = %v", s, s.Terminal())
		}
	}
	for _, bad := range []model.State{0, model.Quarantined + 1} {
		if bad.Valid() {
			t.Errorf("state %d is valid", bad)
		}
		if _, err := bad.MarshalText(); !errors.Is(err, model.ErrInvalidArgument) {
			t.Errorf("MarshalText(%d): %v", bad, err)
		}
		if !strings.Contains(bad.String(), "state(") {
			t.Errorf("String of state %d = %q", bad, bad.String())
		}
	}
	var s model.State
	if err := s.UnmarshalText([]byte("Running")); !errors.Is(err, model.ErrInvalidArgument) {
		t.Errorf("state names are lower case: %v", err)
	}
	for _, op := range model.Ops {
		text, _ := op.MarshalText()
		var back model.Op
		if err := back.UnmarshalText(text); err != nil || back != op {
			t.Errorf("op %v: %q → %v, %v", op, text, back, err)
		}
	}
	var op model.Op
	if err := op.UnmarshalText([]byte("Dance")); !errors.Is(err, model.ErrInvalidArgument) {
		t.Errorf("unknown op: %v", err)
	}
	if len(model.Ops) != int(model.OpCounts) || len(model.States) != int(model.Failed) {
		t.Error("Ops or States does not list every value")
	}
	for g := model.GuardNone; g <= model.GuardFirstInLine; g++ {
		if g.String() == "" || strings.Contains(g.String(), "?") {
			t.Errorf("guard %d has no text", g)
		}
	}
	for a := model.Producer; a <= model.Inspector; a++ {
		if strings.Contains(a.String(), "?") {
			t.Errorf("actor %d has no name", a)
		}
	}
}

func TestCountsAgreeWithTheTasks(t *testing.T) {
	s := newScript(t)
	s.enqueue("s", s.now.Add(time.Hour), 3)
	s.enqueue("r", time.Time{}, 3)
	s.enqueue("u", time.Time{}, 3)
	s.enqueue("k", time.Time{}, 3)
	s.pop(time.Minute) // r
	q, _, err := s.q.Ack(s.now, s.pop(time.Minute).Claim(), nil)
	s.must(err, "Ack") // u
	c := q.Counts()
	if c != (model.Counts{Scheduled: 1, Ready: 1, Running: 1, Succeeded: 1}) {
		t.Fatalf("counts %+v", c)
	}
	if c.Total() != 4 || c.Pending() != 3 || q.Len() != 4 {
		t.Errorf("total %d, pending %d, len %d", c.Total(), c.Pending(), q.Len())
	}
	for _, st := range model.States {
		tasks, _, _ := q.List(st, "", model.MaxBatch)
		if c.Of(st) != len(tasks) {
			t.Errorf("%v: count %d, listed %d", st, c.Of(st), len(tasks))
		}
	}
	if c.Of(0) != 0 {
		t.Error("count of no state")
	}
	if len(q.Tasks()) != 4 || q.Name() != qname {
		t.Error("Tasks or Name")
	}
}

func TestApplyDispatchesEveryOpAndChangesNothingOnRefusal(t *testing.T) {
	q := model.NewQueue(qname, 0)
	q, out := model.Apply(q, model.Input{Op: model.OpEnqueue, Now: t0, Enqueue: model.EnqueueArgs{ID: "t", MaxAttempts: 1}})
	if out.Err != nil || out.Task.ID != "t" {
		t.Fatalf("Apply(Enqueue): %+v", out)
	}
	for _, in := range []model.Input{
		{Op: model.OpPop, Now: t0, Lease: 0, Limit: 1},
		{Op: model.OpAck, Now: t0, Claim: model.Claim{TaskID: "t", Token: 99}},
		{Op: 0},
		{Op: model.OpCounts + 1},
	} {
		next, out := model.Apply(q, in)
		if out.Err == nil || !next.Equal(q) {
			t.Errorf("Apply(%v): err %v", in, out.Err)
		}
		if in.String() == "" {
			t.Errorf("Input %d has no description", in.Op)
		}
	}
	_, out = model.Apply(q, model.Input{Op: model.OpCounts})
	if out.Counts.Ready != 1 {
		t.Errorf("Apply(Counts): %+v", out.Counts)
	}
}
