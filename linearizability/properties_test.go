package linearizability_test

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/linearizability/backends"
	"github.com/leasehold/leasehold/model"
)

// propertyPlan is a small runtime plan in fake time whose history has what
// every property reads: a task that succeeds, one that fails once and is
// retried after a delay, one whose handler outlives several heartbeats, one
// whose first attempt runs past its timeout, and broker passes.
func propertyPlan() *linearizability.RuntimePlan {
	ms := time.Millisecond
	p := &linearizability.RuntimePlan{
		Mode:  linearizability.FakeTime,
		Queue: "q0",
		Tasks: []linearizability.RuntimeTask{
			{ID: "t0", MaxAttempts: 1, Attempts: []linearizability.Behaviour{{Kind: linearizability.Succeed}}},
			{ID: "t1", MaxAttempts: 2, Attempts: []linearizability.Behaviour{{Kind: linearizability.Error}, {Kind: linearizability.Succeed}}},
			{ID: "t2", MaxAttempts: 1, Attempts: []linearizability.Behaviour{{Kind: linearizability.Outlive, Sleep: 20 * ms}}},
			{ID: "t3", MaxAttempts: 2, Timeout: 5 * ms, Attempts: []linearizability.Behaviour{{Kind: linearizability.IgnoreCtx, Sleep: 7 * ms}, {Kind: linearizability.Succeed}}},
		},
		Workers: []linearizability.WorkerSpec{{Concurrency: 3, Lease: 9 * ms, PollMin: ms, PollMax: 2 * ms,
			Shutdown: ms, Policy: linearizability.PolicySpec{Delay: 2 * ms}}},
		Brokers: []linearizability.BrokerSpec{{Batch: 1, ClaimTTL: 4 * ms, Interval: 2 * ms, Policy: linearizability.PolicySpec{Delay: ms}}},
	}
	for range 12 {
		p.Ticks = append(p.Ticks, linearizability.Tick{Advance: ms, Passes: []int{0}})
	}
	return p
}

// propertyCase breaks a history the way a bug the property is for would.
type propertyCase struct {
	property string
	breakIt  func(*testing.T, *linearizability.RuntimeHistory)
}

