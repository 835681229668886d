package linearizability

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// Input is one call a client made to a store: the queue it routes to, the op
// and the op's arguments. It is the porcupine input of an operation. Only the
// fields the op reads are set; see model.Input, which it converts to.
type Input struct {
	Queue     string              `json:"queue"`
	Op        model.Op            `json:"op,omitempty"` // 0 for a Damage
	Enqueue   *model.EnqueueArgs  `json:"enqueue,omitempty"`
	Claim     *ClaimRef           `json:"claim,omitempty"`     // Extend, Ack, Fail, Retry
	ReapClaim *ClaimRef           `json:"reapClaim,omitempty"` // Requeue, Finalize
	ID        string              `json:"id,omitempty"`        // InspectRequeue, Remove, Get
	Expect    uint64              `json:"expect,omitempty"`    // InspectRequeue, Remove
	Lease     time.Duration       `json:"lease,omitempty"`     // Pop, Extend; claim TTL; recovery delay
	Limit     int                 `json:"limit,omitempty"`     // Promote, Pop, ClaimExpired, RecoverExpired, Prune, List
	Delay     time.Duration       `json:"delay,omitempty"`     // Retry, Requeue
	Message   string              `json:"message,omitempty"`   // Fail, Retry, Requeue, Finalize
	Result    []byte              `json:"result,omitempty"`    // Ack
	State     model.State         `json:"state,omitempty"`     // List
	After     string              `json:"after,omitempty"`     // List
	States    []model.State       `json:"states,omitempty"`    // Prune
	Before    time.Time           `json:"before,omitzero"`     // Prune
	Batch     []model.EnqueueArgs `json:"batch,omitempty"`     // EnqueueBatch
	Acks      []AckRef            `json:"acks,omitempty"`      // AckBatch (Lease and Limit: its pop)
	// Tx, when set, makes the input an application's transaction: the
	// store ops made inside it (Op is then the first one's) and its end.
	Tx *TxInput `json:"tx,omitempty"`
	// Damage marks the step that damaged the stored record of task ID
	// (Backend.Damage): the event model.Queue.Damage, not an op of the
	// store. Op is then 0. See damage.go.
	Damage bool `json:"damage,omitempty"`

	// NowCandidates is set on an indeterminate operation (its outcome is
	// unknown, so is the clock reading it would have used): every reading the
	// store's clock gave from the call on. The model tries each of them, and
	// also that the op never happened. It is set too on a refused Enqueue
	// with a unique key (a refusal carries no reading, and the key's hold
	// may depend on it): every reading within the call, of which the model
	// must find one that gives the store's answer.
	NowCandidates []time.Time `json:"nowCandidates,omitempty"`
}

// ClaimRef is the part of a worker Claim or broker ReapClaim a store
// decision reads: the task and the token (worker) or version (broker).
type ClaimRef struct {
	TaskID   string    `json:"taskID"`
	Token    uint64    `json:"token,omitempty"`   // worker claim
	Version  uint64    `json:"version,omitempty"` // broker claim
	Attempt  int       `json:"attempt,omitempty"`
	Deadline time.Time `json:"deadline,omitzero"`
}

// AckRef is one item of an AckBatch: the claim, the queue it names (a store
// refuses a whole batch that names another queue than its own) and the
// result.
type AckRef struct {
	ClaimRef
	Queue  string `json:"queue"`
	Result []byte `json:"result,omitempty"`
}

// ItemOutput is the answer to one item of a batch: the task, or the kind of
// error that refused the item (as in Output).
type ItemOutput struct {
	Task     *model.Task `json:"task,omitempty"`
	Err      string      `json:"err,omitempty"`
	ErrOp    model.Op    `json:"errOp,omitempty"`
	ErrState model.State `json:"errState,omitempty"`
	// ErrHolder is the holder a *model.DuplicateError names.
	ErrHolder string `json:"errHolder,omitempty"`
	ErrText   string `json:"errText,omitempty"`
}

