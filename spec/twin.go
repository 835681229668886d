package spec

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/core"
)

// twin is a core.Store that performs every operation on the store under test
// and then on a ModelStore reading the same clock, returns the store's answer,
// and reports every difference: in the answer (error kind, every result field,
// Now), and in the whole state of the queue the operation named, read back
// through the store's List and Counts. A rejected operation is thereby checked
// to leave the store as the model leaves itself: unchanged.
//
// The clock must not move between the two halves of an operation, so a twin is
// for one goroutine.
type twin struct {
	store  core.Store
	model  *ModelStore
	report func(msg string)
	queues []string // valid queue names operated on, in first-use order
}

var _ core.BatchStore = (*twin)(nil)

func newTwin(store core.Store, ref *ModelStore, report func(string)) *twin {
	return &twin{store: store, model: ref, report: report}
}

// after reports, in one message, how the answer differs (diff, "" if it
// agrees) and how the named queue's state differs from the model's.
func (w *twin) after(queue, desc, diff string) {
	var msgs []string
	if diff != "" {
		msgs = append(msgs, desc+": "+diff)
	}
	if d := w.queueDiff(queue, desc); d != "" {
		msgs = append(msgs, d)
	}
	if len(msgs) > 0 {
		w.report(strings.Join(msgs, "\n"))
	}
}

// queueDiff compares the store's whole state of queue with the model's.
func (w *twin) queueDiff(queue, desc string) string {
	if core.ValidateQueueName(queue) != nil {
		return ""
	}
	if !slices.Contains(w.queues, queue) {
		w.queues = append(w.queues, queue)
	}
	got, err := readQueue(context.Background(), w.store, queue)
	if err != nil {
		return fmt.Sprintf("after %s: reading the store back: %v", desc, err)
	}
	if d := diffQueueState(queue, got, modelQueue(w.model, queue)); d != "" {
		return fmt.Sprintf("after %s, the store's state differs from the model's:\n%s", desc, d)
	}
	return ""
}

// checkAll compares every queue the twin has operated on.
func (w *twin) checkAll(desc string) {
	for _, q := range w.queues {
		if d := w.queueDiff(q, desc); d != "" {
			w.report(d)
		}
	}
}

func taskDiff(got core.TaskResult, gerr error, want core.TaskResult, werr error) string {
	d, both := diffError(gerr, werr)
	if !both {
		return d
	}
	return joinDiffs(diffNow(got.Now, want.Now), diffTask("task", got.Task, want.Task))
}

func tasksDiff(got core.TasksResult, gerr error, want core.TasksResult, werr error) string {
	d, both := diffError(gerr, werr)
	if !both {
		return d
	}
	return joinDiffs(diffNow(got.Now, want.Now), diffTasks("tasks", got.Tasks, want.Tasks))
}

func idsDiff(got core.IDsResult, gerr error, want core.IDsResult, werr error) string {
	d, both := diffError(gerr, werr)
	if !both {
		return d
	}
	return joinDiffs(diffNow(got.Now, want.Now), diffIDs(got.IDs, want.IDs))
}

// Enqueue implements core.Store.
func (w *twin) Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error) {
	got, gerr := w.store.Enqueue(ctx, p)
	want, werr := w.model.Enqueue(ctx, p)
	w.after(p.Queue, describeEnqueue(p), taskDiff(got, gerr, want, werr))
	return got, gerr
}

// Promote implements core.Store.
func (w *twin) Promote(ctx context.Context, p core.PromoteParams) (core.IDsResult, error) {
	got, gerr := w.store.Promote(ctx, p)
	want, werr := w.model.Promote(ctx, p)
	w.after(p.Queue, fmt.Sprintf("Promote(%s limit=%d)", p.Queue, p.Limit), idsDiff(got, gerr, want, werr))
	return got, gerr
}

// Pop implements core.Store.
func (w *twin) Pop(ctx context.Context, p core.PopParams) (core.TasksResult, error) {
	got, gerr := w.store.Pop(ctx, p)
	want, werr := w.model.Pop(ctx, p)
	w.after(p.Queue, fmt.Sprintf("Pop(%s lease=%v n=%d)", p.Queue, p.Lease, p.N), tasksDiff(got, gerr, want, werr))
	return got, gerr
}

