package linearizability

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// The edges of the store contract that small plans miss: a state holding
// more tasks than any page an adapter reads internally, clock readings with
// a fraction of a microsecond, and callers that write into what a store
// returned.

// BulkSizes are the sizes of a bulk enqueue (Step.N of an Enqueue): more
// tasks than a node of the memory adapter's B-trees holds (63) and than the
// page the Redis adapter's Prune reads (256), so every op that walks an
// index walks it over several pages.
var BulkSizes = []int{300, 80, 270}

// drawBulk draws the bulk steps of a plan: a client enqueues BulkSizes
// tasks in one step, then (in the same round) takes them as far as the
// state whose index a later op walks, and sometimes runs that op itself:
// Promote or List over the Ready or Scheduled ones; Pop of all of them in
// one batch, then ClaimExpired, RecoverExpired or List over the Running
// ones; or a RecoverExpired that fails them all (one attempt) and a Prune or
// a List over the Failed ones.
func drawBulk(t *rapid.T, p *Plan) []Step {
	n := BulkSizes[rapid.IntRange(0, len(BulkSizes)-1).Draw(t, "bulk size")]
	q := rapid.IntRange(0, len(p.Queues)-1).Draw(t, "bulk queue")
	lease := msDur(rapid.IntRange(1, 3).Draw(t, "bulk lease"))
	fill := Step{Kind: Enqueue, Queue: q, N: n, Attempts: rapid.IntRange(1, 2).Draw(t, "bulk attempts"),
		Priority: rapid.IntRange(-1, 1).Draw(t, "bulk priority")}
	// Three fills in four are one EnqueueBatch where the store has it: a
	// fill of one call per task is hundreds of round trips on a store over
	// the network, most of a PostgreSQL run's time.
	fill.Batched = rapid.IntRange(0, 3).Draw(t, "bulk batched") > 0
	// One batch in two also names IDs that may be taken (Step.Taken).
	fill.Taken = fill.Batched && rapid.Bool().Draw(t, "bulk taken")
	list := func(s model.State) Step { return Step{Kind: List, Queue: q, State: s, N: model.MaxBatch} }
	if rapid.IntRange(0, 3).Draw(t, "bulk scheduled") == 3 {
		fill.Delay = msDur(1)
		return append([]Step{fill}, [][]Step{
			nil,
			{{Kind: Pause, Delay: msDur(1)}, {Kind: Promote, Queue: q}},
			{list(model.Scheduled)},
		}[rapid.IntRange(0, 2).Draw(t, "bulk then")]...)
	}
	pop := Step{Kind: Pop, Queue: q, Lease: lease, N: n}
	lapse := Step{Kind: Pause, Delay: lease}
	// Half the plans take their bulk to Failed or back to Ready: the stage
	// whose index Prune pages through, only reached with a lapse and a
	// recovery in between.
	switch rapid.IntRange(0, 3).Draw(t, "bulk stage") {
	case 0: // Ready
		return append([]Step{fill}, [][]Step{
			nil,
			{list(model.Ready)},
			{{Kind: Pop, Queue: q, Lease: lease, N: n}},
		}[rapid.IntRange(0, 2).Draw(t, "bulk then")]...)
	case 1: // Running
		return append([]Step{fill, pop}, [][]Step{
			nil,
			{lapse, {Kind: ClaimExpired, Queue: q, Lease: lease}},
			{lapse, {Kind: RecoverExpired, Queue: q}},
			{list(model.Running)},
		}[rapid.IntRange(0, 3).Draw(t, "bulk then")]...)
	}
	// Failed (one attempt) or back to Ready (two); three in four fail, as
	// the Prune and List that may follow walk the Failed ones.
	if rapid.IntRange(0, 3).Draw(t, "bulk fails") > 0 {
		fill.Attempts = 1
	}
	done := []Step{fill, pop, lapse, {Kind: RecoverExpired, Queue: q}}
	return append(done, [][]Step{
		nil,
		{{Kind: Prune, Queue: q, Prune: []model.State{model.Failed}, Delay: msDur(1)}},
		{{Kind: Prune, Queue: q, Prune: []model.State{model.Succeeded, model.Failed}, Delay: msDur(1)}},
		{list(model.Failed)},
	}[rapid.IntRange(0, 3).Draw(t, "bulk then")]...)
}

