package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// reapEnv drives one queue of a Redis store on a fake clock and reads its
// keys directly.
type reapEnv struct {
	t     *testing.T
	ctx   context.Context
	clock *core.FakeClock
	s     *redis.Store
	c     *goredis.Client
	q     string
}

func newReapEnv(t *testing.T) *reapEnv {
	clock := core.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s, c := newStore(t, redis.WithClock(clock))
	return &reapEnv{t: t, ctx: context.Background(), clock: clock, s: s, c: c, q: "reap"}
}

func us(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// at renders a time index entry as indexes reports it.
func at(name string, t time.Time) string { return fmt.Sprintf("%s@%d", name, t.UnixMicro()) }

// readyAt renders a ready index entry of a task of priority 0.
func readyAt(version uint64) string {
	return fmt.Sprintf("ready@%.17g", float64(uint64(model.MaxPriority)<<36+version))
}

func (e *reapEnv) must(what string, err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

// popped enqueues id and pops it with a 10 s lease.
func (e *reapEnv) popped(id string) core.Task {
	e.t.Helper()
	_, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: id, Payload: []byte("p"), MaxAttempts: 3}})
	e.must("enqueue", err)
	r, err := e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: 10 * time.Second, N: 1})
	e.must("pop", err)
	if len(r.Tasks) != 1 || r.Tasks[0].ID != id {
		e.t.Fatalf("pop returned %v, want %s", r.Tasks, id)
	}
	return r.Tasks[0]
}

// reap lets the lease lapse (or the claim TTL, when called again) and
// claims the one expired task for a broker.
func (e *reapEnv) reap(after, ttl time.Duration) core.ReapClaim {
	e.t.Helper()
	e.clock.Advance(after)
	r, err := e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: ttl})
	e.must("claim expired", err)
	if len(r.Claims) != 1 {
		e.t.Fatalf("ClaimExpired returned %d claims, want 1", len(r.Claims))
	}
	return r.Claims[0]
}

// staleDecisions runs every decision of a stale broker claim and fails
// unless each is ErrStaleClaim and Redis is left exactly as it was.
func (e *reapEnv) staleDecisions(rc core.ReapClaim) {
	e.t.Helper()
	before := dump(e.t, e.c, e.s)
	_, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: rc, Delay: time.Minute, Message: "stale requeue"})
	if !errors.Is(err, core.ErrStaleClaim) {
		e.t.Errorf("stale Requeue: %v, want ErrStaleClaim", err)
	}
	_, err = e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: rc})
	if !errors.Is(err, core.ErrStaleClaim) {
		e.t.Errorf("stale Requeue (now): %v, want ErrStaleClaim", err)
	}
	_, err = e.s.Finalize(e.ctx, core.FinalizeParams{ReapClaim: rc, Message: "stale finalize"})
	if !errors.Is(err, core.ErrStaleClaim) {
		e.t.Errorf("stale Finalize: %v, want ErrStaleClaim", err)
	}
	unchanged(e.t, "a stale broker decision", before, dump(e.t, e.c, e.s))
}

// counts fails unless the queue's counts are want.
func (e *reapEnv) counts(want core.Counts) {
	e.t.Helper()
	got, err := e.s.Counts(e.ctx, core.CountsParams{Queue: e.q})
	e.must("counts", err)
	if got != want {
		e.t.Errorf("counts %+v, want %+v", got, want)
	}
}

// popNone fails unless nothing is Ready.
func (e *reapEnv) popNone() {
	e.t.Helper()
	r, err := e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: time.Second, N: 10})
	e.must("pop", err)
	if len(r.Tasks) != 0 {
		e.t.Errorf("pop returned %d tasks, want none: %v", len(r.Tasks), r.Tasks)
	}
}

