package mutants

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// HarnessPackage is the package whose test binary the runner builds, and
// HarnessTest its randomized entry point: each run executes
// HarnessTest/<adapter> with its budget set through the environment
// (LEASEHOLD_SEED, LEASEHOLD_DURATION, LEASEHOLD_HISTORIES, LEASEHOLD_SHRINK,
// LEASEHOLD_OUT, LEASEHOLD_CHECK_TIMEOUT; see linearizability/harness_test.go).
const (
	HarnessPackage = "./linearizability"
	HarnessTest    = "TestRandomizedHistories"
	// RuntimeTest is the entry point of the runtime harness (real Worker,
	// Broker and Inspector values over recorded stores), which runs the
	// mutants of Core, on RuntimeAdapter.
	RuntimeTest    = "TestRuntimeHistories"
	RuntimeAdapter = "memory"
)

// Harness returns the test and the subtest of the harness binary that a
// patch runs: TestRandomizedHistories on its adapter (SQLite and PostgreSQL
// with their default Pop), the runtime harness for Core, and the runtime
// harness on its adapter for a mutant of a busy database (whose plans hold
// the database's write lock past the store's busy timeout).
func Harness(p Patch) (test, sub string) {
	target := p.Adapter
	switch {
	case target == Core:
		return RuntimeTest, RuntimeAdapter
	case p.Mutant.Origin == BusyDatabase:
		return RuntimeTest, target
	}
	switch target {
	case "sqlite":
		return HarnessTest, "sqlite-returning"
	case "postgres":
		return HarnessTest, "postgres-update-returning"
	}
	return HarnessTest, target
}

// Config configures Evaluate.
type Config struct {
	// Root is the module root (required).
	Root string
	// Patches are the mutants to run.
	Patches []Patch
	// Runs is the number of runs of each mutant on each adapter (default
	// 20); run i uses seed Seed + i*SeedStride. A control runs once.
	Runs int
	// Budget bounds one run: the harness draws histories until one is not
	// linearizable or Budget has passed (default 20s).
	Budget time.Duration
	// Seed is the seed of each mutant's first run.
	Seed uint64
	// Parallel is the number of builds, and of runs, under way at once
	// (default GOMAXPROCS).
	Parallel int
	// FirstCatch stops a mutant's runs at the first that catches it.
	FirstCatch bool
	// Control also runs the unpatched module once on each adapter of
	// Patches: it must not be caught, or a catch means nothing.
	Control bool
	// WorkDir holds the module copies, binaries and saved violations
	// (default: a temporary directory, removed at the end unless Keep).
	WorkDir string
	Keep    bool
	// Env is added to the environment of every run (for example
	// REDIS_URL=redis://127.0.0.1:6379/0: the runs then share that
	// server instead of starting one each).
	Env []string
	// Done, when set, is called as the runs of each result (a mutant on
	// one adapter, or a control) end, one call at a time.
	Done func(Result)
}

// SeedStride separates the seeds of two runs: the harness gives history i
// of a run seed Seed+i, so runs do not share histories unless one runs more
// than SeedStride of them.
const SeedStride = 1_000_000

// Result is what the runs of one patch (or of a control) found.
type Result struct {
	Patch     Patch // the zero Patch with Adapter set for a control
	Control   bool
	BuildTime time.Duration
	BuildErr  error
	Runs      []Run
}

// Name is the mutant's name, or "(unpatched)" for a control.
func (r Result) Name() string {
	if r.Control {
		return "(unpatched)"
	}
	return r.Patch.Mutant.Name
}

// Run is one execution of the harness on a patched module.
type Run struct {
	Seed uint64
	// Caught: the harness found a history that is not linearizable.
	Caught bool
	// Detect is the harness's time to that history, Histories the number
	// of histories it ran until then (its own count, 1-based); Wall the
	// run's whole time, with the test binary's start.
	Detect    time.Duration
	Histories int
	Wall      time.Duration
	// Saved is where the harness saved the violation ("" if not caught).
	Saved string
	// Err is a run that neither passed nor found a violation: the harness
	// failed, was skipped, or ran out of time.
	Err    error
	Output string // the end of the test binary's output
}

// Caught returns the number of runs that caught the mutant.
func (r Result) Caught() int {
	n := 0
	for _, run := range r.Runs {
		if run.Caught {
			n++
		}
	}
	return n
}

// Errors returns the runs that failed without a verdict.
func (r Result) Errors() []Run {
	var out []Run
	for _, run := range r.Runs {
		if run.Err != nil {
			out = append(out, run)
		}
	}
	return out
}

// DetectTimes returns the times to detect of the runs that caught the
// mutant, shortest first.
func (r Result) DetectTimes() []time.Duration {
	var out []time.Duration
	for _, run := range r.Runs {
		if run.Caught {
			out = append(out, run.Detect)
		}
	}
	slices.Sort(out)
	return out
}