// bulkID is the ID of the i-th task client enqueues in bulk: apart from
// Plan.Tasks, so the bulk tasks do not meet the plan's other enqueues.
func bulkID(client, i int) string { return fmt.Sprintf("b%d-%03d", client, i) }

// fill performs a bulk Enqueue: s.N tasks, every one with the step's
// priority, attempts and run-after, in one call each (a fault hits the
// first call) or, Batched on a core.BatchStore, in one EnqueueBatch.
func (a *actor) fill(ctx context.Context, s Step) {
	q := a.plan.Queues[s.Queue]
	var runAfter time.Time
	if s.Delay > 0 {
		runAfter = a.at(s.Delay)
	}
	if s.Batched && a.batch {
		items := make([]model.EnqueueArgs, s.N)
		for i := range items {
			items[i] = model.EnqueueArgs{ID: bulkID(a.index, a.enqueued), Payload: []byte(a.name), Priority: s.Priority,
				RunAfter: runAfter, MaxAttempts: s.Attempts, Timeout: s.Timeout}
			a.enqueued++
		}
		if s.Taken {
			// The plan's task IDs in the middle of the batch, and its first
			// item again both there and at its end. The plan's IDs are taken
			// only if enqueued before; the repeated first item always is, so
			// every such batch has a refused item with fresh ones after it,
			// which a store must not number.
			taken := make([]model.EnqueueArgs, 0, len(a.plan.Tasks)+1)
			for _, id := range a.plan.Tasks {
				it := items[0]
				it.ID = id
				taken = append(taken, it)
			}
			taken = append(taken, items[0])
			items = slices.Concat(items[:len(items)/2], taken, items[len(items)/2:], items[:1])
		}
		r, err := a.store.(enqueueBatcher).EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: q, Tasks: items})
		if err == nil {
			for _, it := range r.Items {
				if it.Err == nil {
					a.see(it.Task)
				}
			}
		}
		return
	}
	for range s.N {
		if ctx.Err() != nil {
			return
		}
		id := bulkID(a.index, a.enqueued)
		a.enqueued++
		r, err := a.store.Enqueue(ctx, core.EnqueueParams{Queue: q, EnqueueArgs: model.EnqueueArgs{
			ID: id, Payload: []byte(a.name), Priority: s.Priority, RunAfter: runAfter, MaxAttempts: s.Attempts, Timeout: s.Timeout,
		}})
		if err == nil {
			a.see(r.Task)
		}
	}
}

// subMicroClock gives the stores readings with a fraction of a microsecond:
// the fraction the contract lets a store meet. Run-afters and Prune's
// before are whole microseconds (core.Store: callers truncate them), and so
// are the plans' leases, claim TTLs and delays: the model adds a duration to
// the reading exactly, while the memory and Redis adapters truncate the sum
// and SQLite rounds it up, so a lease of 1.5µs ends 1.5µs, 1µs or 2µs after
// the reading depending on the store, and no rule says which is right.
//
// the k-th reading is the wrapped clock's plus (k*step mod 1000)ns. The
// wrapped clock (the recorder's) keeps the whole-microsecond reading, which
// is the instant a store must use and report: core.Store keeps times in
// microseconds, and every adapter truncates its clock's reading.
type subMicroClock struct {
	core.Clock
	step int64
	k    atomic.Int64 // readings so far
}

func newSubMicroClock(c core.Clock, step int) core.Clock {
	if step <= 0 {
		return c
	}
	return &subMicroClock{Clock: c, step: int64(step)}
}

func (c *subMicroClock) Now() time.Time {
	now := c.Clock.Now()
	k := c.k.Add(1) - 1
	return now.Add(time.Duration(k * c.step % 1000))
}

// wholeMicros reports whether every time in the output is whole
// microseconds, as the store contract keeps them.
func (o *Output) wholeMicros() bool {
	if !whole(o.Now) {
		return false
	}
	if o.Task != nil && !taskWhole(*o.Task) {
		return false
	}
	for _, t := range o.Tasks {
		if !taskWhole(t) {
			return false
		}
	}
	for _, c := range o.Claims {
		if !whole(c.Deadline) || !taskWhole(c.Task) {
			return false
		}
	}
	return true
}

func whole(t time.Time) bool { return t.Nanosecond()%1000 == 0 }

