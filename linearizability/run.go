package linearizability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/model"
)

// Config configures Run.
type Config struct {
	// Name names the adapter in reports and in the folders of violations.
	Name string
	// Factory makes the backend of each history (required).
	Factory Factory
	// Histories stops the run after this many histories; Duration after
	// this much time (a history under way is finished and checked). At
	// least one must be set; whichever comes first ends the run.
	Histories int
	Duration  time.Duration
	// Seed is the seed of the first history; history i uses Seed+i. The
	// plan of a seed is the same on every run (rapid's Example); in
	// FakeTime so are its times, only the interleaving within a round is
	// left to the scheduler.
	Seed uint64
	// TimeMode is FakeTime, RealTime or MixedTime (the default).
	TimeMode TimeMode
	// Clients bounds the number of clients of a plan (default 6).
	Clients int
	// Faults injects transport faults, making some operations
	// indeterminate (see PlanOptions.Faults).
	Faults bool
	// ProducerTwins adds twins of each plan's producer (see
	// PlanOptions.ProducerTwins).
	ProducerTwins int
	// WithoutContests draws no contests (see PlanOptions.WithoutContests).
	WithoutContests bool
	// UnbatchedFills: see PlanOptions.UnbatchedFills.
	UnbatchedFills bool
	// Tx draws Tx steps (see PlanOptions.Tx): set it for a Factory whose
	// stores are TxStores.
	Tx bool
	// CheckTimeout bounds the check of one history (default 10s). A check
	// that runs out of time is Unknown, and Unknown counts as a violation.
	CheckTimeout time.Duration
	// MaxViolations stops the run after this many violations (default 1;
	// negative: never stop early).
	MaxViolations int
	// OutDir is where each violation is saved, in a folder of its own
	// (default: DefaultOutDir()).
	OutDir string
	// ExampleHTML, when set, is where the visualization of one passing
	// history is written (the longest of those with a stale or refused
	// decision), so a newcomer can see what was checked.
	ExampleHTML string
	// Parallel is the number of histories run at once, each on its own
	// backend (default DefaultParallel()).
	Parallel int
	// Progress, when set, is called after each history, from the goroutine
	// that called Run.
	Progress func(Progress)
	// Logf, when set, receives a line for each violation.
	Logf func(format string, args ...any)
}

// Progress is the state of a run after a history.
type Progress struct {
	Histories  int
	Operations int
	Violations int
	Elapsed    time.Duration
}

// Report summarises a run.
type Report struct {
	Adapter       string
	Histories     int
	Operations    int
	Indeterminate int           // operations with an injected or real transport fault
	Violations    int           // histories not found linearizable (Illegal or Unknown)
	Unknown       int           // of which the check ran out of time
	RunTime       time.Duration // running plans against the store
	CheckTime     time.Duration // checking histories
	MaxCheck      time.Duration // the slowest check of one history
	MaxRun        time.Duration // the slowest run of one plan
	// Outcomes counts the operations by op and outcome ("Ack ok", "Ack
	// stale_claim", "Pop empty", "Requeue ?" for an indeterminate one): what
	// the histories exercised. A transaction counts as "Tx commit" (or
	// "Tx rollback", "Tx ?"), and each op in it once more under that name
	// ("Tx rollback: Enqueue ok").
	Outcomes map[string]int
	// Guards counts the guards that fired over all histories.
	Guards   Guards
	Elapsed  time.Duration
	Failures []Failure
	// Example is the path of the visualization written to
	// Config.ExampleHTML, "" if none was; ExampleHistory and ExampleVerdict
	// are the history it shows and its check.
	Example        string
	ExampleHistory *History
	ExampleVerdict Verdict
}

// Failure is one history that was not found linearizable.
type Failure struct {
	Seed   uint64
	Result porcupine.CheckResult
	// Check is porcupine's verdict on the history, with the partial
	// linearizations a report is drawn from.
	Check   Verdict
	Plan    *Plan
	History *History
	// Dir is the folder holding plan.json, history.json and history.html
	// ("" if saving failed; SaveError says why).
	Dir       string
	SaveError error
	// After is the index of the history in the run (its seed less the
	// run's); Elapsed the time since the run started when it was found.
	After   int
	Elapsed time.Duration
	// Properties are the runtime properties the history broke (RunRuntime
	// only; Result is then porcupine's verdict, Ok if it was linearizable),
	// and RuntimePlan its plan (Plan is nil).
	Properties  []Violation
	RuntimePlan *RuntimePlan
}

