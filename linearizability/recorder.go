package linearizability

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// Operation is one recorded call of a client and its return.
type Operation struct {
	// Client is the porcupine client ID (0, 1, ...). A client whose op was
	// indeterminate continues under a new ID.
	Client int `json:"client"`
	// Actor names the plan's client that made the call ("worker 2").
	Actor string `json:"actor"`
	// Call and Return are monotonic nanoseconds since the recorder started;
	// Return is math.MaxInt64 for an indeterminate op.
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	Input  Input  `json:"input"`
	Output Output `json:"output"`
}

// Event is a mark on a history's timeline that is not a store call: a clock
// advance, a round boundary. Visualizations show events as annotations.
type Event struct {
	At   int64  `json:"at"`
	Text string `json:"text"`
}

type reading struct {
	at  int64
	now time.Time
}

// Recorder records every call to the stores it wraps, and every reading of
// the clocks it wraps, on one monotonic timeline. It is safe for concurrent
// use; each wrapped store (a Client) is meant for one goroutine at a time.
type Recorder struct {
	start time.Time // carries the monotonic reading

	mu       sync.Mutex
	ops      []Operation
	events   []Event
	readings []reading
	clients  int
}

// NewRecorder returns a recorder whose timeline starts now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// tick returns the monotonic time since the recorder started, in ns.
func (r *Recorder) tick() int64 { return int64(time.Since(r.start)) }

// Event notes a mark on the timeline.
func (r *Recorder) Event(text string) {
	at := r.tick()
	r.mu.Lock()
	r.events = append(r.events, Event{At: at, Text: text})
	r.mu.Unlock()
}

func (r *Recorder) newClientID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clients++
	return r.clients - 1
}

// Clock wraps a clock so that every reading is recorded: an indeterminate
// op may have used any reading taken after it was called, and the checker
// tries each of them. Give the wrapped clock to the stores under test.
func (r *Recorder) Clock(c core.Clock) core.Clock { return &recordingClock{Clock: c, r: r} }

type recordingClock struct {
	core.Clock
	r *Recorder

	// Every every-th reading from the reading from on blocks for stall
	// before Now returns; see Plan.StallEvery.
	every, from int
	stall       time.Duration
	stalled     int // stalls so far, at most MaxStalls
}

func (c *recordingClock) Now() time.Time {
	at := c.r.tick()
	now := c.Clock.Now()
	c.r.mu.Lock()
	n := len(c.r.readings)
	c.r.readings = append(c.r.readings, reading{at, now})
	stall := c.every > 0 && n >= c.from && (n-c.from)%c.every == 0 && c.stalled < MaxStalls
	if stall {
		c.stalled++
	}
	c.r.mu.Unlock()
	if stall {
		time.Sleep(c.stall)
	}
	return now
}

// Operations returns the recorded operations in call order. The input of an
// indeterminate op gets its NowCandidates: every distinct clock reading
// recorded from its call on. So does a refused Enqueue with a unique key,
// whose answer depends on the reading the store took (a key held for a
// period) though a refusal carries none: every reading between its call
// and its return.
func (r *Recorder) Operations() []Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := slices.Clone(r.ops)
	slices.SortStableFunc(ops, func(a, b Operation) int { return cmpInt64(a.Call, b.Call) })
	for i := range ops {
		in, out := ops[i].Input, ops[i].Output
		keyed := out.Err != "" && in.Op == model.OpEnqueue && in.Enqueue != nil && in.Enqueue.UniqueKey != ""
		if !out.Indeterminate && !keyed {
			continue
		}
		var cands []time.Time
		for _, rd := range r.readings {
			if rd.at >= ops[i].Call && (out.Indeterminate || rd.at <= ops[i].Return) {
				cands = append(cands, rd.now)
			}
		}
		slices.SortFunc(cands, time.Time.Compare)
		ops[i].Input.NowCandidates = slices.CompactFunc(cands, time.Time.Equal)
	}
	return ops
}