func taskWhole(t model.Task) bool {
	for _, at := range []time.Time{t.EnqueuedAt, t.RunAfter, t.ClaimedAt, t.Deadline, t.FinishedAt} {
		if !whole(at) {
			return false
		}
	}
	for _, e := range t.Errors {
		if !whole(e.At) {
			return false
		}
	}
	return true
}

// scribbler is a careless caller: once it has used an answer (just before
// its next call, or at Close) it writes over everything the answer holds
// (payloads, results, error histories, the Tasks, IDs and Claims slices),
// and after each call it writes over the byte slices it passed in. A store
// that hands out or keeps its own slices then answers later calls with the
// scribbles, which the model never does.
type scribbler struct {
	core.Store
	pending []func()
}

// scribbled is what a scribbler writes into strings and bytes.
const scribbled = "scribbled"

func newScribbler(s core.Store, on bool) core.Store {
	if !on {
		return s
	}
	return &scribbler{Store: s}
}

// before runs the scribbles owed for the previous answers.
func (s *scribbler) before() {
	for _, f := range s.pending {
		f()
	}
	s.pending = s.pending[:0]
}

func scribbleBytes(b []byte) {
	for i := range b {
		b[i] = '#'
	}
}

func scribbleTask(t *model.Task) {
	scribbleBytes(t.Payload)
	scribbleBytes(t.Result)
	for i := range t.Errors {
		t.Errors[i] = model.TaskError{Attempt: -1, Message: scribbled}
	}
}

func (s *scribbler) task(t *model.Task) {
	s.pending = append(s.pending, func() { scribbleTask(t) })
}

func (s *scribbler) tasks(ts []model.Task) {
	s.pending = append(s.pending, func() {
		for i := range ts {
			scribbleTask(&ts[i])
			ts[i] = model.Task{ID: scribbled}
		}
	})
}

func (s *scribbler) ids(ids []string) {
	s.pending = append(s.pending, func() {
		for i := range ids {
			ids[i] = scribbled
		}
	})
}

func scribbleTaskResult(s *scribbler, r core.TaskResult, err error) (core.TaskResult, error) {
	if err == nil {
		s.task(&r.Task)
	}
	return r, err
}

func scribbleTasksResult(s *scribbler, r core.TasksResult, err error) (core.TasksResult, error) {
	if err == nil {
		s.tasks(r.Tasks)
	}
	return r, err
}

func scribbleIDsResult(s *scribbler, r core.IDsResult, err error) (core.IDsResult, error) {
	if err == nil {
		s.ids(r.IDs)
	}
	return r, err
}

// Enqueue implements core.Store.
func (s *scribbler) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	s.before()
	p.Payload = bytes.Clone(p.Payload)
	r, err := s.Store.Enqueue(ctx, p)
	scribbleBytes(p.Payload)
	return scribbleTaskResult(s, r, err)
}

// Promote implements core.Store.
func (s *scribbler) Promote(ctx context.Context, p core.PromoteParams) (core.IDsResult, error) {
	s.before()
	r, err := s.Store.Promote(ctx, p)
	return scribbleIDsResult(s, r, err)
}

// Pop implements core.Store.
func (s *scribbler) Pop(ctx context.Context, p core.PopParams) (core.TasksResult, error) {
	s.before()
	r, err := s.Store.Pop(ctx, p)
	return scribbleTasksResult(s, r, err)
}

// Extend implements core.Store.
func (s *scribbler) Extend(ctx context.Context, p core.ExtendParams) (core.TaskResult, error) {
	s.before()
	r, err := s.Store.Extend(ctx, p)
	return scribbleTaskResult(s, r, err)
}

// Ack implements core.Store.
func (s *scribbler) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	s.before()
	p.Result = bytes.Clone(p.Result)
	r, err := s.Store.Ack(ctx, p)
	scribbleBytes(p.Result)
	return scribbleTaskResult(s, r, err)
}

// AckBatch implements core.BatchStore for a store that is one (the runner
// calls it only then).
func (s *scribbler) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	bs, ok := s.Store.(ackBatcher)
	if !ok {
		return core.BatchResult{}, errNoBatch
	}
	s.before()
	acks := make([]core.AckItem, len(p.Acks))
	for i, a := range p.Acks {
		acks[i] = core.AckItem{Claim: a.Claim, Result: bytes.Clone(a.Result)}
	}
	p.Acks = acks
	r, err := bs.AckBatch(ctx, p)
	for _, a := range acks {
		scribbleBytes(a.Result)
	}
	if err == nil {
		for i := range r.Items {
			if r.Items[i].Err == nil {
				s.task(&r.Items[i].Task)
			}
		}
		s.tasks(r.Claimed)
	}
	return r, err
}

