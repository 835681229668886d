package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// fixture is a queue with one task in each state, and the claims on the
// running one: "sch" (Scheduled and due), "rdy" (Ready), "run" (Running,
// expired, with a worker claim and a broker claim), "ok" (Succeeded) and
// "bad" (Failed).
type fixture struct {
	t     *testing.T
	ctx   context.Context
	clock *core.FakeClock
	s     *redis.Store
	c     *goredis.Client
	q     string
	claim core.Claim
	rc    core.ReapClaim
	keys  map[string]string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	clock := core.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s, c := newStore(t, redis.WithClock(clock))
	f := &fixture{t: t, ctx: context.Background(), clock: clock, s: s, c: c, q: "fx", keys: s.QueueKeys("fx")}
	enqueue := func(id string, runAfter time.Time) {
		_, err := s.Enqueue(f.ctx, core.EnqueueParams{Queue: f.q, EnqueueArgs: model.EnqueueArgs{ID: id, Payload: []byte("p"), MaxAttempts: 5, RunAfter: runAfter}})
		f.must(err)
	}
	pop := func() core.Claim {
		r, err := s.Pop(f.ctx, core.PopParams{Queue: f.q, Lease: time.Second, N: 1})
		f.must(err)
		return r.Tasks[0].Claim()
	}
	enqueue("run", time.Time{})
	f.claim = pop()
	enqueue("ok", time.Time{})
	_, err := s.Ack(f.ctx, core.AckParams{Claim: pop(), Result: []byte("r")})
	f.must(err)
	enqueue("bad", time.Time{})
	_, err = s.Fail(f.ctx, core.FailParams{Claim: pop(), Message: "m"})
	f.must(err)
	enqueue("rdy", time.Time{})
	enqueue("sch", clock.Now().Add(time.Second))
	clock.Advance(2 * time.Second)
	r, err := s.ClaimExpired(f.ctx, core.ClaimExpiredParams{Queue: f.q, ClaimTTL: time.Second})
	f.must(err)
	f.rc = r.Claims[0]
	clock.Advance(2 * time.Second) // "run" is expired again, "sch" is due
	return f
}

func (f *fixture) must(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

// redis runs a raw command, for writing garbage.
func (f *fixture) redis(args ...any) {
	f.t.Helper()
	if err := f.c.Do(f.ctx, args...).Err(); err != nil {
		f.t.Fatalf("%v: %v", args, err)
	}
}

// ops returns the operations of the store, by name, aimed at the fixture.
func (f *fixture) ops() map[string]func() error {
	ctx, s, q := f.ctx, f.s, f.q
	now := f.clock.Now()
	return map[string]func() error{
		"Enqueue": func() error {
			_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: q, EnqueueArgs: model.EnqueueArgs{ID: "new", MaxAttempts: 1}})
			return err
		},
		"Promote": func() error { _, err := s.Promote(ctx, core.PromoteParams{Queue: q}); return err },
		"Pop":     func() error { _, err := s.Pop(ctx, core.PopParams{Queue: q, Lease: time.Second, N: 10}); return err },
		"Extend": func() error {
			_, err := s.Extend(ctx, core.ExtendParams{Claim: f.claim, Lease: time.Second})
			return err
		},
		"Ack":   func() error { _, err := s.Ack(ctx, core.AckParams{Claim: f.claim}); return err },
		"Fail":  func() error { _, err := s.Fail(ctx, core.FailParams{Claim: f.claim}); return err },
		"Retry": func() error { _, err := s.Retry(ctx, core.RetryParams{Claim: f.claim}); return err },
		"ClaimExpired": func() error {
			_, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: q, ClaimTTL: time.Second})
			return err
		},
		"Requeue":        func() error { _, err := s.Requeue(ctx, core.RequeueParams{ReapClaim: f.rc}); return err },
		"Finalize":       func() error { _, err := s.Finalize(ctx, core.FinalizeParams{ReapClaim: f.rc}); return err },
		"RecoverExpired": func() error { _, err := s.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: q}); return err },
		"Prune": func() error {
			_, err := s.Prune(ctx, core.PruneParams{Queue: q, States: []core.State{core.Succeeded, core.Failed}, Before: now.Add(time.Hour)})
			return err
		},
		"Counts": func() error { _, err := s.Counts(ctx, core.CountsParams{Queue: q}); return err },
	}
}