// Events returns the recorded events in time order.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Client wraps a store: every call through the returned store is recorded
// as an operation of one client, named actor. An op that ends in a transport
// error (an error of no kind the store contract defines) is recorded as
// indeterminate, and the client continues under a new porcupine client ID.
func (r *Recorder) Client(actor string, s core.Store) *Client {
	return &Client{r: r, s: s, actor: actor, id: r.newClientID()}
}

// Client is a core.Store that records the calls of one client. Use it from
// one goroutine at a time.
type Client struct {
	r     *Recorder
	s     core.Store
	actor string
	id    int
}

var _ core.Store = (*Client)(nil)

// record calls the store and records the call, its return and the output
// made from its result by fill.
func record[R any](c *Client, in Input, call func() (R, error), fill func(*Output, R)) (R, error) {
	begin := c.r.tick()
	res, err := call()
	end := c.r.tick()
	var out Output
	if err != nil {
		out.setError(err)
	} else {
		fill(&out, res)
	}
	if out.Indeterminate {
		end = math.MaxInt64
	}
	op := Operation{Client: c.id, Actor: c.actor, Call: begin, Return: end, Input: in, Output: out}
	c.r.mu.Lock()
	c.r.ops = append(c.r.ops, op)
	c.r.mu.Unlock()
	if out.Indeterminate {
		c.id = c.r.newClientID()
	}
	return res, err
}

func taskOut(o *Output, r core.TaskResult) {
	t := cloneTask(r.Task)
	o.Now, o.Task = r.Now, &t
}

func tasksOut(o *Output, r core.TasksResult) {
	o.Now = r.Now
	o.Tasks = cloneTasks(r.Tasks)
}

func idsOut(o *Output, r core.IDsResult) { o.Now, o.IDs = r.Now, slices.Clone(r.IDs) }

func cloneTasks(ts []model.Task) []model.Task {
	out := make([]model.Task, len(ts))
	for i, t := range ts {
		out[i] = cloneTask(t)
	}
	return out
}

func claimRef(c core.Claim) *ClaimRef {
	return &ClaimRef{TaskID: c.TaskID, Token: c.Token, Attempt: c.Attempt, Deadline: c.Deadline}
}

func reapRef(c core.ReapClaim) *ClaimRef {
	return &ClaimRef{TaskID: c.TaskID, Version: c.Version, Deadline: c.Deadline}
}

// Enqueue implements core.Store.
func (c *Client) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	args := p.EnqueueArgs
	args.Payload = bytes.Clone(args.Payload)
	in := Input{Queue: p.Queue, Op: model.OpEnqueue, Enqueue: &args}
	return record(c, in, func() (core.TaskResult, error) { return c.s.Enqueue(ctx, p) }, taskOut)
}

// Promote implements core.Store.
func (c *Client) Promote(ctx context.Context, p core.PromoteParams) (core.IDsResult, error) {
	in := Input{Queue: p.Queue, Op: model.OpPromote, Limit: p.Limit}
	return record(c, in, func() (core.IDsResult, error) { return c.s.Promote(ctx, p) }, idsOut)
}

// Pop implements core.Store.
func (c *Client) Pop(ctx context.Context, p core.PopParams) (core.TasksResult, error) {
	in := Input{Queue: p.Queue, Op: model.OpPop, Lease: p.Lease, Limit: p.N}
	return record(c, in, func() (core.TasksResult, error) { return c.s.Pop(ctx, p) }, tasksOut)
}

// Extend implements core.Store.
func (c *Client) Extend(ctx context.Context, p core.ExtendParams) (core.TaskResult, error) {
	in := Input{Queue: p.Claim.Queue, Op: model.OpExtend, Claim: claimRef(p.Claim), Lease: p.Lease}
	return record(c, in, func() (core.TaskResult, error) { return c.s.Extend(ctx, p) }, taskOut)
}

// Ack implements core.Store.
func (c *Client) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	in := Input{Queue: p.Claim.Queue, Op: model.OpAck, Claim: claimRef(p.Claim), Result: bytes.Clone(p.Result)}
	return record(c, in, func() (core.TaskResult, error) { return c.s.Ack(ctx, p) }, taskOut)
}