// TestRuntimePropertiesCatchTheirViolation runs one clean runtime history
// and then breaks it, one property at a time, the way a buggy component
// would: each property must name the history it is written for.
func TestRuntimePropertiesCatchTheirViolation(t *testing.T) {
	p := propertyPlan()
	rh, err := linearizability.ExecuteRuntime(context.Background(), p, backends.Memory())
	if err != nil {
		t.Fatal(err)
	}
	if v := linearizability.CheckRuntime(p, rh); len(v) > 0 {
		t.Fatalf("the clean history breaks %v", v)
	}
	if v := linearizability.Check(rh.History, 10*time.Second); !v.OK() {
		t.Fatalf("the clean history is %s", v.Result)
	}
	cases := []propertyCase{
		{"no-bypass", func(t *testing.T, h *linearizability.RuntimeHistory) {
			op := find(t, h, func(op *linearizability.Operation) bool { return op.Actor == "broker 0" })
			bypass := *op
			bypass.Input = linearizability.Input{Queue: "q0", Op: model.OpInspectRequeue, ID: "t0"}
			h.History.Operations = append(h.History.Operations, bypass)
		}},
		{"handler-outcome", func(t *testing.T, h *linearizability.RuntimeHistory) {
			op := find(t, h, func(op *linearizability.Operation) bool {
				return op.Actor == "worker 0" && (op.Input.Op == model.OpAck || op.Input.Op == model.OpAckBatch)
			})
			if op.Input.Op == model.OpAck {
				op.Input.Result = []byte("not the handler's")
			} else {
				op.Input.Acks[0].Result = []byte("not the handler's")
			}
		}},
		{"attempt-timeout", func(t *testing.T, h *linearizability.RuntimeHistory) {
			h.Invocations = slices.Clone(h.Invocations)
			for i := range h.Invocations {
				if h.Invocations[i].TaskID == "t3" {
					h.Invocations[i].Deadline = time.Time{} // the task's timeout ignored
					return
				}
			}
			t.Fatal("t3 never ran")
		}},
		{"handler-outcome", func(t *testing.T, h *linearizability.RuntimeHistory) {
			// The timed-out attempt of t3 recorded as the handler's success.
			op := find(t, h, func(op *linearizability.Operation) bool {
				return op.Actor == "worker 0" && op.Input.Op == model.OpRetry && op.Input.Claim.TaskID == "t3"
			})
			if !strings.Contains(op.Input.Message, "timed out") {
				t.Fatalf("t3's retry says %q", op.Input.Message)
			}
			op.Input.Message = "handler failed"
		}},
		{"heartbeat-lease", func(t *testing.T, h *linearizability.RuntimeHistory) {
			op := find(t, h, func(op *linearizability.Operation) bool { return op.Input.Op == model.OpExtend })
			op.Input.Lease = 3 * time.Millisecond
		}},
		{"pass-decides-expired", func(t *testing.T, h *linearizability.RuntimeHistory) {
			op := find(t, h, func(op *linearizability.Operation) bool {
				return op.Actor == "broker 0" && op.Input.Op == model.OpClaimExpired && op.Return < h.StopAt
			})
			op.Output.Claims = []model.ReapClaim{{Queue: "q0", TaskID: "t9", Version: 99}}
		}},
		{"store-clock-delays", func(t *testing.T, h *linearizability.RuntimeHistory) {
			op := find(t, h, func(op *linearizability.Operation) bool { return op.Input.Op == model.OpRetry })
			op.Input.Delay += time.Millisecond
		}},
		{"periodic-occurrences", func(t *testing.T, h *linearizability.RuntimeHistory) {
			// One occurrence accepted twice, as two stores that each let
			// their own scheduler in would.
			op := find(t, h, func(op *linearizability.Operation) bool { return op.Input.Op == model.OpEnqueue && op.Output.Err == "" })
			dup := *op
			dup.Input.Enqueue.ID = model.OccurrenceID(linearizability.PeriodicName, time.Unix(60, 0))
			h.History.Operations = append(h.History.Operations, dup, dup)
		}},
		{"cancel-final", func(t *testing.T, h *linearizability.RuntimeHistory) { cancelBeforeAck(t, h) }},
		{"busy-resend", func(t *testing.T, h *linearizability.RuntimeHistory) {
			// A worker's ack answered busy and never sent again.
			op := find(t, h, func(op *linearizability.Operation) bool {
				return op.Actor == "worker 0" && (op.Input.Op == model.OpAck || op.Input.Op == model.OpAckBatch)
			})
			op.Output = linearizability.Output{Err: "busy"}
		}},
		{"quiescence", func(t *testing.T, h *linearizability.RuntimeHistory) {
			h.Final[0].State = model.Running
		}},
		{"quiescence", func(t *testing.T, h *linearizability.RuntimeHistory) {
			h.Final = h.Final[1:] // a task lost
		}},
		{"concurrency", func(t *testing.T, h *linearizability.RuntimeHistory) {
			// Worker 0 (concurrency 3) runs four handlers at once, as a
			// gate that started its tasks claimed ahead at once would.
			h.Invocations = slices.Clone(h.Invocations)
			n := 0
			for i := range h.Invocations {
				if inv := &h.Invocations[i]; inv.Worker == "worker 0" && n < 4 {
					inv.Start, inv.End = int64(1_000_000+n), 2_000_000
					n++
				}
			}
			if n < 4 {
				t.Fatalf("worker 0 ran %d handlers, want at least 4", n)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.property, func(t *testing.T) {
			h := *rh
			h.Final = slices.Clone(rh.Final)
			hist := *rh.History
			h.History = &hist
			hist.Operations = make([]linearizability.Operation, len(rh.History.Operations))
			for i, op := range rh.History.Operations {
				op.Input.Acks = slices.Clone(op.Input.Acks)
				hist.Operations[i] = op
			}
			tc.breakIt(t, &h)
			var got []string
			for _, v := range linearizability.CheckRuntime(p, &h) {
				got = append(got, v.Property)
				t.Log(v)
			}
			if !slices.Contains(got, tc.property) {
				t.Errorf("the broken history breaks %v, not %s", got, tc.property)
			}
		})
	}
	var names []string
	for _, prop := range linearizability.RuntimeProperties {
		names = append(names, prop.Name)
	}
	for _, tc := range cases {
		if !slices.Contains(names, tc.property) {
			t.Errorf("no runtime property is called %s", tc.property)
		}
	}
	for _, n := range names {
		if !slices.ContainsFunc(cases, func(tc propertyCase) bool { return tc.property == n }) {
			t.Errorf("no case breaks %s", n)
		}
	}
}

// A plan whose two Clients keep one periodic schedule: the clean history
// enqueues occurrences and passes, and a scheduler Enqueue under an ID that
// is not one of the schedule's occurrences breaks periodic-occurrences.
func TestPeriodicOccurrencesNamesAForeignID(t *testing.T) {
	ms := time.Millisecond
	p := &linearizability.RuntimePlan{
		Mode:  linearizability.FakeTime,
		Queue: "q0",
		Tasks: []linearizability.RuntimeTask{{ID: "t0", MaxAttempts: 1, Attempts: []linearizability.Behaviour{{Kind: linearizability.Succeed}}}},
	}
	for range 2 {
		p.Workers = append(p.Workers, linearizability.WorkerSpec{Concurrency: 2, Lease: 9 * ms, PollMin: ms, PollMax: 2 * ms, Shutdown: ms})
		p.Brokers = append(p.Brokers, linearizability.BrokerSpec{Batch: 1, ClaimTTL: 4 * ms, Interval: 2 * ms, Loop: true})
	}
	for i := range 2 {
		p.Clients = append(p.Clients, linearizability.ClientSpec{Worker: i, Broker: i, Grace: ms, Every: 2 * ms})
	}
	for range 10 {
		p.Ticks = append(p.Ticks, linearizability.Tick{Advance: ms})
	}
	rh, err := linearizability.ExecuteRuntime(context.Background(), p, backends.Memory())
	if err != nil {
		t.Fatal(err)
	}
	if v := linearizability.CheckRuntime(p, rh); len(v) > 0 {
		t.Fatalf("the clean history breaks %v", v)
	}
	var sched []int
	for i, op := range rh.History.Operations {
		if strings.HasPrefix(op.Actor, "scheduler ") {
			sched = append(sched, i)
		}
	}
	if len(sched) < 4 {
		t.Fatalf("the schedulers sent %d Enqueues in 10 ms of a 2 ms schedule", len(sched))
	}
	op := &rh.History.Operations[sched[0]]
	op.Input.Enqueue.ID = model.OccurrenceID(linearizability.PeriodicName, linearizability.FakeEpoch.Add(time.Microsecond)) // between occurrences, as a wall-clock reading would be
	var got []string
	for _, v := range linearizability.CheckRuntime(p, rh) {
		got = append(got, v.Property)
	}
	if !slices.Contains(got, "periodic-occurrences") {
		t.Fatalf("an Enqueue under an ID between occurrences breaks %v, not periodic-occurrences", got)
	}
}

// cancelBeforeAck adds to h an operator's cancel of a task, stamped just
// before a worker's accepted Ack of it, so that the Ack came after the
// cancel, and returns that Ack and the task's ID.
func cancelBeforeAck(t *testing.T, h *linearizability.RuntimeHistory) (linearizability.Operation, string) {
	t.Helper()
	acked := func(op *linearizability.Operation) *model.Task {
		switch {
		case op.Output.Err != "" || op.Actor != "worker 0":
		case op.Input.Op == model.OpAck && op.Output.Task != nil:
			return op.Output.Task
		case op.Input.Op == model.OpAckBatch && len(op.Output.Items) > 0 && op.Output.Items[0].Task != nil:
			return op.Output.Items[0].Task
		}
		return nil
	}
	op := find(t, h, func(op *linearizability.Operation) bool { return acked(op) != nil })
	cancelled := *acked(op)
	cancelled.Version--
	h.History.Operations = append(h.History.Operations, linearizability.Operation{
		Actor: "inspector 0", Call: op.Call, Return: op.Call,
		Input:  linearizability.Input{Queue: op.Input.Queue, Op: model.OpCancel, ID: cancelled.ID},
		Output: linearizability.Output{Task: &cancelled},
	})
	return *op, cancelled.ID
}

// TestCancelFinalSparesWhatALostRequeueMayExplain: an operator's requeue
// of a cancelled task whose reply was lost may have given the task a new
// life before a worker's Ack of it, at a version no output shows, so
// cancel-final does not judge that Ack (the property flagged such a
// history of a correct Worker).
func TestCancelFinalSparesWhatALostRequeueMayExplain(t *testing.T) {
	p := propertyPlan()
	rh, err := linearizability.ExecuteRuntime(context.Background(), p, backends.Memory())
	if err != nil {
		t.Fatal(err)
	}
	// broken adds a cancel before an Ack and, unless requeued is nil, a
	// lost requeue of the task requeued names (given the Ack's task).
	broken := func(t *testing.T, requeued func(task string) string) []string {
		h := *rh
		hist := *rh.History
		hist.Operations = slices.Clone(rh.History.Operations)
		h.History = &hist
		ack, task := cancelBeforeAck(t, &h)
		if requeued != nil {
			hist.Operations = append(hist.Operations, linearizability.Operation{
				Actor: "inspector 1", Call: ack.Call - 1, Return: math.MaxInt64,
				Input:  linearizability.Input{Queue: ack.Input.Queue, Op: model.OpInspectRequeue, ID: requeued(task)},
				Output: linearizability.Output{Indeterminate: true},
			})
		}
		var got []string
		for _, v := range linearizability.CheckRuntime(p, &h) {
			got = append(got, v.Property)
		}
		return got
	}
	if got := broken(t, nil); !slices.Contains(got, "cancel-final") {
		t.Fatalf("without the lost requeue the history breaks %v, want cancel-final", got)
	}
	if got := broken(t, func(string) string { return "another" }); !slices.Contains(got, "cancel-final") {
		t.Fatalf("with a lost requeue of another task the history breaks %v, want cancel-final", got)
	}
	if got := broken(t, func(task string) string { return task }); slices.Contains(got, "cancel-final") {
		t.Fatalf("with a lost requeue of the task the history breaks %v", got)
	}
}

// find returns the first operation of h that ok accepts, failing the test
// when there is none.
func find(t *testing.T, h *linearizability.RuntimeHistory, ok func(*linearizability.Operation) bool) *linearizability.Operation {
	t.Helper()
	for i := range h.History.Operations {
		if op := &h.History.Operations[i]; ok(op) {
			return op
		}
	}
	t.Fatal("the history has no such operation")
	return nil
}
