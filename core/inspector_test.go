package core_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

func newInspector(t *testing.T, s core.Store) *core.Inspector {
	t.Helper()
	ins, err := core.NewInspector(s, queue)
	if err != nil {
		t.Fatal(err)
	}
	return ins
}

func TestInspectorListsPagesOfAStateWithACursor(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newStore(t, clk)
	for _, id := range []string{"e", "a", "d", "b", "c"} {
		enqueue(t, s, clk, id)
	}
	enqueue(t, s, clk, "z", core.WithDelay(time.Hour))
	ins := newInspector(t, s)
	ctx := context.Background()

	var pages [][]string
	after := ""
	for {
		page, err := ins.List(ctx, core.Ready, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, task := range page.Tasks {
			ids = append(ids, task.ID)
		}
		pages = append(pages, ids)
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if want := [][]string{{"a", "b"}, {"c", "d"}, {"e"}}; !slices.EqualFunc(pages, want, slices.Equal) {
		t.Fatalf("pages = %v, want %v", pages, want)
	}

	var all []string
	for task, err := range ins.All(ctx, core.Ready) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, task.ID)
	}
	if !slices.Equal(all, []string{"a", "b", "c", "d", "e"}) {
		t.Fatalf("All = %v", all)
	}
	for task, err := range ins.All(ctx, core.Ready) {
		if err != nil || task.ID != "a" {
			t.Fatalf("first of All = %v, %v", task.ID, err)
		}
		break // stopping early is allowed
	}
	for _, err := range ins.All(ctx, core.State(0)) {
		if !errors.Is(err, core.ErrInvalidArgument) {
			t.Fatalf("All of an invalid state yields %v", err)
		}
	}
	if _, err := ins.List(ctx, core.Ready, "", 0); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("List with limit 0 = %v", err)
	}

	counts, err := ins.Counts(ctx)
	if err != nil || counts != (core.Counts{Ready: 5, Scheduled: 1}) {
		t.Fatalf("Counts = %+v, %v", counts, err)
	}
}

func TestInspectorActionsAreConditionalOnTheVersionTheOperatorSaw(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newStore(t, clk)
	ins := newInspector(t, s)
	ctx := context.Background()

	seen := popExpired(t, s, clk, "t")
	// The task moves on after the operator looked at it.
	if _, err := s.Ack(ctx, core.AckParams{Claim: seen.Claim(), Result: []byte("r")}); err != nil {
		t.Fatal(err)
	}
	if _, err := ins.Requeue(ctx, "t", seen.Version); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("Requeue at an old version = %v, want ErrConflict", err)
	}
	if _, err := ins.Remove(ctx, "t", seen.Version); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("Remove at an old version = %v, want ErrConflict", err)
	}
	current, err := ins.Get(ctx, "t")
	if err != nil || current.State != core.Succeeded {
		t.Fatalf("Get = %v, %v; want unchanged by the refused actions", current.State, err)
	}

	requeued, err := ins.Requeue(ctx, "t", current.Version)
	if err != nil || requeued.State != core.Ready || requeued.Attempt != 0 || requeued.Result != nil {
		t.Fatalf("Requeue = %+v, %v; want ready with fresh attempts", requeued, err)
	}
	var te *core.TransitionError
	if _, err := ins.Requeue(ctx, "t", core.AnyVersion); !errors.As(err, &te) || te.State != core.Ready {
		t.Fatalf("Requeue of a ready task = %v, want a TransitionError from ready", err)
	}
	removed, err := ins.Remove(ctx, "t", requeued.Version)
	if err != nil || removed.ID != "t" {
		t.Fatalf("Remove = %+v, %v", removed, err)
	}
	if _, err := ins.Get(ctx, "t"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Get after Remove = %v, want ErrNotFound", err)
	}
	if _, err := ins.Remove(ctx, "t", core.AnyVersion); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("second Remove = %v, want ErrNotFound", err)
	}
}

func TestInspectorPrunesOldTerminalTasks(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newStore(t, clk)
	ins := newInspector(t, s)
	ctx := context.Background()
	finish := func(id string, ok bool) {
		enqueue(t, s, clk, id)
		res, err := s.Pop(ctx, core.PopParams{Queue: queue, Lease: lease, N: 1})
		if err != nil || len(res.Tasks) != 1 {
			t.Fatalf("Pop = %+v, %v", res, err)
		}
		if ok {
			_, err = s.Ack(ctx, core.AckParams{Claim: res.Tasks[0].Claim()})
		} else {
			_, err = s.Fail(ctx, core.FailParams{Claim: res.Tasks[0].Claim(), Message: "no"})
		}
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
	}
	finish("ok1", true)
	finish("bad1", false)
	finish("ok2", true)
	cutoff := clk.Now()
	finish("ok3", true)

	ids, err := ins.Prune(ctx, cutoff, 0, core.Succeeded)
	if err != nil || !slices.Equal(ids, []string{"ok1", "ok2"}) {
		t.Fatalf("Prune(succeeded) = %v, %v", ids, err)
	}
	ids, err = ins.Prune(ctx, clk.Now().Add(time.Nanosecond), 0)
	if err != nil || !slices.Equal(ids, []string{"bad1", "ok3"}) {
		t.Fatalf("Prune(both) = %v, %v", ids, err)
	}
	if _, err := ins.Prune(ctx, cutoff, 0, core.Ready); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("Prune(ready) = %v, want ErrInvalidArgument", err)
	}
	if counts, err := ins.Counts(ctx); err != nil || counts.Total() != 0 {
		t.Fatalf("Counts = %+v, %v", counts, err)
	}
}

func TestNewInspectorValidatesItsArguments(t *testing.T) {
	if _, err := core.NewInspector(nil, queue); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("nil store: %v", err)
	}
	if _, err := core.NewInspector(newStore(t, core.NewFakeClock(t0)), ""); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("empty queue name: %v", err)
	}
}
