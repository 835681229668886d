package linearizability_test

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/linearizability/backends"
	"github.com/leasehold/leasehold/model"
)

// TestRuntimePlansPauseTheQueue runs drawn runtime plans whose operator
// pauses the queue until one history has Workers poll the paused queue:
// their Pops, recorded between the accepted Pause and the next Resume,
// answer no task, every task still ends terminal after the harness's
// Resume, and the history passes every check.
func TestRuntimePlansPauseTheQueue(t *testing.T) {
	gen := linearizability.RuntimePlans(linearizability.RuntimeOptions{Mode: linearizability.FakeTime})
	for seed := 0; seed < 400; seed++ {
		p := gen.Example(seed)
		pauses := false
		for _, a := range p.Inspects {
			pauses = pauses || a.Kind == linearizability.InspectPause
		}
		if !pauses {
			continue
		}
		rh, err := linearizability.ExecuteRuntime(context.Background(), p, backends.Memory())
		if err != nil {
			t.Fatal(err)
		}
		// A Pop called after an accepted Pause returned, and returned
		// before any Resume was called, found the queue paused.
		ops := rh.History.Operations
		var pausedAt []int64
		var resumeCalls []int64
		for _, op := range ops {
			switch {
			case op.Input.Op == model.OpPause && op.Output.Err == "" && !op.Output.Indeterminate:
				pausedAt = append(pausedAt, op.Return)
			case op.Input.Op == model.OpResume:
				resumeCalls = append(resumeCalls, op.Call)
			}
		}
		emptyPops, resumes := 0, len(resumeCalls)
		for _, op := range ops {
			if op.Input.Op != model.OpPop || op.Output.Err != "" || op.Output.Indeterminate {
				continue
			}
			inPause := false
			for _, at := range pausedAt {
				if op.Call <= at {
					continue
				}
				resumed := false
				for _, rc := range resumeCalls {
					resumed = resumed || (rc > at && rc < op.Return)
				}
				inPause = inPause || !resumed
			}
			if !inPause {
				continue
			}
			if len(op.Output.Tasks) > 0 {
				t.Fatalf("seed %d: a Pop of the paused queue claimed %d tasks", seed, len(op.Output.Tasks))
			}
			emptyPops++
		}
		if emptyPops == 0 {
			continue
		}
		if resumes == 0 {
			t.Fatalf("seed %d: the queue was paused and never resumed", seed)
		}
		if v := linearizability.CheckRuntime(p, rh); len(v) > 0 {
			t.Fatalf("seed %d: %v", seed, v)
		}
		if !rh.Drained {
			t.Fatalf("seed %d: tasks were left unfinished: %s", seed, rh.Left)
		}
		return
	}
	t.Fatal("no plan of 400 had a Worker poll a paused queue")
}
