package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/faultproxy"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/model"
)

// enqueueResult is what one Enqueue call answered.
type enqueueResult struct {
	args model.EnqueueArgs
	res  core.TaskResult
	err  error
}

// enqueueTogether makes the Enqueue calls of args concurrently while the
// queue's flight is held, so that they wait, then lets them go out
// together, and returns their answers in the order of args.
func enqueueTogether(t *testing.T, s *redis.Store, queue string, args []model.EnqueueArgs) []enqueueResult {
	t.Helper()
	return enqueueTogetherThen(t, s, queue, args, nil, func() {})
}

// enqueueTogetherThen is enqueueTogether with a context per call (ctxs[i],
// or none) and a function it calls once they have gone out.
func enqueueTogetherThen(t *testing.T, s *redis.Store, queue string, args []model.EnqueueArgs, ctxs []context.Context, then func()) []enqueueResult {
	t.Helper()
	waiting, release := redis.HoldEnqueues(s, queue)
	out := make([]enqueueResult, len(args))
	var wg sync.WaitGroup
	for i, a := range args {
		ctx := context.Background()
		if i < len(ctxs) {
			ctx = ctxs[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.Enqueue(ctx, core.EnqueueParams{Queue: queue, EnqueueArgs: a})
			out[i] = enqueueResult{a, r, err}
		}()
	}
	waitFor(t, func() bool { return waiting() == len(args) })
	release()
	then()
	wg.Wait()
	return out
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
	}
}

func task(id string) model.EnqueueArgs {
	return model.EnqueueArgs{ID: id, Payload: []byte("payload of " + id), MaxAttempts: 2}
}

// Enqueue calls that meet go out as one script, and each is answered with
// its own item: its task, or the refusal a lone Enqueue would get at that
// point (an ID taken before, or by an earlier call of the same batch).
func TestConcurrentEnqueuesGoOutTogetherEachWithItsOwnAnswer(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: task("old")}); err != nil {
		t.Fatal(err)
	}
	if n := redis.Batched(s); n != 0 {
		t.Fatalf("a lone Enqueue went out in a batch (%d calls batched)", n)
	}
	var args []model.EnqueueArgs
	for i := range 8 {
		args = append(args, task(fmt.Sprintf("t%d", i)))
	}
	args = append(args, task("t0"), task("old"), task("t0"))
	res := enqueueTogether(t, s, "q", args)
	if n := redis.Batched(s); n != uint64(len(args)) {
		t.Fatalf("%d calls went out in a batch, want %d", n, len(args))
	}
	added := map[string]int{}
	for _, r := range res {
		switch {
		case r.err == nil:
			added[r.args.ID]++
			if r.res.Task.ID != r.args.ID || string(r.res.Task.Payload) != string(r.args.Payload) || r.res.Task.State != model.Ready {
				t.Errorf("Enqueue of %s answered task %s (payload %q, %v)", r.args.ID, r.res.Task.ID, r.res.Task.Payload, r.res.Task.State)
			}
			if r.res.Now.IsZero() || !r.res.Task.EnqueuedAt.Equal(r.res.Now) {
				t.Errorf("Enqueue of %s: now %v, enqueued at %v", r.args.ID, r.res.Now, r.res.Task.EnqueuedAt)
			}
		case errors.Is(r.err, core.ErrConflict):
			if r.args.ID != "t0" && r.args.ID != "old" {
				t.Errorf("Enqueue of %s: %v", r.args.ID, r.err)
			}
		default:
			t.Errorf("Enqueue of %s: %v", r.args.ID, r.err)
		}
	}
	for i := range 8 {
		if id := fmt.Sprintf("t%d", i); added[id] != 1 {
			t.Errorf("%s added %d times, want once", id, added[id])
		}
	}
	if added["old"] != 0 {
		t.Errorf("the taken ID old was added again")
	}
	c, err := s.Counts(ctx, core.CountsParams{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Ready != 9 {
		t.Errorf("%d tasks ready, want 9", c.Ready)
	}
}

// The store forgets the Enqueue state of a queue once its calls are done
// (a batch's flight ends a moment after its calls returned, see land), so
// one that serves many queues does not keep a state for each.
func TestIdleQueuesKeepNoEnqueueState(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	for i := range 50 {
		if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: fmt.Sprintf("q%d", i), EnqueueArgs: task("a")}); err != nil {
			t.Fatal(err)
		}
	}
	enqueueTogether(t, s, "q0", []model.EnqueueArgs{task("b"), task("c")})
	for deadline := time.Now().Add(10 * time.Second); redis.EnqueueGroups(s) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the store keeps the Enqueue state of %d idle queues", redis.EnqueueGroups(s))
		}
	}
}

