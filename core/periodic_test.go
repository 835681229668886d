package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

func TestEveryCountsFromTheEpoch(t *testing.T) {
	s, err := core.Every(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ at, want time.Time }{
		{time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), time.Date(2030, 1, 2, 3, 4, 6, 0, time.UTC)},
		{time.Date(2030, 1, 2, 3, 4, 5, 999_999_000, time.UTC), time.Date(2030, 1, 2, 3, 4, 6, 0, time.UTC)},
		{time.Unix(-3, 500_000_000).UTC(), time.Unix(-2, 0).UTC()}, // before the epoch
	} {
		if got := s.Next(c.at); !got.Equal(c.want) {
			t.Errorf("Every(1s).Next(%v) = %v, want %v", c.at, got, c.want)
		}
	}
	// The same occurrences whatever the zone of the time asked.
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	s15, _ := core.Every(15 * time.Minute)
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	if a, b := s15.Next(at), s15.Next(at.In(paris)); !a.Equal(b) || a.Minute() != 15 {
		t.Fatalf("Every(15m).Next = %v in UTC, %v from Paris", a, b)
	}
	for _, d := range []time.Duration{0, -time.Second, time.Microsecond, 1500 * time.Nanosecond, model.MaxDuration + time.Hour} {
		if _, err := core.Every(d); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("Every(%v) = %v, want ErrInvalidArgument", d, err)
		}
	}
}

func TestCronIsUTCUnlessItNamesAZone(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		expr string
		want time.Time
	}{
		{"0 9 * * *", time.Date(2030, 1, 2, 9, 0, 0, 0, time.UTC)},
		{"30 * * * * *", time.Date(2030, 1, 2, 3, 4, 30, 0, time.UTC)}, // with seconds
		{"@hourly", time.Date(2030, 1, 2, 4, 0, 0, 0, time.UTC)},
		{"CRON_TZ=Europe/Paris 0 9 * * *", time.Date(2030, 1, 2, 8, 0, 0, 0, time.UTC)}, // CET is UTC+1
	} {
		s, err := core.Cron(c.expr)
		if err != nil {
			t.Fatalf("Cron(%q) = %v", c.expr, err)
		}
		if got := s.Next(at); !got.Equal(c.want) || got.Location() != time.UTC {
			t.Errorf("Cron(%q).Next(%v) = %v, want %v", c.expr, at, got, c.want)
		}
	}
	for _, expr := range []string{"", "not cron", "61 * * * *", "@every 1s", "CRON_TZ=UTC @every 1m", "CRON_TZ=Nowhere/City 0 9 * * *"} {
		if _, err := core.Cron(expr); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("Cron(%q) = %v, want ErrInvalidArgument", expr, err)
		}
	}
}

func TestOccurrenceIDDependsOnNameAndTimeOnly(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 123_456_789, time.UTC)
	paris, _ := time.LoadLocation("Europe/Paris")
	id := model.OccurrenceID("report", at)
	if id != "report@2030-01-02T03:04:05.123456Z" {
		t.Fatalf("OccurrenceID = %q", id)
	}
	if other := model.OccurrenceID("report", at.In(paris)); other != id {
		t.Fatalf("OccurrenceID in another zone = %q, want %q", other, id)
	}
	long := make([]byte, model.MaxScheduleNameLength)
	for i := range long {
		long[i] = 'n'
	}
	if err := model.ValidateID(model.OccurrenceID(string(long), at)); err != nil {
		t.Fatalf("the longest schedule name gives an ID Enqueue refuses: %v", err)
	}
	for _, name := range []string{"", "a@b", string(long) + "n"} {
		if err := model.ValidateScheduleName(name); !errors.Is(err, model.ErrInvalidArgument) {
			t.Errorf("ValidateScheduleName(%q) = %v, want ErrInvalidArgument", name, err)
		}
	}
}

func TestNewSchedulerRefusesBadSchedules(t *testing.T) {
	store := memory.New()
	defer store.Close()
	every, _ := core.Every(time.Second)
	for _, ps := range [][]core.Periodic{
		{{Name: "", Queue: "q", Schedule: every}},
		{{Name: "a", Queue: "", Schedule: every}},
		{{Name: "a", Queue: "q"}},
		{{Name: "a", Queue: "q", Schedule: every, CatchUp: -time.Second}},
		{{Name: "a", Queue: "q", Schedule: every}, {Name: "a", Queue: "q", Schedule: every}},
	} {
		if _, err := core.NewScheduler(store, ps); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("NewScheduler(%+v) = %v, want ErrInvalidArgument", ps, err)
		}
	}
	if _, err := core.NewClient(store, core.WithQueue("q", nopHandler), core.WithPeriodic(core.Periodic{Name: "a@", Queue: "q", Schedule: every})); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("NewClient with a bad schedule = %v, want ErrInvalidArgument", err)
	}
}

