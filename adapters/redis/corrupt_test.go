package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
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
		// Two new tasks: one write of both to each index (store_all).
		"EnqueueBatch": func() error {
			_, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: q, Tasks: []model.EnqueueArgs{
				{ID: "new", MaxAttempts: 1}, {ID: "new2", MaxAttempts: 1}}})
			return err
		},
		// A worker's ack of run and its pop of rdy: two tasks written at once.
		"AckPop": func() error {
			_, err := s.AckBatch(ctx, core.AckBatchParams{Queue: q, Acks: []core.AckItem{{Claim: f.claim}},
				Pop: core.AckPop{Lease: time.Second, N: 10}})
			return err
		},
		"Promote": func() error { _, err := s.Promote(ctx, core.PromoteParams{Queue: q}); return err },
		"Pop":     func() error { _, err := s.Pop(ctx, core.PopParams{Queue: q, Lease: time.Second, N: 10}); return err },
		"Extend": func() error {
			_, err := s.Extend(ctx, core.ExtendParams{Claim: f.claim, Lease: time.Second})
			return err
		},
		"Ack": func() error { _, err := s.Ack(ctx, core.AckParams{Claim: f.claim}); return err },
		"AckBatch": func() error {
			// The claim, then one with a wrong token: both ErrCorrupt.
			wrong := f.claim
			wrong.Token += 100
			r, err := s.AckBatch(ctx, core.AckBatchParams{Queue: q, Acks: []core.AckItem{{Claim: f.claim}, {Claim: wrong}}})
			if err != nil {
				return fmt.Errorf("the whole batch refused: %v", err) // not ErrCorrupt: the items must answer
			}
			if !errors.Is(r.Items[1].Err, core.ErrCorrupt) {
				return fmt.Errorf("the item with a wrong token: %w", r.Items[1].Err)
			}
			return r.Items[0].Err
		},
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

// decisions lists the operations that decide the task id (a worker's, a
// broker's, the operator's requeue): on a damaged record each is
// ErrCorrupt and writes nothing.
func decisions(id string) []string {
	if id == "run" {
		return []string{"InspectRequeue", "Extend", "Ack", "AckBatch", "Fail", "Retry", "Requeue", "Finalize"}
	}
	return []string{"InspectRequeue"}
}

// scanOf names the scan that reaches the task id through its order index.
func scanOf(id string) string {
	return map[string]string{"sch": "Promote", "rdy": "Pop", "run": "ClaimExpired", "ok": "Prune", "bad": "Prune"}[id]
}

// wantDamaged checks what the model says of the damaged record id before a
// scan meets it: every decision is ErrCorrupt, Get shows it quarantined
// with a reason, List of its state passes over it, its ID stays taken
// (when its key holds anything: taken), and none of it writes anything.
func (f *fixture) wantDamaged(id, state string, taken bool, decide ...string) {
	f.t.Helper()
	f.wantCorrupt(id, decide...)
	before := dump(f.t, f.c, f.s)
	got, err := f.s.Get(f.ctx, core.GetParams{Queue: f.q, ID: id})
	if err != nil || got.State != core.Quarantined || got.Quarantine == "" {
		f.t.Errorf("Get of the damaged record: %+v, %v; want it quarantined with a reason", got, err)
	}
	if state != "" {
		st, _ := model.ParseState(state)
		res, err := f.s.List(f.ctx, core.ListParams{Queue: f.q, State: st, Limit: 100})
		if err != nil || slices.ContainsFunc(res.Tasks, func(t core.Task) bool { return t.ID == id }) {
			f.t.Errorf("List(%s): %v, %v; want it without the damaged record", state, res.Tasks, err)
		}
	}
	if taken {
		_, err = f.s.Enqueue(f.ctx, core.EnqueueParams{Queue: f.q, EnqueueArgs: model.EnqueueArgs{ID: id, MaxAttempts: 1}})
		if !errors.Is(err, core.ErrConflict) {
			f.t.Errorf("Enqueue of the damaged record's ID: %v, want ErrConflict", err)
		}
	}
	unchanged(f.t, "the reads and refusals on a damaged record", before, dump(f.t, f.c, f.s))
	if taken {
		// In a batch the item is refused as taken, and the others are
		// added (then removed again, for the checks that follow).
		r, err := f.s.EnqueueBatch(f.ctx, core.EnqueueBatchParams{Queue: f.q, Tasks: []model.EnqueueArgs{{ID: id, MaxAttempts: 1}, {ID: "sound", MaxAttempts: 1}}})
		if err != nil || len(r.Items) != 2 || !errors.Is(r.Items[0].Err, core.ErrConflict) || r.Items[1].Err != nil {
			f.t.Errorf("EnqueueBatch of the damaged record's ID and a new one: %+v, %v; want ErrConflict for the first, the second added", r.Items, err)
		}
		if err == nil && len(r.Items) == 2 && r.Items[1].Err == nil {
			_, err := f.s.Remove(f.ctx, core.InspectParams{Queue: f.q, ID: "sound", Expect: r.Items[1].Task.Version})
			f.must(err)
		}
		wantIndexes(f.t, f.c, f.s, f.q, "sound")
	}
}

