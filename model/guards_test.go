package model_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/model"
)

// One focused test per guard: each fails if its guard is deleted from the
// model, and checks that a refused operation leaves the queue unchanged.

// refused checks that an operation failed with want and left q unchanged.
func refused(t *testing.T, what string, before, after model.Queue, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
	if !after.Equal(before) || after.Hash() != before.Hash() || after.Seq() != before.Seq() {
		t.Errorf("%s: the refused op changed the queue", what)
	}
}

func TestGuardNewIDRefusesATakenIDAndAllowsItAfterRemove(t *testing.T) {
	s := newScript(t)
	s.enqueue("t", time.Time{}, 3)
	args := model.EnqueueArgs{ID: "t", MaxAttempts: 1}
	next, _, err := s.q.Enqueue(s.now, args)
	refused(t, "Enqueue of a taken ID", s.q, next, err, model.ErrConflict)
	q, old, err := s.q.Remove("t", 0)
	s.must(err, "Remove")
	q, again, err := q.Enqueue(s.now, args)
	if err != nil {
		t.Fatalf("Enqueue after Remove: %v", err)
	}
	if again.Version <= old.Version || q.Seq() != again.Version {
		t.Errorf("the new task has version %d, the removed one had %d", again.Version, old.Version)
	}
}

func TestCapacityCountsPendingTasksOnly(t *testing.T) {
	q := model.NewQueue(qname, 2)
	if q.Capacity() != 2 || model.NewQueue(qname, -5).Capacity() != 0 {
		t.Fatalf("capacity %d", q.Capacity())
	}
	q, _, _ = q.Enqueue(t0, model.EnqueueArgs{ID: "a", MaxAttempts: 1})
	q, _, _ = q.Enqueue(t0, model.EnqueueArgs{ID: "b", MaxAttempts: 1, RunAfter: t0.Add(time.Hour)})
	next, _, err := q.Enqueue(t0, model.EnqueueArgs{ID: "c", MaxAttempts: 1})
	refused(t, "Enqueue into a full queue", q, next, err, model.ErrQueueFull)
	q, popped, _ := q.Pop(t0, time.Minute, 1)
	next, _, err = q.Enqueue(t0, model.EnqueueArgs{ID: "c", MaxAttempts: 1})
	refused(t, "Enqueue with a running task", q, next, err, model.ErrQueueFull)
	q, _, err = q.Ack(t0, popped[0].Claim(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err = q.Enqueue(t0, model.EnqueueArgs{ID: "c", MaxAttempts: 1}); err != nil {
		t.Errorf("a succeeded task still counts against the capacity: %v", err)
	}
	unlimited := model.NewQueue(qname, 0)
	for i := range 50 {
		if unlimited, _, err = unlimited.Enqueue(t0, model.EnqueueArgs{ID: strings.Repeat("x", i+1), MaxAttempts: 1}); err != nil {
			t.Fatalf("capacity 0: %v", err)
		}
	}
}

func TestGuardClaimTokenRefusesEveryOtherToken(t *testing.T) {
	s := newScript(t)
	s.enqueue("t", time.Time{}, 3)
	s.enqueue("u", time.Time{}, 3)
	c := s.pop(time.Minute).Claim()
	other := s.pop(time.Minute).Claim() // a live claim on another task
	for _, forged := range []model.Claim{
		{Queue: qname, TaskID: "t", Token: c.Token + 1},
		{Queue: qname, TaskID: "t", Token: c.Token - 1 + 1000},
		{Queue: qname, TaskID: "t", Token: other.Token},
		{Queue: qname, TaskID: "gone", Token: c.Token},
	} {
		for _, op := range []model.Op{model.OpExtend, model.OpAck, model.OpFail, model.OpRetry} {
			next, _, err := stale(s, op, forged)
			refused(t, op.String()+" with a forged claim", s.q, next, err, model.ErrStaleClaim)
		}
	}
	// The claim of a task returned to the queue and popped again is stale.
	q, _, err := s.q.Retry(s.now, c, 0, "again")
	s.must(err, "Retry")
	s.q = q
	fresh := s.pop(time.Minute).Claim()
	if fresh.Token <= c.Token {
		t.Fatalf("new token %d, old %d", fresh.Token, c.Token)
	}
	for _, op := range []model.Op{model.OpExtend, model.OpAck, model.OpFail, model.OpRetry} {
		next, _, err := stale(s, op, c)
		refused(t, op.String()+" with the superseded claim", s.q, next, err, model.ErrStaleClaim)
	}
	if _, _, err := s.q.Ack(s.now, fresh, nil); err != nil {
		t.Errorf("the current claim: %v", err)
	}
}

func TestGuardReapVersionRefusesAfterAnyChange(t *testing.T) {
	type change struct {
		name string
		do   func(s *script, c model.Claim)
	}
	for _, ch := range []change{
		{"nothing", func(*script, model.Claim) {}},
		{"the worker extends", func(s *script, c model.Claim) {
			q, _, err := s.q.Extend(s.now, c, time.Hour)
			s.must(err, "Extend")
			s.q = q
		}},
		{"the worker acks", func(s *script, c model.Claim) {
			q, _, err := s.q.Ack(s.now, c, nil)
			s.must(err, "Ack")
			s.q = q
		}},
		{"another broker claims", func(s *script, _ model.Claim) { s.advance(time.Hour).claimExpired() }},
		{"the operator requeues", func(s *script, _ model.Claim) {
			q, _, err := s.q.InspectRequeue("t", 0)
			s.must(err, "InspectRequeue")
			s.q = q
		}},
	} {
		t.Run(ch.name, func(t *testing.T) {
			s := newScript(t)
			s.enqueue("t", time.Time{}, 3)
			c := s.pop(time.Minute).Claim()
			rc := s.advance(time.Minute).claimExpired()
			ch.do(s, c)
			requeue := func() (model.Queue, error) {
				q, _, err := s.q.Requeue(s.now, rc, 0, "")
				return q, err
			}
			finalize := func() (model.Queue, error) {
				q, _, err := s.q.Finalize(s.now, rc, "")
				return q, err
			}
			for name, op := range map[string]func() (model.Queue, error){"Requeue": requeue, "Finalize": finalize} {
				next, err := op()
				if ch.name == "nothing" {
					if err != nil {
						t.Errorf("%s with the current claim: %v", name, err)
					}
					continue
				}
				refused(t, name+" after "+ch.name, s.q, next, err, model.ErrStaleClaim)
			}
		})
	}
}

func TestGuardExpectedVersionRefusesAStaleView(t *testing.T) {
	s := newScript(t)
	seen := s.enqueue("t", time.Time{}, 3)
	c := s.pop(time.Minute).Claim()
	for _, expect := range []uint64{seen.Version, s.get("t").Version + 1} {
		next, _, err := s.q.InspectRequeue("t", expect)
		refused(t, "InspectRequeue with a stale expected version", s.q, next, err, model.ErrConflict)
		next, _, err = s.q.Remove("t", expect)
		refused(t, "Remove with a stale expected version", s.q, next, err, model.ErrConflict)
	}
	current := s.get("t").Version
	q, _, err := s.q.InspectRequeue("t", current)
	if err != nil {
		t.Fatalf("InspectRequeue with the current version: %v", err)
	}
	if _, _, err := q.Ack(s.now, c, nil); !errors.Is(err, model.ErrStaleClaim) {
		t.Errorf("the worker's claim after an operator's requeue: %v", err)
	}
	if _, _, err := q.Remove("t", 0); err != nil {
		t.Errorf("Remove without an expected version: %v", err)
	}
}

func TestGuardDuePromotesAtRunAfterNotBefore(t *testing.T) {
	s := newScript(t)
	due := s.now.Add(time.Second)
	s.enqueue("b", due, 3)
	s.enqueue("a", due, 3)
	s.enqueue("c", due.Add(-time.Nanosecond), 3)
	next, ids, err := s.q.Promote(due.Add(-time.Nanosecond), 0)
	if err != nil || !slices.Equal(ids, []string{"c"}) {
		t.Fatalf("Promote a nanosecond early: %v, %v", ids, err)
	}
	_, ids, _ = next.Promote(due, 0)
	if !slices.Equal(ids, []string{"a", "b"}) {
		t.Errorf("Promote at RunAfter: %v, want [a b] (RunAfter, then ID)", ids)
	}
	_, ids, _ = s.q.Promote(due, 2)
	if !slices.Equal(ids, []string{"c", "a"}) {
		t.Errorf("Promote with limit 2: %v", ids)
	}
}

func TestGuardExpiredClaimsAndRecoversAtTheDeadlineNotBefore(t *testing.T) {
	s := newScript(t)
	s.enqueue("b", time.Time{}, 3)
	s.enqueue("a", time.Time{}, 3)
	s.enqueue("c", time.Time{}, 3)
	b := s.pop(time.Minute)
	s.pop(time.Minute)
	s.pop(time.Minute - time.Nanosecond)
	deadline := b.Deadline
	_, claims, _ := s.q.ClaimExpired(deadline.Add(-time.Nanosecond), time.Second, 0)
	if ids := reapedIDs(claims); !slices.Equal(ids, []string{"c"}) {
		t.Errorf("ClaimExpired just before the deadline: %v", ids)
	}
	_, claims, _ = s.q.ClaimExpired(deadline, time.Second, 0)
	if ids := reapedIDs(claims); !slices.Equal(ids, []string{"c", "a", "b"}) {
		t.Errorf("ClaimExpired at the deadline: %v, want [c a b] (deadline, then ID)", ids)
	}
	_, claims, _ = s.q.ClaimExpired(deadline, time.Second, 1)
	if ids := reapedIDs(claims); !slices.Equal(ids, []string{"c"}) {
		t.Errorf("ClaimExpired with limit 1: %v", ids)
	}
	_, tasks, _ := s.q.RecoverExpired(deadline.Add(-time.Nanosecond), 0, 0)
	if ids := taskIDsOf(tasks); !slices.Equal(ids, []string{"c"}) {
		t.Errorf("RecoverExpired just before the deadline: %v", ids)
	}
	_, tasks, _ = s.q.RecoverExpired(deadline, 0, 2)
	if ids := taskIDsOf(tasks); !slices.Equal(ids, []string{"c", "a"}) {
		t.Errorf("RecoverExpired at the deadline with limit 2: %v", ids)
	}
}

func TestClaimExpiredRenewsAndKeepsTheWorkerToken(t *testing.T) {
	s := newScript(t)
	s.enqueue("t", time.Time{}, 3)
	popped := s.pop(time.Minute)
	rc := s.advance(time.Minute).claimExpired()
	got := s.get("t")
	if got.ClaimToken != popped.ClaimToken || got.Version != rc.Version || !got.Deadline.Equal(s.now.Add(10*time.Second)) ||
		!rc.Deadline.Equal(got.Deadline) || !rc.Task.Equal(got) || got.Attempt != 1 {
		t.Errorf("after ClaimExpired: %+v, claim %+v", got, rc)
	}
	// Not claimable again until the claim TTL has passed.
	if _, claims, _ := s.q.ClaimExpired(s.now.Add(10*time.Second-time.Nanosecond), time.Second, 0); len(claims) != 0 {
		t.Errorf("claimed again within the claim TTL")
	}
}

func TestRecoverExpiredFailsOnlyExhaustedTasks(t *testing.T) {
	for _, tc := range []struct {
		maxAttempts, pops int
		want              model.State
	}{{1, 1, model.Failed}, {2, 1, model.Ready}, {2, 2, model.Failed}, {3, 2, model.Ready}} {
		s := newScript(t)
		s.enqueue("t", time.Time{}, tc.maxAttempts)
		for i := range tc.pops {
			c := s.pop(time.Minute).Claim()
			if i < tc.pops-1 {
				q, _, err := s.q.Retry(s.now, c, 0, "")
				s.must(err, "Retry")
				s.q = q
			}
		}
		q, tasks, err := s.advance(time.Minute).q.RecoverExpired(s.now, 0, 0)
		if err != nil || len(tasks) != 1 {
			t.Fatalf("RecoverExpired: %v, %v", tasks, err)
		}
		task, _ := q.Get("t")
		if task.State != tc.want || !tasks[0].Equal(task) {
			t.Errorf("attempt %d of %d: %v, want %v", tc.pops, tc.maxAttempts, task.State, tc.want)
		}
		last := task.Errors[len(task.Errors)-1]
		if !last.LeaseExpired || last.Message != model.LeaseExpiredMessage || last.Attempt != tc.pops || !last.At.Equal(s.now) {
			t.Errorf("recorded error %+v", last)
		}
	}
}

func TestGuardFinishedBeforeIsStrict(t *testing.T) {
	s := newScript(t)
	s.enqueue("t", time.Time{}, 3)
	q, done, err := s.q.Ack(s.now, s.pop(time.Minute).Claim(), nil)
	s.must(err, "Ack")
	if _, ids, _ := q.Prune([]model.State{model.Succeeded}, done.FinishedAt, 0); len(ids) != 0 {
		t.Errorf("pruned a task that finished exactly at the cut-off")
	}
	if _, ids, _ := q.Prune([]model.State{model.Failed}, done.FinishedAt.Add(time.Nanosecond), 0); len(ids) != 0 {
		t.Errorf("pruned a succeeded task when asked for failed ones")
	}
	if _, ids, _ := q.Prune([]model.State{model.Succeeded}, done.FinishedAt.Add(999*time.Nanosecond), 0); len(ids) != 0 {
		t.Errorf("pruned with a bound less than a microsecond after FinishedAt, which rounds to it")
	}
	next, ids, _ := q.Prune([]model.State{model.Succeeded}, done.FinishedAt.Add(time.Microsecond), 0)
	if !slices.Equal(ids, []string{"t"}) || next.Len() != 0 {
		t.Errorf("Prune a microsecond after FinishedAt: %v", ids)
	}
}

func TestGuardFirstInLinePopsByPriorityThenReadyOrder(t *testing.T) {
	q := model.NewQueue(qname, 0)
	add := func(id string, prio int) {
		t.Helper()
		var err error
		if q, _, err = q.Enqueue(t0, model.EnqueueArgs{ID: id, Priority: prio, MaxAttempts: 3}); err != nil {
			t.Fatal(err)
		}
	}
	add("z", 0)
	add("low", model.MinPriority)
	add("y", 0)
	add("high", model.MaxPriority)
	add("x", 0)
	// y goes to the back of its priority when it becomes Ready again.
	q, first, _ := q.Pop(t0, time.Minute, 1)
	if first[0].ID != "high" {
		t.Fatalf("first pop: %s", first[0].ID)
	}
	q, _, _ = q.Retry(t0, first[0].Claim(), 0, "")
	_, all, err := q.Pop(t0, time.Minute, model.MaxBatch)
	if err != nil {
		t.Fatal(err)
	}
	if ids := taskIDsOf(all); !slices.Equal(ids, []string{"high", "z", "y", "x", "low"}) {
		t.Errorf("pop order %v", ids)
	}
}

func TestGuardOrderValidationThenExistenceThenIdentityThenState(t *testing.T) {
	s := newScript(t)
	s.enqueue("t", time.Time{}, 3)
	c := s.pop(time.Minute).Claim()
	q, _, err := s.q.Ack(s.now, c, nil)
	s.must(err, "Ack")
	s.q = q
	zeroMissing := model.Claim{Queue: qname, TaskID: "missing", Token: 0}
	if _, _, err := s.q.Ack(s.now, zeroMissing, nil); !errors.Is(err, model.ErrInvalidArgument) {
		t.Errorf("zero token on a missing task: %v, want invalid argument first", err)
	}
	if _, _, err := s.q.Extend(s.now, model.Claim{TaskID: "missing", Token: 1}, 0); !errors.Is(err, model.ErrInvalidArgument) {
		t.Errorf("zero lease on a missing task: %v, want invalid argument first", err)
	}
	wrong := c
	wrong.Token++
	if _, _, err := s.q.Ack(s.now, wrong, nil); !errors.Is(err, model.ErrStaleClaim) {
		t.Errorf("stale token on a succeeded task: %v, want stale claim before the state", err)
	}
	if _, _, err := s.q.Ack(s.now, c, nil); !errors.Is(err, model.ErrInvalidTransition) {
		t.Errorf("matching token on a succeeded task: %v, want invalid transition", err)
	}
	rq, _, err := s.q.InspectRequeue("t", 0)
	s.must(err, "InspectRequeue")
	if _, _, err := rq.InspectRequeue("t", 1); !errors.Is(err, model.ErrConflict) {
		t.Errorf("a stale expected version on a ready task: %v, want conflict before the state", err)
	}
	if _, _, err := rq.InspectRequeue("", 1); !errors.Is(err, model.ErrInvalidArgument) {
		t.Errorf("empty ID: %v", err)
	}
	if _, _, err := rq.Remove("missing", 1); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("missing task with an expected version: %v, want not found", err)
	}
	if _, _, err := rq.Requeue(s.now, model.ReapClaim{TaskID: "missing", Version: 0}, 0, ""); !errors.Is(err, model.ErrInvalidArgument) {
		t.Errorf("zero version on a missing task: %v, want invalid argument", err)
	}
	if _, _, err := rq.Requeue(s.now, model.ReapClaim{TaskID: "missing", Version: 1}, 0, ""); !errors.Is(err, model.ErrStaleClaim) {
		t.Errorf("broker claim on a missing task: %v, want stale claim", err)
	}
}

func TestArgumentValidation(t *testing.T) {
	s := newScript(t)
	s.enqueue("t", time.Time{}, 3)
	q := s.q
	check := func(what string, next model.Queue, err error) {
		t.Helper()
		refused(t, what, q, next, err, model.ErrInvalidArgument)
	}
	for _, a := range []model.EnqueueArgs{
		{ID: "", MaxAttempts: 1},
		{ID: strings.Repeat("x", model.MaxIDLength+1), MaxAttempts: 1},
		{ID: "p", Priority: model.MaxPriority + 1, MaxAttempts: 1},
		{ID: "p", Priority: model.MinPriority - 1, MaxAttempts: 1},
		{ID: "m", MaxAttempts: 0},
	} {
		next, _, err := q.Enqueue(t0, a)
		check("Enqueue "+a.ID, next, err)
	}
	if _, _, err := q.Enqueue(t0, model.EnqueueArgs{ID: strings.Repeat("x", model.MaxIDLength), Priority: model.MaxPriority, MaxAttempts: 1}); err != nil {
		t.Errorf("limits themselves are valid: %v", err)
	}
	next, _, err := q.Promote(t0, -1)
	check("Promote limit -1", next, err)
	for _, p := range []struct {
		lease time.Duration
		n     int
	}{{0, 1}, {-1, 1}, {time.Second, 0}, {time.Second, model.MaxBatch + 1}} {
		next, _, err := q.Pop(t0, p.lease, p.n)
		check("Pop", next, err)
	}
	next, _, err = q.ClaimExpired(t0, 0, 0)
	check("ClaimExpired TTL 0", next, err)
	next, _, err = q.ClaimExpired(t0, time.Second, -1)
	check("ClaimExpired limit -1", next, err)
	next, _, err = q.RecoverExpired(t0, -1, 0)
	check("RecoverExpired delay -1", next, err)
	next, _, err = q.RecoverExpired(t0, 0, -1)
	check("RecoverExpired limit -1", next, err)
	for _, states := range [][]model.State{nil, {model.Ready}, {0}, {model.Failed + 1}} {
		next, _, err = q.Prune(states, t0, 0)
		check("Prune", next, err)
	}
	next, _, err = q.Prune([]model.State{model.Failed}, t0, -1)
	check("Prune limit -1", next, err)
	for _, l := range []struct {
		s     model.State
		limit int
	}{{0, 1}, {model.Quarantined + 1, 1}, {model.Ready, 0}, {model.Ready, model.MaxBatch + 1}} {
		if _, _, err := q.List(l.s, "", l.limit); !errors.Is(err, model.ErrInvalidArgument) {
			t.Errorf("List(%v, limit %d): %v", l.s, l.limit, err)
		}
	}
}

func TestListPagesInIDOrder(t *testing.T) {
	q := model.NewQueue(qname, 0)
	for _, id := range []string{"d", "b", "a", "c", "e"} {
		q, _, _ = q.Enqueue(t0, model.EnqueueArgs{ID: id, MaxAttempts: 1})
	}
	q, _, _ = q.Enqueue(t0, model.EnqueueArgs{ID: "s", MaxAttempts: 1, RunAfter: t0.Add(time.Hour)})
	var pages [][]string
	var cursors []string
	after := ""
	for {
		tasks, next, err := q.List(model.Ready, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, taskIDsOf(tasks))
		cursors = append(cursors, next)
		if next == "" {
			break
		}
		after = next
	}
	if want := [][]string{{"a", "b"}, {"c", "d"}, {"e"}}; !slices.EqualFunc(pages, want, slices.Equal) {
		t.Errorf("pages %v, want %v", pages, want)
	}
	if !slices.Equal(cursors, []string{"b", "d", ""}) {
		t.Errorf("cursors %q", cursors)
	}
	if tasks, next, _ := q.List(model.Ready, "bb", 10); !slices.Equal(taskIDsOf(tasks), []string{"c", "d", "e"}) || next != "" {
		t.Errorf("List after a cursor between IDs: %v %q", taskIDsOf(tasks), next)
	}
	if tasks, _, _ := q.List(model.Scheduled, "", 10); !slices.Equal(taskIDsOf(tasks), []string{"s"}) {
		t.Errorf("List(scheduled): %v", taskIDsOf(tasks))
	}
}

func reapedIDs(cs []model.ReapClaim) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.TaskID
	}
	return out
}

func taskIDsOf(ts []model.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}
