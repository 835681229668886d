package spec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// DefaultQueue is the queue a scenario step names when it names none.
const DefaultQueue = "jobs"

// Epoch is the time every scenario and suite test starts its fake clock at.
// It has microseconds, so a store that drops them is caught.
var Epoch = time.Date(2030, time.January, 2, 3, 4, 5, 123456000, time.UTC)

// Scenario is a named story of the specification: a sequence of steps, each
// with the outcome the model gives it. The same data runs on every adapter
// (Run), is printed in SPEC.md, and is replayed on a ModelStore whose answers
// and final state the adapter's must equal.
type Scenario struct {
	// Name is the scenario's name, a Go identifier (it names the subtest).
	Name string
	// Origin says where the scenario comes from (a seed report), or "".
	Origin string
	// Summary says in one sentence what the scenario shows.
	Summary string
	// Steps are performed in order on one store.
	Steps []Step
}

// Step is one step of a Scenario: the clock moves, one actor performs one
// operation, and its outcome is checked.
//
// Claims are named by labels: a Pop or ClaimExpired step keeps the claims it
// receives under its Label (as Label when it receives one, as Label+":"+ID
// when it receives several), and a worker or broker step decides with the
// claim kept under its Label. The label "@id" forges a claim on task id from
// the task's current Version: for a worker op a token that is not the task's
// claim token (unless the task is Running and unchanged since its Pop), for a
// broker op a version that passes the version guard, so that the op reaches
// the state check. A Get step keeps the version it read under its Label, for
// an inspector step's Expect.
type Step struct {
	// Advance moves the clock forward before the operation.
	Advance time.Duration
	// Op is the operation; 0 only moves the clock and checks Then.
	Op model.Op
	// Queue is the queue the operation names; "" means DefaultQueue.
	Queue string
	// ID is the task of Enqueue, Get, InspectRequeue and Remove.
	ID string
	// Label names a claim or a version read; see Step.
	Label string
	// Expect is the label of a Get whose version an inspector action
	// expects; "" expects none.
	Expect string
	// Priority and MaxAttempts are Enqueue's (MaxAttempts 0 means 3).
	Priority, MaxAttempts int
	// Key and KeyFor are Enqueue's unique key and its hold period.
	Key    string
	KeyFor time.Duration
	// Delay sets RunAfter = now + Delay for Enqueue (0 leaves RunAfter
	// zero: run at once); it is the retry delay of Retry, Requeue and
	// RecoverExpired, which the store adds to its own clock, and Prune
	// prunes tasks finished before now − Delay.
	Delay time.Duration
	// Lease is the lease of Pop and Extend, the claim TTL of ClaimExpired.
	Lease time.Duration
	// N is Pop's batch size (0 means 1) and the limit of Promote,
	// ClaimExpired, RecoverExpired and Prune (0: none).
	N int
	// States are Prune's states.
	States []model.State
	// Text is Ack's result, or the message of Fail, Retry, Requeue and
	// Finalize.
	Text string
	// Want is the error the operation must return, compared by kind (a
	// *model.TransitionError also by op and state); nil wants success.
	Want error
	// Got lists the task IDs Promote, Pop, ClaimExpired, RecoverExpired or
	// Prune must return, in order.
	Got []string
	// Then are facts that must hold after the step, each "ID word..." (or
	// "queue/ID word...") where a word is a state name, "gone", "unclaimed"
	// (no token, ClaimedAt, Deadline or FinishedAt), "result=TEXT",
	// "errors=N", "leaselosses=N", "cancelled" (Task.Cancelled), "attempt=N", "claimed-by=LABEL" (the
	// task's ClaimToken is that claim's) or "version=LABEL" (the task's
	// Version is the one that claim or read saw: nothing changed it since);
	// or "counts word...", where a word is "state=N", "paused" or
	// "unpaused" (the queue's paused flag); or "row KEY present" or "row
	// KEY absent" (the application's row, read outside any transaction).
	Then []string
	// Tx, with Op 0, is a step of the application's own transaction on
	// the store's database (see TxAction).
	Tx TxAction
	// InTx makes the operation inside the application's open
	// transaction: Enqueue, EnqueueBatch and Ack are then the adapter's
	// EnqueueTx, EnqueueBatchTx and AckTx.
	InTx bool
	// Batch are the IDs of EnqueueBatch's items, and Items the error each
	// item must be answered with (nil, or missing: success).
	Batch []string
	Items []error
}

// TxAction is a step of the application's own transaction in a scenario.
type TxAction int

