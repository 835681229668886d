package spec

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// batchSuite checks EnqueueBatch and AckBatch: every item answered on its
// own by the single operation's rules, refused items changing nothing, the
// batch refused as a whole only for its own invalid arguments, and an
// AckBatch's pop claiming after the acks exactly as Pop would.
var batchSuite = []suiteCase{
	{name: "EnqueueBatchAnswersEachItemOnItsOwnAsEnqueueWould", run: func(e *env) {
		bs := e.batch()
		e.enqueue("old")
		e.clock.Advance(time.Millisecond)
		later := e.now().Add(time.Hour)
		res, err := bs.EnqueueBatch(e.ctx, core.EnqueueBatchParams{Queue: e.q, Tasks: []model.EnqueueArgs{
			{ID: "a", Payload: []byte("A"), Priority: 3, MaxAttempts: 2},
			{ID: "old", MaxAttempts: 1},                                // exists
			{ID: "", MaxAttempts: 1},                                   // invalid ID
			{ID: "a", MaxAttempts: 1},                                  // added by the first item
			{ID: "p", Priority: model.MaxPriority + 1, MaxAttempts: 1}, // invalid priority
			{ID: "m", MaxAttempts: 0},                                  // invalid attempts
			{ID: "later", RunAfter: later, MaxAttempts: 1},             // scheduled
			{ID: "b", MaxAttempts: 1},
		}})
		e.ok("EnqueueBatch", err)
		if !res.Now.Equal(e.now()) {
			e.t.Errorf("EnqueueBatch Now = %s, want the clock's %s", formatTime(res.Now), formatTime(e.now()))
		}
		e.wantItems("EnqueueBatch", res, nil, core.ErrConflict, core.ErrInvalidArgument, core.ErrConflict,
			core.ErrInvalidArgument, core.ErrInvalidArgument, nil, nil)
		e.wantTask("item a", res.Items[0].Task, e.get("a"))
		if a := e.get("a"); a.State != core.Ready || string(a.Payload) != "A" || a.Priority != 3 || a.MaxAttempts != 2 {
			e.t.Errorf("a: %s", formatTask(a))
		}
		if l := e.get("later"); l.State != core.Scheduled || !l.RunAfter.Equal(later) {
			e.t.Errorf("later: %s", formatTask(l))
		}
		if e.get("old").Version != 1 {
			e.t.Errorf("the refused item changed old: %s", formatTask(e.get("old")))
		}
		// Each accepted item stamps one version, in item order.
		if va, vl, vb := e.get("a").Version, e.get("later").Version, e.get("b").Version; !(va < vl && vl < vb) {
			e.t.Errorf("versions a=%d later=%d b=%d: not in item order", va, vl, vb)
		}
	}},
	{name: "EnqueueBatchRefusesTheItemsPastTheQueueCapacity", capacity: 2, run: func(e *env) {
		bs := e.batch()
		e.enqueue("a")
		res, err := bs.EnqueueBatch(e.ctx, core.EnqueueBatchParams{Queue: e.q, Tasks: []model.EnqueueArgs{
			{ID: "b", MaxAttempts: 1}, {ID: "c", MaxAttempts: 1}, {ID: "d", MaxAttempts: 1},
		}})
		e.ok("EnqueueBatch", err)
		e.wantItems("EnqueueBatch", res, nil, core.ErrQueueFull, core.ErrQueueFull)
		c, err := e.s.Counts(e.ctx, core.CountsParams{Queue: e.q})
		e.ok("Counts", err)
		if c.Ready != 2 {
			e.t.Errorf("counts %+v, want 2 ready", c)
		}
	}},
	{name: "AckBatchAnswersEachClaimOnItsOwnAsAckWould", run: func(e *env) {
		bs := e.batch()
		staleOld, rc := e.reaped("taken")
		// A broker requeued it for later: the worker's claim is stale.
		_, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: rc, Delay: time.Hour})
		e.ok("Requeue", err)
		stale, _ := e.reaped("stale") // a broker claimed it but has not decided: the worker's claim still holds it
		_, a := e.running("a")
		_, b := e.running("b")
		ready := e.enqueue("ready")
		forged := core.Claim{Queue: e.q, TaskID: "ready", Token: ready.Version}
		e.clock.Advance(time.Millisecond)
		res, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: []core.AckItem{
			{Claim: a, Result: []byte("A")},
			{Claim: staleOld, Result: []byte("late")},                       // superseded
			{Claim: forged},                                                 // forged from a version
			{Claim: a, Result: []byte("again")},                             // duplicate
			{Claim: core.Claim{Queue: e.q, TaskID: "b"}},                    // token 0
			{Claim: core.Claim{Queue: e.q, TaskID: "gone", Token: a.Token}}, // no such task
			{Claim: core.Claim{Queue: e.q, TaskID: "", Token: a.Token}},     // invalid ID
			{Claim: stale, Result: []byte("late but first")},                // lease lapsed, nobody decided
			{Claim: b, Result: []byte("B")},
		}})
		e.ok("AckBatch", err)
		if !res.Now.Equal(e.now()) {
			e.t.Errorf("AckBatch Now = %s, want the clock's %s", formatTime(res.Now), formatTime(e.now()))
		}
		e.wantItems("AckBatch", res, nil, core.ErrStaleClaim, core.ErrStaleClaim,
			&model.TransitionError{Op: model.OpAck, State: core.Succeeded}, core.ErrInvalidArgument,
			core.ErrStaleClaim, core.ErrInvalidArgument, nil, nil)
		for id, result := range map[string]string{"a": "A", "b": "B", "stale": "late but first"} {
			if t := e.get(id); t.State != core.Succeeded || string(t.Result) != result {
				e.t.Errorf("%s: %s, want succeeded with %q", id, formatTask(t), result)
			}
		}
		if t := e.get("taken"); t.State != core.Scheduled {
			e.t.Errorf("the stale item changed taken: %s", formatTask(t))
		}
		if t := e.get("ready"); t.Version != ready.Version {
			e.t.Errorf("the forged item changed ready: %s", formatTask(t))
		}
	}},
	{name: "AckBatchOfManyDistinctClaimsStampsThoseThatHoldInOrder", run: func(e *env) {
		// More claims than a store may decide in one statement or script,
		// each on a task of its own, with refused ones spread among them:
		// each is answered as Ack would answer it, and the versions of those
		// that hold follow one another in the batch's order.
		bs := e.batch()
		const n = 75
		acks := make([]core.AckItem, n)
		want := make([]error, n)
		for i := range acks {
			id := fmt.Sprintf("m%03d", i)
			_, c := e.running(id)
			switch i % 8 {
			case 3:
				c.Token++ // not the token that holds it
				want[i] = core.ErrStaleClaim
			case 6:
				c.TaskID = "gone-" + id // no such task
				want[i] = core.ErrStaleClaim
			}
			acks[i] = core.AckItem{Claim: c, Result: []byte(id)}
		}
		e.clock.Advance(time.Millisecond)
		res, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: acks})
		e.ok("AckBatch", err)
		e.wantItems("AckBatch", res, want...)
		var last uint64
		for i, it := range res.Items {
			id := fmt.Sprintf("m%03d", i)
			t := e.get(id)
			if want[i] != nil {
				if t.State != core.Running {
					e.t.Errorf("item %d was refused but changed %s: %s", i, id, formatTask(t))
				}
				continue
			}
			if t.State != core.Succeeded || string(t.Result) != id || t.Version != it.Task.Version || !it.Task.FinishedAt.Equal(e.now()) {
				e.t.Errorf("item %d answered %s; the store holds %s, want it succeeded now with result %q", i, formatTask(it.Task), formatTask(t), id)
			}
			if last != 0 && it.Task.Version != last+1 {
				e.t.Errorf("item %d stamped with version %d after %d, want the next one", i, it.Task.Version, last)
			}
			last = it.Task.Version
		}
	}},
	{name: "AckBatchOfATaskAnOperatorCancelledIsRefusedAsAckWould", run: func(e *env) {
		// The claim still names the task by its token, so only the record
		// of the Cancel tells this refusal from the Failed state's.
		bs := e.batch()
		_, a := e.running("a")
		_, c := e.running("c")
		_, err := e.s.Cancel(e.ctx, core.InspectParams{Queue: e.q, ID: "c"})
		e.ok("Cancel", err)
		cancelled := e.get("c")
		res, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: []core.AckItem{
			{Claim: a, Result: []byte("A")},
			{Claim: c, Result: []byte("C")},
		}})
		e.ok("AckBatch", err)
		e.wantItems("AckBatch", res, nil, model.ErrCancelled)
		if t := e.get("c"); t.Version != cancelled.Version || len(t.Result) != 0 {
			e.t.Errorf("the refused item changed c: %s, was %s", formatTask(t), formatTask(cancelled))
		}
	}},
	{name: "AckBatchWhoseItemsAreAllRefusedChangesNothing", run: func(e *env) {
		bs := e.batch()
		_, a := e.running("a")
		_, err := e.s.Ack(e.ctx, core.AckParams{Claim: a})
		e.ok("Ack", err)
		e.rejectsNothingChanged(func() error {
			res, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: []core.AckItem{{Claim: a}, {Claim: a}}})
			if err == nil {
				e.wantItems("AckBatch", res, &model.TransitionError{Op: model.OpAck, State: core.Succeeded},
					&model.TransitionError{Op: model.OpAck, State: core.Succeeded})
			}
			return err
		})
	}},
	{name: "RejectsBatchesWithNoItemsOrMoreThanMaxBatch", run: func(e *env) {
		bs := e.batch()
		_, c := e.running("a")
		tooManyAcks := make([]core.AckItem, model.MaxBatch+1)
		tooManyTasks := make([]model.EnqueueArgs, model.MaxBatch+1)
		for i := range tooManyAcks {
			tooManyAcks[i] = core.AckItem{Claim: c}
			tooManyTasks[i] = model.EnqueueArgs{ID: fmt.Sprintf("t%04d", i), MaxAttempts: 1}
		}
		for _, tasks := range [][]model.EnqueueArgs{nil, {}, tooManyTasks} {
			e.rejects(core.ErrInvalidArgument, func() error {
				_, err := bs.EnqueueBatch(e.ctx, core.EnqueueBatchParams{Queue: e.q, Tasks: tasks})
				return err
			})
		}
		for _, acks := range [][]core.AckItem{nil, {}, tooManyAcks} {
			e.rejects(core.ErrInvalidArgument, func() error {
				_, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: acks})
				return err
			})
		}
		e.rejects(core.ErrInvalidArgument, func() error {
			_, err := bs.EnqueueBatch(e.ctx, core.EnqueueBatchParams{Queue: "bad queue", Tasks: []model.EnqueueArgs{{ID: "x", MaxAttempts: 1}}})
			return err
		})
		e.rejects(core.ErrInvalidArgument, func() error {
			_, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: "", Acks: []core.AckItem{{Claim: c}}})
			return err
		})
	}},
	{name: "RejectsAckBatchOfAClaimOfAnotherQueue", run: func(e *env) {
		bs := e.batch()
		_, c := e.running("a")
		e.enqueueIn("other", "o")
		res, err := e.s.Pop(e.ctx, core.PopParams{Queue: "other", Lease: lease, N: 1})
		e.ok("Pop(other)", err)
		o := res.Tasks[0].Claim()
		// A batch that names a claim of another queue is refused as a whole,
		// its good items included, in both queues.
		e.rejects(core.ErrInvalidArgument, func() error {
			_, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: []core.AckItem{{Claim: c}, {Claim: o}}})
			return err
		}, e.q, "other")
		e.rejects(core.ErrInvalidArgument, func() error {
			_, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: "other", Acks: []core.AckItem{{Claim: c}}})
			return err
		}, e.q, "other")
		forged := c
		forged.Queue = ""
		e.rejects(core.ErrInvalidArgument, func() error {
			_, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: []core.AckItem{{Claim: forged}}})
			return err
		}, e.q, "other")
	}},
	{name: "AcceptsBatchesOfExactlyMaxBatchItems", run: func(e *env) {
		bs := e.batch()
		tasks := make([]model.EnqueueArgs, model.MaxBatch)
		for i := range tasks {
			tasks[i] = model.EnqueueArgs{ID: fmt.Sprintf("t%04d", i), Payload: []byte{byte(i)}, MaxAttempts: 1}
		}
		res, err := bs.EnqueueBatch(e.ctx, core.EnqueueBatchParams{Queue: e.q, Tasks: tasks})
		e.ok("EnqueueBatch", err)
		e.wantItems("EnqueueBatch", res, make([]error, model.MaxBatch)...)
		popped := e.pop(model.MaxBatch, lease)
		acks := make([]core.AckItem, len(popped))
		for i, t := range popped {
			acks[i] = core.AckItem{Claim: t.Claim(), Result: []byte(t.ID)}
		}
		res, err = bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: acks})
		e.ok("AckBatch", err)
		e.wantItems("AckBatch", res, make([]error, model.MaxBatch)...)
		c, err := e.s.Counts(e.ctx, core.CountsParams{Queue: e.q})
		e.ok("Counts", err)
		if c.Succeeded != model.MaxBatch {
			e.t.Errorf("counts %+v, want %d succeeded", c, model.MaxBatch)
		}
	}},
	{name: "AckBatchWithAPopAcksThenClaimsAsPopWould", run: func(e *env) {
		bs := e.batch()
		staleOld, rc := e.reaped("taken")
		_, err := e.s.Requeue(e.ctx, core.RequeueParams{ReapClaim: rc}) // Ready again: the worker's claim is stale
		e.ok("Requeue", err)
		e.enqueue("a", priority(5))
		a := e.popID("a").Claim()
		e.enqueue("low", priority(-1))
		e.enqueue("high", priority(2))
		e.enqueue("later", runAfter(e.now().Add(time.Hour)))
		e.clock.Advance(time.Millisecond)
		const popLease = 7 * time.Second
		res, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: []core.AckItem{
			{Claim: a, Result: []byte("A")},
			{Claim: staleOld, Result: []byte("late")}, // superseded: its task is Ready, and the pop claims it
		}, Pop: core.AckPop{Lease: popLease, N: 3}})
		e.ok("AckBatch", err)
		e.wantItems("AckBatch", res, nil, core.ErrStaleClaim)
		if !res.Now.Equal(e.now()) {
			e.t.Errorf("AckBatch Now = %s, want the clock's %s", formatTime(res.Now), formatTime(e.now()))
		}
		// Pop's order: the highest priority, then the first to become Ready;
		// the scheduled task is not due.
		e.wantIDs("AckBatch's pop", taskIDs(res.Claimed), "high", "taken", "low")
		acked := e.get("a")
		if acked.State != core.Succeeded || string(acked.Result) != "A" {
			e.t.Errorf("a: %s, want succeeded with %q", formatTask(acked), "A")
		}
		prev := acked.Version
		for _, c := range res.Claimed {
			e.wantTask("claimed "+c.ID, c, e.get(c.ID))
			if c.State != core.Running || c.ClaimToken != c.Version || !c.ClaimedAt.Equal(e.now()) ||
				!c.Deadline.Equal(e.now().Add(popLease)) {
				e.t.Errorf("claimed %s", formatTask(c))
			}
			// The pop comes after the acks: its tokens are drawn after them.
			if c.Version <= prev {
				e.t.Errorf("claimed %s has token %d, not after %d", c.ID, c.Version, prev)
			}
			prev = c.Version
		}
		if t := e.get("taken"); t.Attempt != 2 || len(t.Result) != 0 {
			e.t.Errorf("the stale item's task: %s, want claimed again and not acknowledged", formatTask(t))
		}
		// Nothing Ready is left: a pop that finds nothing still acks.
		claims := make([]core.AckItem, len(res.Claimed))
		for i, c := range res.Claimed {
			claims[i] = core.AckItem{Claim: c.Claim(), Result: []byte(c.ID)}
		}
		res, err = bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: claims, Pop: core.AckPop{Lease: popLease, N: model.MaxBatch}})
		e.ok("AckBatch", err)
		e.wantItems("AckBatch", res, nil, nil, nil)
		if len(res.Claimed) != 0 {
			e.t.Errorf("an empty queue's pop claimed %v", taskIDs(res.Claimed))
		}
		c, err := e.s.Counts(e.ctx, core.CountsParams{Queue: e.q})
		e.ok("Counts", err)
		if c.Succeeded != 4 || c.Scheduled != 1 || c.Running != 0 {
			e.t.Errorf("counts %+v, want 4 succeeded, 1 scheduled", c)
		}
	}},
	{name: "AckBatchWithAPopNeverAcknowledgesWhatItsPopClaims", run: func(e *env) {
		bs := e.batch()
		_, a := e.running("a")
		next := e.enqueue("next")
		// The token the pop draws for next, were it drawn before the acks;
		// the version next would have were its item acked first.
		guesses := []core.AckItem{{Claim: a}}
		for tok := next.Version; tok <= next.Version+4; tok++ {
			guesses = append(guesses, core.AckItem{Claim: core.Claim{Queue: e.q, TaskID: "next", Token: tok}})
		}
		res, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: guesses, Pop: core.AckPop{Lease: lease, N: 1}})
		e.ok("AckBatch", err)
		e.wantItems("AckBatch", res, nil, core.ErrStaleClaim, core.ErrStaleClaim, core.ErrStaleClaim, core.ErrStaleClaim, core.ErrStaleClaim)
		e.wantIDs("AckBatch's pop", taskIDs(res.Claimed), "next")
		if t := e.get("next"); t.State != core.Running {
			e.t.Errorf("next: %s, want running for the pop's claim", formatTask(t))
		}
	}},
	{name: "RejectsAckBatchWithAPopPopWouldRefuse", run: func(e *env) {
		bs := e.batch()
		_, c := e.running("a")
		e.enqueue("b")
		for _, p := range []core.AckPop{{Lease: lease, N: -1}, {Lease: lease, N: model.MaxBatch + 1}, {N: 1}, {Lease: -time.Second, N: 1}} {
			e.rejects(core.ErrInvalidArgument, func() error {
				_, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: []core.AckItem{{Claim: c}}, Pop: p})
				return err
			})
		}
		// With no pop the lease is not read.
		res, err := bs.AckBatch(e.ctx, core.AckBatchParams{Queue: e.q, Acks: []core.AckItem{{Claim: c}}, Pop: core.AckPop{Lease: -time.Second}})
		e.ok("AckBatch with no pop", err)
		e.wantItems("AckBatch", res, nil)
		if len(res.Claimed) != 0 {
			e.t.Errorf("a batch with no pop claimed %v", taskIDs(res.Claimed))
		}
	}},
}

