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

// TestRuntimeHarnessResumesThroughFailedCalls pauses the queue with
// inspector 1 and fails the first four calls of inspector 0, which sends
// the harness's Resume after the plan's ticks (two lost requests, two
// ErrBusy answers: none of them runs): the harness sends it again until
// one is answered, and every task still ends terminal.
func TestRuntimeHarnessResumesThroughFailedCalls(t *testing.T) {
	gen := linearizability.RuntimePlans(linearizability.RuntimeOptions{Mode: linearizability.FakeTime})
	ran := 0
	for seed := 0; ran < 3 && seed < 400; seed++ {
		p := gen.Example(seed)
		if len(p.Tasks) == 0 {
			continue
		}
		p.Inspects = []linearizability.InspectAction{{By: 1, Tick: 0, Kind: linearizability.InspectPause}}
		var faults []linearizability.CallFault
		for _, f := range p.Faults {
			if f.Component != "inspector 0" && f.Component != "inspector 1" {
				faults = append(faults, f)
			}
		}
		p.Faults = append(faults,
			linearizability.CallFault{Component: "inspector 0", Call: 0, Kind: linearizability.CallLoseRequest},
			linearizability.CallFault{Component: "inspector 0", Call: 1, Kind: linearizability.CallBusy, PastTimeout: true},
			linearizability.CallFault{Component: "inspector 0", Call: 2, Kind: linearizability.CallLoseRequest},
			linearizability.CallFault{Component: "inspector 0", Call: 3, Kind: linearizability.CallBusy, PastTimeout: true},
		)
		rh, err := linearizability.ExecuteRuntime(context.Background(), p, backends.Memory())
		if err != nil {
			t.Fatal(err)
		}
		paused, resumes := false, 0
		for _, op := range rh.History.Operations {
			switch op.Input.Op {
			case model.OpPause:
				paused = paused || (op.Output.Err == "" && !op.Output.Indeterminate)
			case model.OpResume:
				resumes++
			}
		}
		if !paused {
			t.Fatalf("seed %d: the plan's Pause did not take effect", seed)
		}
		if resumes < 5 {
			t.Errorf("seed %d: %d Resume calls; want the four that failed and one more", seed, resumes)
		}
		if !rh.Drained {
			t.Fatalf("seed %d: tasks were left unfinished: %s", seed, rh.Left)
		}
		if v := linearizability.CheckRuntime(p, rh); len(v) > 0 {
			t.Fatalf("seed %d: %v", seed, v)
		}
		ran++
	}
	if ran < 3 {
		t.Fatalf("ran %d plans; want 3", ran)
	}
}