// Output is what a store answered to an Input: the result fields of the op
// (Now included), or the kind of error. It is the porcupine output of an
// operation.
type Output struct {
	Now    time.Time         `json:"now,omitzero"`
	Task   *model.Task       `json:"task,omitempty"`
	Tasks  []model.Task      `json:"tasks,omitempty"`
	IDs    []string          `json:"ids,omitempty"`
	Claims []model.ReapClaim `json:"claims,omitempty"`
	Counts *model.Counts     `json:"counts,omitempty"`
	Next   string            `json:"next,omitempty"`
	Items  []ItemOutput      `json:"items,omitempty"`  // EnqueueBatch, AckBatch
	Paused *bool             `json:"paused,omitempty"` // Pause, Resume: the flag as the call left it
	// Tx holds the answers to a transaction's ops, one per TxInput.Ops;
	// RowFound whether the application's row was there once it ended.
	Tx       []Output `json:"tx,omitempty"`
	RowFound *bool    `json:"rowFound,omitempty"`

	// Err is the kind of a definite error (see ErrorKind), "" for success.
	Err string `json:"err,omitempty"`
	// ErrOp and ErrState are those of a *model.TransitionError.
	ErrOp    model.Op    `json:"errOp,omitempty"`
	ErrState model.State `json:"errState,omitempty"`
	// ErrHolder is the task a *model.DuplicateError names as the unique
	// key's holder ("" for any other error).
	ErrHolder string `json:"errHolder,omitempty"`
	// ErrText is the error message, for people; it is not compared.
	ErrText string `json:"errText,omitempty"`

	// Indeterminate marks an op that failed in transport: it may or may not
	// have taken effect. Such an op returns at time math.MaxInt64.
	Indeterminate bool `json:"indeterminate,omitempty"`
}

// The error kinds an Output can carry. Every one but "corrupt", "closed" and
// "busy" is an error of the model. "corrupt" and "closed" are never right
// in a history, so a store that returns them fails the check; "busy"
// (core.ErrBusy: the store could not start the call in time) is an answer
// that the call did not run, and is checked as such: the state stays as it
// was.
var errorKinds = []struct {
	name string
	err  error
}{
	{"cancelled", model.ErrCancelled}, // before stale_claim, which it wraps too
	{"stale_claim", model.ErrStaleClaim},
	{"not_found", model.ErrNotFound},
	{"invalid_transition", model.ErrInvalidTransition},
	{"invalid_argument", model.ErrInvalidArgument},
	{"conflict", model.ErrConflict},
	{"queue_full", model.ErrQueueFull},
	{"corrupt", core.ErrCorrupt},
	{"closed", core.ErrClosed},
	{"busy", core.ErrBusy},
}

// ErrorKind names the kind of err: one of the model's errors, "corrupt",
// "closed", "busy", or "" when err is nil or of none of these kinds (a transport
// error: the op is indeterminate).
func ErrorKind(err error) string {
	if err == nil {
		return ""
	}
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return ""
}

// setError fills the error fields of an output from err. An error of no
// known kind is a transport error: the op is then indeterminate.
func (o *Output) setError(err error) {
	o.ErrText = err.Error()
	o.Err = ErrorKind(err)
	if o.Err == "" {
		o.Indeterminate = true
		return
	}
	var te *model.TransitionError
	if errors.As(err, &te) {
		o.ErrOp, o.ErrState = te.Op, te.State
	}
	o.ErrHolder = holderOf(err)
}

// holderOf is the holder a *model.DuplicateError names, "" for any other
// error.
func holderOf(err error) string {
	var d *model.DuplicateError
	if errors.As(err, &d) {
		return d.TaskID
	}
	return ""
}

// modelInput converts in to the model's input, judged at now.
func (in *Input) modelInput(now time.Time) model.Input {
	m := model.Input{
		Op: in.Op, Now: now, ID: in.ID, Expect: in.Expect, Lease: in.Lease,
		Limit: in.Limit, Delay: in.Delay, Message: in.Message, Result: in.Result,
		State: in.State, After: in.After, States: in.States, Before: in.Before,
	}
	if in.Enqueue != nil {
		m.Enqueue = *in.Enqueue
	}
	if c := in.Claim; c != nil {
		m.Claim = model.Claim{Queue: in.Queue, TaskID: c.TaskID, Token: c.Token, Attempt: c.Attempt, Deadline: c.Deadline}
	}
	if c := in.ReapClaim; c != nil {
		m.ReapClaim = model.ReapClaim{Queue: in.Queue, TaskID: c.TaskID, Version: c.Version, Deadline: c.Deadline}
	}
	m.Batch = in.Batch
	if in.Acks != nil {
		m.Acks = make([]model.AckItem, len(in.Acks))
		for i, a := range in.Acks {
			m.Acks[i] = model.AckItem{Claim: model.Claim{Queue: a.Queue, TaskID: a.TaskID, Token: a.Token, Attempt: a.Attempt, Deadline: a.Deadline}, Result: a.Result}
		}
	}
	return m
}

