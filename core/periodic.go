package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/leasehold/leasehold/model"
)

// Schedule gives the occurrence times of a periodic task. Every Client that
// runs the same schedule must compute the same occurrences, whatever its
// clock or time zone, so a Schedule depends on nothing but its definition.
type Schedule interface {
	// Next returns the first occurrence strictly after t, or the zero time
	// when none follows.
	Next(t time.Time) time.Time
}

// cronParser reads the standard five fields (minute, hour, day of month,
// month, day of week), an optional leading seconds field, and the
// descriptors @yearly, @monthly, @weekly, @daily and @hourly.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Cron returns the Schedule of a cron expression, parsed by
// github.com/robfig/cron/v3: five fields (minute hour day-of-month month
// day-of-week), or six with a leading seconds field, or a descriptor such as
// @hourly. The times are those of UTC unless the expression starts with
// CRON_TZ=<IANA zone> (for example "CRON_TZ=Europe/Paris 0 9 * * *"), never
// those of the host's local zone, so Clients in different zones agree.
// "@every" is refused: its occurrences count from whenever it is asked, so
// two Clients would not agree on them; use Every.
//
// Errors: ErrInvalidArgument for an expression that does not parse.
func Cron(expr string) (Schedule, error) {
	spec := strings.TrimSpace(expr)
	body := spec
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		_, rest, _ := strings.Cut(spec, " ")
		body = strings.TrimSpace(rest)
	} else {
		spec = "CRON_TZ=UTC " + spec
	}
	if strings.HasPrefix(body, "@every") {
		return nil, fmt.Errorf("%w: cron expression %q: @every counts from when it is asked, so Clients would disagree on its occurrences; use Every", ErrInvalidArgument, expr)
	}
	s, err := cronParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: cron expression %q: %v", ErrInvalidArgument, expr, err)
	}
	return cronSchedule{s}, nil
}

type cronSchedule struct{ s cron.Schedule }