func nopHandler(context.Context, core.Claim, core.Task) ([]byte, error) { return nil, nil }

// occurrences lists the tasks of the queue, by ID, in every state.
func occurrences(t *testing.T, s core.Store, queue string) map[string]core.Task {
	t.Helper()
	out := map[string]core.Task{}
	for _, st := range []core.State{core.Scheduled, core.Ready, core.Running, core.Succeeded, core.Failed} {
		after := ""
		for {
			res, err := s.List(context.Background(), core.ListParams{Queue: queue, State: st, After: after, Limit: core.MaxBatch})
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range res.Tasks {
				if _, dup := out[task.ID]; dup {
					t.Fatalf("task %s listed twice", task.ID)
				}
				out[task.ID] = task
			}
			if res.Next == "" {
				break
			}
			after = res.Next
		}
	}
	return out
}

// Two Clients keep the same every-second schedule for a minute of the fake
// clock: each occurrence is enqueued exactly once, by one of them, and the
// other is told it is a duplicate.
func TestTwoClientsEnqueueEachOccurrenceOnce(t *testing.T) {
	start := t0.Add(500 * time.Millisecond) // between two occurrences
	clk := core.NewFakeClock(start)
	store := newStore(t, clk)
	every, err := core.Every(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p := core.Periodic{Name: "tick", Queue: "ticks", Schedule: every, Payload: []byte("tick"), Options: []core.EnqueueOption{core.WithPriority(3)}}
	mk := func() *core.Client {
		c, err := core.NewClient(store, core.WithClock(clk),
			core.WithQueue("work", nopHandler, core.WithPollInterval(time.Hour, time.Hour)),
			core.WithMaintenance(core.WithInterval(time.Hour)),
			core.WithPeriodic(p))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	clients := []*core.Client{mk(), mk()}
	ctx, cancel := context.WithCancel(context.Background())
	var runs sync.WaitGroup
	for _, c := range clients {
		runs.Go(func() {
			if err := c.Run(ctx); err != nil {
				t.Errorf("Run = %v", err)
			}
		})
	}
	defer func() { cancel(); runs.Wait() }()
	// Each Client waits on three timers once idle: its worker's poll, its
	// broker's interval and its scheduler's next occurrence.
	if !clk.BlockUntil(6, timeout(t)) {
		t.Fatalf("the clients did not start their timers: %d", clk.Timers())
	}
	dealt := func(c *core.Client) int64 {
		st := c.Stats().Scheduler
		return st.Enqueued + st.Duplicates + st.Skipped
	}
	const seconds = 60
	for i := int64(1); i <= seconds; i++ {
		clk.Advance(time.Second)
		waitFor(t, "both schedulers deal with the occurrence", func() bool {
			return dealt(clients[0]) == i && dealt(clients[1]) == i
		})
	}
	var enqueued, dups, skipped, errs int64
	for _, c := range clients {
		st := c.Stats().Scheduler
		enqueued, dups, skipped, errs = enqueued+st.Enqueued, dups+st.Duplicates, skipped+st.Skipped, errs+st.Errors
	}
	if enqueued != seconds || dups != seconds || skipped != 0 || errs != 0 {
		t.Fatalf("enqueued %d, duplicates %d, skipped %d, errors %d; want %d, %d, 0, 0", enqueued, dups, skipped, errs, seconds, seconds)
	}
	got := occurrences(t, store, "ticks")
	if len(got) != seconds {
		t.Fatalf("%d tasks for %d occurrences", len(got), seconds)
	}
	for i := 1; i <= seconds; i++ {
		id := model.OccurrenceID("tick", t0.Add(time.Duration(i)*time.Second))
		task, ok := got[id]
		if !ok {
			t.Fatalf("occurrence %s missing", id)
		}
		if string(task.Payload) != "tick" || task.Priority != 3 || task.State != core.Ready {
			t.Fatalf("occurrence %s = %+v", id, task)
		}
	}
}

func timeout(t *testing.T) <-chan struct{} {
	ch := make(chan struct{})
	tm := time.AfterFunc(guard, func() { close(ch) })
	t.Cleanup(func() { tm.Stop() })
	return ch
}

// The CatchUp policy after downtime: 0 skips what was missed, a window
// enqueues what it covers, oldest first.
func TestSchedulerCatchUpAfterDowntime(t *testing.T) {
	every, _ := core.Every(time.Minute)
	for _, c := range []struct {
		name    string
		catchUp time.Duration
		want    []time.Duration // occurrences (after t0) enqueued at start
	}{
		{"skip", 0, nil},
		{"five minutes", 5 * time.Minute, []time.Duration{-4 * time.Minute, -3 * time.Minute, -2 * time.Minute, -time.Minute, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := core.NewFakeClock(t0.Truncate(time.Minute))
			store := newStore(t, clk)
			s, err := core.NewScheduler(store, []core.Periodic{{Name: "m", Queue: "q", Schedule: every, CatchUp: c.catchUp}}, core.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			if !clk.BlockUntil(1, timeout(t)) {
				t.Fatal("the scheduler did not wait")
			}
			got := occurrences(t, store, "q")
			if len(got) != len(c.want) || s.Stats().Enqueued != int64(len(c.want)) {
				t.Fatalf("%d occurrences caught up (stats %+v), want %d", len(got), s.Stats(), len(c.want))
			}
			for _, d := range c.want {
				if _, ok := got[model.OccurrenceID("m", t0.Truncate(time.Minute).Add(d))]; !ok {
					t.Fatalf("occurrence at %v missing: %v", d, got)
				}
			}
			// Running, the next occurrence comes on time.
			clk.Advance(time.Minute)
			waitFor(t, "the next occurrence", func() bool { return s.Stats().Enqueued == int64(len(c.want))+1 })
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := s.Run(context.Background()); !errors.Is(err, core.ErrRunning) {
				t.Fatalf("second Run = %v, want ErrRunning", err)
			}
		})
	}
}

// flakyEnqueue fails the first n enqueues with a transport error.
type flakyEnqueue struct {
	core.Store
	mu   sync.Mutex
	fail int
}

func (f *flakyEnqueue) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	f.mu.Lock()
	if f.fail > 0 {
		f.fail--
		f.mu.Unlock()
		return core.TaskResult{}, errNetwork
	}
	f.mu.Unlock()
	return f.Store.Enqueue(ctx, p)
}

// An occurrence whose enqueue failed is tried again after a second, and a
// stall that spans several occurrences enqueues only the latest with
// CatchUp 0.
func TestSchedulerRetriesAFailedOccurrenceAndSkipsAfterAStall(t *testing.T) {
	clk := core.NewFakeClock(t0.Truncate(time.Minute).Add(time.Second))
	store := &flakyEnqueue{Store: newStore(t, clk), fail: 2}
	every, _ := core.Every(time.Minute)
	s, err := core.NewScheduler(store, []core.Periodic{{Name: "m", Queue: "q", Schedule: every}}, core.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Run(ctx) }()
	if !clk.BlockUntil(1, timeout(t)) {
		t.Fatal("the scheduler did not wait")
	}
	first := t0.Truncate(time.Minute).Add(time.Minute)
	clk.Set(first)
	waitFor(t, "two failed tries", func() bool {
		if s.Stats().Errors < 2 {
			clk.Advance(time.Second)
			return false
		}
		return true
	})
	waitFor(t, "the retry succeeds", func() bool {
		if s.Stats().Enqueued < 1 {
			clk.Advance(time.Second)
			return false
		}
		return true
	})
	if _, ok := occurrences(t, store, "q")[model.OccurrenceID("m", first)]; !ok {
		t.Fatal("the retried occurrence is missing")
	}
	// A stall: the clock jumps five occurrences at once.
	clk.Set(first.Add(5 * time.Minute))
	waitFor(t, "the latest occurrence after the stall", func() bool { return s.Stats().Enqueued == 2 })
	if st := s.Stats(); st.Skipped != 4 {
		t.Fatalf("stats %+v, want 4 skipped", st)
	}
	if _, ok := occurrences(t, store, "q")[model.OccurrenceID("m", first.Add(5*time.Minute))]; !ok {
		t.Fatal("the latest occurrence is missing")
	}
}