// Evaluate builds the harness once for each mutant, on a copy of the module
// with the mutant's patches applied, and runs it cfg.Runs times on each
// patched adapter, up to cfg.Parallel builds and cfg.Parallel runs at once.
// It returns one Result per patch (after the controls, if any), in the
// order of cfg.Patches. An error means the runner itself could not work
// (the module cannot be copied or a patch applied); a build that fails or a
// run without a verdict is reported in its Result.
func Evaluate(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.Root == "" {
		return nil, errors.New("mutants: Config.Root is required")
	}
	if cfg.Runs <= 0 {
		cfg.Runs = 20
	}
	if cfg.Budget <= 0 {
		cfg.Budget = 20 * time.Second
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = runtime.GOMAXPROCS(0)
	}
	work := cfg.WorkDir
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "leasehold-mutants-"); err != nil {
			return nil, err
		}
		if !cfg.Keep {
			defer os.RemoveAll(work)
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	gobin, err := goTool()
	if err != nil {
		return nil, err
	}

	// One build per mutant, with its patches of every adapter applied (each
	// touches its own adapter, and a run exercises one adapter only), and
	// one for the controls; one result per (mutant, adapter).
	var results []Result
	type build struct {
		name    string
		patches []Patch
		results []int // indexes into results
	}
	var bs []*build
	if cfg.Control {
		ctl := &build{name: "unpatched"}
		for _, a := range Adapters {
			if slices.ContainsFunc(cfg.Patches, func(p Patch) bool { return p.Adapter == a }) {
				ctl.results = append(ctl.results, len(results))
				results = append(results, Result{Patch: Patch{Adapter: a}, Control: true})
			}
		}
		bs = append(bs, ctl)
	}
	for _, p := range cfg.Patches {
		i := slices.IndexFunc(bs, func(b *build) bool { return b.name == p.Mutant.Name })
		if i < 0 {
			i = len(bs)
			bs = append(bs, &build{name: p.Mutant.Name})
		}
		bs[i].patches = append(bs[i].patches, p)
		bs[i].results = append(bs[i].results, len(results))
		results = append(results, Result{Patch: p})
	}

	builds := make(chan struct{}, cfg.Parallel)
	runs := make(chan struct{}, cfg.Parallel)
	var mu sync.Mutex // serializes cfg.Done and the first error
	var firstErr error
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir := filepath.Join(work, fmt.Sprintf("%02d-%s", i, safe(b.name)))
			bin := filepath.Join(dir, "harness.test")
			builds <- struct{}{}
			t0 := time.Now()
			buildErr, err := prepare(ctx, gobin, cfg.Root, dir, bin, b.patches)
			<-builds
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				return
			}
			var adapters sync.WaitGroup
			for _, ri := range b.results {
				r := &results[ri]
				r.BuildTime, r.BuildErr = time.Since(t0), buildErr
				adapters.Add(1)
				go func() {
					defer adapters.Done()
					n := cfg.Runs
					if r.Control {
						n = 1
					}
					for k := 0; k < n && r.BuildErr == nil && ctx.Err() == nil; k++ {
						runs <- struct{}{}
						test, sub := Harness(r.Patch)
						run := runOnce(ctx, bin, filepath.Join(dir, "module", "linearizability"), test, sub,
							cfg.Seed+uint64(k)*SeedStride, cfg.Budget,
							filepath.Join(dir, fmt.Sprintf("%s-run%02d", r.Patch.Adapter, k)), cfg.Env)
						<-runs
						r.Runs = append(r.Runs, run)
						if run.Caught && cfg.FirstCatch && !r.Control {
							break
						}
					}
					if cfg.Done != nil {
						mu.Lock()
						cfg.Done(*r)
						mu.Unlock()
					}
				}()
			}
			adapters.Wait()
			if !cfg.Keep {
				_ = os.RemoveAll(filepath.Join(dir, "module"))
				_ = os.Remove(bin)
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return results, firstErr
}

// prepare copies the module to dir/module, applies the patches and builds
// the harness's test binary at bin. A patch that does not apply is err; a
// build that fails is buildErr. A failed build is tried once more on a
// fresh copy: the copy takes the working tree as it is, and a file someone
// is saving may be half written.
func prepare(ctx context.Context, gobin, root, dir, bin string, patches []Patch) (buildErr, err error) {
	mod := filepath.Join(dir, "module")
	for try := 0; try < 2 && ctx.Err() == nil; try++ {
		if err := os.RemoveAll(mod); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(mod, 0o755); err != nil {
			return nil, err
		}
		if err := CopyModule(root, mod); err != nil {
			return nil, fmt.Errorf("mutants: copy the module: %w", err)
		}
		for _, p := range patches {
			if err := Apply(mod, p, false); err != nil {
				return nil, err
			}
		}
		// -trimpath keeps the absolute path of the copy out of the build,
		// so the packages the patches do not touch come from the build
		// cache.
		cmd := exec.CommandContext(ctx, gobin, "test", "-c", "-trimpath", "-o", bin, HarnessPackage)
		cmd.Dir = mod
		out, err := cmd.CombinedOutput()
		if err == nil {
			return nil, nil
		}
		buildErr = fmt.Errorf("go test -c %s: %v\n%s", HarnessPackage, err, out)
	}
	return buildErr, nil
}