// In a batch each call meets the capacity as it would alone: the ones the
// queue has room for are added, in order, the others are ErrQueueFull.
func TestConcurrentEnqueuesMeetTheCapacityOneByOne(t *testing.T) {
	s, _ := newStore(t, redis.WithCapacity(3))
	var args []model.EnqueueArgs
	for i := range 6 {
		args = append(args, task(fmt.Sprintf("t%d", i)))
	}
	full, ok := 0, 0
	for _, r := range enqueueTogether(t, s, "q", args) {
		switch {
		case r.err == nil:
			ok++
		case errors.Is(r.err, core.ErrQueueFull):
			full++
		default:
			t.Errorf("Enqueue of %s: %v", r.args.ID, r.err)
		}
	}
	if ok != 3 || full != 3 {
		t.Errorf("%d added and %d refused as full, want 3 and 3", ok, full)
	}
}

// A call of a batch gets the answer a lone Enqueue gets, a damaged record
// of its ID included; the others of the batch are not affected.
func TestADamagedRecordAnswersItsCallAsAlone(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	for _, id := range []string{"bad", "bad-alone"} {
		if err := c.Set(ctx, s.TaskKey("q", id), "not a task", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, alone := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: task("bad-alone")})
	if alone == nil {
		t.Fatal("Enqueue over a damaged record succeeded")
	}
	res := enqueueTogether(t, s, "q", []model.EnqueueArgs{task("a"), task("bad"), task("b"), task("c")})
	if n := redis.Batched(s); n != 4 {
		t.Fatalf("%d calls went out in a batch, want 4", n)
	}
	for _, r := range res {
		if r.args.ID == "bad" {
			if model.Kind(r.err) != model.Kind(alone) || errors.Is(r.err, core.ErrCorrupt) != errors.Is(alone, core.ErrCorrupt) {
				t.Errorf("Enqueue over a damaged record in a batch: %v; alone: %v", r.err, alone)
			}
			continue
		}
		if r.err != nil || r.res.Task.ID != r.args.ID {
			t.Errorf("Enqueue of %s: %v, task %q", r.args.ID, r.err, r.res.Task.ID)
		}
	}
}

// A batch its script refuses as a whole wrote nothing, and each call is
// sent again alone: with room in the sequence for one more version only,
// the batch is refused, the first call alone takes the last version and
// the others meet the sequence's end.
func TestABatchRefusedAsAWholeIsSentCallByCall(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	if err := c.Set(ctx, s.QueueKeys("q")["seq"], strconv.FormatInt(1<<36-2, 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	res := enqueueTogether(t, s, "q", []model.EnqueueArgs{task("a"), task("b"), task("c")})
	if n := redis.Batched(s); n != 3 {
		t.Fatalf("%d calls went out in a batch, want 3", n)
	}
	ok := 0
	for _, r := range res {
		switch {
		case r.err == nil:
			ok++
			if r.res.Task.ID != r.args.ID || r.res.Task.Version != 1<<36-1 {
				t.Errorf("Enqueue of %s answered task %s at version %d", r.args.ID, r.res.Task.ID, r.res.Task.Version)
			}
		case !errors.Is(r.err, redis.ErrSequenceExhausted):
			t.Errorf("Enqueue of %s: %v, want ErrSequenceExhausted", r.args.ID, r.err)
		}
	}
	if ok != 1 {
		t.Errorf("%d calls added a task, want 1", ok)
	}
}

// A call whose context ends while it waits to go out returns the
// context's error and is never sent; the others go out.
func TestAnEnqueueCancelledWhileWaitingIsNotSent(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	waiting, release := redis.HoldEnqueues(s, "q")
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 2)
	go func() {
		_, err := s.Enqueue(cctx, core.EnqueueParams{Queue: "q", EnqueueArgs: task("gone")})
		errc <- err
	}()
	go func() {
		_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: task("kept")})
		errc <- err
	}()
	waitFor(t, func() bool { return waiting() == 2 })
	cancel()
	waitFor(t, func() bool { return waiting() == 1 })
	release()
	for range 2 {
		if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	if _, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "gone"}); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("the cancelled Enqueue: Get answered %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "kept"}); err != nil {
		t.Errorf("the other Enqueue: %v", err)
	}
}