// withDefaults checks the settings every run needs and fills in the
// defaults of the others.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Factory == nil {
		return cfg, errors.New("linearizability: Config.Factory is required")
	}
	if cfg.Histories <= 0 && cfg.Duration <= 0 {
		return cfg, errors.New("linearizability: set Config.Histories or Config.Duration")
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = 10 * time.Second
	}
	if cfg.MaxViolations == 0 {
		cfg.MaxViolations = 1
	}
	if cfg.OutDir == "" {
		cfg.OutDir = DefaultOutDir()
	}
	if cfg.Name == "" {
		cfg.Name = "store"
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = DefaultParallel()
	}
	return cfg, nil
}

// Run draws plans with rapid, executes each against a fresh backend,
// checks every history with porcupine, and saves each violation (its plan,
// its history as JSON, and porcupine's visualization) to a folder of its own.
// Up to Config.Parallel histories run at once, each on its own backend. It
// returns an error only when the harness itself fails (the backend cannot be
// made, a store panics) or ctx ends; violations are in the report.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Report{}, err
	}
	gen := Plans(PlanOptions{Mode: cfg.TimeMode, MaxClients: cfg.Clients, Faults: cfg.Faults, ProducerTwins: cfg.ProducerTwins, Tx: cfg.Tx, WithoutContests: cfg.WithoutContests, UnbatchedFills: cfg.UnbatchedFills})
	start := time.Now()

	// Workers take the next history index until the budget is spent or
	// the run is stopped.
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
	stop := func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
	}
	type result struct {
		i       int
		seed    uint64
		plan    *Plan
		h       *History
		v       Verdict
		runTime time.Duration
		err     error
	}
	results := make(chan result)
	var wg sync.WaitGroup
	for range cfg.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i, ok := next()
				if !ok {
					return
				}
				r := result{i: i, seed: cfg.Seed + uint64(i)}
				r.plan = gen.Example(int(r.seed))
				t0 := time.Now()
				r.h, r.err = Execute(ctx, r.plan, cfg.Factory)
				r.runTime = time.Since(t0)
				if r.err == nil {
					r.h.Adapter, r.h.Seed = cfg.Name, r.seed
					r.v = Check(r.h, cfg.CheckTimeout)
				}
				results <- r
			}
		}()
	}
	go func() {
		wg.Wait()
		close(results)
	}()

	rep := Report{Adapter: cfg.Name, Outcomes: map[string]int{}}
	var firstErr error
	var example result
	exampleScore := -1
	for r := range results {
		rep.RunTime += r.runTime
		rep.MaxRun = max(rep.MaxRun, r.runTime)
		if r.err != nil {
			if firstErr == nil && ctx.Err() == nil {
				firstErr = fmt.Errorf("history %d (seed %d): %w", r.i, r.seed, r.err)
			}
			stop()
			continue
		}
		h, v := r.h, r.v
		rep.CheckTime += v.Elapsed
		rep.MaxCheck = max(rep.MaxCheck, v.Elapsed)
		rep.Histories++
		rep.Operations += len(h.Operations)
		rep.Indeterminate += h.Indeterminate()
		rep.Guards.Add(CountGuards(h))
		for _, op := range h.Operations {
			rep.Outcomes[outcome(op)]++
			if tx := op.Input.Tx; tx != nil {
				for i := range min(len(tx.Ops), len(op.Output.Tx)) {
					rep.Outcomes["Tx "+txEnd(&op.Input, &op.Output)+": "+outcome(Operation{Input: tx.Ops[i], Output: op.Output.Tx[i]})]++
				}
			}
		}
		if !v.OK() {
			rep.Violations++
			if v.Result == porcupine.Unknown {
				rep.Unknown++
			}
			f := Failure{Seed: r.seed, Result: v.Result, Check: v, Plan: r.plan, History: h, After: r.i, Elapsed: time.Since(start)}
			f.Dir, f.SaveError = SaveFailure(cfg.OutDir, h, r.plan, v)
			if cfg.Logf != nil {
				cfg.Logf("%s: history %d (seed %d) is %s: %d operations; %s", cfg.Name, r.i, r.seed, v.Result, len(h.Operations), f.where())
			}
			rep.Failures = append(rep.Failures, f)
			if cfg.MaxViolations > 0 && rep.Violations >= cfg.MaxViolations {
				stop()
			}
		} else if cfg.ExampleHTML != "" {
			if s := exampleInterest(h); s > exampleScore || s == exampleScore && r.i < example.i {
				example, exampleScore = r, s
			}
		}
		if cfg.Progress != nil {
			cfg.Progress(Progress{Histories: rep.Histories, Operations: rep.Operations, Violations: rep.Violations, Elapsed: time.Since(start)})
		}
	}
	slices.SortFunc(rep.Failures, func(a, b Failure) int { return a.After - b.After })
	if example.h != nil {
		if err := os.MkdirAll(filepath.Dir(cfg.ExampleHTML), 0o755); err == nil {
			if WriteVisualization(example.h, example.v, cfg.ExampleHTML) == nil {
				rep.Example = cfg.ExampleHTML
				rep.ExampleHistory, rep.ExampleVerdict = example.h, example.v
			}
		}
	}
	rep.Elapsed = time.Since(start)
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return rep, firstErr
}

