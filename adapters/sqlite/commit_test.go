package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// TestGroupCommitKeepsEachOperationAtomic runs batches on the writer
// connection by hand: an operation refused before it wrote is answered and
// the others of its batch go on and commit, each run once; one that fails
// after it wrote (with an error of the model or any other) aborts the
// batch, and the others run again in a new one and commit once; an
// operation whose context has ended never runs.
func TestGroupCommitKeepsEachOperationAtomic(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "group.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// draw makes an operation that draws one value of queue's sequence (a
	// write), then fails with fail (nil: succeeds).
	runs := map[string]int{}
	draw := func(ctx context.Context, queue string, fail error) *job {
		j := newJob(ctx)
		j.fn = func(t tx, now time.Time) error {
			runs[queue]++
			if _, err := t.draw(queue, 1); err != nil {
				return err
			}
			return fail
		}
		return j
	}
	// seq is the queue's sequence as the store keeps it after its last
	// commit (the row is not rewritten at every draw: see seq.go).
	seq := func(queue string) int64 {
		if e := s.seq[queue]; e != nil {
			return e.last
		}
		return 0
	}
	// commit runs the jobs on the writer connection as one batch.
	commit := func(jobs ...*job) {
		batch := newJob(context.Background())
		batch.direct = func(c *wconn) error {
			for pending := jobs; len(pending) > 0; {
				pending = s.commitBatch(c, pending)
			}
			return nil
		}
		s.submit(batch)
		for _, j := range jobs {
			<-j.wake
		}
	}

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	// refuse makes an operation that reads queue's sequence and is refused,
	// having changed nothing.
	refuse := func(queue string) *job {
		j := newJob(bg)
		j.fn = func(t tx, now time.Time) error {
			runs[queue]++
			if _, err := t.base(queue); err != nil {
				return err
			}
			return core.ErrStaleClaim
		}
		return j
	}
	f, refused, g := draw(bg, "f", nil), refuse("refused"), draw(bg, "g", nil)
	commit(f, refused, g)
	if f.err != nil || g.err != nil || !errors.Is(refused.err, core.ErrStaleClaim) {
		t.Fatalf("errors f=%v refused=%v g=%v", f.err, refused.err, g.err)
	}
	if seq("f") != 1 || seq("g") != 1 || runs["f"] != 1 || runs["g"] != 1 || runs["refused"] != 1 {
		t.Errorf("after a batch with an operation refused before it wrote: f=%d g=%d, runs f=%d g=%d refused=%d; want 1 1, each run once",
			seq("f"), seq("g"), runs["f"], runs["g"], runs["refused"])
	}

	a, stale, b, never := draw(bg, "a", nil), draw(bg, "stale", core.ErrStaleClaim), draw(bg, "b", nil), draw(cancelled, "never", nil)
	commit(a, stale, never, b)
	if a.err != nil || b.err != nil || !errors.Is(stale.err, core.ErrStaleClaim) || !errors.Is(never.err, context.Canceled) {
		t.Fatalf("errors a=%v stale=%v b=%v never=%v", a.err, stale.err, b.err, never.err)
	}
	if seq("a") != 1 || seq("b") != 1 || seq("stale") != 0 || runs["never"] != 0 {
		t.Errorf("after a batch with an operation refused after it wrote: a=%d b=%d stale=%d, never ran %d times; want 1 1 0 0",
			seq("a"), seq("b"), seq("stale"), runs["never"])
	}
	if runs["a"] != 2 || runs["b"] != 1 {
		t.Errorf("a ran %d times, b %d; want a again after the abort, b once", runs["a"], runs["b"])
	}
	if a.now.IsZero() || b.now.Before(a.now) {
		t.Errorf("clock readings a=%v b=%v", a.now, b.now)
	}

	broken := errors.New("the transaction may be gone")
	c, fatal, d := draw(bg, "c", nil), draw(bg, "fatal", broken), draw(bg, "d", nil)
	commit(c, fatal, d)
	if c.err != nil || d.err != nil || !errors.Is(fatal.err, broken) {
		t.Fatalf("errors c=%v fatal=%v d=%v", c.err, fatal.err, d.err)
	}
	if seq("c") != 1 || seq("d") != 1 || seq("fatal") != 0 {
		t.Errorf("after an aborted batch: c=%d d=%d fatal=%d, want 1 1 0", seq("c"), seq("d"), seq("fatal"))
	}
	if runs["c"] != 2 || runs["d"] != 1 {
		t.Errorf("c ran %d times, d %d; want c again after the abort, d once", runs["c"], runs["d"])
	}

	panics := newJob(bg)
	panics.fn = func(tx, time.Time) error { panic("boom") }
	e := draw(bg, "e", nil)
	commit(panics, e)
	if panics.err == nil || e.err != nil || seq("e") != 1 {
		t.Errorf("a panicking operation: err %v; the next one: %v, seq %d", panics.err, e.err, seq("e"))
	}
}

// TestConcurrentWorkersShareCommits has goroutines pop and decide tasks on
// one store at once, so their operations meet in the writer's batches.
// Every task must end decided by exactly one successful decision, a second
// decision with the same claim must be refused, and some operations must
// have been committed together.
func TestConcurrentWorkersShareCommits(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "workers.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const tasks, workers = 48, 8
	for i := range tasks {
		if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: fmt.Sprintf("t%02d", i), MaxAttempts: 3}}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	final := map[string]int{} // task -> successful terminal decisions
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Hour, N: 1})
				if err != nil {
					errs <- err
					return
				}
				if len(res.Tasks) == 0 {
					return // nothing Ready: the others hold or have decided the rest
				}
				task := res.Tasks[0]
				c := task.Claim()
				var n int
				fmt.Sscanf(task.ID, "t%d", &n)
				switch {
				case n%3 == 0 && task.Attempt == 1:
					_, err = s.Retry(ctx, core.RetryParams{Claim: c, Message: "again"})
				case n%3 == 1:
					_, err = s.Fail(ctx, core.FailParams{Claim: c, Message: "no"})
				default:
					_, err = s.Ack(ctx, core.AckParams{Claim: c})
				}
				if err != nil {
					errs <- fmt.Errorf("decision on %s: %w", task.ID, err)
					return
				}
				if !(n%3 == 0 && task.Attempt == 1) {
					mu.Lock()
					final[task.ID]++
					mu.Unlock()
				}
				if _, err := s.Ack(ctx, core.AckParams{Claim: c}); !errors.Is(err, core.ErrStaleClaim) && !errors.Is(err, core.ErrInvalidTransition) {
					errs <- fmt.Errorf("second decision on %s with the same claim: %v", task.ID, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	counts, err := s.Counts(ctx, core.CountsParams{Queue: "q"})
	if err != nil || counts.Succeeded+counts.Failed != tasks {
		t.Fatalf("counts %+v (%v), want all %d tasks decided", counts, err, tasks)
	}
	for i := range tasks {
		if id := fmt.Sprintf("t%02d", i); final[id] != 1 {
			t.Errorf("task %s: %d successful final decisions", id, final[id])
		}
	}
	if s.grouped.Load() == 0 {
		t.Errorf("no operations were committed together")
	}
	t.Logf("%d operations committed in shared batches", s.grouped.Load())
}