// proxiedStore returns a store whose client reaches a private server
// through a fault proxy, with go-redis's retries off when noRetries, and a
// store on the same keys that talks to the server directly.
func proxiedStore(t *testing.T, noRetries bool) (*faultproxy.Proxy, *redis.Store, *redis.Store) {
	t.Helper()
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	opt := &goredis.Options{Addr: p.Addr()}
	if noRetries {
		opt.MaxRetries = -1
	}
	c := goredis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	via, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := redis.New(srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return p, via, direct
}

// A caller cancelled after its call went out with others returns at once;
// the script still runs for all of them: the others are answered with
// their tasks, and the cancelled one's task is there too.
func TestCancellingOneEnqueueOfABatchLeavesTheOthers(t *testing.T) {
	p, s, direct := proxiedStore(t, false)
	ctx := context.Background()
	if err := s.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(50 * time.Millisecond)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Cancelled once the batch went out, while its request and reply are
	// held in the proxy.
	res := enqueueTogetherThen(t, s, "q", []model.EnqueueArgs{task("a"), task("b"), task("c")},
		[]context.Context{cctx}, func() { time.Sleep(10 * time.Millisecond); cancel() })
	if !errors.Is(res[0].err, context.Canceled) {
		t.Errorf("the cancelled call answered %v, want context.Canceled", res[0].err)
	}
	for _, r := range res[1:] {
		if r.err != nil || r.res.Task.ID != r.args.ID {
			t.Errorf("Enqueue of %s: %v, task %q", r.args.ID, r.err, r.res.Task.ID)
		}
	}
	p.SetDelay(0)
	for _, id := range []string{"a", "b", "c"} {
		if _, err := direct.Get(ctx, core.GetParams{Queue: "q", ID: id}); err != nil {
			t.Errorf("task %s: %v", id, err)
		}
	}
}

// A batch whose reply is lost answers every call of it with the transport
// error, never a typed refusal, although each took effect; with the
// client's retries on, the batch sent again is answered with its first
// answer and every call gets its task.
func TestALostBatchReplyIsATransportErrorForEveryCall(t *testing.T) {
	for _, retries := range []bool{false, true} {
		t.Run(fmt.Sprintf("retries=%v", retries), func(t *testing.T) {
			p, s, direct := proxiedStore(t, !retries)
			ctx := context.Background()
			if err := s.Preload(ctx); err != nil {
				t.Fatal(err)
			}
			waiting, release := redis.HoldEnqueues(s, "q")
			args := []model.EnqueueArgs{task("a"), task("b"), task("c")}
			res := make([]enqueueResult, len(args))
			var wg sync.WaitGroup
			for i, a := range args {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: a})
					res[i] = enqueueResult{a, r, err}
				}()
			}
			waitFor(t, func() bool { return waiting() == len(args) })
			p.CutAfterReply()
			release()
			wg.Wait()
			for _, r := range res {
				switch {
				case retries && (r.err != nil || r.res.Task.ID != r.args.ID):
					t.Errorf("Enqueue of %s sent again: %v, task %q", r.args.ID, r.err, r.res.Task.ID)
				case !retries && (r.err == nil || typed(r.err)):
					t.Errorf("Enqueue of %s with its reply lost: %v, want a transport error", r.args.ID, r.err)
				}
			}
			for _, a := range args {
				if _, err := direct.Get(ctx, core.GetParams{Queue: "q", ID: a.ID}); err != nil {
					t.Errorf("task %s: %v", a.ID, err)
				}
			}
		})
	}
}

// Enqueue calls that go out together keep each its own attempt timeout.
func TestConcurrentEnqueuesKeepTheirAttemptTimeouts(t *testing.T) {
	s, _ := newStore(t)
	var args []model.EnqueueArgs
	for i := range 6 {
		a := task(fmt.Sprintf("t%d", i))
		a.Timeout = time.Duration(i) * 1500 * time.Millisecond // t0 has none
		args = append(args, a)
	}
	for _, r := range enqueueTogether(t, s, "q", args) {
		if r.err != nil || r.res.Task.Timeout != r.args.Timeout {
			t.Errorf("Enqueue of %s: timeout %v, %v; want %v", r.args.ID, r.res.Task.Timeout, r.err, r.args.Timeout)
			continue
		}
		if got, err := s.Get(context.Background(), core.GetParams{Queue: "q", ID: r.args.ID}); err != nil || got.Timeout != r.args.Timeout {
			t.Errorf("Get of %s: timeout %v, %v; want %v", r.args.ID, got.Timeout, err, r.args.Timeout)
		}
	}
	if n := redis.Batched(s); n != uint64(len(args)) {
		t.Errorf("%d calls went out in a batch, want %d", n, len(args))
	}
}