// batch returns the store under test (through the twin) as a BatchStore, and
// stops the test when the store does not implement it.
func (e *env) batch() core.BatchStore {
	e.t.Helper()
	if _, ok := e.raw.(core.BatchStore); !ok {
		e.t.Fatal(errNoBatch(e.raw))
	}
	return e.s
}

// wantItems fails unless the batch answered one item per error of want, each
// with that error (by kind; a TransitionError also by op and state) and, when
// it is nil, a task.
func (e *env) wantItems(what string, res core.BatchResult, want ...error) {
	e.t.Helper()
	if len(res.Items) != len(want) {
		e.t.Fatalf("%s answered %d items, want %d", what, len(res.Items), len(want))
	}
	for i, w := range want {
		got := res.Items[i]
		if !sameError(got.Err, w) {
			e.t.Errorf("%s item %d: got %s (%v), want %s", what, i, describeError(got.Err), got.Err, describeError(w))
		}
		if w == nil && got.Err == nil && got.Task.ID == "" {
			e.t.Errorf("%s item %d: accepted without a task", what, i)
		}
	}
}

// rejectsNothingChanged runs op and checks, reading the queue before and
// after, that it changed nothing, whatever it answered.
func (e *env) rejectsNothingChanged(op func() error) {
	e.t.Helper()
	before, err := readQueue(e.ctx, e.raw, e.q)
	e.ok("reading the store", err)
	_ = op()
	after, err := readQueue(e.ctx, e.raw, e.q)
	e.ok("reading the store", err)
	if d := diffQueueState(e.q, after, before); d != "" {
		e.t.Errorf("a batch of refused items changed the store (\"store\" is after, \"model\" before):\n%s", d)
	}
}