// The steps of the application's transaction. A scenario has at most one
// transaction open at a time; while it is open, the store is written only
// inside it (the transaction holds the queue's lock, as the stores'
// transactions do) and read from outside.
const (
	// TxBegin opens the transaction.
	TxBegin TxAction = iota + 1
	// TxWrite writes the application's row Step.ID in the transaction.
	TxWrite
	// TxCommit commits the transaction.
	TxCommit
	// TxRollback rolls the transaction back.
	TxRollback
)

// --- step constructors, for the scenario tables ------------------------------

const (
	scenarioLease = 30 * time.Second
	scenarioTTL   = 10 * time.Second
)

func enqueue(id string) Step { return Step{Op: model.OpEnqueue, ID: id} }
func promote(ids ...string) Step {
	return Step{Op: model.OpPromote, Got: ids}
}
func pop(label string, ids ...string) Step {
	return Step{Op: model.OpPop, Label: label, Lease: scenarioLease, N: max(1, len(ids)), Got: ids}
}
func extend(label string) Step { return Step{Op: model.OpExtend, Label: label, Lease: scenarioLease} }
func ack(label, result string) Step {
	return Step{Op: model.OpAck, Label: label, Text: result}
}
func fail(label, message string) Step {
	return Step{Op: model.OpFail, Label: label, Text: message}
}
func retry(label, message string) Step {
	return Step{Op: model.OpRetry, Label: label, Text: message}
}
func claimExpired(label string, ids ...string) Step {
	return Step{Op: model.OpClaimExpired, Label: label, Lease: scenarioTTL, Got: ids}
}
func requeue(label string) Step  { return Step{Op: model.OpRequeue, Label: label} }
func finalize(label string) Step { return Step{Op: model.OpFinalize, Label: label} }
func recoverExpired(ids ...string) Step {
	return Step{Op: model.OpRecoverExpired, Got: ids}
}
func inspectRequeue(id string) Step { return Step{Op: model.OpInspectRequeue, ID: id} }
func remove(id string) Step         { return Step{Op: model.OpRemove, ID: id} }
func prune(states []model.State, ids ...string) Step {
	return Step{Op: model.OpPrune, States: states, Got: ids}
}
func get(id, label string) Step { return Step{Op: model.OpGet, ID: id, Label: label} }
func pause() Step               { return Step{Op: model.OpPause} }
func resume() Step              { return Step{Op: model.OpResume} }
func cancel(id string) Step     { return Step{Op: model.OpCancel, ID: id} }

func enqueueBatch(ids ...string) Step { return Step{Op: model.OpEnqueueBatch, Batch: ids} }
func begin() Step                     { return Step{Tx: TxBegin} }
func writeRow(key string) Step        { return Step{Tx: TxWrite, ID: key} }
func commit() Step                    { return Step{Tx: TxCommit} }
func rollback() Step                  { return Step{Tx: TxRollback} }

func (s Step) inTx() Step                 { s.InTx = true; return s }
func (s Step) items(errs ...error) Step   { s.Items = errs; return s }
func (s Step) after(d time.Duration) Step { s.Advance = d; return s }
func (s Step) fails(err error) Step       { s.Want = err; return s }
func (s Step) then(facts ...string) Step  { s.Then = append(s.Then, facts...); return s }
func (s Step) delay(d time.Duration) Step { s.Delay = d; return s }
func (s Step) attempts(n int) Step        { s.MaxAttempts = n; return s }
func (s Step) text(t string) Step         { s.Text = t; return s }
func (s Step) key(k string) Step          { s.Key = k; return s }
func (s Step) keyFor(k string, d time.Duration) Step {
	s.Key, s.KeyFor = k, d
	return s
}
func duplicate(key, holder string) error { return &model.DuplicateError{Key: key, TaskID: holder} }
func invalidTransition(op model.Op, from model.State) error {
	return &model.TransitionError{Op: op, State: from}
}

func (s Step) queue() string {
	if s.Queue == "" {
		return DefaultQueue
	}
	return s.Queue
}

func (s Step) bulk() bool {
	switch s.Op {
	case model.OpPromote, model.OpPop, model.OpClaimExpired, model.OpRecoverExpired, model.OpPrune:
		return true
	}
	return false
}

// --- running a scenario ------------------------------------------------------