func (c cronSchedule) Next(t time.Time) time.Time {
	n := c.s.Next(t)
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// MinEvery is the shortest interval of Every.
const MinEvery = time.Millisecond

// Every returns the Schedule whose occurrences are the multiples of d since
// the Unix epoch (1970-01-01T00:00:00Z): every d, at times that do not depend
// on when a Client started. d must be within MinEvery..model.MaxDuration and
// a whole number of microseconds.
//
// Errors: ErrInvalidArgument for d out of range.
func Every(d time.Duration) (Schedule, error) {
	if d < MinEvery || d > model.MaxDuration || d%time.Microsecond != 0 {
		return nil, fmt.Errorf("%w: interval %v outside %v..%v or not whole microseconds", ErrInvalidArgument, d, MinEvery, model.MaxDuration)
	}
	return every(d.Microseconds()), nil
}

type every int64 // µs

func (e every) Next(t time.Time) time.Time {
	n, d := t.UnixMicro(), int64(e)
	q := n / d
	if n%d < 0 {
		q-- // floor for times before the epoch
	}
	return time.UnixMicro((q + 1) * d).UTC()
}

// Periodic is a task enqueued on a Schedule: each occurrence once, under the
// ID model.OccurrenceID(Name, occurrence time), in Queue.
//
// Any number of Schedulers or Clients may run the same Periodic over one
// store: an occurrence's ID depends only on the Name and the occurrence
// time, and Enqueue refuses an ID that a task holds (ErrConflict), so each
// occurrence is enqueued exactly once while its task is kept. A Scheduler
// that meets the conflict counts it in SchedulerStats.Duplicates.
type Periodic struct {
	// Name names the schedule; it is the prefix of every occurrence's task
	// ID, so two schedules of one queue need different names
	// (model.ValidateScheduleName).
	Name string
	// Queue is the queue the occurrences are enqueued in.
	Queue string
	// Schedule gives the occurrence times (Cron or Every).
	Schedule Schedule
	// Payload is every occurrence's payload.
	Payload []byte
	// Options are the enqueue options of every occurrence (WithPriority,
	// WithMaxAttempts, WithDelay, ...). A WithID among them is overridden by
	// the occurrence's ID.
	Options []EnqueueOption
	// CatchUp is how far back a Scheduler reaches for occurrences it did not
	// enqueue when they came: after downtime (when it starts) and after a
	// stall (a wake-up later than the occurrence). With 0, the default,
	// missed occurrences are skipped: a Scheduler enqueues only the
	// occurrences that come while it runs, and after a stall only the latest
	// one that came. With CatchUp > 0 it enqueues every occurrence within
	// CatchUp before now, oldest first, at most MaxBatch per wake-up (the
	// older ones are skipped).
	//
	// A finished occurrence's ID stays taken only while its task is kept:
	// keep finished tasks (see Store.Prune) longer than CatchUp, or a
	// Scheduler that starts later may enqueue a pruned occurrence again.
	CatchUp time.Duration
}

// SchedulerStats counts a Scheduler's occurrences, over all its schedules.
type SchedulerStats struct {
	// Enqueued counts the occurrences this Scheduler added.
	Enqueued int64
	// Duplicates counts the occurrences already held by a task (another
	// Scheduler, or an earlier run of this one, added them): not added again.
	Duplicates int64
	// Skipped counts the occurrences passed over by the CatchUp policy.
	Skipped int64
	// Errors counts enqueue attempts that failed otherwise (the store's
	// transport, a full queue); a failed occurrence is tried again while
	// CatchUp allows, and at least until the next occurrence comes.
	Errors int64
}

// SchedulerOption configures a Scheduler. Option values are
// SchedulerOptions.
type SchedulerOption interface{ applyScheduler(*Scheduler) }

func (o Option) applyScheduler(s *Scheduler) { o(&s.common) }

// schedulerRetry is how long a Scheduler waits before it tries a failed
// occurrence again.
const schedulerRetry = time.Second

// Scheduler enqueues the occurrences of periodic tasks. It needs no leader:
// run one in every process that should keep the schedules, and each
// occurrence is still enqueued once (see Periodic). A Client runs one for
// the schedules given to it with WithPeriodic.
//
// A Scheduler runs once: Run, until its context is done.
type Scheduler struct {
	common
	store   Store
	entries []*periodicEntry

	mu      sync.Mutex
	started bool
	stats   SchedulerStats
}

type periodicEntry struct {
	p Periodic
	q *Queue
}

// NewScheduler returns a Scheduler of the given schedules over store. Each
// must have a valid Name, Queue and a Schedule, CatchUp within
// 0..model.MaxDuration, and no two may share a queue and a name.
//
// Errors: ErrInvalidArgument.
func NewScheduler(store Store, periodic []Periodic, opts ...SchedulerOption) (*Scheduler, error) {
	return newScheduler(store, nil, periodic, opts)
}

func newScheduler(store Store, preset *common, periodic []Periodic, opts []SchedulerOption) (*Scheduler, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidArgument)
	}
	s := &Scheduler{store: store}
	if preset != nil {
		s.common = *preset
	} else {
		s.init()
	}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidArgument)
		}
		o.applyScheduler(s)
	}
	if s.err != nil {
		return nil, s.err
	}
	seen := map[[2]string]bool{}
	for _, p := range periodic {
		if err := model.ValidateScheduleName(p.Name); err != nil {
			return nil, err
		}
		if p.Schedule == nil {
			return nil, fmt.Errorf("%w: schedule %q has no Schedule", ErrInvalidArgument, p.Name)
		}
		if p.CatchUp < 0 || p.CatchUp > model.MaxDuration {
			return nil, fmt.Errorf("%w: schedule %q: CatchUp %v outside 0..%v", ErrInvalidArgument, p.Name, p.CatchUp, model.MaxDuration)
		}
		key := [2]string{p.Queue, p.Name}
		if seen[key] {
			return nil, fmt.Errorf("%w: schedule %q given twice for queue %q", ErrInvalidArgument, p.Name, p.Queue)
		}
		seen[key] = true
		q, err := NewQueue(store, p.Queue, Option(func(c *common) {
			c.clock, c.logger, c.telemetry = s.clock, s.logger, s.telemetry
		}))
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %w", p.Name, err)
		}
		p.Options = append([]EnqueueOption(nil), p.Options...)
		s.entries = append(s.entries, &periodicEntry{p: p, q: q})
	}
	return s, nil
}

// Stats returns a snapshot of the Scheduler's counters.
func (s *Scheduler) Stats() SchedulerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Run keeps the schedules until ctx is done, then returns nil. It returns
// ErrRunning if the Scheduler is already running or ran before.
func (s *Scheduler) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return fmt.Errorf("%w: scheduler", ErrRunning)
	}
	s.started = true
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range s.entries {
		wg.Go(func() { s.keep(ctx, e) })
	}
	wg.Wait()
	return nil
}

