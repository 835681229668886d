package fuzz

import (
	"bytes"
	"cmp"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"pgregory.net/rapid"
)

// This file is an oracle for one step of the model, written from DESIGN.md
// and the op documentation without reading the model's indexes or guards:
// which error an input must get, which tasks a bulk op must select and in
// which order, what each op writes, and that it touches no other task.

// expectedErr returns the error kind DESIGN.md prescribes for in on q (nil
// when the op must succeed), and for an ErrInvalidTransition the state of the
// task it must name. Guard order: argument validation, existence, token or
// version, source state.
func expectedErr(q model.Queue, in model.Input) (model.State, error) {
	badID := func(id string) bool { return id == "" || len(id) > model.MaxIDLength }
	badLimit := in.Limit < 0
	badDelay := in.Delay < 0 || in.Delay > model.MaxDuration
	task, err := q.Get(in.ID)
	exists := err == nil
	switch in.Op {
	case model.OpEnqueue:
		a := in.Enqueue
		_, err := q.Get(a.ID)
		switch {
		case badID(a.ID) || a.Priority < model.MinPriority || a.Priority > model.MaxPriority || a.MaxAttempts < 1:
			return 0, model.ErrInvalidArgument
		case err == nil:
			return 0, model.ErrConflict
		case q.Capacity() > 0 && q.Counts().Pending() >= q.Capacity():
			return 0, model.ErrQueueFull
		}
	case model.OpPromote, model.OpPrune:
		if badLimit {
			return 0, model.ErrInvalidArgument
		}
		if in.Op == model.OpPrune {
			if len(in.States) == 0 {
				return 0, model.ErrInvalidArgument
			}
			for _, s := range in.States {
				if !s.Terminal() {
					return 0, model.ErrInvalidArgument
				}
			}
		}
	case model.OpPop:
		if in.Lease <= 0 || in.Limit < 1 || in.Limit > model.MaxBatch {
			return 0, model.ErrInvalidArgument
		}
	case model.OpClaimExpired:
		if in.Lease <= 0 || badLimit {
			return 0, model.ErrInvalidArgument
		}
	case model.OpRecoverExpired:
		if in.Lease < 0 || in.Lease > model.MaxDuration || badLimit {
			return 0, model.ErrInvalidArgument
		}
	case model.OpExtend, model.OpAck, model.OpFail, model.OpRetry:
		c := in.Claim
		task, err := q.Get(c.TaskID)
		switch {
		case (in.Op == model.OpExtend && in.Lease <= 0) || badID(c.TaskID) || c.Token == 0 || (in.Op == model.OpRetry && badDelay):
			return 0, model.ErrInvalidArgument
		case err != nil || task.ClaimToken != c.Token:
			return 0, model.ErrStaleClaim
		case task.State != model.Running:
			return task.State, model.ErrInvalidTransition
		}
	case model.OpRequeue, model.OpFinalize:
		rc := in.ReapClaim
		task, err := q.Get(rc.TaskID)
		switch {
		case badID(rc.TaskID) || rc.Version == 0 || (in.Op == model.OpRequeue && badDelay):
			return 0, model.ErrInvalidArgument
		case err != nil || task.Version != rc.Version:
			return 0, model.ErrStaleClaim
		case task.State != model.Running:
			return task.State, model.ErrInvalidTransition
		}
	case model.OpInspectRequeue, model.OpRemove:
		switch {
		case badID(in.ID):
			return 0, model.ErrInvalidArgument
		case !exists:
			return 0, model.ErrNotFound
		case in.Expect != 0 && in.Expect != task.Version:
			return 0, model.ErrConflict
		case in.Op == model.OpInspectRequeue && task.State == model.Ready:
			return task.State, model.ErrInvalidTransition
		}
	case model.OpGet:
		switch {
		case badID(in.ID):
			return 0, model.ErrInvalidArgument
		case !exists:
			return 0, model.ErrNotFound
		}
	case model.OpList:
		if !in.State.Valid() || in.Limit < 1 || in.Limit > model.MaxBatch {
			return 0, model.ErrInvalidArgument
		}
	}
	return 0, nil
}