// scenarioRun is one scenario being played on a store (through a twin).
type scenarioRun struct {
	ctx    context.Context
	clock  *core.FakeClock
	s      *twin
	errorf func(format string, args ...any)
	claims map[string]core.Claim
	reaps  map[string]core.ReapClaim
	seen   map[string]uint64
	failed bool // a step failed: the scenario stops after it

	db    TxDB  // the application's side of the store's database (Harness.Tx), or nil
	txAck bool  // the harness says its transactions ack (TxHarness.Ack)
	tx    AppTx // the application's open transaction on the store, or nil
	mtx   AppTx // the same transaction on the model
}

func newScenarioRun(store core.Store, ref *ModelStore, clock *core.FakeClock, errorf func(string, ...any)) *scenarioRun {
	r := &scenarioRun{ctx: context.Background(), clock: clock, claims: map[string]core.Claim{}, reaps: map[string]core.ReapClaim{}, seen: map[string]uint64{}}
	r.errorf = func(format string, args ...any) {
		r.failed = true
		errorf(format, args...)
	}
	r.s = newTwin(store, ref, func(msg string) { r.errorf("%s", msg) })
	return r
}

// play runs every step of sc, then compares the final state of every queue
// with the model's.
func (r *scenarioRun) play(sc Scenario) {
	defer func() {
		if r.tx != nil { // the scenario stopped in a transaction: end it
			_ = r.tx.Rollback(r.ctx)
			_ = r.mtx.Rollback(r.ctx)
			r.tx, r.mtx = nil, nil
		}
	}()
	for i, st := range sc.Steps {
		where := fmt.Sprintf("%s step %d (%s)", sc.Name, i+1, st)
		r.s.report = func(msg string) { r.errorf("%s: %s", where, msg) }
		r.step(where, st)
		if r.failed {
			r.errorf("%s: stopped after step %d of %d", sc.Name, i+1, len(sc.Steps))
			return
		}
	}
	if r.tx != nil {
		r.errorf("%s: scenario error: the transaction is still open after the last step", sc.Name)
		return
	}
	r.s.report = func(msg string) { r.errorf("%s final state: %s", sc.Name, msg) }
	r.s.checkAll("the last step")
}

func (r *scenarioRun) claim(label string, q string) core.Claim {
	if id, ok := strings.CutPrefix(label, "@"); ok {
		t, err := r.s.model.Queue(q).Get(id)
		if err != nil {
			r.errorf("scenario error: label %q: %v", label, err)
		}
		return core.Claim{Queue: q, TaskID: id, Token: t.Version, Attempt: t.Attempt, Deadline: t.Deadline}
	}
	c, ok := r.claims[label]
	if !ok {
		r.errorf("scenario error: no claim labelled %q", label)
	}
	return c
}

func (r *scenarioRun) reap(label string, q string) core.ReapClaim {
	if id, ok := strings.CutPrefix(label, "@"); ok {
		t, err := r.s.model.Queue(q).Get(id)
		if err != nil {
			r.errorf("scenario error: label %q: %v", label, err)
		}
		return core.ReapClaim{Queue: q, TaskID: id, Version: t.Version, Deadline: t.Deadline, Task: t}
	}
	c, ok := r.reaps[label]
	if !ok {
		r.errorf("scenario error: no broker claim labelled %q", label)
	}
	return c
}