// taskOps returns the operations that name one task.
func (f *fixture) taskOps(id string) map[string]func() error {
	ctx, s, q := f.ctx, f.s, f.q
	ops := map[string]func() error{
		"Get":            func() error { _, err := s.Get(ctx, core.GetParams{Queue: q, ID: id}); return err },
		"Remove":         func() error { _, err := s.Remove(ctx, core.InspectParams{Queue: q, ID: id}); return err },
		"InspectRequeue": func() error { _, err := s.InspectRequeue(ctx, core.InspectParams{Queue: q, ID: id}); return err },
		"EnqueueSameID": func() error {
			_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: q, EnqueueArgs: model.EnqueueArgs{ID: id, MaxAttempts: 1}})
			return err
		},
	}
	for _, st := range model.States {
		ops["List"+st.String()] = func() error {
			_, err := s.List(ctx, core.ListParams{Queue: q, State: st, Limit: 100})
			return err
		}
	}
	return ops
}

// opsTouching lists the operations that read the task id, by its state.
func opsTouching(id string) []string {
	common := []string{"Get", "Remove", "EnqueueSameID"}
	switch id {
	case "sch":
		return append(common, "InspectRequeue", "Promote", "Listscheduled")
	case "rdy":
		return append(common, "Pop", "Listready")
	case "run":
		return append(common, "InspectRequeue", "Extend", "Ack", "Fail", "Retry", "ClaimExpired", "Requeue", "Finalize", "RecoverExpired", "Listrunning")
	case "ok":
		return append(common, "InspectRequeue", "Prune", "Listsucceeded")
	case "bad":
		return append(common, "InspectRequeue", "Prune", "Listfailed")
	}
	panic(id)
}

