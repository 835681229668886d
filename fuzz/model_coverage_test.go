package fuzz

import (
	"flag"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/model"
	"pgregory.net/rapid"
)

// TestModelCoverage runs the model property with a fixed seed and fails when
// an outcome of wantCovered never happened: the generators must keep reaching
// the interesting parts of the model (a change that made, say, every broker
// claim stale would leave the properties passing while testing little). The
// seed and the run's size are fixed so that the verdict is the same on every
// run; the rarest outcome happens a few times in it.
func TestModelCoverage(t *testing.T) {
	setFlag(t, "rapid.seed", "1")
	setFlag(t, "rapid.checks", "100")
	setFlag(t, "rapid.steps", "30")
	stats := map[string]int{}
	rapid.Check(t, func(rt *rapid.T) { runModel(rt, stats) })
	keys := make([]string, 0, len(stats))
	for k := range stats {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t.Logf("%6d  %s", stats[k], k)
	}
	if testing.Short() {
		t.Logf("-short runs a fifth of the checks: coverage not judged")
		return
	}
	for _, k := range wantCovered {
		if stats[k] == 0 {
			t.Errorf("no step reached %q in %d steps: the generators no longer cover it", k, stats["steps"])
		}
	}
}

// setFlag sets a command-line flag for the rest of the test.
func setFlag(t *testing.T, name, value string) {
	t.Helper()
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("no flag %s", name)
	}
	old := f.Value.String()
	if err := flag.Set(name, value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = flag.Set(name, old) })
}

// wantCovered lists the outcomes TestModelCoverage must reach.
var wantCovered = []string{
	// Every mutation succeeds, the bulk ones on at least one task.
	"Enqueue ok", "Promote ok+", "Pop ok+", "Extend ok", "Ack ok", "Fail ok", "Retry ok",
	"ClaimExpired ok+", "Requeue ok", "Finalize ok", "RecoverExpired ok+",
	"InspectRequeue ok", "Remove ok", "Prune ok+",
	// Every refusal.
	"Enqueue conflict", "Enqueue full", "invalid argument",
	"worker stale", "worker transition", "broker stale", "broker transition",
	"inspector not found", "inspector conflict", "InspectRequeue transition",
	// The seed races and the paths around them.
	"worker decides while a broker holds a live claim (WorkerAckRace)",
	"broker decision stale after the worker decided",
	"popped claim stale after its task was popped again (StaleWorkerAck)",
	"RecoverExpired fails a task", "RecoverExpired returns a task to the queue",
	"Pop of a task already attempted", "Enqueue of an ID used before",
	"InspectRequeue of a Succeeded task",
}

var kindNames = map[error]string{
	model.ErrStaleClaim:        "stale",
	model.ErrNotFound:          "not found",
	model.ErrInvalidTransition: "transition",
	model.ErrInvalidArgument:   "invalid argument",
	model.ErrConflict:          "conflict",
	model.ErrQueueFull:         "full",
}

// count records the outcome of one step: prev is the state it started from.
func (m *machine) count(prev model.Queue, in model.Input, out model.Output) {
	add := func(k string) { m.stats[k]++ }
	add("steps")
	op := in.Op.String()
	kind := kindNames[model.Kind(out.Err)]
	group := map[model.Op]string{
		model.OpExtend: "worker", model.OpAck: "worker", model.OpFail: "worker", model.OpRetry: "worker",
		model.OpRequeue: "broker", model.OpFinalize: "broker",
		model.OpInspectRequeue: "inspector", model.OpRemove: "inspector",
	}[in.Op]
	switch {
	case out.Err == nil && len(outputIDs(in, out)) > 0:
		add(op + " ok+")
	case out.Err == nil:
		add(op + " ok")
	case kind == "invalid argument":
		add(kind)
	default:
		add(op + " " + kind)
		if group != "" {
			add(group + " " + kind)
		}
	}

	switch in.Op {
	case model.OpExtend, model.OpAck, model.OpFail, model.OpRetry:
		task, err := prev.Get(in.Claim.TaskID)
		if out.Err == nil && slices.ContainsFunc(m.reaps, func(rc model.ReapClaim) bool {
			return rc.TaskID == task.ID && rc.Version == task.Version
		}) {
			add("worker decides while a broker holds a live claim (WorkerAckRace)")
		}
		if model.Kind(out.Err) == model.ErrStaleClaim && err == nil && task.State == model.Running && slices.Contains(m.claims, in.Claim) {
			add("popped claim stale after its task was popped again (StaleWorkerAck)")
		}
	case model.OpRequeue, model.OpFinalize:
		task, err := prev.Get(in.ReapClaim.TaskID)
		if model.Kind(out.Err) == model.ErrStaleClaim && err == nil && task.State.Terminal() {
			add("broker decision stale after the worker decided")
		}
	case model.OpRecoverExpired:
		for _, task := range out.Tasks {
			if task.State == model.Failed {
				add("RecoverExpired fails a task")
			} else {
				add("RecoverExpired returns a task to the queue")
			}
		}
	case model.OpPop:
		for _, task := range out.Tasks {
			if task.Attempt > 1 {
				add("Pop of a task already attempted")
			}
		}
	case model.OpEnqueue:
		if _, seen := m.versions[in.Enqueue.ID]; seen && out.Err == nil {
			add("Enqueue of an ID used before")
		}
	case model.OpInspectRequeue:
		if task, err := prev.Get(in.ID); err == nil && task.State == model.Succeeded && out.Err == nil {
			add("InspectRequeue of a Succeeded task")
		}
	}
}