// goTool returns the go command: the one on PATH, else the one in $GOROOT.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("mutants: no go command on PATH or in $GOROOT")
}

var (
	violationLine = regexp.MustCompile(`violation after (\d+) histories in (\S+?):`)
	savedTo       = regexp.MustCompile(`saved to (\S+)`)
)

// runOnce runs test/adapter of the harness binary once and classifies the
// run.
func runOnce(ctx context.Context, bin, dir, test, adapter string, seed uint64, budget time.Duration, out string, env []string) Run {
	run := Run{Seed: seed}
	// The binary gets its budget, time to start (a redis-server) and to
	// save a violation, and then it is stopped.
	limit := budget + 60*time.Second
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin,
		"-test.run", "^"+test+"$/^"+adapter+"$",
		"-test.v", "-test.count=1", "-test.timeout", (limit - 10*time.Second).String())
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"LEASEHOLD_SEED="+strconv.FormatUint(seed, 10),
		"LEASEHOLD_DURATION="+budget.String(),
		"LEASEHOLD_HISTORIES=1000000000",
		"LEASEHOLD_SHRINK=0",
		"LEASEHOLD_OUT="+out,
		// The harness's own limit: a check that runs out is a catch, and
		// it comes within the run's budget.
		"LEASEHOLD_CHECK_TIMEOUT=10s",
	)
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 5 * time.Second
	t0 := time.Now()
	b, err := cmd.CombinedOutput()
	run.Wall = time.Since(t0)
	output := string(b)
	run.Output = tail(output, 4000)
	pass := "--- PASS: " + test + "/" + adapter + " "
	fail := "--- FAIL: " + test + "/" + adapter + " "
	switch m := violationLine.FindStringSubmatch(output); {
	case strings.Contains(output, fail) && (m != nil || saved(out) != ""):
		// The harness's own account of the violation, if it gave one; else
		// the folder it saved the violation to, and the run's time.
		run.Caught, run.Detect, run.Saved = true, run.Wall, saved(out)
		if m != nil {
			run.Histories, _ = strconv.Atoi(m[1])
			if d, perr := time.ParseDuration(m[2]); perr == nil {
				run.Detect = d
			}
		}
		if s := savedTo.FindStringSubmatch(output); s != nil {
			run.Saved = s[1]
		}
	case err == nil && strings.Contains(output, pass):
		// survived the budget
	case strings.Contains(output, "--- SKIP: "+test):
		run.Err = fmt.Errorf("the harness skipped the %s run (no redis-server?)", adapter)
	case ctx.Err() != nil:
		run.Err = fmt.Errorf("the run did not end within %v", limit)
	case err == nil:
		run.Err = fmt.Errorf("no %s/%s test ran (renamed?)", test, adapter)
	default:
		run.Err = fmt.Errorf("the harness failed without a violation: %v", err)
	}
	return run
}

// saved returns the first folder under out holding a saved history, "" if
// there is none.
func saved(out string) string {
	found, _ := filepath.Glob(filepath.Join(out, "*", "history.json"))
	if len(found) == 0 {
		return ""
	}
	return filepath.Dir(found[0])
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

func safe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, s)
}

// WriteTable writes one line per result: the mutant, its adapter, whether
// any run caught it, runs caught out of runs tried, and the median and
// worst time to detect over the runs that caught it.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MUTANT\tADAPTER\tCAUGHT\tRUNS\tMEDIAN\tWORST\tHISTORIES (MEDIAN)")
	for _, r := range results {
		caught := "no"
		switch {
		case r.BuildErr != nil:
			caught = "build failed"
		case r.Control && r.Caught() == 0:
			caught = "clean"
		case r.Control:
			caught = "FLAGGED"
		case r.Caught() > 0:
			caught = "yes"
		}
		if n := len(r.Errors()); n > 0 {
			caught += fmt.Sprintf(" (%d errors)", n)
		}
		median, worst, hist := "-", "-", "-"
		if ts := r.DetectTimes(); len(ts) > 0 {
			median, worst = round(ts[len(ts)/2]), round(ts[len(ts)-1])
			var hs []int
			for _, run := range r.Runs {
				if run.Caught {
					hs = append(hs, run.Histories)
				}
			}
			slices.Sort(hs)
			hist = strconv.Itoa(hs[len(hs)/2])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", r.Name(), r.Patch.Adapter, caught,
			r.Caught(), len(r.Runs), median, worst, hist)
	}
	return tw.Flush()
}

func round(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}