// selected returns the IDs a bulk op must pick from q, in the order the op
// must report them, or nil for other ops.
func selected(q model.Queue, in model.Input) []string {
	var pick []model.Task
	limit := in.Limit
	var order func(a, b model.Task) int
	byTime := func(at func(model.Task) time.Time) func(a, b model.Task) int {
		return func(a, b model.Task) int {
			return cmp.Or(at(a).Compare(at(b)), strings.Compare(a.ID, b.ID))
		}
	}
	for _, t := range q.Tasks() {
		switch in.Op {
		case model.OpPromote:
			if t.State == model.Scheduled && !t.RunAfter.After(in.Now) {
				pick = append(pick, t)
			}
			order = byTime(func(t model.Task) time.Time { return t.RunAfter })
		case model.OpPop:
			if t.State == model.Ready {
				pick = append(pick, t)
			}
			order = func(a, b model.Task) int {
				return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.Version, b.Version))
			}
		case model.OpClaimExpired, model.OpRecoverExpired:
			if t.State == model.Running && !t.Deadline.After(in.Now) {
				pick = append(pick, t)
			}
			order = byTime(func(t model.Task) time.Time { return t.Deadline })
		case model.OpPrune:
			if t.State.Terminal() && slices.Contains(in.States, t.State) && t.FinishedAt.Before(in.Before) {
				pick = append(pick, t)
			}
			order = byTime(func(t model.Task) time.Time { return t.FinishedAt })
		default:
			return nil
		}
	}
	if order != nil {
		slices.SortFunc(pick, order)
	}
	if limit > 0 && len(pick) > limit {
		pick = pick[:limit]
	}
	ids := []string{}
	for _, t := range pick {
		ids = append(ids, t.ID)
	}
	return ids
}

// outputIDs returns the IDs of the tasks a successful bulk op reports.
func outputIDs(in model.Input, out model.Output) []string {
	ids := []string{}
	switch in.Op {
	case model.OpPromote, model.OpPrune:
		ids = append(ids, out.IDs...)
	case model.OpPop, model.OpRecoverExpired:
		for _, t := range out.Tasks {
			ids = append(ids, t.ID)
		}
	case model.OpClaimExpired:
		for _, r := range out.ReapClaims {
			ids = append(ids, r.TaskID)
		}
	}
	return ids
}

