package spec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// The concurrent part of the suite: operations that must be atomic, called
// from several goroutines at once on one store. The store is not wrapped in a
// twin (the model cannot know the order the calls took); instead each test
// checks what atomicity promises, and where the outcome does not depend on
// the order, compares the final state with a model that ran the calls in
// sequence.

const (
	concurrentCallers = 8
	concurrentTasks   = 24
	// maxRounds bounds the calls of one caller: more than enough to drain
	// the queue, so a store that keeps answering is reported, not waited on.
	maxRounds = 2 * concurrentTasks
)

var errRounds = errors.New("still answering after more calls than there are tasks")

type concurrentCase struct {
	name string
	run  func(t *testing.T, h Harness)
}

var concurrentSuite = []concurrentCase{
	{"ConcurrentRecoverExpiredRecoversEachExpiredTaskExactlyOnce", func(t *testing.T, h Harness) {
		for _, limit := range []int{0, 1, 5} {
			t.Run(fmt.Sprintf("limit%d", limit), func(t *testing.T) {
				c := newConcurrentEnv(t, h)
				c.expiredTasks(concurrentTasks)
				results := c.together(func(ctx context.Context) ([]string, error) {
					var mine []string
					for range maxRounds {
						res, err := c.store.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: DefaultQueue, Delay: time.Second, Limit: limit})
						if err != nil || len(res.Tasks) == 0 {
							return mine, err
						}
						mine = append(mine, taskIDs(res.Tasks)...)
						if limit == 0 {
							return mine, nil
						}
					}
					return mine, errRounds
				})
				c.exactlyOnce("RecoverExpired", results)
				if limit == 0 {
					// One call recovered everything in one step; the others found
					// nothing: the state is the model's after one call.
					c.apply(func(ctx context.Context, s core.Store) error {
						_, err := s.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: DefaultQueue, Delay: time.Second})
						return err
					})
					c.sameAsModel()
				}
				c.each(func(task core.Task) {
					if task.State != core.Scheduled || task.LeaseLosses() != 1 || task.ClaimToken != 0 {
						t.Errorf("after recovery: %s", formatTask(task))
					}
				})
			})
		}
	}},
	{"ConcurrentClaimExpiredHandsEachExpiredTaskToOneBroker", func(t *testing.T, h Harness) {
		for _, limit := range []int{0, 2} {
			t.Run(fmt.Sprintf("limit%d", limit), func(t *testing.T) {
				c := newConcurrentEnv(t, h)
				c.expiredTasks(concurrentTasks)
				var mu sync.Mutex
				var claims []core.ReapClaim
				results := c.together(func(ctx context.Context) ([]string, error) {
					var mine []string
					for range maxRounds {
						res, err := c.store.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: DefaultQueue, ClaimTTL: time.Minute, Limit: limit})
						if err != nil || len(res.Claims) == 0 {
							return mine, err
						}
						mu.Lock()
						claims = append(claims, res.Claims...)
						mu.Unlock()
						mine = append(mine, reapIDs(res.Claims)...)
						if limit == 0 {
							return mine, nil
						}
					}
					return mine, errRounds
				})
				c.exactlyOnce("ClaimExpired", results)
				if limit == 0 {
					c.apply(func(ctx context.Context, s core.Store) error {
						_, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: DefaultQueue, ClaimTTL: time.Minute})
						return err
					})
					c.sameAsModel()
				}
				// Every claim handed out still holds its task: each broker's
				// decision applies.
				for _, rc := range claims {
					if _, err := c.store.Requeue(context.Background(), core.RequeueParams{ReapClaim: rc}); err != nil {
						t.Errorf("Requeue(%s): %v", describeReap(rc), err)
					}
				}
			})
		}
	}},
	{"ConcurrentPopsNeverHandOutATaskTwice", func(t *testing.T, h Harness) {
		c := newConcurrentEnv(t, h)
		c.enqueueAll(concurrentTasks)
		results := c.together(func(ctx context.Context) ([]string, error) {
			var mine []string
			for range maxRounds {
				res, err := c.store.Pop(ctx, core.PopParams{Queue: DefaultQueue, Lease: time.Minute, N: 2})
				if err != nil || len(res.Tasks) == 0 {
					return mine, err
				}
				mine = append(mine, taskIDs(res.Tasks)...)
			}
			return mine, errRounds
		})
		c.exactlyOnce("Pop", results)
		tokens := map[uint64]string{}
		c.each(func(task core.Task) {
			if task.State != core.Running || task.Attempt != 1 {
				t.Errorf("after the pops: %s", formatTask(task))
			}
			if other, dup := tokens[task.ClaimToken]; dup {
				t.Errorf("tasks %s and %s share token %d", other, task.ID, task.ClaimToken)
			}
			tokens[task.ClaimToken] = task.ID
		})
	}},
	{"ConcurrentDecisionsOnOneTaskLetExactlyOneWin", func(t *testing.T, h Harness) {
		c := newConcurrentEnv(t, h)
		c.expiredTasks(1)
		worker := c.get("t00").Claim()
		res, err := c.store.ClaimExpired(context.Background(), core.ClaimExpiredParams{Queue: DefaultQueue, ClaimTTL: time.Minute})
		if err != nil || len(res.Claims) != 1 {
			t.Fatalf("ClaimExpired: %v, %v", reapIDs(res.Claims), err)
		}
		rc := res.Claims[0]
		ops := []func(ctx context.Context) error{
			func(ctx context.Context) error {
				_, err := c.store.Ack(ctx, core.AckParams{Claim: worker, Result: []byte("done")})
				return err
			},
			func(ctx context.Context) error {
				_, err := c.store.Requeue(ctx, core.RequeueParams{ReapClaim: rc})
				return err
			},
			func(ctx context.Context) error {
				_, err := c.store.Finalize(ctx, core.FinalizeParams{ReapClaim: rc})
				return err
			},
			func(ctx context.Context) error {
				_, err := c.store.Fail(ctx, core.FailParams{Claim: worker, Message: "boom"})
				return err
			},
		}
		errs := make([]error, len(ops))
		var i int
		c.together(func(ctx context.Context) ([]string, error) {
			c.mu.Lock()
			n := i
			i++
			c.mu.Unlock()
			if n >= len(ops) {
				return nil, nil
			}
			errs[n] = ops[n](ctx)
			return nil, nil
		})
		wins := 0
		for n, err := range errs {
			switch {
			case err == nil:
				wins++
			case model.Kind(err) == model.ErrStaleClaim || model.Kind(err) == model.ErrInvalidTransition:
			default:
				t.Errorf("decision %d: %v", n, err)
			}
		}
		if wins != 1 {
			t.Errorf("%d decisions applied, want exactly 1 (errors %v)", wins, errs)
		}
		task := c.get("t00")
		if task.State == core.Running || len(task.Errors) > 1 {
			t.Errorf("after the decisions: %s", formatTask(task))
		}
	}},
}