// Extend implements core.Store.
func (w *twin) Extend(ctx context.Context, p core.ExtendParams) (core.TaskResult, error) {
	got, gerr := w.store.Extend(ctx, p)
	want, werr := w.model.Extend(ctx, p)
	w.after(p.Claim.Queue, fmt.Sprintf("Extend(%s lease=%v)", describeClaim(p.Claim), p.Lease), taskDiff(got, gerr, want, werr))
	return got, gerr
}

// Ack implements core.Store.
func (w *twin) Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error) {
	got, gerr := w.store.Ack(ctx, p)
	want, werr := w.model.Ack(ctx, p)
	w.after(p.Claim.Queue, fmt.Sprintf("Ack(%s result=%q)", describeClaim(p.Claim), p.Result), taskDiff(got, gerr, want, werr))
	return got, gerr
}

// Fail implements core.Store.
func (w *twin) Fail(ctx context.Context, p core.FailParams) (core.TaskResult, error) {
	got, gerr := w.store.Fail(ctx, p)
	want, werr := w.model.Fail(ctx, p)
	w.after(p.Claim.Queue, fmt.Sprintf("Fail(%s %q)", describeClaim(p.Claim), p.Message), taskDiff(got, gerr, want, werr))
	return got, gerr
}

// Retry implements core.Store.
func (w *twin) Retry(ctx context.Context, p core.RetryParams) (core.TaskResult, error) {
	got, gerr := w.store.Retry(ctx, p)
	want, werr := w.model.Retry(ctx, p)
	w.after(p.Claim.Queue, fmt.Sprintf("Retry(%s delay=%v %q)", describeClaim(p.Claim), p.Delay, p.Message), taskDiff(got, gerr, want, werr))
	return got, gerr
}

// ClaimExpired implements core.Store.
func (w *twin) ClaimExpired(ctx context.Context, p core.ClaimExpiredParams) (core.ReapResult, error) {
	got, gerr := w.store.ClaimExpired(ctx, p)
	want, werr := w.model.ClaimExpired(ctx, p)
	d, both := diffError(gerr, werr)
	if both {
		d = joinDiffs(diffNow(got.Now, want.Now), diffReapClaims(got.Claims, want.Claims))
	}
	w.after(p.Queue, fmt.Sprintf("ClaimExpired(%s ttl=%v limit=%d)", p.Queue, p.ClaimTTL, p.Limit), d)
	return got, gerr
}

// Requeue implements core.Store.
func (w *twin) Requeue(ctx context.Context, p core.RequeueParams) (core.TaskResult, error) {
	got, gerr := w.store.Requeue(ctx, p)
	want, werr := w.model.Requeue(ctx, p)
	w.after(p.ReapClaim.Queue, fmt.Sprintf("Requeue(%s delay=%v %q)", describeReap(p.ReapClaim), p.Delay, p.Message), taskDiff(got, gerr, want, werr))
	return got, gerr
}

// Finalize implements core.Store.
func (w *twin) Finalize(ctx context.Context, p core.FinalizeParams) (core.TaskResult, error) {
	got, gerr := w.store.Finalize(ctx, p)
	want, werr := w.model.Finalize(ctx, p)
	w.after(p.ReapClaim.Queue, fmt.Sprintf("Finalize(%s %q)", describeReap(p.ReapClaim), p.Message), taskDiff(got, gerr, want, werr))
	return got, gerr
}

// RecoverExpired implements core.Store.
func (w *twin) RecoverExpired(ctx context.Context, p core.RecoverExpiredParams) (core.TasksResult, error) {
	got, gerr := w.store.RecoverExpired(ctx, p)
	want, werr := w.model.RecoverExpired(ctx, p)
	w.after(p.Queue, fmt.Sprintf("RecoverExpired(%s delay=%v limit=%d)", p.Queue, p.Delay, p.Limit), tasksDiff(got, gerr, want, werr))
	return got, gerr
}

// Get implements core.Store.
func (w *twin) Get(ctx context.Context, p core.GetParams) (core.Task, error) {
	got, gerr := w.store.Get(ctx, p)
	want, werr := w.model.Get(ctx, p)
	d, both := diffError(gerr, werr)
	if both {
		d = diffTask("task", got, want)
	}
	if d != "" {
		w.report(fmt.Sprintf("Get(%s/%s): %s", p.Queue, p.ID, d))
	}
	return got, gerr
}