// checkOutcome checks one step against the oracle.
func checkOutcome(t *rapid.T, prev, next model.Queue, in model.Input, out model.Output) {
	t.Helper()
	wantState, wantErr := expectedErr(prev, in)
	if got := model.Kind(out.Err); got != wantErr {
		t.Fatalf("%v: error %v, want kind %v", step(in), out.Err, wantErr)
	}
	if errors.Is(out.Err, model.ErrInvalidTransition) {
		te, ok := asTransition(out.Err)
		if !ok || te.Op != in.Op || te.State != wantState {
			t.Fatalf("%v: %v, want a *TransitionError naming %v from %v", step(in), out.Err, in.Op, wantState)
		}
	}
	if out.Err != nil {
		return
	}

	touched := map[string]bool{}
	fields := func(id string) (model.Task, model.Task, bool) {
		p, perr := prev.Get(id)
		n, nerr := next.Get(id)
		if nerr != nil {
			t.Fatalf("%v: task %q missing afterwards", step(in), id)
		}
		touched[id] = true
		return p, n, perr == nil
	}
	legal := func(op model.Op, from, to model.State) {
		row, ok := model.Row(op, from)
		if !ok || (to != 0 && !slices.Contains(row.To, to)) || (to == 0 && !row.Removes) {
			t.Fatalf("%v took a task from %v to %v: no such row in the table", op, from, to)
		}
	}

	switch in.Op {
	case model.OpGet, model.OpList, model.OpCounts:
		if next != prev {
			t.Fatalf("%v returned a new state", step(in))
		}
		checkRead(t, prev, in, out)

	case model.OpEnqueue, model.OpExtend, model.OpAck, model.OpFail, model.OpRetry,
		model.OpRequeue, model.OpFinalize, model.OpInspectRequeue:
		p, n, existed := fields(out.Task.ID)
		if !n.Equal(out.Task) {
			t.Fatalf("%v returned %+v, stored %+v", step(in), out.Task, n)
		}
		if next.Seq() != prev.Seq()+1 || n.Version != next.Seq() {
			t.Fatalf("%v: seq %d -> %d, task version %d: want one new version", step(in), prev.Seq(), next.Seq(), n.Version)
		}
		if existed == (in.Op == model.OpEnqueue) {
			t.Fatalf("%v: task existed before = %v", step(in), existed)
		}
		legal(in.Op, p.State, n.State)
		checkEffect(t, in, p, n)

	case model.OpRemove:
		p, _ := prev.Get(in.ID)
		if _, err := next.Get(in.ID); !errors.Is(err, model.ErrNotFound) || !out.Task.Equal(p) || next.Seq() != prev.Seq() {
			t.Fatalf("%v: returned %+v (was %+v), Get afterwards %v, seq %d -> %d", step(in), out.Task, p, err, prev.Seq(), next.Seq())
		}
		legal(in.Op, p.State, 0)
		touched[in.ID] = true

	case model.OpPromote, model.OpPop, model.OpClaimExpired, model.OpRecoverExpired, model.OpPrune:
		want, got := selected(prev, in), outputIDs(in, out)
		if !slices.Equal(want, got) {
			t.Fatalf("%v selected %q, want %q", step(in), got, want)
		}
		if in.Op == model.OpPrune {
			for _, id := range got {
				p, _ := prev.Get(id)
				if _, err := next.Get(id); err == nil {
					t.Fatalf("Prune reported %q but kept it", id)
				}
				legal(in.Op, p.State, 0)
				touched[id] = true
			}
			if next.Seq() != prev.Seq() {
				t.Fatalf("Prune drew from the sequence")
			}
			break
		}
		if next.Seq() != prev.Seq()+uint64(len(got)) {
			t.Fatalf("%v touched %d tasks but seq went %d -> %d", step(in), len(got), prev.Seq(), next.Seq())
		}
		for i, id := range got {
			p, n, _ := fields(id)
			if n.Version != prev.Seq()+uint64(i)+1 {
				t.Fatalf("%v: %q got version %d, want %d", step(in), id, n.Version, prev.Seq()+uint64(i)+1)
			}
			switch in.Op {
			case model.OpPop:
				if !out.Tasks[i].Equal(n) {
					t.Fatalf("Pop returned %+v, stored %+v", out.Tasks[i], n)
				}
			case model.OpRecoverExpired:
				if !out.Tasks[i].Equal(n) {
					t.Fatalf("RecoverExpired returned %+v, stored %+v", out.Tasks[i], n)
				}
			case model.OpClaimExpired:
				rc := out.ReapClaims[i]
				if rc.Version != n.Version || !rc.Deadline.Equal(n.Deadline) || !rc.Task.Equal(n) || rc.Queue != next.Name() {
					t.Fatalf("ClaimExpired returned %+v, stored %+v", rc, n)
				}
			}
			legal(in.Op, p.State, n.State)
			checkEffect(t, in, p, n)
		}
	}

	// The frame: no other task changed.
	for _, q := range []model.Queue{prev, next} {
		for _, task := range q.Tasks() {
			if touched[task.ID] {
				continue
			}
			p, perr := prev.Get(task.ID)
			n, nerr := next.Get(task.ID)
			if perr != nil || nerr != nil || !p.Equal(n) {
				t.Fatalf("%v changed task %q, which it does not name:\nbefore %+v\nafter  %+v", step(in), task.ID, p, n)
			}
		}
	}
}

