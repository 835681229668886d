package spec

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// uniqueSuite checks unique keys beyond the scenarios: the argument rules,
// the key and its hold kept with the task and shown by Get and List, the
// batch's answers item by item, and a quarantined holder holding nothing.
var uniqueSuite = []suiteCase{
	{name: "UniqueKeyArgumentsOutOfRangeAreRefusedAndChangeNothing", run: func(e *env) {
		e.enqueue("held", uniqueKey("k"))
		for _, a := range []model.EnqueueArgs{
			{ID: "x", MaxAttempts: 1, UniqueKey: strings.Repeat("k", model.MaxUniqueKeyLength+1)},
			{ID: "x", MaxAttempts: 1, UniqueKey: "k2", UniqueFor: -time.Microsecond},
			{ID: "x", MaxAttempts: 1, UniqueKey: "k2", UniqueFor: model.MaxDuration + 1},
			{ID: "x", MaxAttempts: 1, UniqueFor: time.Second},
			{ID: "x", MaxAttempts: 1, UniqueKey: "k", UniqueFor: -time.Second}, // invalid before held
		} {
			e.rejects(core.ErrInvalidArgument, func() error {
				_, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: a})
				return err
			})
		}
		e.enqueue("longest", uniqueKey(strings.Repeat("k", model.MaxUniqueKeyLength)))
	}},
	{name: "UniqueKeyAndItsHoldAreKeptWithTheTask", run: func(e *env) {
		until := e.now().Add(time.Hour)
		e.enqueue("p", uniqueKey("pending"))
		e.enqueue("f", func(a *model.EnqueueArgs) { a.UniqueKey, a.UniqueFor = "period", time.Hour+time.Nanosecond })
		if g := e.get("f"); g.UniqueKey != "period" || !g.UniqueUntil.Equal(until) {
			e.t.Errorf("Get(f): key %q until %s, want %q until %s", g.UniqueKey, formatTime(g.UniqueUntil), "period", formatTime(until))
		}
		for _, id := range []string{"p", "f"} {
			c := e.popID(id).Claim()
			_, err := e.s.Retry(e.ctx, core.RetryParams{Claim: c, Message: "again"})
			e.ok("Retry", err)
		}
		res, err := e.s.List(e.ctx, core.ListParams{Queue: e.q, State: core.Ready, Limit: 10})
		e.ok("List", err)
		for _, t := range res.Tasks {
			if t.UniqueKey == "" {
				e.t.Errorf("List: %s lost its key", formatTask(t))
			}
		}
		if g := e.get("p"); g.UniqueKey != "pending" || !g.UniqueUntil.IsZero() {
			e.t.Errorf("Get(p): %s", formatTask(g))
		}
		e.rejects(duplicate("pending", "p"), func() error {
			_, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "q", MaxAttempts: 1, UniqueKey: "pending"}})
			return err
		})
	}},
	{name: "EnqueueBatchAnswersEachItemsUniqueKeyOnItsOwn", run: func(e *env) {
		bs := e.batch()
		e.enqueue("old", uniqueKey("k1"))
		res, err := bs.EnqueueBatch(e.ctx, core.EnqueueBatchParams{Queue: e.q, Tasks: []model.EnqueueArgs{
			{ID: "a", MaxAttempts: 1, UniqueKey: "k1"},                       // held by old
			{ID: "b", MaxAttempts: 1, UniqueKey: "k2"},                       // takes k2
			{ID: "c", MaxAttempts: 1, UniqueKey: "k2"},                       // taken by the item before
			{ID: "old", MaxAttempts: 1, UniqueKey: "k3"},                     // the ID exists
			{ID: "d", MaxAttempts: 1, UniqueKey: "k3", UniqueFor: -1},        // invalid
			{ID: "e", MaxAttempts: 1, UniqueKey: "k3", UniqueFor: time.Hour}, // takes k3
			{ID: "f", MaxAttempts: 1},
		}})
		e.ok("EnqueueBatch", err)
		e.wantItems("EnqueueBatch", res, duplicate("k1", "old"), nil, duplicate("k2", "b"), core.ErrConflict, core.ErrInvalidArgument, nil, nil)
	}},
}

// uniqueDamageSuite checks a damaged holder: it holds its key until a scan
// sets it aside, and a quarantined record holds none.
var uniqueDamageSuite = []suiteCase{
	{name: "AQuarantinedHolderHoldsNoKey", run: func(e *env) {
		e.enqueue("poison", uniqueKey("k"), priority(5))
		e.enqueue("sound")
		e.damage("poison")
		_, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "early", MaxAttempts: 1, UniqueKey: "k"}})
		e.wantErr("Enqueue of a key a damaged record holds", err, duplicate("k", "poison"))
		e.popID("sound")
		e.enqueue("next", uniqueKey("k"))
	}},
}

func uniqueKey(k string) func(*model.EnqueueArgs) {
	return func(a *model.EnqueueArgs) { a.UniqueKey = k }
}

// uniqueConcurrentSuite checks that the duplicate check and the take are
// one atomic step: of callers enqueueing tasks with one key at once, one
// is accepted and every other is told it holds the key.
var uniqueConcurrentSuite = []concurrentCase{
	{"ConcurrentEnqueuesOfOneUniqueKeyAcceptOne", func(t *testing.T, h Harness) {
		clock := core.NewFakeClock(Epoch)
		store := h.New(t, clock, 0)
		for round := range 3 {
			key := fmt.Sprintf("k%d", round)
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				won     []string
				holders []string
				start   = make(chan struct{})
			)
			for i := range concurrentCallers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					id := fmt.Sprintf("r%d-c%d", round, i)
					a := model.EnqueueArgs{ID: id, MaxAttempts: 1, UniqueKey: key}
					var err error
					if bs, ok := store.(core.BatchStore); ok && i%2 == 1 {
						var res core.BatchResult
						res, err = bs.EnqueueBatch(context.Background(), core.EnqueueBatchParams{Queue: DefaultQueue, Tasks: []model.EnqueueArgs{a}})
						if err == nil {
							err = res.Items[0].Err
						}
					} else {
						_, err = store.Enqueue(context.Background(), core.EnqueueParams{Queue: DefaultQueue, EnqueueArgs: a})
					}
					mu.Lock()
					defer mu.Unlock()
					var d *model.DuplicateError
					switch {
					case err == nil:
						won = append(won, id)
					case errors.As(err, &d) && d.Key == key:
						holders = append(holders, d.TaskID)
					default:
						t.Errorf("Enqueue(%s): %v", id, err)
					}
				}()
			}
			close(start)
			wg.Wait()
			if len(won) != 1 {
				t.Fatalf("round %d: %d enqueues of key %s accepted (%q), want 1", round, len(won), key, won)
			}
			for _, h := range holders {
				if h != won[0] {
					t.Errorf("round %d: a duplicate named %q as the holder, but %q took the key", round, h, won[0])
				}
			}
			c, err := store.Counts(context.Background(), core.CountsParams{Queue: DefaultQueue})
			if err != nil || c.Ready != round+1 {
				t.Fatalf("round %d: counts %+v, %v; want %d ready", round, c, err, round+1)
			}
		}
	}},
}
