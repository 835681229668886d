package model_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/model"
)

// The tests in this file check that the code and the transition table
// agree: for every operation and every state, an operation whose guard holds
// succeeds exactly when the table has a row for it, and lands the task in one
// of the row's target states; otherwise it returns a *TransitionError naming
// the operation and the state, and leaves the queue unchanged.

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)

const qname = "q"

// script builds a queue step by step, failing the test on any error.
type script struct {
	t   *testing.T
	q   model.Queue
	now time.Time
}

func newScript(t *testing.T) *script {
	return &script{t: t, q: model.NewQueue(qname, 0), now: t0}
}

func (s *script) advance(d time.Duration) *script { s.now = s.now.Add(d); return s }

func (s *script) must(err error, what string) {
	s.t.Helper()
	if err != nil {
		s.t.Fatalf("building the queue: %s: %v", what, err)
	}
}

func (s *script) enqueue(id string, runAfter time.Time, maxAttempts int) model.Task {
	s.t.Helper()
	q, task, err := s.q.Enqueue(s.now, model.EnqueueArgs{ID: id, Payload: []byte(id), MaxAttempts: maxAttempts, RunAfter: runAfter})
	s.must(err, "Enqueue")
	s.q = q
	return task
}

func (s *script) pop(lease time.Duration) model.Task {
	s.t.Helper()
	q, tasks, err := s.q.Pop(s.now, lease, 1)
	s.must(err, "Pop")
	if len(tasks) != 1 {
		s.t.Fatalf("building the queue: Pop returned %d tasks", len(tasks))
	}
	s.q = q
	return tasks[0]
}

func (s *script) claimExpired() model.ReapClaim {
	s.t.Helper()
	q, claims, err := s.q.ClaimExpired(s.now, 10*time.Second, 0)
	s.must(err, "ClaimExpired")
	if len(claims) != 1 {
		s.t.Fatalf("building the queue: ClaimExpired returned %d claims", len(claims))
	}
	s.q = q
	return claims[0]
}

func (s *script) get(id string) model.Task {
	s.t.Helper()
	task, err := s.q.Get(id)
	s.must(err, "Get")
	return task
}

// route is one way to bring task "t" into a state.
type route struct {
	name  string
	state model.State
	build func(s *script)
}

