package core_test

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

func newQueue(t *testing.T, s core.Store, clk core.Clock) *core.Queue {
	t.Helper()
	q, err := core.NewQueue(s, queue, core.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return q
}

var uuidV7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestQueueEnqueueGeneratesSortableIDsAndAppliesDefaults(t *testing.T) {
	clk := core.NewFakeClock(t0)
	q := newQueue(t, newStore(t, clk), clk)
	ctx := context.Background()
	prev := ""
	for range 100 {
		task, err := q.Enqueue(ctx, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		if !uuidV7.MatchString(task.ID) || task.ID <= prev {
			t.Fatalf("ID %q after %q: want increasing version 7 UUIDs", task.ID, prev)
		}
		prev = task.ID
		if task.State != core.Ready || task.MaxAttempts != core.DefaultMaxAttempts || task.Priority != 0 || task.Queue != queue {
			t.Fatalf("task = %+v, want ready with the defaults", task)
		}
	}
	if q.Name() != queue {
		t.Fatalf("Name = %q", q.Name())
	}
}

func TestQueueEnqueueHonoursItsOptions(t *testing.T) {
	clk := core.NewFakeClock(t0)
	s := newStore(t, clk)
	q := newQueue(t, s, clk)
	ctx := context.Background()

	payload := []byte("original")
	task, err := q.Enqueue(ctx, payload, core.WithID("job-1"), core.WithPriority(7), core.WithMaxAttempts(3), core.WithDelay(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	payload[0] = 'X'
	got, err := q.Get(ctx, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != core.Scheduled || !got.RunAfter.Equal(t0.Add(5*time.Second)) || got.Priority != 7 ||
		got.MaxAttempts != 3 || string(got.Payload) != "original" || !got.Equal(task) {
		t.Fatalf("task = %+v", got)
	}

	// A run-after time is kept at microsecond precision, in UTC.
	loc := time.FixedZone("east", 3*3600)
	at := t0.Add(time.Hour + 123456789*time.Nanosecond).In(loc)
	task, err = q.Enqueue(ctx, nil, core.WithID("job-2"), core.WithRunAfter(at))
	if err != nil {
		t.Fatal(err)
	}
	if want := at.UTC().Truncate(time.Microsecond); task.RunAfter != want {
		t.Fatalf("RunAfter = %v, want %v", task.RunAfter, want)
	}
	// A past run-after time is Ready at once; the last of WithRunAfter and
	// WithDelay wins.
	task, err = q.Enqueue(ctx, nil, core.WithID("job-3"), core.WithDelay(time.Hour), core.WithRunAfter(t0.Add(-time.Hour)))
	if err != nil || task.State != core.Ready {
		t.Fatalf("past run-after: %v, %v", task.State, err)
	}

	for name, opts := range map[string][]core.EnqueueOption{
		"taken ID":          {core.WithID("job-1")},
		"priority too high": {core.WithPriority(core.MaxPriority + 1)},
		"zero max attempts": {core.WithMaxAttempts(0)},
		"negative delay":    {core.WithDelay(-time.Second)},
		"ID too long":       {core.WithID(string(make([]byte, core.MaxIDLength+1)))},
	} {
		want := core.ErrInvalidArgument
		if name == "taken ID" {
			want = core.ErrConflict
		}
		if _, err := q.Enqueue(ctx, nil, opts...); !errors.Is(err, want) {
			t.Errorf("%s: err = %v, want %v", name, err, want)
		}
	}
	if _, err := q.Get(ctx, "nope"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Get(nope) = %v", err)
	}
}

func TestNewQueueValidatesItsArguments(t *testing.T) {
	s := newStore(t, core.NewFakeClock(t0))
	if _, err := core.NewQueue(s, "no spaces"); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("bad name: %v", err)
	}
	if _, err := core.NewQueue(nil, queue); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("nil store: %v", err)
	}
	if _, err := core.NewQueue(s, queue, core.WithClock(nil)); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("nil clock: %v", err)
	}
}