// checkEffect checks what a successful op wrote to one task: p before, n
// after.
func checkEffect(t *rapid.T, in model.Input, p, n model.Task) {
	t.Helper()
	now := in.Now
	fail := func(what string) {
		t.Fatalf("%v on %q: %s\nbefore %+v\nafter  %+v", step(in), n.ID, what, p, n)
	}
	queued := func(runAfter time.Time) {
		want := model.Ready
		if runAfter.After(now) {
			want = model.Scheduled
		}
		if n.State != want || !n.RunAfter.Equal(runAfter) || n.ClaimToken != 0 || !n.ClaimedAt.IsZero() || !n.Deadline.IsZero() || !n.FinishedAt.IsZero() {
			fail("not returned to the queue as " + want.String())
		}
	}
	appended := func(message string, leaseExpired bool) {
		if leaseExpired && message == "" {
			message = model.LeaseExpiredMessage
		}
		want := append(slices.Clone(p.Errors), model.TaskError{Attempt: p.Attempt, At: now, Message: message, LeaseExpired: leaseExpired})
		if !slices.EqualFunc(n.Errors, want, func(a, b model.TaskError) bool {
			return a.Attempt == b.Attempt && a.At.Equal(b.At) && a.Message == b.Message && a.LeaseExpired == b.LeaseExpired
		}) {
			fail("error history not appended")
		}
	}
	finished := func(s model.State) {
		if n.State != s || !n.FinishedAt.Equal(now) || !n.Deadline.IsZero() {
			fail("not finished as " + s.String())
		}
	}
	keeps := func() {
		if n.ID != p.ID || !bytes.Equal(n.Payload, p.Payload) || n.Priority != p.Priority || n.MaxAttempts != p.MaxAttempts || !n.EnqueuedAt.Equal(p.EnqueuedAt) {
			fail("changed a field set at Enqueue")
		}
	}

	switch in.Op {
	case model.OpEnqueue:
		a := in.Enqueue
		if n.ID != a.ID || !bytes.Equal(n.Payload, a.Payload) || n.Priority != a.Priority || n.MaxAttempts != a.MaxAttempts ||
			n.Attempt != 0 || !n.EnqueuedAt.Equal(now) || len(n.Errors) != 0 || n.Result != nil || n.Queue != "q" {
			fail("not enqueued as asked")
		}
		queued(a.RunAfter)
		return
	case model.OpPromote:
		if n.State != model.Ready || !n.RunAfter.Equal(p.RunAfter) || n.Attempt != p.Attempt {
			fail("not promoted")
		}
	case model.OpPop:
		if n.State != model.Running || n.ClaimToken != n.Version || n.Attempt != p.Attempt+1 || !n.ClaimedAt.Equal(now) || !n.Deadline.Equal(now.Add(in.Lease)) {
			fail("not claimed")
		}
	case model.OpExtend:
		if n.State != model.Running || n.ClaimToken != p.ClaimToken || !n.Deadline.Equal(now.Add(in.Lease)) || !n.ClaimedAt.Equal(p.ClaimedAt) || n.Attempt != p.Attempt {
			fail("not extended")
		}
	case model.OpClaimExpired:
		if n.State != model.Running || n.ClaimToken != p.ClaimToken || !n.Deadline.Equal(now.Add(in.Lease)) || !n.ClaimedAt.Equal(p.ClaimedAt) || n.Attempt != p.Attempt || len(n.Errors) != len(p.Errors) {
			fail("not claimed by the broker")
		}
	case model.OpAck:
		finished(model.Succeeded)
		if !bytes.Equal(n.Result, in.Result) || len(n.Errors) != len(p.Errors) {
			fail("result not recorded")
		}
	case model.OpFail:
		finished(model.Failed)
		appended(in.Message, false)
	case model.OpRetry:
		queued(model.RunAfter(now, in.Delay))
		appended(in.Message, false)
	case model.OpRequeue:
		queued(model.RunAfter(now, in.Delay))
		appended(in.Message, true)
	case model.OpFinalize:
		finished(model.Failed)
		appended(in.Message, true)
	case model.OpRecoverExpired:
		if p.Attempt >= p.MaxAttempts {
			finished(model.Failed)
		} else {
			queued(now.Add(in.Lease))
		}
		appended("", true)
	case model.OpInspectRequeue:
		if n.State != model.Ready || n.Attempt != 0 || len(n.Result) != 0 || n.ClaimToken != 0 || !n.RunAfter.IsZero() ||
			!n.ClaimedAt.IsZero() || !n.Deadline.IsZero() || !n.FinishedAt.IsZero() || len(n.Errors) != len(p.Errors) {
			fail("not requeued by the operator")
		}
	}
	keeps()
}

// checkRead checks Get, List and Counts against the task list.
func checkRead(t *rapid.T, q model.Queue, in model.Input, out model.Output) {
	t.Helper()
	all := q.Tasks()
	switch in.Op {
	case model.OpGet:
		i := slices.IndexFunc(all, func(task model.Task) bool { return task.ID == in.ID })
		if i < 0 || !all[i].Equal(out.Task) {
			t.Fatalf("Get(%q) = %+v", in.ID, out.Task)
		}
	case model.OpList:
		var want []model.Task
		next := ""
		for _, task := range all {
			if task.State != in.State || task.ID <= in.After {
				continue
			}
			if len(want) == in.Limit {
				next = want[len(want)-1].ID
				break
			}
			want = append(want, task)
		}
		if !sameTasks(out.Tasks, want) || out.Next != next {
			t.Fatalf("%v after %q limit %d: got %d tasks, next %q; want %d, next %q", step(in), in.After, in.Limit, len(out.Tasks), out.Next, len(want), next)
		}
	case model.OpCounts:
		var c model.Counts
		for _, task := range all {
			switch task.State {
			case model.Scheduled:
				c.Scheduled++
			case model.Ready:
				c.Ready++
			case model.Running:
				c.Running++
			case model.Succeeded:
				c.Succeeded++
			case model.Failed:
				c.Failed++
			}
		}
		if out.Counts != c {
			t.Fatalf("Counts = %+v, tasks say %+v", out.Counts, c)
		}
	}
}