// runScan runs the named scan, which must succeed.
func (f *fixture) runScan(name string) {
	f.t.Helper()
	if err := f.ops()[name](); err != nil {
		f.t.Fatalf("%s past a damaged record: %v", name, err)
	}
}

// wantSetAside checks a record the scan set aside: Get, List and Counts
// show it quarantined with a reason, decisions on it are refused as the
// model's (stale claims, an invalid transition), and the operator's Remove
// deletes it and every index entry of its ID.
func (f *fixture) wantSetAside(id, reason string) {
	f.t.Helper()
	got, err := f.s.Get(f.ctx, core.GetParams{Queue: f.q, ID: id})
	if err != nil || got.State != core.Quarantined || !strings.Contains(got.Quarantine, reason) {
		f.t.Errorf("Get after the scan: %+v, %v; want it quarantined, the reason saying %q", got, err, reason)
	}
	wantIndexes(f.t, f.c, f.s, f.q, id, "ids:quarantined@0")
	res, err := f.s.List(f.ctx, core.ListParams{Queue: f.q, State: core.Quarantined, Limit: 10})
	if err != nil || len(res.Tasks) != 1 || res.Tasks[0].ID != id || res.Tasks[0].Quarantine != got.Quarantine {
		f.t.Errorf("List(quarantined): %+v, %v", res.Tasks, err)
	}
	if c, err := f.s.Counts(f.ctx, core.CountsParams{Queue: f.q}); err != nil || c.Quarantined != 1 {
		f.t.Errorf("Counts: %+v, %v; want 1 quarantined", c, err)
	}
	before := dump(f.t, f.c, f.s)
	if id == "run" {
		if _, err := f.s.Ack(f.ctx, core.AckParams{Claim: f.claim}); !errors.Is(err, core.ErrStaleClaim) {
			f.t.Errorf("Ack of a quarantined record: %v, want ErrStaleClaim", err)
		}
		if _, err := f.s.Requeue(f.ctx, core.RequeueParams{ReapClaim: f.rc}); !errors.Is(err, core.ErrStaleClaim) {
			f.t.Errorf("Requeue of a quarantined record: %v, want ErrStaleClaim", err)
		}
	}
	if _, err := f.s.InspectRequeue(f.ctx, core.InspectParams{Queue: f.q, ID: id}); !errors.Is(err, core.ErrInvalidTransition) {
		f.t.Errorf("InspectRequeue of a quarantined record: %v, want ErrInvalidTransition", err)
	}
	if _, err := f.s.Remove(f.ctx, core.InspectParams{Queue: f.q, ID: id, Expect: 1}); !errors.Is(err, core.ErrConflict) {
		f.t.Errorf("Remove of a quarantined record with a version: %v, want ErrConflict", err)
	}
	unchanged(f.t, "the refusals on a quarantined record", before, dump(f.t, f.c, f.s))
	f.wantRemoved(id)
}