// List implements core.Store.
func (w *twin) List(ctx context.Context, p core.ListParams) (core.ListResult, error) {
	got, gerr := w.store.List(ctx, p)
	want, werr := w.model.List(ctx, p)
	d, both := diffError(gerr, werr)
	if both {
		d = diffTasks("tasks", got.Tasks, want.Tasks)
		if got.Next != want.Next {
			d = joinDiffs(d, fmt.Sprintf("Next: store %q, model %q", got.Next, want.Next))
		}
	}
	if d != "" {
		w.report(fmt.Sprintf("List(%s %v after=%q limit=%d): %s", p.Queue, p.State, p.After, p.Limit, d))
	}
	return got, gerr
}

// Counts implements core.Store.
func (w *twin) Counts(ctx context.Context, p core.CountsParams) (core.Counts, error) {
	got, gerr := w.store.Counts(ctx, p)
	want, werr := w.model.Counts(ctx, p)
	d, both := diffError(gerr, werr)
	if both && got != want {
		d = fmt.Sprintf("store %+v, model %+v", got, want)
	}
	if d != "" {
		w.report(fmt.Sprintf("Counts(%s): %s", p.Queue, d))
	}
	return got, gerr
}

// Pause implements core.Store.
func (w *twin) Pause(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	got, gerr := w.store.Pause(ctx, p)
	want, werr := w.model.Pause(ctx, p)
	w.after(p.Queue, fmt.Sprintf("Pause(%s)", p.Queue), pauseDiff(got, gerr, want, werr))
	return got, gerr
}

// Resume implements core.Store.
func (w *twin) Resume(ctx context.Context, p core.PauseParams) (core.PauseResult, error) {
	got, gerr := w.store.Resume(ctx, p)
	want, werr := w.model.Resume(ctx, p)
	w.after(p.Queue, fmt.Sprintf("Resume(%s)", p.Queue), pauseDiff(got, gerr, want, werr))
	return got, gerr
}

func pauseDiff(got core.PauseResult, gerr error, want core.PauseResult, werr error) string {
	d, both := diffError(gerr, werr)
	if both && got != want {
		d = fmt.Sprintf("store paused=%v, model paused=%v", got.Paused, want.Paused)
	}
	return d
}

// InspectRequeue implements core.Store.
func (w *twin) InspectRequeue(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	got, gerr := w.store.InspectRequeue(ctx, p)
	want, werr := w.model.InspectRequeue(ctx, p)
	w.after(p.Queue, fmt.Sprintf("InspectRequeue(%s/%s expect=%d)", p.Queue, p.ID, p.Expect), taskDiff(got, gerr, want, werr))
	return got, gerr
}

// Cancel implements core.Store.
func (w *twin) Cancel(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	got, gerr := w.store.Cancel(ctx, p)
	want, werr := w.model.Cancel(ctx, p)
	w.after(p.Queue, fmt.Sprintf("Cancel(%s/%s expect=%d)", p.Queue, p.ID, p.Expect), taskDiff(got, gerr, want, werr))
	return got, gerr
}

// Remove implements core.Store.
func (w *twin) Remove(ctx context.Context, p core.InspectParams) (core.TaskResult, error) {
	got, gerr := w.store.Remove(ctx, p)
	want, werr := w.model.Remove(ctx, p)
	w.after(p.Queue, fmt.Sprintf("Remove(%s/%s expect=%d)", p.Queue, p.ID, p.Expect), taskDiff(got, gerr, want, werr))
	return got, gerr
}

// Prune implements core.Store.
func (w *twin) Prune(ctx context.Context, p core.PruneParams) (core.IDsResult, error) {
	got, gerr := w.store.Prune(ctx, p)
	want, werr := w.model.Prune(ctx, p)
	w.after(p.Queue, fmt.Sprintf("Prune(%s %v before=%s limit=%d)", p.Queue, p.States, formatTime(p.Before), p.Limit), idsDiff(got, gerr, want, werr))
	return got, gerr
}

// errNoBatch is what a twin answers for a batch operation when the store under
// test does not implement core.BatchStore.
func errNoBatch(s core.Store) error {
	return fmt.Errorf("spec: the store %T does not implement core.BatchStore (EnqueueBatch, AckBatch), which every leasehold store must", s)
}