func (r *scenarioRun) step(where string, st Step) {
	r.clock.Advance(st.Advance)
	if st.Tx != 0 {
		r.txStep(where, st)
		r.facts(where, st.Then)
		return
	}
	if st.Op == 0 {
		r.facts(where, st.Then)
		return
	}
	if st.InTx {
		if err := r.txOp(where, st); !sameError(err, st.Want) {
			r.errorf("%s: got %s (%v), want %s", where, describeError(err), err, describeError(st.Want))
		}
		r.facts(where, st.Then)
		return
	}
	if r.tx != nil && !readOnly(st.Op) {
		r.errorf("%s: scenario error: a write outside the open transaction (it holds the queue)", where)
		return
	}
	ctx, q, now := r.ctx, st.queue(), r.clock.Now()
	var runAfter time.Time
	if st.Delay > 0 {
		runAfter = now.Add(st.Delay)
	}
	var (
		err error
		ids []string
	)
	switch st.Op {
	case model.OpEnqueue:
		_, err = r.s.Enqueue(ctx, core.EnqueueParams{Queue: q, EnqueueArgs: st.enqueueArgs(st.ID, runAfter)})
	case model.OpEnqueueBatch:
		var res core.BatchResult
		res, err = r.s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: q, Tasks: st.batchArgs()})
		if err == nil {
			r.wantItems(where, st, res)
		}
	case model.OpPromote:
		var res core.IDsResult
		res, err = r.s.Promote(ctx, core.PromoteParams{Queue: q, Limit: st.N})
		ids = res.IDs
	case model.OpPop:
		var res core.TasksResult
		res, err = r.s.Pop(ctx, core.PopParams{Queue: q, Lease: st.Lease, N: max(st.N, 1)})
		ids = taskIDs(res.Tasks)
		for _, t := range res.Tasks {
			r.claims[labelFor(st.Label, t.ID, len(res.Tasks))] = t.Claim()
		}
	case model.OpExtend:
		_, err = r.s.Extend(ctx, core.ExtendParams{Claim: r.claim(st.Label, q), Lease: st.Lease})
	case model.OpAck:
		_, err = r.s.Ack(ctx, core.AckParams{Claim: r.claim(st.Label, q), Result: []byte(st.Text)})
	case model.OpFail:
		_, err = r.s.Fail(ctx, core.FailParams{Claim: r.claim(st.Label, q), Message: st.Text})
	case model.OpRetry:
		_, err = r.s.Retry(ctx, core.RetryParams{Claim: r.claim(st.Label, q), Delay: st.Delay, Message: st.Text})
	case model.OpClaimExpired:
		var res core.ReapResult
		res, err = r.s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: q, ClaimTTL: st.Lease, Limit: st.N})
		ids = reapIDs(res.Claims)
		for _, c := range res.Claims {
			r.reaps[labelFor(st.Label, c.TaskID, len(res.Claims))] = c
		}
	case model.OpRequeue:
		_, err = r.s.Requeue(ctx, core.RequeueParams{ReapClaim: r.reap(st.Label, q), Delay: st.Delay, Message: st.Text})
	case model.OpFinalize:
		_, err = r.s.Finalize(ctx, core.FinalizeParams{ReapClaim: r.reap(st.Label, q), Message: st.Text})
	case model.OpRecoverExpired:
		var res core.TasksResult
		res, err = r.s.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: q, Delay: st.Delay, Limit: st.N})
		ids = taskIDs(res.Tasks)
	case model.OpInspectRequeue:
		_, err = r.s.InspectRequeue(ctx, core.InspectParams{Queue: q, ID: st.ID, Expect: r.seen[st.Expect]})
	case model.OpRemove:
		_, err = r.s.Remove(ctx, core.InspectParams{Queue: q, ID: st.ID, Expect: r.seen[st.Expect]})
	case model.OpCancel:
		_, err = r.s.Cancel(ctx, core.InspectParams{Queue: q, ID: st.ID, Expect: r.seen[st.Expect]})
	case model.OpPrune:
		var res core.IDsResult
		res, err = r.s.Prune(ctx, core.PruneParams{Queue: q, States: st.States, Before: now.Add(-st.Delay), Limit: st.N})
		ids = res.IDs
	case model.OpPause, model.OpResume:
		call, want := r.s.Pause, true
		if st.Op == model.OpResume {
			call, want = r.s.Resume, false
		}
		var res core.PauseResult
		res, err = call(ctx, core.PauseParams{Queue: q})
		if err == nil && res.Paused != want {
			r.errorf("%s: answered paused=%v, want %v", where, res.Paused, want)
		}
	case model.OpGet:
		var t core.Task
		t, err = r.s.Get(ctx, core.GetParams{Queue: q, ID: st.ID})
		if st.Label != "" {
			r.seen[st.Label] = t.Version
		}
	default:
		r.errorf("%s: scenario error: op %v is not supported in scenarios", where, st.Op)
		return
	}
	if !sameError(err, st.Want) {
		r.errorf("%s: got %s (%v), want %s", where, describeError(err), err, describeError(st.Want))
	}
	if err == nil && st.bulk() && !slices.Equal(ids, st.Got) && (len(ids) > 0 || len(st.Got) > 0) {
		r.errorf("%s: returned %q, want %q", where, ids, st.Got)
	}
	r.facts(where, st.Then)
}

// enqueueArgs are the arguments of an Enqueue (or a batch item) of task id.
func (s Step) enqueueArgs(id string, runAfter time.Time) model.EnqueueArgs {
	attempts := s.MaxAttempts
	if attempts == 0 {
		attempts = 3
	}
	return model.EnqueueArgs{
		ID: id, Payload: []byte("payload of " + id), Priority: s.Priority, RunAfter: runAfter, MaxAttempts: attempts,
		UniqueKey: s.Key, UniqueFor: s.KeyFor,
	}
}