func (s *Scheduler) count(f func(*SchedulerStats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}

// keep runs one schedule: at each wake-up it enqueues the occurrences due
// (due), then sleeps until the next occurrence or a retry.
func (s *Scheduler) keep(ctx context.Context, e *periodicEntry) {
	start := s.clock.Now()
	// last is the latest occurrence time already dealt with: the ones after
	// it are candidates. At start, only those within CatchUp are.
	last := start.Add(-e.p.CatchUp)
	if e.p.CatchUp == 0 {
		last = start
	}
	var failed []time.Time // occurrences whose enqueue failed, oldest first
	for {
		now := s.clock.Now()
		var due []time.Time
		due, last = s.due(e, failed, last, now)
		failed = failed[:0]
		for _, at := range due {
			if ctx.Err() != nil {
				return
			}
			if !s.enqueue(ctx, e, at) {
				failed = append(failed, at)
			}
		}
		next := e.p.Schedule.Next(last)
		if !now.Before(next) && !next.IsZero() {
			continue // more came while enqueueing
		}
		wait := next.Sub(s.clock.Now())
		if next.IsZero() {
			wait = model.MaxDuration
		}
		if len(failed) > 0 && wait > schedulerRetry {
			wait = schedulerRetry
		}
		if wait <= 0 {
			continue
		}
		t := s.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// due returns the occurrences to enqueue at now, oldest first, and the new
// last: the failed ones still in the window, then those after last up to
// now, by the CatchUp policy.
func (s *Scheduler) due(e *periodicEntry, failed []time.Time, last, now time.Time) ([]time.Time, time.Time) {
	var fresh []time.Time
	skipped := int64(0)
	for at := e.p.Schedule.Next(last); !at.IsZero() && !at.After(now); at = e.p.Schedule.Next(at) {
		fresh = append(fresh, at)
		last = at
		if len(fresh) > MaxBatch {
			fresh = fresh[1:]
			skipped++
		}
	}
	window := now.Add(-e.p.CatchUp)
	var out []time.Time
	for _, at := range failed {
		// A failed occurrence is tried again while it is in the window, and
		// with CatchUp 0 until a newer one comes.
		if (e.p.CatchUp > 0 && !at.Before(window)) || (e.p.CatchUp == 0 && len(fresh) == 0) {
			out = append(out, at)
		} else {
			skipped++
		}
	}
	if e.p.CatchUp == 0 {
		if len(fresh) > 1 {
			skipped += int64(len(fresh) - 1)
			fresh = fresh[len(fresh)-1:]
		}
	} else {
		for len(fresh) > 0 && fresh[0].Before(window) {
			fresh = fresh[1:]
			skipped++
		}
	}
	if skipped > 0 {
		s.count(func(st *SchedulerStats) { st.Skipped += skipped })
	}
	return append(out, fresh...), last
}

// enqueue adds the occurrence at; it reports false when it should be tried
// again.
func (s *Scheduler) enqueue(ctx context.Context, e *periodicEntry, at time.Time) bool {
	id := model.OccurrenceID(e.p.Name, at)
	opts := append(append([]EnqueueOption(nil), e.p.Options...), WithID(id))
	_, err := e.q.Enqueue(ctx, e.p.Payload, opts...)
	switch {
	case err == nil:
		s.count(func(st *SchedulerStats) { st.Enqueued++ })
		s.logger.DebugContext(ctx, "occurrence enqueued", "queue", e.p.Queue, "schedule", e.p.Name, "task", id)
		return true
	case errors.Is(err, ErrConflict):
		s.count(func(st *SchedulerStats) { st.Duplicates++ })
		return true
	case errors.Is(err, ErrInvalidArgument):
		s.count(func(st *SchedulerStats) { st.Errors++ })
		s.logger.ErrorContext(ctx, "occurrence refused", "queue", e.p.Queue, "schedule", e.p.Name, "task", id, "error", err)
		return true // trying again cannot help
	default:
		if ctx.Err() != nil {
			return true
		}
		s.count(func(st *SchedulerStats) { st.Errors++ })
		s.logger.WarnContext(ctx, "occurrence not enqueued, will retry", "queue", e.p.Queue, "schedule", e.p.Name, "task", id, "error", err)
		return false
	}
}