// wantRemoved removes the record id (expect 0), which must come back
// quarantined, and checks that nothing of it is left.
func (f *fixture) wantRemoved(id string) {
	f.t.Helper()
	r, err := f.s.Remove(f.ctx, core.InspectParams{Queue: f.q, ID: id})
	if err != nil || r.Task.State != core.Quarantined {
		f.t.Errorf("Remove: %+v, %v; want the quarantined record", r.Task, err)
	}
	if _, err := f.s.Get(f.ctx, core.GetParams{Queue: f.q, ID: id}); !errors.Is(err, core.ErrNotFound) {
		f.t.Errorf("Get after Remove: %v, want ErrNotFound", err)
	}
	wantIndexes(f.t, f.c, f.s, f.q, id)
}

// Garbage written into a stored task damages that record only: decisions
// on it are ErrCorrupt, reads show it quarantined and write nothing, the
// scan that reaches it sets it aside in the same call and goes on (Prune
// deletes a damaged finished record whose state still reads, as the model
// does), and the operator removes it. A version beyond the queue's
// sequence is the sequence's damage: every operation that reads the task
// is ErrCorrupt, as for the queue-wide records in
// TestGarbageInAQueueWideRecordIsCorrupt.
func TestGarbageInATaskIsSetAside(t *testing.T) {
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
		{"timeout", "0"}, {"timeout", int64(1000)}, {"timeout", "1e9"}, {"timeout", "3153600000000000001"},
	}
	states := map[string]string{"sch": "scheduled", "rdy": "ready", "run": "running", "ok": "succeeded", "bad": "failed"}
	check := func(f *fixture, id string, stateReads bool) {
		f.wantDamaged(id, states[id], true, decisions(id)...)
		f.runScan(scanOf(id))
		if scanOf(id) == "Prune" && stateReads {
			// Pruned as the state it still names.
			if _, err := f.s.Get(f.ctx, core.GetParams{Queue: f.q, ID: id}); !errors.Is(err, core.ErrNotFound) {
				f.t.Errorf("Get after Prune: %v, want ErrNotFound", err)
			}
			wantIndexes(f.t, f.c, f.s, f.q, id)
			return
		}
		f.wantSetAside(id, "")
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
				if fv.field == "version" && fv.value == int64(99999) {
					f.wantCorrupt(id, slices.DeleteFunc(opsTouching(id), func(op string) bool { return op == "EnqueueSameID" })...)
					return
				}
				check(f, id, i > 0 && fv.field != "state")
			})
		}
		t.Run(id+"/hash instead of a packed task", func(t *testing.T) {
			f := newFixture(t)
			key := f.s.TaskKey(f.q, id)
			f.redis("DEL", key)
			f.redis("HSET", key, "payload", "p")
			check(f, id, false)
		})
		t.Run(id+"/string that is not a packed task", func(t *testing.T) {
			f := newFixture(t)
			f.redis("SET", f.s.TaskKey(f.q, id), "garbage")
			check(f, id, false)
		})
		t.Run(id+"/packed map instead of an array", func(t *testing.T) {
			f := newFixture(t)
			f.redis("SET", f.s.TaskKey(f.q, id), "\x81\xa1k\xa1v")
			check(f, id, false)
		})
		t.Run(id+"/packed value with bytes after it", func(t *testing.T) {
			f := newFixture(t)
			f.redis("APPEND", f.s.TaskKey(f.q, id), "\xa1x")
			check(f, id, true)
		})
	}
}

// An index entry that disagrees with its task (no task, a task of another
// state, another score, an entry missing from an index) is the record's
// damage: decisions on it are ErrCorrupt, Get shows it quarantined, the
// scan that reaches it sets it aside and goes on with the sound tasks, and
// the operator removes it with every index entry of its ID.
// ghost leaves an entry of the ID "ghost" in the index named, without its
// task, as a task key lost with its entries left does: its ID registered
// (see akey in lua/lib.lua), in the index.
func (f *fixture) ghost(index string) {
	f.redis("ZADD", f.keys[index], 0, "ghost")
	f.redis("SADD", redis.RegistryKey(f.s, f.q), "ghost")
}