func batchDiff(got core.BatchResult, gerr error, want core.BatchResult, werr error) string {
	d, both := diffError(gerr, werr)
	if !both {
		return d
	}
	if len(got.Items) != len(want.Items) {
		return fmt.Sprintf("store answered %d items, model %d", len(got.Items), len(want.Items))
	}
	ds := []string{diffNow(got.Now, want.Now)}
	for i := range got.Items {
		g, m := got.Items[i], want.Items[i]
		d, both := diffError(g.Err, m.Err)
		if both {
			d = diffTask("task", g.Task, m.Task)
		}
		if d != "" {
			ds = append(ds, fmt.Sprintf("item %d: %s", i, d))
		}
	}
	ds = append(ds, diffTasks("claimed", got.Claimed, want.Claimed))
	return joinDiffs(ds...)
}

// EnqueueBatch implements core.BatchStore.
func (w *twin) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	bs, ok := w.store.(core.BatchStore)
	if !ok {
		return core.BatchResult{}, errNoBatch(w.store)
	}
	sp := p // the store gets its own copy of the items, so it cannot change the model's
	sp.Tasks = slices.Clone(p.Tasks)
	got, gerr := bs.EnqueueBatch(ctx, sp)
	want, werr := w.model.EnqueueBatch(ctx, p)
	w.after(p.Queue, describeEnqueueBatch(p), batchDiff(got, gerr, want, werr))
	return got, gerr
}

// AckBatch implements core.BatchStore.
func (w *twin) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	bs, ok := w.store.(core.BatchStore)
	if !ok {
		return core.BatchResult{}, errNoBatch(w.store)
	}
	sp := p
	sp.Acks = slices.Clone(p.Acks)
	got, gerr := bs.AckBatch(ctx, sp)
	want, werr := w.model.AckBatch(ctx, p)
	w.after(p.Queue, describeAckBatch(p), batchDiff(got, gerr, want, werr))
	return got, gerr
}

// Close implements core.Store: it closes both.
func (w *twin) Close() error {
	err := w.store.Close()
	_ = w.model.Close()
	return err
}

func describeEnqueue(p core.EnqueueParams) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Enqueue(%s/%s", p.Queue, p.ID)
	if p.Priority != 0 {
		fmt.Fprintf(&b, " priority=%d", p.Priority)
	}
	if !p.RunAfter.IsZero() {
		fmt.Fprintf(&b, " runAfter=%s", formatTime(p.RunAfter))
	}
	if p.Timeout != 0 {
		fmt.Fprintf(&b, " timeout=%v", p.Timeout)
	}
	if p.UniqueKey != "" {
		fmt.Fprintf(&b, " key=%q", p.UniqueKey)
	}
	if p.UniqueFor != 0 {
		fmt.Fprintf(&b, " uniqueFor=%v", p.UniqueFor)
	}
	fmt.Fprintf(&b, " maxAttempts=%d payload=%q)", p.MaxAttempts, p.Payload)
	return b.String()
}

func describeEnqueueBatch(p core.EnqueueBatchParams) string {
	items := make([]string, len(p.Tasks))
	for i, a := range p.Tasks {
		items[i] = describeEnqueue(core.EnqueueParams{Queue: p.Queue, EnqueueArgs: a})
	}
	return fmt.Sprintf("EnqueueBatch(%s: %s)", p.Queue, strings.Join(items, ", "))
}

func describeAckBatch(p core.AckBatchParams) string {
	items := make([]string, len(p.Acks))
	for i, a := range p.Acks {
		items[i] = fmt.Sprintf("%s result=%q", describeClaim(a.Claim), a.Result)
	}
	if p.Pop.N != 0 {
		return fmt.Sprintf("AckBatch(%s: %s; pop lease=%v n=%d)", p.Queue, strings.Join(items, ", "), p.Pop.Lease, p.Pop.N)
	}
	return fmt.Sprintf("AckBatch(%s: %s)", p.Queue, strings.Join(items, ", "))
}

func describeClaim(c core.Claim) string {
	return fmt.Sprintf("%s/%s token=%d", c.Queue, c.TaskID, c.Token)
}

func describeReap(c core.ReapClaim) string {
	return fmt.Sprintf("%s/%s version=%d", c.Queue, c.TaskID, c.Version)
}
