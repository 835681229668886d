package linearizability

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// TxStore is a store whose adapter can work inside the application's own
// database transaction (the EnqueueTx of SQLite and PostgreSQL, the AckTx
// of PostgreSQL). A plan drawn with PlanOptions.Tx has Tx steps; a client
// runs them through its store's TxStore, and skips them on a store that is
// none.
type TxStore interface {
	// BeginTx opens a transaction of the application on the store's
	// database. immediate asks SQLite for BEGIN IMMEDIATE (the write lock
	// at once) rather than a deferred BEGIN; other adapters ignore it.
	BeginTx(ctx context.Context, immediate bool) (AppTx, error)
	// HasRow reports whether the application's row key exists, read
	// outside any transaction.
	HasRow(ctx context.Context, key string) (bool, error)
}

// AppTx is an application's open transaction and the store ops an adapter
// can make inside it.
type AppTx interface {
	// Enqueue is the adapter's EnqueueTx.
	Enqueue(ctx context.Context, p core.EnqueueParams) (core.TaskResult, error)
	// EnqueueBatch is its EnqueueBatchTx; errors.ErrUnsupported where it
	// has none (the client then enqueues one at a time).
	EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error)
	// Ack is its AckTx; errors.ErrUnsupported where it has none (the
	// client then acks nothing in the transaction).
	Ack(ctx context.Context, p core.AckParams) (core.TaskResult, error)
	// Write inserts the application's row key.
	Write(ctx context.Context, key string) error
	// Commit and Rollback end the transaction.
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// TxInput is an application's transaction as a history records it: the
// store ops made inside it, in order, and how it ended. A committed
// transaction is its ops taking effect together, one after another, at
// one instant between its begin and its commit; a rolled-back one takes no
// effect, though its ops' answers must still be those of the queue it saw.
type TxInput struct {
	Ops    []Input `json:"ops"`
	Commit bool    `json:"commit"`
	// Row is the application's row the transaction wrote after its ops
	// ("" none): it must exist once the transaction ended if and only if
	// it committed, whatever the ops answered.
	Row string `json:"row,omitempty"`
}

// stepTx is step for a transaction.
func stepTx(q model.Queue, in *Input, out *Output) []any {
	tx := in.Tx
	if len(out.Tx) != len(tx.Ops) {
		return nil
	}
	if tx.Row != "" && out.RowFound != nil && *out.RowFound != tx.Commit {
		return nil // the application's write did not share the transaction's fate
	}
	n := q
	for i := range tx.Ops {
		sub, so := &tx.Ops[i], &out.Tx[i]
		if so.Indeterminate {
			break // a transport error: the client rolled back after it
		}
		next, m := model.Apply(n, sub.modelInput(so.Now))
		if !matches(m, so) {
			return nil
		}
		n = next
	}
	switch {
	case out.Indeterminate: // the commit's answer was lost
		return []any{q, n}
	case tx.Commit:
		return []any{n}
	}
	return []any{q}
}

func txEnd(in *Input, out *Output) string {
	switch {
	case out.Indeterminate:
		return "?"
	case in.Tx.Commit:
		return "commit"
	}
	return "rollback"
}

// txOutcome is outcome for a transaction: "Tx commit", "Tx rollback" or
// "Tx ?".
func txOutcome(op Operation) string { return "Tx " + txEnd(&op.Input, &op.Output) }

// describeTx shows a transaction, for example
// "q0 Tx[q0 Enqueue(t1 maxAttempts=1) @+0ms → t1 ready v1; row worker 1/0] → commit".
func describeTx(in *Input, out *Output, epoch time.Time) string {
	var parts []string
	for i := range in.Tx.Ops {
		so := &Output{Indeterminate: true, ErrText: "no answer"}
		if i < len(out.Tx) {
			so = &out.Tx[i]
		}
		parts = append(parts, describeOp(&in.Tx.Ops[i], so, epoch))
	}
	if in.Tx.Row != "" {
		row := "row " + in.Tx.Row
		if out.RowFound != nil {
			row += fmt.Sprintf(" (found after: %v)", *out.RowFound)
		}
		parts = append(parts, row)
	}
	end := txEnd(in, out)
	if out.Indeterminate {
		end += " (" + out.ErrText + ")"
	}
	return fmt.Sprintf("%s Tx[%s] → %s", in.Queue, strings.Join(parts, "; "), end)
}

// describeTxCall shows a transaction's calls, for example
// "q0 Tx[q0 Ack(t1 token=3); q0 Enqueue(t2 maxAttempts=1)] commit".
func describeTxCall(in *Input, epoch time.Time) string {
	var calls []string
	for i := range in.Tx.Ops {
		calls = append(calls, describeCall(&in.Tx.Ops[i], epoch))
	}
	if in.Tx.Row != "" {
		calls = append(calls, "row "+in.Tx.Row)
	}
	end := "rollback"
	if in.Tx.Commit {
		end = "commit"
	}
	return fmt.Sprintf("%s Tx[%s] %s", in.Queue, strings.Join(calls, "; "), end)
}