// batchArgs are the items of an EnqueueBatch step, one per Batch ID.
func (s Step) batchArgs() []model.EnqueueArgs {
	out := make([]model.EnqueueArgs, len(s.Batch))
	for i, id := range s.Batch {
		out[i] = s.enqueueArgs(id, time.Time{})
	}
	return out
}

// wantItems checks a batch's items against the step's Items.
func (r *scenarioRun) wantItems(where string, st Step, res core.BatchResult) {
	if len(res.Items) != len(st.Batch) {
		r.errorf("%s: %d items answered for %d", where, len(res.Items), len(st.Batch))
		return
	}
	for i, it := range res.Items {
		var want error
		if i < len(st.Items) {
			want = st.Items[i]
		}
		if !sameError(it.Err, want) {
			r.errorf("%s: item %d (%s): got %s (%v), want %s", where, i, st.Batch[i], describeError(it.Err), it.Err, describeError(want))
		}
	}
}

// txStep begins, writes in or ends the application's transaction, on the
// store's database and on the model.
func (r *scenarioRun) txStep(where string, st Step) {
	if r.db == nil {
		r.errorf("%s: the harness opens no transaction of the application (Harness.Tx)", where)
		return
	}
	if (st.Tx == TxBegin) != (r.tx == nil) {
		r.errorf("%s: scenario error: the transaction is open: %v", where, r.tx != nil)
		return
	}
	var gerr, werr error
	switch st.Tx {
	case TxBegin:
		r.tx, gerr = r.db.Begin(r.ctx)
		r.mtx, werr = r.s.model.Begin(r.ctx)
		if gerr != nil {
			r.tx = nil
		}
	case TxWrite:
		gerr, werr = r.tx.Write(r.ctx, st.ID), r.mtx.Write(r.ctx, st.ID)
	case TxCommit, TxRollback:
		if st.Tx == TxCommit {
			gerr, werr = r.tx.Commit(r.ctx), r.mtx.Commit(r.ctx)
		} else {
			gerr, werr = r.tx.Rollback(r.ctx), r.mtx.Rollback(r.ctx)
		}
		r.tx, r.mtx = nil, nil
	default:
		r.errorf("%s: scenario error: unknown transaction step %d", where, st.Tx)
		return
	}
	if werr != nil {
		r.errorf("%s: the model: %v", where, werr)
	}
	if gerr != nil {
		r.errorf("%s: %v", where, gerr)
		return
	}
	// Whatever the transaction did, the others see the state the model
	// gives them: before its end, the queue without its operations.
	r.s.checkAll(st.String())
}

// txOp makes one operation inside the open transaction, on the store and
// on the model, and compares the answers; the store's state, read outside
// the transaction, must be the model's: without the transaction's
// operations until it commits.
func (r *scenarioRun) txOp(where string, st Step) error {
	if r.tx == nil {
		r.errorf("%s: scenario error: no transaction is open", where)
		return nil
	}
	// A store op that waits for a lock the transaction holds (an op made
	// beside the transaction, not in it) would wait for ever: the store's
	// half of the op is given txWait.
	ctx, q := r.ctx, st.queue()
	sctx, cancel := context.WithTimeout(ctx, txWait)
	defer cancel()
	var (
		err  error
		desc string
		diff string
	)
	switch st.Op {
	case model.OpEnqueue:
		var runAfter time.Time
		if st.Delay > 0 {
			runAfter = r.clock.Now().Add(st.Delay)
		}
		p := core.EnqueueParams{Queue: q, EnqueueArgs: st.enqueueArgs(st.ID, runAfter)}
		var got, want core.TaskResult
		var werr error
		got, err = r.tx.Enqueue(sctx, p)
		want, werr = r.mtx.Enqueue(ctx, p)
		desc, diff = "EnqueueTx "+describeEnqueue(p), taskDiff(got, err, want, werr)
	case model.OpEnqueueBatch:
		p := core.EnqueueBatchParams{Queue: q, Tasks: st.batchArgs()}
		var got core.BatchResult
		got, err = r.enqueueBatchTx(sctx, p)
		want, werr := r.mtx.(TxBatcher).EnqueueBatch(ctx, p)
		desc, diff = "EnqueueBatchTx "+describeEnqueueBatch(p), batchDiff(got, err, want, werr)
		if err == nil {
			r.wantItems(where, st, got)
		}
	case model.OpAck:
		ta, ok := r.tx.(TxAcker)
		if !ok || !r.txAck {
			r.errorf("%s: the harness's transactions do not ack (TxHarness.Ack %v, a TxAcker %v)", where, r.txAck, ok)
			return nil
		}
		p := core.AckParams{Claim: r.claim(st.Label, q), Result: []byte(st.Text)}
		var got core.TaskResult
		got, err = ta.Ack(sctx, p)
		want, werr := r.mtx.(TxAcker).Ack(ctx, p)
		desc, diff = fmt.Sprintf("AckTx(%s result=%q)", describeClaim(p.Claim), p.Result), taskDiff(got, err, want, werr)
	default:
		r.errorf("%s: scenario error: %v is not made in a transaction", where, st.Op)
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		diff += fmt.Sprintf(" (the store waited %v: for a lock the application's transaction holds? The op is then not made inside it)", txWait)
	}
	r.s.after(q, desc, diff)
	return err
}