// Fail implements core.Store.
func (c *Client) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	in := Input{Queue: p.Claim.Queue, Op: model.OpFail, Claim: claimRef(p.Claim), Message: p.Message}
	return record(c, in, func() (core.TaskResult, error) { return c.s.Fail(ctx, p) }, taskOut)
}

// Retry implements core.Store.
func (c *Client) Retry(ctx context.Context, p core.RetryParams) (core.TaskResult, error) {
	in := Input{Queue: p.Claim.Queue, Op: model.OpRetry, Claim: claimRef(p.Claim), Delay: p.Delay, Message: p.Message}
	return record(c, in, func() (core.TaskResult, error) { return c.s.Retry(ctx, p) }, taskOut)
}

// ClaimExpired implements core.Store.
func (c *Client) ClaimExpired(ctx context.Context, p core.ClaimExpiredParams) (core.ReapResult, error) {
	in := Input{Queue: p.Queue, Op: model.OpClaimExpired, Lease: p.ClaimTTL, Limit: p.Limit}
	return record(c, in, func() (core.ReapResult, error) { return c.s.ClaimExpired(ctx, p) },
		func(o *Output, r core.ReapResult) {
			o.Now = r.Now
			o.Claims = make([]model.ReapClaim, len(r.Claims))
			for i, rc := range r.Claims {
				rc.Task = cloneTask(rc.Task)
				o.Claims[i] = rc
			}
		})
}

// Requeue implements core.Store.
func (c *Client) Requeue(ctx context.Context, p core.RequeueParams) (core.TaskResult, error) {
	in := Input{Queue: p.ReapClaim.Queue, Op: model.OpRequeue, ReapClaim: reapRef(p.ReapClaim), Delay: p.Delay, Message: p.Message}
	return record(c, in, func() (core.TaskResult, error) { return c.s.Requeue(ctx, p) }, taskOut)
}

// Finalize implements core.Store.
func (c *Client) Finalize(ctx context.Context, p core.FinalizeParams) (core.TaskResult, error) {
	in := Input{Queue: p.ReapClaim.Queue, Op: model.OpFinalize, ReapClaim: reapRef(p.ReapClaim), Message: p.Message}
	return record(c, in, func() (core.TaskResult, error) { return c.s.Finalize(ctx, p) }, taskOut)
}

// RecoverExpired implements core.Store.
func (c *Client) RecoverExpired(ctx context.Context, p core.RecoverExpiredParams) (core.TasksResult, error) {
	in := Input{Queue: p.Queue, Op: model.OpRecoverExpired, Lease: p.Delay, Limit: p.Limit}
	return record(c, in, func() (core.TasksResult, error) { return c.s.RecoverExpired(ctx, p) }, tasksOut)
}

// Get implements core.Store.
func (c *Client) Get(ctx context.Context, p core.GetParams) (core.Task, error) {
	in := Input{Queue: p.Queue, Op: model.OpGet, ID: p.ID}
	return record(c, in, func() (core.Task, error) { return c.s.Get(ctx, p) },
		func(o *Output, t core.Task) { t = cloneTask(t); o.Task = &t })
}

// List implements core.Store.
func (c *Client) List(ctx context.Context, p core.ListParams) (core.ListResult, error) {
	in := Input{Queue: p.Queue, Op: model.OpList, State: p.State, After: p.After, Limit: p.Limit}
	return record(c, in, func() (core.ListResult, error) { return c.s.List(ctx, p) },
		func(o *Output, r core.ListResult) { o.Tasks, o.Next = cloneTasks(r.Tasks), r.Next })
}

// Counts implements core.Store.
func (c *Client) Counts(ctx context.Context, p core.CountsParams) (core.Counts, error) {
	in := Input{Queue: p.Queue, Op: model.OpCounts}
	return record(c, in, func() (core.Counts, error) { return c.s.Counts(ctx, p) },
		func(o *Output, n core.Counts) { o.Counts = &n })
}

// Pause implements core.Store.
func (c *Client) Pause(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	in := Input{Queue: p.Queue, Op: model.OpPause}
	return record(c, in, func() (core.PauseResult, error) { return c.s.Pause(ctx, p) }, pausedOut)
}