// DefaultParallel is the number of histories Run runs at once by default:
// twice the usable CPUs, at least 4. A history spends much of its time
// asleep (RealTime leases lapsing, stalled clock readings), so more
// histories than CPUs pay: measured under -race on 2 busy CPUs, 4 at once
// ran 1.4 times as many histories as 2, and 8 no more than 4.
func DefaultParallel() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// outcome names an operation's op and outcome, for Report.Outcomes.
func outcome(op Operation) string {
	o := &op.Output
	res := "ok"
	if op.Input.Tx != nil {
		return txOutcome(op)
	}
	switch {
	case o.Indeterminate:
		res = "?"
	case o.Err != "":
		res = o.Err
	case op.Input.Op == model.OpPop || op.Input.Op == model.OpRecoverExpired || op.Input.Op == model.OpList:
		if len(o.Tasks) == 0 {
			res = "empty"
		}
	case op.Input.Op == model.OpClaimExpired:
		if len(o.Claims) == 0 {
			res = "empty"
		}
	case op.Input.Op == model.OpPromote || op.Input.Op == model.OpPrune:
		if len(o.IDs) == 0 {
			res = "empty"
		}
	}
	return op.Input.Op.String() + " " + res
}

func (f Failure) where() string {
	if f.SaveError != nil {
		return "could not save it: " + f.SaveError.Error()
	}
	return "saved to " + f.Dir
}

// exampleInterest scores a history for the example visualization: one with
// refused decisions (stale claims, invalid transitions) shows what the
// guards are for; among those, the longer the better, up to a size a
// person can read.
func exampleInterest(h *History) int {
	if len(h.Operations) > 60 {
		return 0
	}
	refused := 0
	for _, op := range h.Operations {
		switch op.Output.Err {
		case "stale_claim", "cancelled", "invalid_transition", "conflict":
			refused++
		}
	}
	return min(refused, 4)*100 + len(h.Operations)
}

// DefaultOutDir is where violations are saved when no folder is given: a
// "leasehold-check" folder in os.TempDir().
func DefaultOutDir() string { return filepath.Join(os.TempDir(), "leasehold-check") }

// SaveFailure saves a violation to a new folder under dir: plan.json (nil
// plan: skipped), history.json (what `leasehold check --replay` reads) and
// history.html (porcupine's visualization: open it in a browser). It
// returns the folder.
func SaveFailure(dir string, h *History, plan *Plan, v Verdict) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out, err := os.MkdirTemp(dir, fmt.Sprintf("%s-seed%d-", safeName(h.Adapter), h.Seed))
	if err != nil {
		return "", err
	}
	if plan != nil {
		if err := SaveJSON(filepath.Join(out, "plan.json"), plan); err != nil {
			return out, err
		}
		if err := os.WriteFile(filepath.Join(out, "plan.txt"), []byte(plan.String()), 0o644); err != nil {
			return out, err
		}
	}
	if err := SaveJSON(filepath.Join(out, "history.json"), h); err != nil {
		return out, err
	}
	return out, WriteVisualization(h, v, filepath.Join(out, "history.html"))
}

func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}