// tx runs a Tx step: the client opens the application's transaction,
// acks a claim it holds in it (Step.Ack, where the adapter can), enqueues
// N tasks, writes the application's row (Step.Row), and commits, or rolls
// back (Step.Rollback, or when an op failed in transport).
func (a *actor) tx(ctx context.Context, s Step) {
	ts, ok := a.faults.Store.(TxStore)
	if !ok {
		return
	}
	q := a.plan.Queues[s.Queue]
	var claim model.Claim
	ack := false
	if s.Ack {
		if c, held := a.claim(s); held {
			claim, ack, q = c, true, c.Queue // the transaction stays on one queue
		} else if s.N == 0 {
			a.pop(ctx, q, max(s.Lease, 2*time.Millisecond), 1)
			return
		}
	}
	tx, err := ts.BeginTx(ctx, s.Immediate)
	if err != nil {
		return // nothing was done
	}
	// The transaction's ops can take effect no earlier than the first is
	// called: the operation starts there.
	begin := a.rec.tick()
	in := Input{Queue: q, Tx: &TxInput{}}
	var out Output
	broken := false // an op failed in transport: the transaction rolls back
	add := func(si Input, so Output) {
		if len(in.Tx.Ops) == 0 {
			in.Op = si.Op
		}
		in.Tx.Ops = append(in.Tx.Ops, si)
		out.Tx = append(out.Tx, so)
		broken = broken || so.Indeterminate
	}
	acked := false
	if ack {
		p := core.AckParams{Claim: claim, Result: []byte("done in a transaction by " + a.name)}
		r, err := tx.Ack(ctx, p)
		if !errors.Is(err, errors.ErrUnsupported) {
			var so Output
			if err != nil {
				so.setError(err)
			} else {
				taskOut(&so, r)
			}
			add(Input{Queue: q, Op: model.OpAck, Claim: claimRef(claim), Result: bytes.Clone(p.Result)}, so)
			acked = err == nil
			if err != nil && !so.Indeterminate {
				a.decided(claim, err) // refused: the client is done with the claim
			}
		}
	}
	var enq []model.EnqueueArgs
	for range s.N {
		enq = append(enq, a.enqueueArgs(s))
	}
	if len(enq) > 1 && !broken {
		p := core.EnqueueBatchParams{Queue: q, Tasks: enq}
		r, err := tx.EnqueueBatch(ctx, p)
		if !errors.Is(err, errors.ErrUnsupported) {
			var so Output
			if err != nil {
				so.setError(err)
			} else {
				batchOut(&so, r)
			}
			add(Input{Queue: q, Op: model.OpEnqueueBatch, Batch: cloneArgs(enq)}, so)
			enq = nil
		}
	}
	for _, e := range enq {
		if broken {
			break
		}
		r, err := tx.Enqueue(ctx, core.EnqueueParams{Queue: q, EnqueueArgs: e})
		var so Output
		if err != nil {
			so.setError(err)
		} else {
			taskOut(&so, r)
		}
		add(Input{Queue: q, Op: model.OpEnqueue, Enqueue: &cloneArgs([]model.EnqueueArgs{e})[0]}, so)
	}
	if len(in.Tx.Ops) == 0 {
		_ = tx.Rollback(ctx) // nothing the adapter can do in a transaction
		return
	}
	if s.Row && !broken {
		key := fmt.Sprintf("%s/%d", a.name, a.txs)
		a.txs++
		if err := tx.Write(ctx, key); err != nil {
			broken = true
		} else {
			in.Tx.Row = key
		}
	}
	in.Tx.Commit = !s.Rollback && !broken
	if in.Tx.Commit {
		err = tx.Commit(ctx)
	} else {
		err = tx.Rollback(ctx)
	}
	end := a.rec.tick()
	if err != nil {
		out.Indeterminate, out.ErrText = true, fmt.Sprintf("%s: %v", txEnd(&in, &out), err)
		end = math.MaxInt64
	} else if in.Tx.Row != "" {
		if found, err := ts.HasRow(ctx, in.Tx.Row); err == nil {
			out.RowFound = &found
		}
	}
	a.client.recordOp(in, out, begin, end)
	if out.Indeterminate || !in.Tx.Commit {
		return // a claim acked in it is still held (or may be)
	}
	if acked {
		a.decided(claim, nil)
	}
	for _, so := range out.Tx {
		if so.Task != nil {
			a.see(*so.Task)
		}
		for _, it := range so.Items {
			if it.Task != nil {
				a.see(*it.Task)
			}
		}
	}
}

// enqueueArgs returns the arguments of an Enqueue step's task: each
// producer walks the ID pool from its own place, so most enqueues add a
// task and some meet an ID in use (or removed).
func (a *actor) enqueueArgs(s Step) model.EnqueueArgs {
	var runAfter time.Time
	if s.Delay > 0 {
		runAfter = a.at(s.Delay)
	}
	id := a.plan.Tasks[(a.index+a.enqueued+s.Task)%len(a.plan.Tasks)]
	a.enqueued++
	return model.EnqueueArgs{ID: id, Payload: []byte(a.name), Priority: s.Priority, RunAfter: runAfter, MaxAttempts: s.Attempts, Timeout: s.Timeout}
}

func cloneArgs(as []model.EnqueueArgs) []model.EnqueueArgs {
	out := make([]model.EnqueueArgs, len(as))
	for i, e := range as {
		e.Payload = bytes.Clone(e.Payload)
		out[i] = e
	}
	return out
}

// recordOp records an operation the client made outside the store's
// methods (a transaction), called at begin and returned at end.
func (c *Client) recordOp(in Input, out Output, begin, end int64) {
	op := Operation{Client: c.id, Actor: c.actor, Call: begin, Return: end, Input: in, Output: out}
	c.r.mu.Lock()
	c.r.ops = append(c.r.ops, op)
	c.r.mu.Unlock()
	if out.Indeterminate {
		c.id = c.r.newClientID()
	}
}