// wantCorrupt runs each named op and fails unless it returns ErrCorrupt
// and leaves every key as it was.
func (f *fixture) wantCorrupt(id string, names ...string) {
	f.t.Helper()
	ops := f.ops()
	for k, v := range f.taskOps(id) {
		ops[k] = v
	}
	for _, name := range names {
		op, ok := ops[name]
		if !ok {
			f.t.Fatalf("no op %s", name)
		}
		before := dump(f.t, f.c, f.s)
		err := op()
		if !errors.Is(err, core.ErrCorrupt) {
			f.t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
		unchanged(f.t, name+" on corrupt data", before, dump(f.t, f.c, f.s))
	}
}

// Garbage written into a task's hash makes every operation that reads the
// task refuse with ErrCorrupt, write nothing and not panic.
func TestGarbageInATaskHashIsCorrupt(t *testing.T) {
	fields := []struct {
		field string
		value any
	}{
		{"payload", ""}, // (deleted below: a missing field)
		{"payload", int64(1)},
		{"priority", "0"}, {"priority", int64(40000)}, {"priority", 1.5},
		{"state", "bogus"}, {"state", ""}, {"state", false},
		{"attempt", int64(-1)}, {"attempt", 1.5},
		{"max_attempts", int64(0)},
		{"version", int64(0)}, {"version", int64(99999)}, {"version", "3"},
		{"token", "x"}, {"token", int64(99999)},
		{"enqueued_at", false}, {"enqueued_at", "yesterday"},
		{"run_after", 1e15 + 0.5}, {"claimed_at", true}, {"deadline", uint64(1) << 62},
		{"finished_at", "0x10"},
		{"errors", "garbage"}, {"errors", "1 2 0 99:short"}, {"errors", "1 2 7 1:x"}, {"errors", int64(5)},
		{"result", false},
	}
	for _, id := range []string{"sch", "rdy", "run", "ok", "bad"} {
		for i, fv := range fields {
			t.Run(fmt.Sprintf("%s/%s=%#v", id, fv.field, fv.value), func(t *testing.T) {
				f := newFixture(t)
				key := f.s.TaskKey(f.q, id)
				stored, ok := redis.UnpackValues(f.c.Get(f.ctx, key).Val())
				if !ok {
					t.Fatalf("task %q does not unpack", id)
				}
				if i == 0 {
					stored = stored[1:] // a field missing
				} else {
					stored[slices.Index(redis.StoredFields, fv.field)] = fv.value
				}
				f.redis("SET", key, redis.PackValues(stored))
				f.wantCorrupt(id, opsTouching(id)...)
			})
		}
		t.Run(id+"/hash instead of a packed task", func(t *testing.T) {
			f := newFixture(t)
			key := f.s.TaskKey(f.q, id)
			f.redis("DEL", key)
			f.redis("HSET", key, "payload", "p")
			f.wantCorrupt(id, opsTouching(id)...)
		})
		t.Run(id+"/string that is not a packed task", func(t *testing.T) {
			f := newFixture(t)
			key := f.s.TaskKey(f.q, id)
			f.redis("SET", key, "garbage")
			f.wantCorrupt(id, opsTouching(id)...)
		})
		t.Run(id+"/packed map instead of an array", func(t *testing.T) {
			f := newFixture(t)
			key := f.s.TaskKey(f.q, id)
			f.redis("SET", key, "\x81\xa1k\xa1v")
			f.wantCorrupt(id, opsTouching(id)...)
		})
		t.Run(id+"/packed value with bytes after it", func(t *testing.T) {
			f := newFixture(t)
			key := f.s.TaskKey(f.q, id)
			f.redis("APPEND", key, "\xa1x")
			f.wantCorrupt(id, opsTouching(id)...)
		})
	}
}

// Garbage in an index or the sequence makes every operation that reads it
// refuse with ErrCorrupt and write nothing.
func TestGarbageInAnIndexIsCorrupt(t *testing.T) {
	cases := []struct {
		name    string
		corrupt func(f *fixture)
		id      string // the task whose ops to include
		ops     []string
	}{
		{"ReadyEntryWithoutItsTask", func(f *fixture) { f.redis("ZADD", f.keys["ready"], 0, "ghost") }, "rdy", []string{"Pop"}},
		{"ScheduledEntryWithoutItsTask", func(f *fixture) { f.redis("ZADD", f.keys["scheduled"], 0, "ghost") }, "sch", []string{"Promote"}},
		{"RunningEntryWithoutItsTask", func(f *fixture) { f.redis("ZADD", f.keys["running"], 0, "ghost") }, "run", []string{"ClaimExpired", "RecoverExpired"}},
		{"FinishedEntryWithoutItsTask", func(f *fixture) { f.redis("ZADD", f.keys["finished"], 0, "ghost") }, "ok", []string{"Prune"}},
		{"IDIndexEntryWithoutItsTask", func(f *fixture) { f.redis("ZADD", f.keys["ids:ready"], 0, "ghost") }, "rdy", []string{"Listready"}},
		{"ReadyTaskInTheRunningIndex", func(f *fixture) { f.redis("ZADD", f.keys["running"], 0, "rdy") }, "rdy", []string{"ClaimExpired", "RecoverExpired"}},
		{"RunningTaskAtAnotherScore", func(f *fixture) { f.redis("ZADD", f.keys["running"], 1, "run") }, "run",
			[]string{"Extend", "Ack", "Fail", "Retry", "ClaimExpired", "Requeue", "Finalize", "RecoverExpired", "Get", "Remove", "InspectRequeue"}},
		{"ReadyTaskMissingFromItsIndex", func(f *fixture) { f.redis("ZREM", f.keys["ready"], "rdy") }, "rdy", []string{"Get", "Remove"}},
		{"RunningTaskMissingFromItsIDIndex", func(f *fixture) { f.redis("ZREM", f.keys["ids:running"], "run") }, "run",
			[]string{"Extend", "Ack", "Requeue", "Get"}},
		{"ReadyIndexIsAString", func(f *fixture) { f.redis("DEL", f.keys["ready"]); f.redis("SET", f.keys["ready"], "x") }, "rdy",
			[]string{"Pop", "Enqueue", "Promote", "Retry", "Requeue", "Get"}},
		{"FailedIDIndexIsAList", func(f *fixture) { f.redis("DEL", f.keys["ids:failed"]); f.redis("RPUSH", f.keys["ids:failed"], "x") }, "bad",
			[]string{"Fail", "Finalize", "RecoverExpired", "Counts", "Listfailed", "Get"}},
		{"SequenceIsNotANumber", func(f *fixture) { f.redis("SET", f.keys["seq"], "x") }, "rdy",
			[]string{"Enqueue", "Promote", "Pop", "Extend", "Ack", "ClaimExpired", "Requeue", "RecoverExpired", "Prune", "Get", "Remove", "InspectRequeue", "Listready"}},
		{"SequenceIsAHash", func(f *fixture) { f.redis("DEL", f.keys["seq"]); f.redis("HSET", f.keys["seq"], "a", "1") }, "run",
			[]string{"Enqueue", "Pop", "Ack", "Finalize", "Get"}},
		{"SequenceBehindTheTasks", func(f *fixture) { f.redis("SET", f.keys["seq"], "1") }, "run",
			[]string{"Pop", "Extend", "Ack", "ClaimExpired", "Requeue", "RecoverExpired", "Get", "Remove"}},
		{"SequenceAtItsLimit", func(f *fixture) { f.redis("SET", f.keys["seq"], fmt.Sprint(int64(1)<<36)) }, "run",
			[]string{"Enqueue", "Pop", "Ack", "Get"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.corrupt(f)
			f.wantCorrupt(tc.id, tc.ops...)
		})
	}
}

// Near the end of the sequence a queue refuses mutations with
// ErrSequenceExhausted rather than stamp versions whose ready score would
// not be exact.
func TestAnExhaustedSequenceRefusesMutations(t *testing.T) {
	f := newFixture(t)
	f.redis("SET", f.keys["seq"], fmt.Sprint(int64(1)<<36-1))
	before := dump(t, f.c, f.s)
	_, err := f.s.Enqueue(f.ctx, core.EnqueueParams{Queue: f.q, EnqueueArgs: model.EnqueueArgs{ID: "x", MaxAttempts: 1}})
	if !errors.Is(err, redis.ErrSequenceExhausted) || errors.Is(err, core.ErrCorrupt) {
		t.Errorf("enqueue at the sequence's limit: %v, want ErrSequenceExhausted", err)
	}
	unchanged(t, "enqueue at the sequence's limit", before, dump(t, f.c, f.s))
}

// Tokens that do not hold the task are stale claims: an unknown token, a
// forged one of any size, the token of another task, and the token of a
// task that was removed and enqueued again under the same ID.
func TestForgedAndOutdatedTokensAreStaleClaims(t *testing.T) {
	f := newFixture(t)
	ctx, s := f.ctx, f.s
	claims := map[string]core.Claim{}
	unknown := f.claim
	unknown.Token += 1000
	claims["unknown"] = unknown
	huge := f.claim
	huge.Token = math.MaxUint64
	claims["forged 2^64-1"] = huge
	above := f.claim
	above.Token = 1<<53 + 1
	claims["forged 2^53+1"] = above
	other := f.claim
	other.TaskID = "rdy"
	claims["another task's"] = other

	// Remove "run" and enqueue it again: the old claim must not hold the
	// new task, even once it is running.
	_, err := s.Remove(ctx, core.InspectParams{Queue: f.q, ID: "rdy"})
	f.must(err)
	_, err = s.Enqueue(ctx, core.EnqueueParams{Queue: f.q, EnqueueArgs: model.EnqueueArgs{ID: "rdy", MaxAttempts: 1}})
	f.must(err)
	r, err := s.Pop(ctx, core.PopParams{Queue: f.q, Lease: time.Minute, N: 1})
	f.must(err)
	if len(r.Tasks) != 1 || r.Tasks[0].ID != "rdy" {
		t.Fatalf("pop returned %v", r.Tasks)
	}
	_, err = s.Remove(ctx, core.InspectParams{Queue: f.q, ID: "run"})
	f.must(err)
	_, err = s.Enqueue(ctx, core.EnqueueParams{Queue: f.q, EnqueueArgs: model.EnqueueArgs{ID: "run", MaxAttempts: 1}})
	f.must(err)
	r, err = s.Pop(ctx, core.PopParams{Queue: f.q, Lease: time.Minute, N: 1})
	f.must(err)
	if len(r.Tasks) != 1 || r.Tasks[0].ID != "run" {
		t.Fatalf("pop returned %v", r.Tasks)
	}
	claims["removed and re-enqueued"] = f.claim
	rcs := map[string]core.ReapClaim{"removed and re-enqueued": f.rc}
	forged := f.rc
	forged.Version = math.MaxUint64
	rcs["forged"] = forged

	for name, c := range claims {
		ops := map[string]func() error{
			"Extend": func() error { _, err := s.Extend(ctx, core.ExtendParams{Claim: c, Lease: time.Second}); return err },
			"Ack":    func() error { _, err := s.Ack(ctx, core.AckParams{Claim: c, Result: []byte("x")}); return err },
			"Fail":   func() error { _, err := s.Fail(ctx, core.FailParams{Claim: c, Message: "x"}); return err },
			"Retry":  func() error { _, err := s.Retry(ctx, core.RetryParams{Claim: c, Message: "x"}); return err },
		}
		for op, run := range ops {
			before := dump(t, f.c, s)
			if err := run(); !errors.Is(err, core.ErrStaleClaim) {
				t.Errorf("%s with the %s token: %v, want ErrStaleClaim", op, name, err)
			}
			unchanged(t, op+" with the "+name+" token", before, dump(t, f.c, s))
		}
	}
	for name, rc := range rcs {
		before := dump(t, f.c, s)
		if _, err := s.Requeue(ctx, core.RequeueParams{ReapClaim: rc}); !errors.Is(err, core.ErrStaleClaim) {
			t.Errorf("Requeue with the %s broker claim: %v, want ErrStaleClaim", name, err)
		}
		if _, err := s.Finalize(ctx, core.FinalizeParams{ReapClaim: rc}); !errors.Is(err, core.ErrStaleClaim) {
			t.Errorf("Finalize with the %s broker claim: %v, want ErrStaleClaim", name, err)
		}
		unchanged(t, "decisions with the "+name+" broker claim", before, dump(t, f.c, s))
	}
}