// EnqueueBatch implements core.BatchStore for a store that is one (the
// runner calls it only then).
func (s *scribbler) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	bs, ok := s.Store.(enqueueBatcher)
	if !ok {
		return core.BatchResult{}, errNoBatch
	}
	s.before()
	p.Tasks = cloneArgs(p.Tasks)
	r, err := bs.EnqueueBatch(ctx, p)
	for _, e := range p.Tasks {
		scribbleBytes(e.Payload)
	}
	if err == nil {
		for i := range r.Items {
			if r.Items[i].Err == nil {
				s.task(&r.Items[i].Task)
			}
		}
	}
	return r, err
}

// Fail implements core.Store.
func (s *scribbler) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	s.before()
	r, err := s.Store.Fail(ctx, p)
	return scribbleTaskResult(s, r, err)
}

// Retry implements core.Store.
func (s *scribbler) Retry(ctx context.Context, p core.RetryParams) (core.TaskResult, error) {
	s.before()
	r, err := s.Store.Retry(ctx, p)
	return scribbleTaskResult(s, r, err)
}

// ClaimExpired implements core.Store.
func (s *scribbler) ClaimExpired(ctx context.Context, p core.ClaimExpiredParams) (core.ReapResult, error) {
	s.before()
	r, err := s.Store.ClaimExpired(ctx, p)
	if err == nil {
		cs := r.Claims
		s.pending = append(s.pending, func() {
			for i := range cs {
				scribbleTask(&cs[i].Task)
				cs[i] = model.ReapClaim{TaskID: scribbled}
			}
		})
	}
	return r, err
}

// Requeue implements core.Store.
func (s *scribbler) Requeue(ctx context.Context, p core.RequeueParams) (core.TaskResult, error) {
	s.before()
	r, err := s.Store.Requeue(ctx, p)
	return scribbleTaskResult(s, r, err)
}

// Finalize implements core.Store.
func (s *scribbler) Finalize(ctx context.Context, p core.FinalizeParams) (core.TaskResult, error) {
	s.before()
	r, err := s.Store.Finalize(ctx, p)
	return scribbleTaskResult(s, r, err)
}

// RecoverExpired implements core.Store.
func (s *scribbler) RecoverExpired(ctx context.Context, p core.RecoverExpiredParams) (core.TasksResult, error) {
	s.before()
	r, err := s.Store.RecoverExpired(ctx, p)
	return scribbleTasksResult(s, r, err)
}

// Get implements core.Store.
func (s *scribbler) Get(ctx context.Context, p core.GetParams) (core.Task, error) {
	s.before()
	t, err := s.Store.Get(ctx, p)
	if err == nil {
		s.task(&t)
	}
	return t, err
}

// List implements core.Store.
func (s *scribbler) List(ctx context.Context, p core.ListParams) (core.ListResult, error) {
	s.before()
	r, err := s.Store.List(ctx, p)
	if err == nil {
		s.tasks(r.Tasks)
	}
	return r, err
}

// Counts implements core.Store.
func (s *scribbler) Counts(ctx context.Context, p core.CountsParams) (core.Counts, error) {
	s.before()
	return s.Store.Counts(ctx, p)
}

// InspectRequeue implements core.Store.
func (s *scribbler) InspectRequeue(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	s.before()
	r, err := s.Store.InspectRequeue(ctx, p)
	return scribbleTaskResult(s, r, err)
}

// Remove implements core.Store.
func (s *scribbler) Remove(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	s.before()
	r, err := s.Store.Remove(ctx, p)
	return scribbleTaskResult(s, r, err)
}

// Prune implements core.Store.
func (s *scribbler) Prune(ctx context.Context, p core.PruneParams) (core.IDsResult, error) {
	s.before()
	p.States = slices.Clone(p.States)
	r, err := s.Store.Prune(ctx, p)
	for i := range p.States {
		p.States[i] = model.Ready
	}
	return scribbleIDsResult(s, r, err)
}

// Close implements core.Store: the last answers are scribbled over too.
func (s *scribbler) Close() error {
	s.before()
	return s.Store.Close()
}