// concurrentBatchSuite checks that a batch is one atomic step: callers that
// race with the same claims or IDs see each item succeed for exactly one of
// them.
var concurrentBatchSuite = []concurrentCase{
	{"ConcurrentAckBatchesOfTheSameClaimsAckEachClaimOnce", func(t *testing.T, h Harness) {
		c := newConcurrentEnv(t, h)
		c.enqueueAll(concurrentTasks)
		var claims []core.Claim
		c.both(func(ctx context.Context, s core.Store) error {
			res, err := s.Pop(ctx, core.PopParams{Queue: DefaultQueue, Lease: time.Minute, N: concurrentTasks})
			if err == nil && len(res.Tasks) != concurrentTasks {
				err = fmt.Errorf("Pop returned %d tasks", len(res.Tasks))
			}
			if s == c.store {
				for _, task := range res.Tasks {
					claims = append(claims, task.Claim())
				}
			}
			return err
		})
		bs := c.batchStore()
		var turn sync.Mutex
		next := 0
		results := c.together(func(ctx context.Context) ([]string, error) {
			// Each caller acks every claim, starting at its own offset.
			turn.Lock()
			offset := next
			next += 3
			turn.Unlock()
			acks := make([]core.AckItem, len(claims))
			for i := range claims {
				acks[i] = core.AckItem{Claim: claims[(i+offset)%len(claims)], Result: []byte("ok")}
			}
			res, err := bs.AckBatch(ctx, core.AckBatchParams{Queue: DefaultQueue, Acks: acks})
			if err != nil {
				return nil, err
			}
			var mine []string
			for i, it := range res.Items {
				var te *model.TransitionError
				switch {
				case it.Err == nil:
					mine = append(mine, acks[i].Claim.TaskID)
				case errors.As(it.Err, &te) && te.Op == model.OpAck && te.State == core.Succeeded:
				default:
					return mine, fmt.Errorf("item %d (%s): %v, want success or an invalid transition from succeeded", i, acks[i].Claim.TaskID, it.Err)
				}
			}
			return mine, nil
		})
		c.exactlyOnce("AckBatch", results)
		c.each(func(task core.Task) {
			if task.State != core.Succeeded || string(task.Result) != "ok" {
				t.Errorf("after the batches: %s", formatTask(task))
			}
		})
	}},
	{"ConcurrentEnqueueBatchesOfTheSameIDsAddEachTaskOnce", func(t *testing.T, h Harness) {
		c := newConcurrentEnv(t, h)
		for i := range concurrentTasks {
			c.ids = append(c.ids, fmt.Sprintf("t%02d", i))
		}
		bs := c.batchStore()
		results := c.together(func(ctx context.Context) ([]string, error) {
			tasks := make([]model.EnqueueArgs, len(c.ids))
			for i, id := range c.ids {
				tasks[len(tasks)-1-i] = model.EnqueueArgs{ID: id, MaxAttempts: 1}
			}
			res, err := bs.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: DefaultQueue, Tasks: tasks})
			if err != nil {
				return nil, err
			}
			var mine []string
			for i, it := range res.Items {
				switch {
				case it.Err == nil:
					mine = append(mine, tasks[i].ID)
				case errors.Is(it.Err, core.ErrConflict):
				default:
					return mine, fmt.Errorf("item %d (%s): %v, want success or a conflict", i, tasks[i].ID, it.Err)
				}
			}
			return mine, nil
		})
		c.exactlyOnce("EnqueueBatch", results)
	}},
}