func TestIndexDamageIsSetAside(t *testing.T) {
	cases := []struct {
		name    string
		corrupt func(f *fixture)
		id      string   // the damaged record
		decide  []string // the decisions on it (ErrCorrupt)
		scan    string   // the scan that reaches it ("": none)
		sound   string   // a sound task the scan still processes
		reason  string
	}{
		{"ReadyEntryWithoutItsTask", func(f *fixture) { f.ghost("ready") }, "ghost", nil, "Pop", "rdy", "without its task"},
		{"ScheduledEntryWithoutItsTask", func(f *fixture) { f.ghost("scheduled") }, "ghost", nil, "Promote", "sch", "without its task"},
		{"RunningEntryWithoutItsTask", func(f *fixture) { f.ghost("running") }, "ghost", nil, "ClaimExpired", "run", "without its task"},
		{"FinishedEntryWithoutItsTask", func(f *fixture) { f.ghost("finished") }, "ghost", nil, "Prune", "ok", "without its task"},
		{"IDIndexEntryWithoutItsTask", func(f *fixture) { f.ghost("ids:ready") }, "ghost", nil, "", "", ""},
		{"TaskKeyDeletedWithItsEntriesLeft", func(f *fixture) { f.redis("DEL", f.s.TaskKey(f.q, "rdy")) }, "rdy", nil, "Pop", "", "without its task"},
		{"RunningTaskAtAnotherScore", func(f *fixture) { f.redis("ZADD", f.keys["running"], 1, "run") }, "run",
			decisions("run"), "RecoverExpired", "", "at its score"},
		{"ReadyTaskMissingFromItsIndex", func(f *fixture) { f.redis("ZREM", f.keys["ready"], "rdy") }, "rdy", nil, "", "", ""},
		{"RunningTaskMissingFromItsIDIndex", func(f *fixture) { f.redis("ZREM", f.keys["ids:running"], "run") }, "run",
			[]string{"Extend", "Ack", "AckBatch", "Requeue"}, "ClaimExpired", "", "ids:running"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.corrupt(f)
			// An entry without its task takes its ID, as the model's
			// damaged record does: Enqueue of it is ErrConflict.
			f.wantDamaged(tc.id, "", true, tc.decide...)
			if tc.scan == "" {
				f.wantRemoved(tc.id)
				return
			}
			f.runScan(tc.scan)
			if tc.sound != "" {
				got, err := f.s.Get(f.ctx, core.GetParams{Queue: f.q, ID: tc.sound})
				if err == nil && got.State == core.Quarantined || err != nil && !errors.Is(err, core.ErrNotFound) {
					t.Errorf("%s left the sound task %q as %+v, %v", tc.scan, tc.sound, got, err)
				}
				if h := hash(t, f.c, f.s, f.q, tc.sound); tc.scan != "Prune" && h["version"] == "" {
					t.Errorf("%s: the sound task %q is gone", tc.scan, tc.sound)
				}
			}
			f.wantSetAside(tc.id, tc.reason)
		})
	}
}

// A sound task also listed in the index of another state is not damaged:
// the scan that meets the stray entry drops it and leaves the task as it
// is.
func TestAStrayIndexEntryIsDropped(t *testing.T) {
	for _, tc := range []struct{ index, scan, id string }{
		{"running", "ClaimExpired", "rdy"},
		{"running", "RecoverExpired", "ok"},
		{"ready", "Pop", "sch"},
		{"scheduled", "Promote", "bad"},
		{"finished", "Prune", "rdy"},
	} {
		t.Run(tc.id+" in "+tc.index, func(t *testing.T) {
			f := newFixture(t)
			want := indexes(t, f.c, f.s, f.q, tc.id)
			task, err := f.s.Get(f.ctx, core.GetParams{Queue: f.q, ID: tc.id})
			f.must(err)
			f.redis("ZADD", f.keys[tc.index], 0, tc.id)
			f.runScan(tc.scan)
			got, err := f.s.Get(f.ctx, core.GetParams{Queue: f.q, ID: tc.id})
			if err != nil || !got.Equal(task) {
				t.Errorf("after %s: %+v, %v; want %+v", tc.scan, got, err, task)
			}
			wantIndexes(t, f.c, f.s, f.q, tc.id, want...)
		})
	}
}