// Resume implements core.Store.
func (c *Client) Resume(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	in := Input{Queue: p.Queue, Op: model.OpResume}
	return record(c, in, func() (core.PauseResult, error) { return c.s.Resume(ctx, p) }, pausedOut)
}

func pausedOut(o *Output, r core.PauseResult) {
	paused := r.Paused
	o.Paused = &paused
}

// InspectRequeue implements core.Store.
func (c *Client) InspectRequeue(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	in := Input{Queue: p.Queue, Op: model.OpInspectRequeue, ID: p.ID, Expect: p.Expect}
	return record(c, in, func() (core.TaskResult, error) { return c.s.InspectRequeue(ctx, p) }, taskOut)
}

// Cancel implements core.Store.
func (c *Client) Cancel(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	in := Input{Queue: p.Queue, Op: model.OpCancel, ID: p.ID, Expect: p.Expect}
	return record(c, in, func() (core.TaskResult, error) { return c.s.Cancel(ctx, p) }, taskOut)
}

// Remove implements core.Store.
func (c *Client) Remove(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	in := Input{Queue: p.Queue, Op: model.OpRemove, ID: p.ID, Expect: p.Expect}
	return record(c, in, func() (core.TaskResult, error) { return c.s.Remove(ctx, p) }, taskOut)
}

// Prune implements core.Store.
func (c *Client) Prune(ctx context.Context, p core.PruneParams) (core.IDsResult, error) {
	in := Input{Queue: p.Queue, Op: model.OpPrune, States: slices.Clone(p.States), Before: p.Before, Limit: p.Limit}
	return record(c, in, func() (core.IDsResult, error) { return c.s.Prune(ctx, p) }, idsOut)
}

// errNoBatch is returned, unrecorded, by a batch call through a Client whose
// store does not implement core.BatchStore.
var errNoBatch = errors.New("linearizability: the store does not implement core.BatchStore")

func batchOut(o *Output, r core.BatchResult) {
	o.Now = r.Now
	o.Items = make([]ItemOutput, len(r.Items))
	for i, it := range r.Items {
		if it.Err != nil {
			var eo Output
			eo.setError(it.Err)
			o.Items[i] = ItemOutput{Err: eo.Err, ErrOp: eo.ErrOp, ErrState: eo.ErrState, ErrHolder: eo.ErrHolder, ErrText: eo.ErrText}
			continue
		}
		t := cloneTask(it.Task)
		o.Items[i].Task = &t
	}
	for _, t := range r.Claimed {
		o.Tasks = append(o.Tasks, cloneTask(t))
	}
}

// EnqueueBatch implements core.BatchStore when the wrapped store does.
func (c *Client) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	bs, ok := c.s.(core.BatchStore)
	if !ok {
		return core.BatchResult{}, errNoBatch
	}
	in := Input{Queue: p.Queue, Op: model.OpEnqueueBatch, Batch: make([]model.EnqueueArgs, len(p.Tasks))}
	for i, a := range p.Tasks {
		a.Payload = bytes.Clone(a.Payload)
		in.Batch[i] = a
	}
	return record(c, in, func() (core.BatchResult, error) { return bs.EnqueueBatch(ctx, p) }, batchOut)
}

// AckBatch implements core.BatchStore when the wrapped store does.
func (c *Client) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	bs, ok := c.s.(core.BatchStore)
	if !ok {
		return core.BatchResult{}, errNoBatch
	}
	in := Input{Queue: p.Queue, Op: model.OpAckBatch, Acks: make([]AckRef, len(p.Acks)), Lease: p.Pop.Lease, Limit: p.Pop.N}
	for i, a := range p.Acks {
		in.Acks[i] = AckRef{ClaimRef: *claimRef(a.Claim), Queue: a.Claim.Queue, Result: bytes.Clone(a.Result)}
	}
	return record(c, in, func() (core.BatchResult, error) { return bs.AckBatch(ctx, p) }, batchOut)
}

// Close closes the wrapped store; it is not recorded.
func (c *Client) Close() error { return c.s.Close() }
