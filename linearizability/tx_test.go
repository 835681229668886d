package linearizability_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/linearizability/backends"
	"github.com/leasehold/leasehold/model"
)

// txPlan is a plan of every shape of transaction: a producer's rolled back
// and committed (two tasks, then one), a worker's that acks its claim and
// enqueues the next task, rolled back and then committed, and one acking
// the claim it already acked; an inspector then reads what is left.
func txPlan() *linearizability.Plan {
	lease := 50 * time.Millisecond
	tx := func(s linearizability.Step) linearizability.Step {
		s.Kind, s.Attempts, s.Row = linearizability.Tx, 2, true
		return s
	}
	return &linearizability.Plan{
		Mode: linearizability.FakeTime, Queues: []string{"q0"},
		Tasks: []string{"t0", "t1", "t2", "t3", "t4", "t5"}, Gaps: []time.Duration{0, time.Millisecond, 0},
		Clients: []linearizability.ClientPlan{
			{Role: linearizability.Producer, Rounds: [][]linearizability.Step{
				{tx(linearizability.Step{N: 2, Rollback: true}), tx(linearizability.Step{N: 2, Immediate: true}), tx(linearizability.Step{N: 1})}, nil, nil}},
			{Role: linearizability.Worker, Rounds: [][]linearizability.Step{nil, {
				{Kind: linearizability.Pop, N: 1, Lease: lease},
				tx(linearizability.Step{Ack: true, N: 1, Rollback: true}),
				tx(linearizability.Step{Ack: true, N: 1}),
				tx(linearizability.Step{Ack: true, Pick: 2}),
			}, nil}},
			{Role: linearizability.Inspector, Rounds: [][]linearizability.Step{nil, nil, {
				{Kind: linearizability.Counts}, {Kind: linearizability.Get}, {Kind: linearizability.Get, Task: 3},
				{Kind: linearizability.List, State: model.Ready, N: 3},
			}}},
		},
	}
}

// The transactions of a plan run inside the application's own
// transactions on SQLite and PostgreSQL, and the history that records them
// passes the check: committed and rolled back, enqueueing (on SQLite in a
// batch) and, on PostgreSQL, acking a claim.
func TestTxStepsAreRunAndChecked(t *testing.T) {
	sf, err := backends.SQLite(t.TempDir(), sqlite.PopReturning)
	if err != nil {
		t.Fatal(err)
	}
	pf, cleanup, err := backends.Postgres(pgtest.URL(t), postgres.PopUpdateReturning)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cleanup(); err != nil {
			t.Error(err)
		}
	}()
	for _, c := range []struct {
		name string
		f    linearizability.Factory
		want []string // the ops of its transactions, as "commit: Enqueue ok"
	}{
		{"sqlite", sf, []string{"rollback: EnqueueBatch ok", "commit: EnqueueBatch ok", "commit: Enqueue ok", "rollback: Enqueue ok"}},
		{"postgres", pf, []string{"rollback: Enqueue ok", "commit: Enqueue ok", "rollback: Ack ok", "commit: Ack ok", "commit: Ack invalid_transition"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := linearizability.Execute(context.Background(), txPlan(), c.f)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, op := range h.Operations {
				tx := op.Input.Tx
				if tx == nil {
					continue
				}
				end := "rollback"
				if tx.Commit {
					end = "commit"
				}
				if tx.Row == "" || op.Output.RowFound == nil || *op.Output.RowFound != tx.Commit {
					t.Errorf("a transaction that ended in %s: its row %q found %v", end, tx.Row, op.Output.RowFound)
				}
				for i, sub := range tx.Ops {
					res := "ok"
					if e := op.Output.Tx[i].Err; e != "" {
						res = e
					}
					got = append(got, end+": "+sub.Op.String()+" "+res)
				}
			}
			for _, w := range c.want {
				if !strings.Contains(strings.Join(got, "\n"), w) {
					t.Errorf("no %q among the transactions' ops: %q", w, got)
				}
			}
			if v := linearizability.Check(h, 10*time.Second); !v.OK() {
				t.Errorf("the history is %v", v.Result)
			}
		})
	}
}