// batchStore returns the store as a core.BatchStore, failing the test when it
// is not one.
func (c *concurrentEnv) batchStore() core.BatchStore {
	c.t.Helper()
	bs, ok := c.store.(core.BatchStore)
	if !ok {
		c.t.Fatal(errNoBatch(c.store))
	}
	return bs
}

// concurrentEnv is a store shared by goroutines, and a model that replays
// the sequential part of the test for comparison.
type concurrentEnv struct {
	t     *testing.T
	clock *core.FakeClock
	store core.Store
	model *ModelStore
	ids   []string
	mu    sync.Mutex
}

func newConcurrentEnv(t *testing.T, h Harness) *concurrentEnv {
	clock := core.NewFakeClock(Epoch)
	return &concurrentEnv{t: t, clock: clock, store: h.New(t, clock, 0), model: NewModelStore(clock, 0)}
}

// apply runs one operation on the store and on the model (sequential parts
// only); for the concurrent calls, it runs on the model alone.
func (c *concurrentEnv) apply(op func(ctx context.Context, s core.Store) error) {
	c.t.Helper()
	if err := op(context.Background(), c.model); err != nil {
		c.t.Fatalf("model: %v", err)
	}
}

func (c *concurrentEnv) both(op func(ctx context.Context, s core.Store) error) {
	c.t.Helper()
	if err := op(context.Background(), c.store); err != nil {
		c.t.Fatalf("store: %v", err)
	}
	c.apply(op)
}

// enqueueAll enqueues n tasks t00, t01, ... with three priorities.
func (c *concurrentEnv) enqueueAll(n int) {
	c.t.Helper()
	for i := range n {
		id := fmt.Sprintf("t%02d", i)
		c.ids = append(c.ids, id)
		c.both(func(ctx context.Context, s core.Store) error {
			_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: DefaultQueue, EnqueueArgs: model.EnqueueArgs{
				ID: id, Priority: i % 3, MaxAttempts: 3,
			}})
			return err
		})
	}
}

// expiredTasks enqueues n tasks, pops them all with leases lapsing at
// different times, and moves the clock past every deadline.
func (c *concurrentEnv) expiredTasks(n int) {
	c.t.Helper()
	c.enqueueAll(n)
	for range n {
		c.both(func(ctx context.Context, s core.Store) error {
			res, err := s.Pop(ctx, core.PopParams{Queue: DefaultQueue, Lease: time.Second, N: 1})
			if err == nil && len(res.Tasks) != 1 {
				err = fmt.Errorf("Pop returned %d tasks", len(res.Tasks))
			}
			return err
		})
		c.clock.Advance(time.Millisecond)
	}
	c.clock.Advance(time.Second)
}

// together runs fn from concurrentCallers goroutines released at once, and
// returns what each returned.
func (c *concurrentEnv) together(fn func(ctx context.Context) ([]string, error)) [][]string {
	c.t.Helper()
	ctx := context.Background()
	start := make(chan struct{})
	out := make([][]string, concurrentCallers)
	errs := make([]error, concurrentCallers)
	var wg sync.WaitGroup
	for g := range concurrentCallers {
		wg.Go(func() {
			<-start
			out[g], errs[g] = fn(ctx)
		})
	}
	close(start)
	wg.Wait()
	for g, err := range errs {
		if err != nil {
			c.t.Errorf("caller %d: %v", g, err)
		}
	}
	return out
}

// exactlyOnce checks that the callers together returned every task once.
func (c *concurrentEnv) exactlyOnce(op string, results [][]string) {
	c.t.Helper()
	var all []string
	for _, r := range results {
		all = append(all, r...)
	}
	slices.Sort(all)
	if !slices.Equal(all, c.ids) {
		c.t.Errorf("concurrent %s calls returned %q together, want each of %q exactly once", op, all, c.ids)
	}
}

func (c *concurrentEnv) get(id string) core.Task {
	c.t.Helper()
	t, err := c.store.Get(context.Background(), core.GetParams{Queue: DefaultQueue, ID: id})
	if err != nil {
		c.t.Fatalf("Get(%s): %v", id, err)
	}
	return t
}

// each calls fn with every task of the queue.
func (c *concurrentEnv) each(fn func(core.Task)) {
	c.t.Helper()
	st, err := readQueue(context.Background(), c.store, DefaultQueue)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, t := range st.Tasks {
		fn(t)
	}
}

// sameAsModel compares the store's final state with the model's.
func (c *concurrentEnv) sameAsModel() {
	c.t.Helper()
	st, err := readQueue(context.Background(), c.store, DefaultQueue)
	if err != nil {
		c.t.Fatal(err)
	}
	if d := diffQueueState(DefaultQueue, st, modelQueue(c.model, DefaultQueue)); d != "" {
		c.t.Errorf("after the concurrent calls, the state differs from the model's:\n%s", d)
	}
}