// Garbage in a queue-wide record (an index of another type, the sequence)
// makes every operation that reads it refuse with ErrCorrupt and write
// nothing: it cannot be set aside.
func TestGarbageInAQueueWideRecordIsCorrupt(t *testing.T) {
	cases := []struct {
		name    string
		corrupt func(f *fixture)
		id      string // the task whose ops to include
		ops     []string
	}{
		{"ReadyIndexIsAString", func(f *fixture) { f.redis("DEL", f.keys["ready"]); f.redis("SET", f.keys["ready"], "x") }, "rdy",
			[]string{"Pop", "Enqueue", "Promote", "Retry", "Requeue", "Get"}},
		{"FailedIDIndexIsAList", func(f *fixture) { f.redis("DEL", f.keys["ids:failed"]); f.redis("RPUSH", f.keys["ids:failed"], "x") }, "bad",
			[]string{"Fail", "Finalize", "RecoverExpired", "Counts", "Listfailed", "Get"}},
		// The index writes of a move check their own keys: the ID index's
		// ZADD fails first with nothing written; the order index's fails
		// second, and the entry the first added is taken out again (an
		// Enqueue's task, written first, is deleted again too). A write of
		// several tasks checks with TYPE the indexes no read of the call
		// reached but one, whose ZADD goes first and checks itself: each
		// damaged alone takes either path.
		{"ReadyIDIndexIsAString", func(f *fixture) { f.redis("DEL", f.keys["ids:ready"]); f.redis("SET", f.keys["ids:ready"], "x") }, "run",
			[]string{"Enqueue", "EnqueueBatch", "Requeue", "InspectRequeue"}},
		{"ReadyIndexIsAHash", func(f *fixture) { f.redis("DEL", f.keys["ready"]); f.redis("HSET", f.keys["ready"], "a", "1") }, "run",
			[]string{"Enqueue", "EnqueueBatch"}},
		{"SucceededIDIndexIsAList", func(f *fixture) {
			f.redis("DEL", f.keys["ids:succeeded"])
			f.redis("RPUSH", f.keys["ids:succeeded"], "x")
		}, "run",
			[]string{"Ack", "AckPop"}},
		{"FinishedIndexIsAString", func(f *fixture) { f.redis("DEL", f.keys["finished"]); f.redis("SET", f.keys["finished"], "x") }, "run",
			[]string{"Ack", "Fail", "AckPop"}},
		{"QuarantineIndexIsAString", func(f *fixture) {
			f.redis("SET", f.keys["ids:quarantined"], "x")
			f.redis("SET", f.s.TaskKey(f.q, "rdy"), "garbage")
		}, "rdy", []string{"Pop", "Counts", "Remove"}},
		// The registry is read by Enqueue and EnqueueBatch and written by
		// them and by the deletions, each checking it before its first
		// write or by that write.
		{"RegistryIsAString", func(f *fixture) {
			f.redis("DEL", redis.RegistryKey(f.s, f.q))
			f.redis("SET", redis.RegistryKey(f.s, f.q), "x")
		}, "rdy", []string{"Enqueue", "EnqueueBatch", "Remove"}},
		{"SequenceIsNotANumber", func(f *fixture) { f.redis("SET", f.keys["seq"], "x") }, "rdy",
			[]string{"Enqueue", "Promote", "Pop", "Extend", "Ack", "ClaimExpired", "Requeue", "RecoverExpired", "Prune", "Get", "Remove", "InspectRequeue", "Listready"}},
		{"SequenceIsAHash", func(f *fixture) { f.redis("DEL", f.keys["seq"]); f.redis("HSET", f.keys["seq"], "a", "1") }, "run",
			[]string{"Enqueue", "Pop", "Ack", "Finalize", "Get"}},
		{"SequenceBehindTheTasks", func(f *fixture) { f.redis("SET", f.keys["seq"], "1") }, "run",
			[]string{"Pop", "Extend", "Ack", "ClaimExpired", "Requeue", "RecoverExpired", "Prune", "Promote", "Get", "Remove", "Listrunning"}},
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

// registry returns the members of the queue's registry, sorted.
func (f *fixture) registry() []string {
	f.t.Helper()
	m, err := f.c.SMembers(f.ctx, redis.RegistryKey(f.s, f.q)).Result()
	f.must(err)
	slices.Sort(m)
	return m
}

// A queue written before the registry (here: its registry deleted) is
// judged by its indexes, as before, and the first Enqueue or EnqueueBatch
// that adds a task builds the registry from them: an index entry without
// its task keeps its ID taken throughout.
func TestAQueueWithoutItsRegistryGetsOne(t *testing.T) {
	complete := []string{"", "bad", "ghost", "new", "ok", "rdy", "run", "sch"}
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			f := newFixture(t)
			f.redis("DEL", redis.RegistryKey(f.s, f.q))
			f.redis("ZADD", f.keys["ids:running"], 0, "ghost")
			before := dump(t, f.c, f.s)
			_, err := f.s.Enqueue(f.ctx, core.EnqueueParams{Queue: f.q, EnqueueArgs: model.EnqueueArgs{ID: "ghost", MaxAttempts: 1}})
			if !errors.Is(err, core.ErrConflict) {
				t.Fatalf("Enqueue of an ID with an index entry on a queue without a registry: %v, want ErrConflict", err)
			}
			unchanged(t, "the refused Enqueue", before, dump(t, f.c, f.s))
			if batch {
				r, err := f.s.EnqueueBatch(f.ctx, core.EnqueueBatchParams{Queue: f.q, Tasks: []model.EnqueueArgs{{ID: "ghost", MaxAttempts: 1}, {ID: "new", MaxAttempts: 1}}})
				if err != nil || !errors.Is(r.Items[0].Err, core.ErrConflict) || r.Items[1].Err != nil {
					t.Fatalf("EnqueueBatch: %+v, %v; want ErrConflict, then the new task", r.Items, err)
				}
			} else {
				_, err := f.s.Enqueue(f.ctx, core.EnqueueParams{Queue: f.q, EnqueueArgs: model.EnqueueArgs{ID: "new", MaxAttempts: 1}})
				f.must(err)
			}
			if got := f.registry(); !slices.Equal(got, complete) {
				t.Errorf("registry %q, want %q", got, complete)
			}
			_, err = f.s.Enqueue(f.ctx, core.EnqueueParams{Queue: f.q, EnqueueArgs: model.EnqueueArgs{ID: "ghost", MaxAttempts: 1}})
			if !errors.Is(err, core.ErrConflict) {
				t.Errorf("Enqueue of the ghost's ID once the registry is built: %v, want ErrConflict", err)
			}
			// Removing the records takes their IDs out of the registry.
			_, err = f.s.Remove(f.ctx, core.InspectParams{Queue: f.q, ID: "ghost"})
			f.must(err)
			_, err = f.s.Remove(f.ctx, core.InspectParams{Queue: f.q, ID: "rdy"})
			f.must(err)
			_, err = f.s.Prune(f.ctx, core.PruneParams{Queue: f.q, Before: f.clock.Now().Add(time.Hour), States: []core.State{core.Succeeded, core.Failed}})
			f.must(err)
			if got, want := f.registry(), []string{"", "new", "run", "sch"}; !slices.Equal(got, want) {
				t.Errorf("registry after Remove and Prune %q, want %q", got, want)
			}
		})
	}
}

// An index entry of an ID the registry does not hold was left by no write
// of the store (every indexed ID is registered, and leaves the registry
// only with its last entry): the ID is free, so Enqueue adds its task, and
// the scan that meets the entry drops it as a stray one.
func TestAnUnregisteredIndexEntryIsAStrayEntry(t *testing.T) {
	f := newFixture(t)
	f.redis("ZADD", f.keys["running"], 0, "ghost")
	task, err := f.s.Enqueue(f.ctx, core.EnqueueParams{Queue: f.q, EnqueueArgs: model.EnqueueArgs{ID: "ghost", MaxAttempts: 1}})
	f.must(err)
	want := indexes(t, f.c, f.s, f.q, "ghost")
	f.runScan("ClaimExpired")
	got, err := f.s.Get(f.ctx, core.GetParams{Queue: f.q, ID: "ghost"})
	if err != nil || !got.Equal(task.Task) {
		t.Errorf("after ClaimExpired: %+v, %v; want %+v", got, err, task.Task)
	}
	wantIndexes(t, f.c, f.s, f.q, "ghost", slices.DeleteFunc(want, func(s string) bool { return strings.HasPrefix(s, "running@") })...)
}