var routes = []route{
	{"enqueued for later", model.Scheduled, func(s *script) { s.enqueue("t", s.now.Add(time.Hour), 3) }},
	{"retried for later", model.Scheduled, func(s *script) {
		s.enqueue("t", time.Time{}, 3)
		c := s.pop(time.Minute).Claim()
		q, _, err := s.q.Retry(s.now, c, time.Hour, "later")
		s.must(err, "Retry")
		s.q = q
	}},
	{"requeued for later by a broker", model.Scheduled, func(s *script) {
		s.enqueue("t", time.Time{}, 3)
		s.pop(time.Minute)
		rc := s.advance(time.Minute).claimExpired()
		q, _, err := s.q.Requeue(s.now, rc, time.Hour, "")
		s.must(err, "Requeue")
		s.q = q
	}},
	{"recovered with a delay", model.Scheduled, func(s *script) {
		s.enqueue("t", time.Time{}, 3)
		s.pop(time.Minute)
		q, _, err := s.advance(time.Minute).q.RecoverExpired(s.now, time.Hour, 0)
		s.must(err, "RecoverExpired")
		s.q = q
	}},
	{"enqueued", model.Ready, func(s *script) { s.enqueue("t", time.Time{}, 3) }},
	{"promoted", model.Ready, func(s *script) {
		s.enqueue("t", s.now.Add(time.Second), 3)
		q, _, err := s.advance(time.Second).q.Promote(s.now, 0)
		s.must(err, "Promote")
		s.q = q
	}},
	{"retried at once", model.Ready, func(s *script) {
		s.enqueue("t", time.Time{}, 3)
		q, _, err := s.q.Retry(s.now, s.pop(time.Minute).Claim(), 0, "again")
		s.must(err, "Retry")
		s.q = q
	}},
	{"requeued at once by a broker", model.Ready, func(s *script) {
		s.enqueue("t", time.Time{}, 3)
		s.pop(time.Minute)
		rc := s.advance(time.Minute).claimExpired()
		q, _, err := s.q.Requeue(s.now, rc, 0, "")
		s.must(err, "Requeue")
		s.q = q
	}},
	{"recovered at once", model.Ready, func(s *script) {
		s.enqueue("t", time.Time{}, 3)
		s.pop(time.Minute)
		q, _, err := s.advance(time.Minute).q.RecoverExpired(s.now, 0, 0)
		s.must(err, "RecoverExpired")
		s.q = q
	}},
	{"requeued by an operator after success", model.Ready, func(s *script) {
		s.enqueue("t", time.Time{}, 3)
		q, _, err := s.q.Ack(s.now, s.pop(time.Minute).Claim(), []byte("r"))
		s.must(err, "Ack")
		q, _, err = q.InspectRequeue("t", 0)
		s.must(err, "InspectRequeue")
		s.q = q
	}},
	{"popped", model.Running, func(s *script) { s.enqueue("t", time.Time{}, 3); s.pop(time.Minute) }},
	{"popped and extended", model.Running, func(s *script) {
		s.enqueue("t", time.Time{}, 3)
		q, _, err := s.q.Extend(s.now, s.pop(time.Minute).Claim(), time.Hour)
		s.must(err, "Extend")
		s.q = q
	}},
	{"claimed by a broker", model.Running, func(s *script) {
		s.enqueue("t", time.Time{}, 3)
		s.pop(time.Minute)
		s.advance(time.Minute).claimExpired()
	}},
	{"acked", model.Succeeded, func(s *script) {
		s.enqueue("t", time.Time{}, 3)
		q, _, err := s.q.Ack(s.now, s.pop(time.Minute).Claim(), []byte("r"))
		s.must(err, "Ack")
		s.q = q
	}},
	{"acked late, after a broker's claim", model.Succeeded, func(s *script) {
		s.enqueue("t", time.Time{}, 3)
		c := s.pop(time.Minute).Claim()
		s.advance(time.Minute).claimExpired()
		q, _, err := s.q.Ack(s.now, c, nil)
		s.must(err, "Ack")
		s.q = q
	}},
	{"failed", model.Failed, func(s *script) {
		s.enqueue("t", time.Time{}, 3)
		q, _, err := s.q.Fail(s.now, s.pop(time.Minute).Claim(), "boom")
		s.must(err, "Fail")
		s.q = q
	}},
	{"finalized by a broker", model.Failed, func(s *script) {
		s.enqueue("t", time.Time{}, 3)
		s.pop(time.Minute)
		rc := s.advance(time.Minute).claimExpired()
		q, _, err := s.q.Finalize(s.now, rc, "")
		s.must(err, "Finalize")
		s.q = q
	}},
	{"recovered out of attempts", model.Failed, func(s *script) {
		s.enqueue("t", time.Time{}, 1)
		s.pop(time.Minute)
		q, _, err := s.advance(time.Minute).q.RecoverExpired(s.now, 0, 0)
		s.must(err, "RecoverExpired")
		s.q = q
	}},
}

// build runs a route and checks that it reached its state.
func (r route) run(t *testing.T) (*script, model.Task) {
	t.Helper()
	s := newScript(t)
	r.build(s)
	task := s.get("t")
	if task.State != r.state {
		t.Fatalf("route %q reached %v, want %v", r.name, task.State, r.state)
	}
	if err := model.Invariants(s.q); err != nil {
		t.Fatalf("route %q: %v", r.name, err)
	}
	return s, task
}

func TestRoutesReachEveryState(t *testing.T) {
	for _, s := range model.States {
		n := 0
		for _, r := range routes {
			if r.state == s {
				n++
			}
		}
		if n < 2 {
			t.Errorf("%d routes reach %v, want at least 2", n, s)
		}
	}
}