// txWait is how long a store op inside the application's transaction may
// wait; the scenarios' ops wait for nothing, so only an op that waits for the
// transaction's own lock comes near it.
const txWait = 10 * time.Second

// enqueueBatchTx enqueues a batch in the open transaction: in one call where
// the transaction is a TxBatcher, else one Enqueue per item, answered
// alike (see TxBatcher).
func (r *scenarioRun) enqueueBatchTx(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	if tb, ok := r.tx.(TxBatcher); ok {
		return tb.EnqueueBatch(ctx, p)
	}
	if err := model.CheckBatchSize(len(p.Tasks)); err != nil {
		return core.BatchResult{}, err
	}
	var res core.BatchResult
	for _, a := range p.Tasks {
		t, err := r.tx.Enqueue(ctx, core.EnqueueParams{Queue: p.Queue, EnqueueArgs: a})
		if err != nil && model.Kind(err) == nil {
			return core.BatchResult{}, err // not a refusal of the model's
		}
		if res.Now.IsZero() {
			res.Now = t.Now // zero for a refusal
		}
		res.Items = append(res.Items, core.ItemResult{Task: t.Task, Err: err})
	}
	if res.Now.IsZero() { // every item refused: the reading they were refused at
		res.Now = model.Round(r.clock.Now())
	}
	return res, nil
}

func labelFor(label, id string, n int) string {
	if n == 1 {
		return label
	}
	return label + ":" + id
}

// facts checks the facts of a step against the store.
func (r *scenarioRun) facts(where string, facts []string) {
	for _, f := range facts {
		if msg := r.fact(f); msg != "" {
			r.errorf("%s: fact %q does not hold: %s", where, f, msg)
		}
	}
}

func (r *scenarioRun) fact(f string) string {
	words := strings.Fields(f)
	if len(words) < 2 {
		return "scenario error: a fact is an ID and at least one word"
	}
	if words[0] == "row" {
		return r.rowFact(words[1:])
	}
	q, id := DefaultQueue, words[0]
	if before, after, ok := strings.Cut(id, "/"); ok {
		q, id = before, after
	}
	if id == "counts" {
		c, err := r.s.store.Counts(r.ctx, core.CountsParams{Queue: q})
		if err != nil {
			return err.Error()
		}
		for _, w := range words[1:] {
			if w == "paused" || w == "unpaused" {
				if c.Paused != (w == "paused") {
					return fmt.Sprintf("the queue's paused flag is %v", c.Paused)
				}
				continue
			}
			name, val, _ := strings.Cut(w, "=")
			s, err := model.ParseState(name)
			n, nerr := strconv.Atoi(val)
			if err != nil || nerr != nil {
				return fmt.Sprintf("scenario error: bad count %q", w)
			}
			if c.Of(s) != n {
				return fmt.Sprintf("%d %v, counts are %+v", c.Of(s), s, c)
			}
		}
		return ""
	}
	t, err := r.s.store.Get(r.ctx, core.GetParams{Queue: q, ID: id})
	if slices.Contains(words[1:], "gone") {
		if model.Kind(err) != model.ErrNotFound {
			return fmt.Sprintf("Get returned %s, want not found", describeError(err))
		}
		return ""
	}
	if err != nil {
		return fmt.Sprintf("Get: %v", err)
	}
	for _, w := range words[1:] {
		if s, err := model.ParseState(w); err == nil {
			if t.State != s {
				return fmt.Sprintf("state is %v", t.State)
			}
			continue
		}
		key, val, _ := strings.Cut(w, "=")
		n, nerr := strconv.Atoi(val)
		number := func(got int) string {
			if nerr != nil {
				return fmt.Sprintf("scenario error: %q is not a number", val)
			}
			if got != n {
				return fmt.Sprintf("%s is %d", key, got)
			}
			return ""
		}
		var msg string
		switch key {
		case "unclaimed":
			if t.ClaimToken != 0 || !t.ClaimedAt.IsZero() || !t.Deadline.IsZero() || !t.FinishedAt.IsZero() {
				msg = fmt.Sprintf("token %d, claimed %s, deadline %s, finished %s",
					t.ClaimToken, formatTime(t.ClaimedAt), formatTime(t.Deadline), formatTime(t.FinishedAt))
			}
		case "result":
			if string(t.Result) != val {
				msg = fmt.Sprintf("result is %q", t.Result)
			}
		case "errors":
			msg = number(len(t.Errors))
		case "leaselosses":
			msg = number(t.LeaseLosses())
		case "cancelled":
			if !t.Cancelled() {
				msg = fmt.Sprintf("the task is not cancelled (state %v, errors %d)", t.State, len(t.Errors))
			}
		case "attempt":
			msg = number(t.Attempt)
		case "claimed-by":
			c, ok := r.claims[val]
			if !ok {
				return fmt.Sprintf("scenario error: no claim labelled %q", val)
			}
			if t.ClaimToken != c.Token {
				msg = fmt.Sprintf("claim token is %d, %s holds %d", t.ClaimToken, val, c.Token)
			}
		case "version":
			v, ok := r.versionOf(val)
			if !ok {
				return fmt.Sprintf("scenario error: nothing labelled %q", val)
			}
			if t.Version != v {
				msg = fmt.Sprintf("version is %d, %s saw %d", t.Version, val, v)
			}
		default:
			return fmt.Sprintf("scenario error: unknown word %q", w)
		}
		if msg != "" {
			return msg
		}
	}
	return ""
}