// itemsMatch reports whether the model's answers to a batch's items are the
// store's.
func itemsMatch(m []model.ItemResult, o []ItemOutput) bool {
	if len(m) != len(o) {
		return false
	}
	for i, it := range m {
		g := o[i]
		if it.Err != nil || g.Err != "" {
			if ErrorKind(it.Err) != g.Err {
				return false
			}
			var te *model.TransitionError
			if errors.As(it.Err, &te) && (te.Op != g.ErrOp || te.State != g.ErrState) {
				return false
			}
			if holderOf(it.Err) != g.ErrHolder {
				return false
			}
			continue
		}
		if g.Task == nil || !sameTask(it.Task, *g.Task) {
			return false
		}
	}
	return true
}

// matches reports whether the model's output m is the store's output o.
func matches(m model.Output, o *Output) bool {
	if !o.wholeMicros() {
		return false // the store contract keeps times in microseconds
	}
	if m.Err != nil || o.Err != "" {
		if ErrorKind(m.Err) != o.Err || holderOf(m.Err) != o.ErrHolder {
			return false
		}
		var te *model.TransitionError
		if errors.As(m.Err, &te) {
			return te.Op == o.ErrOp && te.State == o.ErrState
		}
		return true
	}
	if o.Task != nil {
		if !sameTask(m.Task, *o.Task) {
			return false
		}
	} else if m.Task.ID != "" {
		return false
	}
	if o.Counts != nil && m.Counts != *o.Counts {
		return false
	}
	if o.Paused != nil && m.Paused != *o.Paused {
		return false
	}
	return slices.EqualFunc(m.Tasks, o.Tasks, sameTask) &&
		slices.Equal(m.IDs, o.IDs) && m.Next == o.Next && itemsMatch(m.Items, o.Items) &&
		slices.EqualFunc(m.ReapClaims, o.Claims, reapEqual)
}

func reapEqual(a, b model.ReapClaim) bool {
	return a.Queue == b.Queue && a.TaskID == b.TaskID && a.Version == b.Version &&
		a.Deadline.Equal(b.Deadline) && sameTask(a.Task, b.Task)
}

// ModelOptions configure the porcupine model of one history.
type ModelOptions struct {
	// Capacity is the stores' WithCapacity: pending tasks per queue, 0 for
	// unlimited. The model must refuse Enqueue exactly where the store does.
	Capacity int
	// Epoch is the instant times are shown relative to in descriptions (the
	// start of the history); zero shows absolute times.
	Epoch time.Time
}

// NewModel returns the porcupine model of a leasehold store: one model.Queue
// per partition, a partition per queue name. Step applies model.Apply with
// Now taken from the store's output, and accepts the step only if the model
// gives exactly the store's answer (tasks compared with Task.Equal but for the reason
// a quarantined record gives, see sameTask; errors by
// kind and, for transition errors, by op and state). An indeterminate output
// may have happened at any of the input's NowCandidates, or not at all; the
// model is the power-set construction of porcupine's NondeterministicModel,
// so a set of queue states is carried while the outcome is open.
//
// Step is pure and safe for concurrent use: model.Queue is an immutable value.
func NewModel(o ModelOptions) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: partitionByQueue,
		Init:      func() []any { return []any{model.NewQueue("", o.Capacity)} },
		Step: func(state, input, output any) []any {
			return step(state.(model.Queue), input.(*Input), output.(*Output), o.Capacity)
		},
		Equal:                     func(a, b any) bool { return a.(model.Queue).Equal(b.(model.Queue)) },
		Hash:                      func(s any) uint64 { return s.(model.Queue).Hash() },
		DescribeOperation:         func(in, out any) string { return describeOp(in.(*Input), out.(*Output), o.Epoch) },
		DescribeState:             func(s any) string { return describeQueue(s.(model.Queue), o.Epoch) },
		DescribeOperationMetadata: func(md any) string { s, _ := md.(string); return s },
	}
	return nm.ToModel()
}

