package linearizability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// RunRuntime is Run for the runtime mode: it draws runtime plans
// (RuntimePlans, with cfg's TimeMode and Faults), runs each with
// ExecuteRuntime on a fresh backend, checks each history with porcupine and
// with every runtime property (CheckRuntime), and saves each violation to a
// folder of its own: the plan (plan.json, plan.txt), the store history
// (history.json, which `leasehold check --replay` reads, and history.html),
// runtime.json (the invocations and readings the properties read) and
// violations.txt (the properties broken). A history is a violation when
// porcupine does not find it linearizable or when it breaks a property.
// cfg.Clients is not used: a runtime plan draws its own components.
func RunRuntime(ctx context.Context, cfg Config) (Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Report{}, err
	}
	gen := RuntimePlans(RuntimeOptions{Mode: cfg.TimeMode, Faults: cfg.Faults})
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var mu sync.Mutex
	issued, stopped := 0, false
	next := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if stopped || ctx.Err() != nil || cfg.Histories > 0 && issued >= cfg.Histories ||
			cfg.Duration > 0 && time.Since(start) >= cfg.Duration {
			return 0, false
		}
		issued++
		return issued - 1, true
	}
	type result struct {
		i       int
		seed    uint64
		plan    *RuntimePlan
		rh      *RuntimeHistory
		v       Verdict
		props   []Violation
		runTime time.Duration
		err     error
	}
	results := make(chan result)
	var wg sync.WaitGroup
	for range cfg.Parallel {
		wg.Go(func() {
			for {
				i, ok := next()
				if !ok {
					return
				}
				r := result{i: i, seed: cfg.Seed + uint64(i)}
				r.plan = gen.Example(int(r.seed))
				t0 := time.Now()
				r.rh, r.err = ExecuteRuntime(ctx, r.plan, cfg.Factory)
				r.runTime = time.Since(t0)
				if r.err == nil {
					r.rh.History.Adapter, r.rh.History.Seed = cfg.Name, r.seed
					r.v = Check(r.rh.History, cfg.CheckTimeout)
					r.props = CheckRuntime(r.plan, r.rh)
				}
				results <- r
			}
		})
	}
	go func() {
		wg.Wait()
		close(results)
	}()

	rep := Report{Adapter: cfg.Name, Outcomes: map[string]int{}}
	var firstErr error
	var example result
	for r := range results {
		rep.RunTime += r.runTime
		rep.MaxRun = max(rep.MaxRun, r.runTime)
		if r.err != nil {
			if firstErr == nil && ctx.Err() == nil {
				firstErr = fmt.Errorf("history %d (seed %d): %w", r.i, r.seed, r.err)
			}
			mu.Lock()
			stopped = true
			mu.Unlock()
			continue
		}
		h := r.rh.History
		rep.CheckTime += r.v.Elapsed
		rep.MaxCheck = max(rep.MaxCheck, r.v.Elapsed)
		rep.Histories++
		rep.Operations += len(h.Operations)
		rep.Indeterminate += h.Indeterminate()
		rep.Guards.Add(CountGuards(h))
		for _, op := range h.Operations {
			rep.Outcomes[outcome(op)]++
		}
		if !r.v.OK() || len(r.props) > 0 {
			rep.Violations++
			if !r.v.OK() && r.v.Result == porcupine.Unknown {
				rep.Unknown++
			}
			f := Failure{Seed: r.seed, Result: r.v.Result, Check: r.v, History: h, After: r.i, Elapsed: time.Since(start),
				Properties: r.props, RuntimePlan: r.plan}
			f.Dir, f.SaveError = SaveRuntimeFailure(cfg.OutDir, r.plan, r.rh, r.v, r.props)
			if cfg.Logf != nil {
				cfg.Logf("%s: runtime history %d (seed %d): %s; %s", cfg.Name, r.i, r.seed, f.Verdict(), f.where())
			}
			rep.Failures = append(rep.Failures, f)
			if cfg.MaxViolations > 0 && rep.Violations >= cfg.MaxViolations {
				mu.Lock()
				stopped = true
				mu.Unlock()
			}
		} else if cfg.ExampleHTML != "" && (example.rh == nil || len(h.Operations) < len(example.rh.History.Operations) && len(h.Operations) >= 20) {
			example = r
		}
		if cfg.Progress != nil {
			cfg.Progress(Progress{Histories: rep.Histories, Operations: rep.Operations, Violations: rep.Violations, Elapsed: time.Since(start)})
		}
	}
	slices.SortFunc(rep.Failures, func(a, b Failure) int { return a.After - b.After })
	if example.rh != nil {
		if err := os.MkdirAll(filepath.Dir(cfg.ExampleHTML), 0o755); err == nil {
			if WriteVisualization(example.rh.History, example.v, cfg.ExampleHTML) == nil {
				rep.Example = cfg.ExampleHTML
				rep.ExampleHistory, rep.ExampleVerdict = example.rh.History, example.v
			}
		}
	}
	rep.Elapsed = time.Since(start)
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return rep, firstErr
}

// Verdict says what was wrong with the history: porcupine's verdict when
// it was not Ok, and the runtime properties it broke.
func (f Failure) Verdict() string {
	var parts []string
	if f.Result != porcupine.Ok {
		parts = append(parts, fmt.Sprintf("%s (%d operations)", f.Result, len(f.History.Operations)))
	}
	names := map[string]int{}
	var order []string
	for _, v := range f.Properties {
		if names[v.Property] == 0 {
			order = append(order, v.Property)
		}
		names[v.Property]++
	}
	for _, n := range order {
		parts = append(parts, fmt.Sprintf("breaks %s (%d)", n, names[n]))
	}
	return strings.Join(parts, ", ")
}

// SaveRuntimeFailure saves a runtime violation to a new folder under dir
// (see RunRuntime) and returns the folder.
func SaveRuntimeFailure(dir string, p *RuntimePlan, rh *RuntimeHistory, v Verdict, props []Violation) (string, error) {
	out, err := SaveFailure(dir, rh.History, nil, v)
	if out == "" {
		return "", err
	}
	var lines strings.Builder
	for _, pv := range props {
		lines.WriteString(pv.String() + "\n")
	}
	if !v.OK() {
		fmt.Fprintf(&lines, "linearizability: %s\n", v.Result)
	}
	return out, errors.Join(err,
		SaveJSON(filepath.Join(out, "plan.json"), p),
		os.WriteFile(filepath.Join(out, "plan.txt"), []byte(p.String()), 0o644),
		SaveJSON(filepath.Join(out, "runtime.json"), rh),
		os.WriteFile(filepath.Join(out, "violations.txt"), []byte(lines.String()), 0o644))
}