// rowFact checks "row KEY present" or "row KEY absent" on the store's
// database and on the model.
func (r *scenarioRun) rowFact(words []string) string {
	if len(words) != 2 || (words[1] != "present" && words[1] != "absent") {
		return "scenario error: a row fact is \"row KEY present\" or \"row KEY absent\""
	}
	if r.db == nil {
		return "the harness opens no transaction of the application (Harness.Tx)"
	}
	want := words[1] == "present"
	if in, _ := r.s.model.HasRow(r.ctx, words[0]); in != want {
		return fmt.Sprintf("scenario error: the model has the row: %v", in)
	}
	got, err := r.db.HasRow(r.ctx, words[0])
	if err != nil {
		return err.Error()
	}
	if got != want {
		return fmt.Sprintf("the application's table has the row: %v", got)
	}
	return ""
}

// versionOf is the task version a label saw: a worker claim's token (the
// version its Pop stamped), a broker claim's version, or a Get's version.
func (r *scenarioRun) versionOf(label string) (uint64, bool) {
	if c, ok := r.claims[label]; ok {
		return c.Token, true
	}
	if c, ok := r.reaps[label]; ok {
		return c.Version, true
	}
	v, ok := r.seen[label]
	return v, ok
}

// --- describing a step in words ----------------------------------------------

// String describes the step in words, as SPEC.md prints it.
func (s Step) String() string {
	var b strings.Builder
	if s.Advance > 0 {
		fmt.Fprintf(&b, "after %s, ", humanDuration(s.Advance))
	}
	b.WriteString(s.action())
	if s.InTx {
		b.WriteString(" inside the transaction")
	}
	if s.Op != 0 {
		b.WriteString(" → ")
		b.WriteString(s.outcome())
	}
	if len(s.Then) > 0 {
		if s.Op != 0 || s.Tx != 0 {
			b.WriteString("; ")
		}
		b.WriteString("then ")
		b.WriteString(strings.Join(s.Then, ", "))
	}
	return b.String()
}