// applyWithGuard applies op to task "t" of the script's queue with its guard
// satisfied, as far as it can be: the claim holds the task's claim token,
// the broker claim its version, the operator expects its version, the time
// is far enough for every due date and deadline, and the task is the only
// one. It returns the next queue and whether the op touched the task (for
// bulk operations: whether it returned it).
func applyWithGuard(s *script, op model.Op, task model.Task) (next model.Queue, touched bool, err error) {
	q, later := s.q, s.now.Add(1000*time.Hour)
	claim := model.Claim{Queue: qname, TaskID: "t", Token: task.ClaimToken, Attempt: task.Attempt, Deadline: task.Deadline}
	reap := model.ReapClaim{Queue: qname, TaskID: "t", Version: task.Version, Deadline: task.Deadline, Task: task}
	var ids []string
	switch op {
	case model.OpExtend:
		next, _, err = q.Extend(s.now, claim, time.Minute)
	case model.OpAck:
		next, _, err = q.Ack(s.now, claim, []byte("r"))
	case model.OpFail:
		next, _, err = q.Fail(s.now, claim, "m")
	case model.OpRetry:
		next, _, err = q.Retry(s.now, claim, 0, "m")
	case model.OpRequeue:
		next, _, err = q.Requeue(s.now, reap, 0, "")
	case model.OpFinalize:
		next, _, err = q.Finalize(s.now, reap, "")
	case model.OpInspectRequeue:
		next, _, err = q.InspectRequeue("t", task.Version)
	case model.OpRemove:
		next, _, err = q.Remove("t", task.Version)
	case model.OpPromote:
		next, ids, err = q.Promote(later, 0)
		touched = slices.Contains(ids, "t")
	case model.OpPop:
		var ts []model.Task
		next, ts, err = q.Pop(later, time.Minute, 1)
		touched = len(ts) == 1 && ts[0].ID == "t"
	case model.OpClaimExpired:
		var cs []model.ReapClaim
		next, cs, err = q.ClaimExpired(later, time.Minute, 0)
		touched = len(cs) == 1 && cs[0].TaskID == "t"
	case model.OpRecoverExpired:
		var ts []model.Task
		next, ts, err = q.RecoverExpired(later, 0, 0)
		touched = len(ts) == 1 && ts[0].ID == "t"
	case model.OpPrune:
		next, ids, err = q.Prune([]model.State{model.Succeeded, model.Failed}, later, 0)
		touched = slices.Contains(ids, "t")
	default:
		panic("applyWithGuard: " + op.String())
	}
	if !bulk(op) {
		touched = err == nil
	}
	return next, touched, err
}

func bulk(op model.Op) bool {
	switch op {
	case model.OpPromote, model.OpPop, model.OpClaimExpired, model.OpRecoverExpired, model.OpPrune:
		return true
	}
	return false
}

// mutating lists the ops that act on an existing task.
var mutating = []model.Op{
	model.OpPromote, model.OpPop, model.OpExtend, model.OpAck, model.OpFail, model.OpRetry,
	model.OpClaimExpired, model.OpRequeue, model.OpFinalize, model.OpRecoverExpired,
	model.OpInspectRequeue, model.OpRemove, model.OpPrune,
}

func TestEveryOpFromEveryStateFollowsTheTable(t *testing.T) {
	for _, r := range routes {
		for _, op := range mutating {
			t.Run(r.state.String()+"/"+r.name+"/"+op.String(), func(t *testing.T) {
				s, task := r.run(t)
				row, legal := model.Row(op, task.State)
				next, touched, err := applyWithGuard(s, op, task)

				workerOp := op == model.OpExtend || op == model.OpAck || op == model.OpFail || op == model.OpRetry
				if workerOp && task.ClaimToken == 0 {
					// No claim can satisfy the token guard of a task that
					// holds no claim: the op is refused as stale (token 0
					// itself is an invalid argument), and the table has no
					// row for it.
					if legal {
						t.Fatalf("the table has a row for %v from %v, whose tasks hold no claim", op, task.State)
					}
					if !errors.Is(err, model.ErrInvalidArgument) {
						t.Fatalf("%v with token 0: %v, want invalid argument", op, err)
					}
					forged := task.Claim()
					forged.Token = task.Version
					_, _, err = stale(s, op, forged)
					if !errors.Is(err, model.ErrStaleClaim) {
						t.Fatalf("%v from %v: %v, want stale claim", op, task.State, err)
					}
					return
				}

				if touched != legal {
					t.Fatalf("%v from %v: touched=%v (err %v), the table says legal=%v", op, task.State, touched, err, legal)
				}
				if !legal {
					if bulk(op) {
						if err != nil {
							t.Fatalf("%v passing over a %v task: %v", op, task.State, err)
						}
					} else {
						var te *model.TransitionError
						if !errors.As(err, &te) || te.Op != op || te.State != task.State || !errors.Is(err, model.ErrInvalidTransition) {
							t.Fatalf("%v from %v: %v, want a TransitionError naming %v and %v", op, task.State, err, op, task.State)
						}
						if err.Error() == "" {
							t.Fatal("empty error text")
						}
					}
					if !next.Equal(s.q) || next.Hash() != s.q.Hash() {
						t.Fatalf("%v refused from %v changed the queue", op, task.State)
					}
					return
				}
				if err != nil {
					t.Fatalf("%v from %v: %v", op, task.State, err)
				}
				if err := model.Invariants(next); err != nil {
					t.Fatalf("after %v: %v", op, err)
				}
				after, gerr := next.Get("t")
				if row.Removes {
					if !errors.Is(gerr, model.ErrNotFound) {
						t.Fatalf("%v (a removing transition) left the task: %v", op, after.State)
					}
					return
				}
				if gerr != nil || !slices.Contains(row.To, after.State) {
					t.Fatalf("%v from %v landed in %v (%v), the row allows %v", op, task.State, after.State, gerr, row.To)
				}
				if after.Version <= task.Version {
					t.Fatalf("%v did not stamp a new version: %d after %d", op, after.Version, task.Version)
				}
			})
		}
	}
}