// The races of the Redis seed (seeds/000_…), driven through the real scripts
// and checked key by key: a decision made under a claim that no longer holds
// the task writes nothing, and a decision under the claim that holds it
// applies.
func TestRedisBrokerReap(t *testing.T) {
	t.Run("WorkerAckRace", func(t *testing.T) {
		// The lease lapses, a broker claims the task, then the slow worker
		// finishes: its ack wins, and the broker's requeue must not put the
		// succeeded task back in the queue.
		e := newReapEnv(t)
		task := e.popped("t1")
		rc := e.reap(11*time.Second, 30*time.Second)
		e.clock.Advance(time.Second)
		acked, err := e.s.Ack(e.ctx, core.AckParams{Claim: task.Claim(), Result: []byte("done")})
		e.must("late worker ack", err)
		e.staleDecisions(rc)

		wantFields(t, e.c, e.s, e.q, "t1", "state", "succeeded", "result", "done", "errors", "",
			"version", strconv.FormatUint(acked.Task.Version, 10), "deadline", "", "finished_at", us(acked.Now))
		wantIndexes(t, e.c, e.s, e.q, "t1", at("finished", acked.Now), "ids:succeeded@0")
		e.counts(core.Counts{Succeeded: 1})
		e.popNone()
	})

	t.Run("ClaimTakeoverAfterClaimTTL", func(t *testing.T) {
		// Broker A claims and stalls past the claim TTL; broker B claims and
		// requeues. A's decision must not schedule the task a second time.
		e := newReapEnv(t)
		e.popped("t1")
		rcA := e.reap(11*time.Second, 5*time.Second)
		rcB := e.reap(6*time.Second, 5*time.Second)
		if rcB.Version <= rcA.Version {
			t.Fatalf("takeover version %d not after %d", rcB.Version, rcA.Version)
		}
		runAfter := e.clock.Now().Add(time.Minute)
		requeued, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: rcB, Delay: time.Minute, Message: "B decided"})
		e.must("B requeue", err)
		e.staleDecisions(rcA)

		wantFields(t, e.c, e.s, e.q, "t1", "state", "scheduled", "run_after", us(runAfter), "token", "0",
			"version", strconv.FormatUint(requeued.Task.Version, 10),
			"errors", fmt.Sprintf("1 %s 1 9:B decided", us(requeued.Now)))
		wantIndexes(t, e.c, e.s, e.q, "t1", at("scheduled", runAfter), "ids:scheduled@0")
		e.counts(core.Counts{Scheduled: 1})

		e.clock.Set(runAfter)
		ids, err := e.s.Promote(e.ctx, core.PromoteParams{Queue: e.q})
		e.must("promote", err)
		if len(ids.IDs) != 1 {
			t.Fatalf("promote returned %v, want [t1] once", ids.IDs)
		}
		r, err := e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: time.Second, N: 10})
		e.must("pop", err)
		if len(r.Tasks) != 1 || r.Tasks[0].Attempt != 2 {
			t.Fatalf("pop after promote returned %v, want t1 once at attempt 2", r.Tasks)
		}
		e.popNone()
	})

	t.Run("InspectorRemoveBetweenClaimAndDecision", func(t *testing.T) {
		// The operator removes the task between the broker's claim and its
		// decision; the decision must not bring it back, not even when the
		// ID is enqueued again.
		e := newReapEnv(t)
		e.popped("t1")
		rc := e.reap(11*time.Second, 30*time.Second)
		_, err := e.s.Remove(e.ctx, core.InspectParams{Queue: e.q, ID: "t1"})
		e.must("remove", err)
		e.staleDecisions(rc)
		if h := hash(t, e.c, e.s, e.q, "t1"); len(h) != 0 {
			t.Errorf("removed task's hash came back: %v", h)
		}
		wantIndexes(t, e.c, e.s, e.q, "t1")
		// Only the sequence and the registry, empty but for its mark of
		// completeness (see akey in lua/lib.lua), are left.
		keys := dump(t, e.c, e.s)
		if reg := redis.RegistryKey(e.s, e.q); len(keys) != 2 || keys[reg] != `set: [""]` {
			t.Errorf("after remove Redis holds %v, want only the sequence and the empty registry", keys)
		}

		again, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "t1", MaxAttempts: 1}})
		e.must("enqueue again", err)
		if again.Task.Version <= rc.Version {
			t.Fatalf("re-enqueued task at version %d, not after the claim's %d", again.Task.Version, rc.Version)
		}
		e.staleDecisions(rc)
		wantFields(t, e.c, e.s, e.q, "t1", "state", "ready", "attempt", "0", "errors", "")
		wantIndexes(t, e.c, e.s, e.q, "t1", readyAt(again.Task.Version), "ids:ready@0")
		e.counts(core.Counts{Ready: 1})
	})

	t.Run("InspectorRequeueBetweenClaimAndDecision", func(t *testing.T) {
		// The operator requeues the task between the broker's claim and its
		// decision; the decision must not undo it.
		e := newReapEnv(t)
		task := e.popped("t1")
		rc := e.reap(11*time.Second, 30*time.Second)
		requeued, err := e.s.InspectRequeue(e.ctx, core.InspectParams{Queue: e.q, ID: "t1", Expect: rc.Version})
		e.must("inspector requeue", err)
		e.staleDecisions(rc)

		before := dump(t, e.c, e.s)
		if _, err := e.s.Ack(e.ctx, core.AckParams{Claim: task.Claim(), Result: []byte("late")}); !errors.Is(err, core.ErrStaleClaim) {
			t.Errorf("old worker's ack after the operator's requeue: %v, want ErrStaleClaim", err)
		}
		unchanged(t, "the old worker's ack", before, dump(t, e.c, e.s))

		wantFields(t, e.c, e.s, e.q, "t1", "state", "ready", "attempt", "0", "token", "0", "errors", "",
			"claimed_at", "", "deadline", "", "version", strconv.FormatUint(requeued.Task.Version, 10))
		wantIndexes(t, e.c, e.s, e.q, "t1", readyAt(requeued.Task.Version), "ids:ready@0")
		e.counts(core.Counts{Ready: 1})
	})

	t.Run("MatchingClaimAcknowledge", func(t *testing.T) {
		// Nobody intervenes: the broker's decision to give up (the seed's
		// acknowledge) applies, and then nothing else may decide the task.
		e := newReapEnv(t)
		task := e.popped("t1")
		rc := e.reap(11*time.Second, 30*time.Second)
		e.clock.Advance(time.Second)
		final, err := e.s.Finalize(e.ctx, core.FinalizeParams{ReapClaim: rc})
		e.must("finalize", err)
		if final.Task.State != core.Failed {
			t.Fatalf("finalize left %v", final.Task.State)
		}
		wantFields(t, e.c, e.s, e.q, "t1", "state", "failed", "deadline", "", "finished_at", us(final.Now),
			"errors", fmt.Sprintf("1 %s 1 13:lease expired", us(final.Now)))
		wantIndexes(t, e.c, e.s, e.q, "t1", at("finished", final.Now), "ids:failed@0")

		before := dump(t, e.c, e.s)
		_, err = e.s.Ack(e.ctx, core.AckParams{Claim: task.Claim(), Result: []byte("late")})
		var te *core.TransitionError
		if !errors.As(err, &te) || te.Op != model.OpAck || te.State != core.Failed {
			t.Errorf("late worker ack after finalize: %v, want Ack not allowed from failed", err)
		}
		unchanged(t, "the late worker ack", before, dump(t, e.c, e.s))
		e.staleDecisions(rc)
		e.counts(core.Counts{Failed: 1})
	})

	t.Run("MatchingClaimRequeue", func(t *testing.T) {
		// Nobody intervenes: the broker's requeue applies, the old worker's
		// claim is void, and the next worker completes the task.
		e := newReapEnv(t)
		task := e.popped("t1")
		rc := e.reap(11*time.Second, 30*time.Second)
		e.clock.Advance(time.Second)
		requeued, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: rc, Message: "worker vanished"})
		e.must("requeue", err)
		wantFields(t, e.c, e.s, e.q, "t1", "state", "ready", "token", "0", "claimed_at", "", "deadline", "",
			"run_after", "", "errors", fmt.Sprintf("1 %s 1 15:worker vanished", us(requeued.Now)))
		wantIndexes(t, e.c, e.s, e.q, "t1", readyAt(requeued.Task.Version), "ids:ready@0")

		before := dump(t, e.c, e.s)
		if _, err := e.s.Ack(e.ctx, core.AckParams{Claim: task.Claim(), Result: []byte("late")}); !errors.Is(err, core.ErrStaleClaim) {
			t.Errorf("old worker's ack after the requeue: %v, want ErrStaleClaim", err)
		}
		unchanged(t, "the old worker's ack", before, dump(t, e.c, e.s))
		e.staleDecisions(rc)

		r, err := e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: 10 * time.Second, N: 1})
		e.must("pop", err)
		if len(r.Tasks) != 1 || r.Tasks[0].Attempt != 2 {
			t.Fatalf("pop returned %v, want t1 at attempt 2", r.Tasks)
		}
		acked, err := e.s.Ack(e.ctx, core.AckParams{Claim: r.Tasks[0].Claim(), Result: []byte("done")})
		e.must("ack", err)
		wantFields(t, e.c, e.s, e.q, "t1", "state", "succeeded", "result", "done")
		wantIndexes(t, e.c, e.s, e.q, "t1", at("finished", acked.Now), "ids:succeeded@0")
		e.counts(core.Counts{Succeeded: 1})
	})
}