func (s Step) action() string {
	var b strings.Builder
	in := ""
	if s.Queue != "" {
		in = " in queue " + s.Queue
	}
	worker := func(verb string) {
		fmt.Fprintf(&b, "%s %s%s", claimant("worker", s.Label), verb, in)
	}
	broker := func(verb string) {
		fmt.Fprintf(&b, "%s %s%s", claimant("broker", s.Label), verb, in)
	}
	at := func() {
		if s.Delay > 0 {
			fmt.Fprintf(&b, " to run after now+%s", humanDuration(s.Delay))
		}
	}
	withText := func(what string) {
		if s.Text != "" {
			fmt.Fprintf(&b, " with %s %q", what, s.Text)
		}
	}
	limit := func() {
		if s.N > 0 {
			fmt.Fprintf(&b, " (at most %d)", s.N)
		}
	}
	switch s.Tx {
	case TxBegin:
		return "the application begins a transaction"
	case TxWrite:
		return fmt.Sprintf("the application writes its row %s in the transaction", s.ID)
	case TxCommit:
		return "the application commits the transaction"
	case TxRollback:
		return "the application rolls the transaction back"
	}
	switch s.Op {
	case 0:
		if s.Advance == 0 {
			b.WriteString("nothing happens")
		} else {
			b.WriteString("nobody acts")
		}
	case model.OpEnqueue:
		fmt.Fprintf(&b, "a producer enqueues %s%s", s.ID, in)
		if s.Priority != 0 {
			fmt.Fprintf(&b, " with priority %d", s.Priority)
		}
		if s.MaxAttempts != 0 {
			fmt.Fprintf(&b, " allowing %d attempts", s.MaxAttempts)
		}
		if s.Key != "" {
			fmt.Fprintf(&b, " with unique key %q", s.Key)
			if s.KeyFor > 0 {
				fmt.Fprintf(&b, " held for %s", humanDuration(s.KeyFor))
			}
		}
		at()
	case model.OpEnqueueBatch:
		fmt.Fprintf(&b, "a producer enqueues %s in one batch%s", strings.Join(s.Batch, ", "), in)
	case model.OpPromote:
		fmt.Fprintf(&b, "the mover promotes due tasks%s", in)
		limit()
	case model.OpPop:
		n := ""
		if s.N > 1 {
			n = fmt.Sprintf(" up to %d tasks", s.N)
		}
		fmt.Fprintf(&b, "worker %s pops%s%s with a %s lease", s.Label, n, in, humanDuration(s.Lease))
	case model.OpExtend:
		worker(fmt.Sprintf("extends its lease to now+%s", humanDuration(s.Lease)))
	case model.OpAck:
		worker("acks")
		withText("result")
	case model.OpFail:
		worker("fails")
		withText("message")
	case model.OpRetry:
		worker("retries")
		withText("message")
		at()
	case model.OpClaimExpired:
		fmt.Fprintf(&b, "broker %s claims the expired tasks%s with a %s claim TTL", s.Label, in, humanDuration(s.Lease))
		limit()
	case model.OpRequeue:
		broker("requeues")
		withText("message")
		at()
	case model.OpFinalize:
		broker("finalizes")
		withText("message")
	case model.OpRecoverExpired:
		fmt.Fprintf(&b, "a broker recovers the expired tasks%s", in)
		if s.Delay > 0 {
			fmt.Fprintf(&b, " with a %s retry delay", humanDuration(s.Delay))
		}
		limit()
	case model.OpInspectRequeue, model.OpRemove, model.OpCancel:
		verb := "requeues"
		switch s.Op {
		case model.OpRemove:
			verb = "removes"
		case model.OpCancel:
			verb = "cancels"
		}
		fmt.Fprintf(&b, "the operator %s %s%s", verb, s.ID, in)
		if s.Expect != "" {
			fmt.Fprintf(&b, " expecting the version read as %s", s.Expect)
		}
	case model.OpPrune:
		fmt.Fprintf(&b, "the operator prunes %v tasks%s finished before now", s.States, in)
		if s.Delay > 0 {
			fmt.Fprintf(&b, "−%s", humanDuration(s.Delay))
		}
		limit()
	case model.OpPause:
		fmt.Fprintf(&b, "the operator pauses the queue%s", in)
	case model.OpResume:
		fmt.Fprintf(&b, "the operator resumes the queue%s", in)
	case model.OpGet:
		fmt.Fprintf(&b, "the operator reads %s%s", s.ID, in)
		if s.Label != "" {
			fmt.Fprintf(&b, " (as %s)", s.Label)
		}
	default:
		fmt.Fprintf(&b, "%v", s.Op)
	}
	return b.String()
}

func claimant(who, label string) string {
	if id, ok := strings.CutPrefix(label, "@"); ok {
		return fmt.Sprintf("a %s with a claim forged from %s's current version", who, id)
	}
	return who + " " + label
}

func (s Step) outcome() string {
	if s.Want != nil {
		return describeError(s.Want)
	}
	if s.Op == model.OpEnqueueBatch && len(s.Items) > 0 {
		items := make([]string, len(s.Batch))
		for i := range s.Batch {
			items[i] = "ok"
			if i < len(s.Items) && s.Items[i] != nil {
				items[i] = describeError(s.Items[i])
			}
		}
		return "items " + strings.Join(items, ", ")
	}
	if s.bulk() {
		if len(s.Got) == 0 {
			return "none"
		}
		return strings.Join(s.Got, ", ")
	}
	return "ok"
}