// stale applies a worker op with a given claim.
func stale(s *script, op model.Op, c model.Claim) (model.Queue, model.Task, error) {
	switch op {
	case model.OpExtend:
		return s.q.Extend(s.now, c, time.Minute)
	case model.OpAck:
		return s.q.Ack(s.now, c, nil)
	case model.OpFail:
		return s.q.Fail(s.now, c, "")
	default:
		return s.q.Retry(s.now, c, 0, "")
	}
}

func TestEnqueueFollowsTheTable(t *testing.T) {
	row, ok := model.Row(model.OpEnqueue, 0)
	if !ok || row.Refusal != model.ErrConflict || row.Guard != model.GuardNewID {
		t.Fatalf("Enqueue row: %+v", row)
	}
	for _, runAfter := range []time.Time{{}, t0, t0.Add(-time.Second), t0.Add(time.Microsecond)} {
		q, task, err := model.NewQueue(qname, 0).Enqueue(t0, model.EnqueueArgs{ID: "t", MaxAttempts: 1, RunAfter: runAfter})
		if err != nil || !slices.Contains(row.To, task.State) {
			t.Fatalf("Enqueue(runAfter %v): %v, %v", runAfter, task.State, err)
		}
		if want := model.Ready; runAfter.After(t0) {
			if task.State != model.Scheduled {
				t.Errorf("runAfter %v: %v, want scheduled", runAfter, task.State)
			}
		} else if task.State != want {
			t.Errorf("runAfter %v: %v, want ready", runAfter, task.State)
		}
		if err := model.Invariants(q); err != nil {
			t.Fatal(err)
		}
	}
	// An existing ID is refused with the row's refusal, from every state.
	for _, r := range routes {
		s, _ := r.run(t)
		next, _, err := s.q.Enqueue(s.now, model.EnqueueArgs{ID: "t", MaxAttempts: 1})
		if !errors.Is(err, row.Refusal) || !next.Equal(s.q) {
			t.Errorf("%s: Enqueue of the same ID: %v", r.name, err)
		}
	}
}

// The bulk ops refuse nothing by state, but Prune refuses to be asked for a
// state the table gives it no row for.
func TestPruneAcceptsExactlyTheStatesOfItsRows(t *testing.T) {
	q := model.NewQueue(qname, 0)
	for _, s := range model.States {
		_, legal := model.Row(model.OpPrune, s)
		_, _, err := q.Prune([]model.State{s}, t0, 0)
		if legal != (err == nil) {
			t.Errorf("Prune(%v): %v, the table says legal=%v", s, err, legal)
		}
		if !legal && !errors.Is(err, model.ErrInvalidArgument) {
			t.Errorf("Prune(%v): %v, want invalid argument", s, err)
		}
	}
}

func TestTheTableIsWellFormed(t *testing.T) {
	seen := map[[2]int]bool{}
	for _, r := range model.Transitions() {
		key := [2]int{int(r.Op), int(r.From)}
		if seen[key] {
			t.Errorf("two rows for %v from %v", r.Op, r.From)
		}
		seen[key] = true
		if r.Removes != (len(r.To) == 0) {
			t.Errorf("%v from %v: Removes=%v with targets %v", r.Op, r.From, r.Removes, r.To)
		}
		if r.Effect == "" || r.Actor == 0 {
			t.Errorf("%v from %v: no effect or actor", r.Op, r.From)
		}
		if (r.From == 0) != (r.Op == model.OpEnqueue) {
			t.Errorf("%v has a row from %v", r.Op, r.From)
		}
		if got, ok := model.Row(r.Op, r.From); !ok || got.Op != r.Op {
			t.Errorf("Row(%v, %v) does not find its row", r.Op, r.From)
		}
	}
	for _, op := range []model.Op{model.OpGet, model.OpList, model.OpCounts} {
		for _, s := range model.States {
			if _, ok := model.Row(op, s); ok {
				t.Errorf("the read %v has a row", op)
			}
		}
	}
	// Transitions returns a copy.
	rows := model.Transitions()
	rows[0].To[0] = model.Failed
	rows[0].Op = model.OpRemove
	if again := model.Transitions(); again[0].Op != model.OpEnqueue || again[0].To[0] == model.Failed {
		t.Error("Transitions hands out the table itself")
	}
}