// step returns the states q can be in after the operation (none: the store's
// answer is impossible from q).
func step(q model.Queue, in *Input, out *Output, capacity int) []any {
	if q.Name() == "" { // the partition's first op names its queue
		q = model.NewQueue(in.Queue, capacity)
	}
	if in.Damage {
		return damageStep(q, in, out)
	}
	if in.Tx != nil {
		return stepTx(q, in, out)
	}
	if out.Indeterminate {
		next := []any{q} // it never happened
		for _, now := range in.NowCandidates {
			if n, m := model.Apply(q, in.modelInput(now)); m.Err == nil {
				next = append(next, n)
			}
		}
		return next
	}
	if out.Err == "busy" {
		return []any{q} // it did not run
	}
	if out.Err != "" && out.Now.IsZero() && len(in.NowCandidates) > 0 {
		// A refusal whose answer depends on the clock reading the store
		// took (see Recorder.Operations): any reading within the call.
		for _, now := range in.NowCandidates {
			if n, m := model.Apply(q, in.modelInput(now)); matches(m, out) {
				return []any{n}
			}
		}
		return nil
	}
	n, m := model.Apply(q, in.modelInput(out.Now))
	if !matches(m, out) {
		return nil
	}
	return []any{n}
}

func partitionByQueue(ops []porcupine.Operation) [][]porcupine.Operation {
	byQueue := map[string][]porcupine.Operation{}
	var order []string
	for _, op := range ops {
		q := op.Input.(*Input).Queue
		if _, ok := byQueue[q]; !ok {
			order = append(order, q)
		}
		byQueue[q] = append(byQueue[q], op)
	}
	slices.Sort(order)
	out := make([][]porcupine.Operation, 0, len(order))
	for _, q := range order {
		out = append(out, byQueue[q])
	}
	return out
}

// --- descriptions ------------------------------------------------------------

// at shows t relative to epoch ("+12ms"), or "-" for the zero time.
func at(t, epoch time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if epoch.IsZero() {
		return t.Format("15:04:05.000000")
	}
	return "+" + ms(t.Sub(epoch))
}

// ms shows a duration in milliseconds, with microseconds when needed.
func ms(d time.Duration) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)), "0"), ".") + "ms"
}

// describeCall shows the call, for example "Ack(t1 token=7)".
func describeCall(in *Input, epoch time.Time) string {
	if in.Tx != nil {
		return describeTxCall(in, epoch)
	}
	if in.Damage {
		return fmt.Sprintf("%s Damage(%s)", in.Queue, in.ID)
	}
	var args []string
	add := func(format string, a ...any) { args = append(args, fmt.Sprintf(format, a...)) }
	switch in.Op {
	case model.OpEnqueue:
		e := in.Enqueue
		add("%s", e.ID)
		if e.Priority != 0 {
			add("prio=%d", e.Priority)
		}
		if !e.RunAfter.IsZero() {
			add("runAfter=%s", at(e.RunAfter, epoch))
		}
		add("maxAttempts=%d", e.MaxAttempts)
		if e.Timeout != 0 {
			add("timeout=%v", e.Timeout)
		}
	case model.OpPop:
		add("n=%d", in.Limit)
		add("lease=%s", ms(in.Lease))
	case model.OpExtend, model.OpAck, model.OpFail, model.OpRetry:
		add("%s", in.Claim.TaskID)
		add("token=%d", in.Claim.Token)
		if in.Op == model.OpExtend {
			add("lease=%s", ms(in.Lease))
		}
		if in.Op == model.OpRetry {
			add("delay=%s", ms(in.Delay))
		}
	case model.OpRequeue, model.OpFinalize:
		add("%s", in.ReapClaim.TaskID)
		add("version=%d", in.ReapClaim.Version)
		if in.Op == model.OpRequeue {
			add("delay=%s", ms(in.Delay))
		}
	case model.OpClaimExpired:
		add("ttl=%s", ms(in.Lease))
		add("limit=%d", in.Limit)
	case model.OpRecoverExpired:
		add("delay=%s", ms(in.Lease))
		add("limit=%d", in.Limit)
	case model.OpPromote:
		add("limit=%d", in.Limit)
	case model.OpInspectRequeue, model.OpRemove, model.OpCancel:
		add("%s", in.ID)
		if in.Expect != 0 {
			add("expect=%d", in.Expect)
		}
	case model.OpGet:
		add("%s", in.ID)
	case model.OpList:
		add("%v", in.State)
		if in.After != "" {
			add("after=%s", in.After)
		}
		add("limit=%d", in.Limit)
	case model.OpEnqueueBatch:
		for _, e := range in.Batch {
			add("%s", e.ID)
		}
	case model.OpAckBatch:
		for _, a := range in.Acks {
			if a.Queue != in.Queue {
				add("%s/%s:token=%d", a.Queue, a.TaskID, a.Token)
			} else {
				add("%s:token=%d", a.TaskID, a.Token)
			}
		}
		if in.Limit != 0 {
			add("pop n=%d lease=%s", in.Limit, ms(in.Lease))
		}
	case model.OpPrune:
		add("%v", in.States)
		add("before=%s", at(in.Before, epoch))
		add("limit=%d", in.Limit)
	}
	return fmt.Sprintf("%s %v(%s)", in.Queue, in.Op, strings.Join(args, " "))
}

// describeOp shows a call and its answer, for example
// "q0 Ack(t1 token=7) @+3ms → t1 succeeded v9".
func describeOp(in *Input, out *Output, epoch time.Time) string {
	if in.Tx != nil {
		return describeTx(in, out, epoch)
	}
	call := describeCall(in, epoch)
	if !out.Now.IsZero() {
		call += " @" + at(out.Now, epoch)
	}
	switch {
	case out.Indeterminate:
		return call + " → ? (" + out.ErrText + ")"
	case out.Err != "":
		msg := out.Err
		if out.Err == "invalid_transition" {
			msg = fmt.Sprintf("invalid transition: %v from %v", out.ErrOp, out.ErrState)
		}
		return call + " → error " + msg
	}
	var res []string
	if out.Task != nil {
		res = append(res, describeTask(*out.Task, epoch))
	}
	for _, t := range out.Tasks {
		res = append(res, describeTask(t, epoch))
	}
	for _, c := range out.Claims {
		res = append(res, fmt.Sprintf("claim %s v%d until %s", c.TaskID, c.Version, at(c.Deadline, epoch)))
	}
	if len(out.IDs) > 0 {
		res = append(res, "["+strings.Join(out.IDs, " ")+"]")
	}
	if c := out.Counts; c != nil {
		desc := fmt.Sprintf("scheduled=%d ready=%d running=%d succeeded=%d failed=%d",
			c.Scheduled, c.Ready, c.Running, c.Succeeded, c.Failed)
		if c.Paused {
			desc += " paused"
		}
		res = append(res, desc)
	}
	if out.Paused != nil {
		res = append(res, fmt.Sprintf("paused=%v", *out.Paused))
	}
	if out.Next != "" {
		res = append(res, "next="+out.Next)
	}
	for _, it := range out.Items {
		switch {
		case it.Task != nil:
			res = append(res, describeTask(*it.Task, epoch))
		case it.Err == "invalid_transition":
			res = append(res, fmt.Sprintf("error invalid transition: %v from %v", it.ErrOp, it.ErrState))
		default:
			res = append(res, "error "+it.Err)
		}
	}
	if len(res) == 0 {
		res = append(res, "none")
	}
	return call + " → " + strings.Join(res, "; ")
}

// describeTask shows the fields of a task that its state gives meaning to.
func describeTask(t model.Task, epoch time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %v v%d", t.ID, t.State, t.Version)
	if t.Priority != 0 {
		fmt.Fprintf(&b, " prio=%d", t.Priority)
	}
	fmt.Fprintf(&b, " attempt=%d/%d", t.Attempt, t.MaxAttempts)
	switch t.State {
	case model.Scheduled:
		fmt.Fprintf(&b, " runAfter=%s", at(t.RunAfter, epoch))
	case model.Running:
		fmt.Fprintf(&b, " token=%d deadline=%s", t.ClaimToken, at(t.Deadline, epoch))
	case model.Succeeded, model.Failed:
		fmt.Fprintf(&b, " finished=%s", at(t.FinishedAt, epoch))
	}
	if len(t.Errors) > 0 {
		fmt.Fprintf(&b, " errors=%d (lease lost %d)", len(t.Errors), t.LeaseLosses())
	}
	if len(t.Result) > 0 {
		fmt.Fprintf(&b, " result=%q", t.Result)
	}
	return b.String()
}

// describeQueue shows every task of the queue and its sequence.
func describeQueue(q model.Queue, epoch time.Time) string {
	paused := ""
	if q.Paused() {
		paused = " paused"
	}
	if q.Len() == 0 {
		return fmt.Sprintf("%s: empty, seq=%d%s", q.Name(), q.Seq(), paused)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s seq=%d%s:", q.Name(), q.Seq(), paused)
	for _, t := range q.Tasks() {
		b.WriteString(" [")
		b.WriteString(describeTask(t, epoch))
		b.WriteString("]")
	}
	return b.String()
}

// cloneTask returns a deep copy of t (its slices are not shared).
func cloneTask(t model.Task) model.Task {
	t.Payload = bytes.Clone(t.Payload)
	t.Result = bytes.Clone(t.Result)
	t.Errors = slices.Clone(t.Errors)
	return t
}
