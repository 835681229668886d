// Command mutants runs the catalogue of historical bugs against the
// randomized linearizability harness: for each mutant it applies the patch
// to a copy of the module, builds the harness's test binary once and runs
// TestRandomizedHistories on the patched adapter -runs times with different
// seeds, each until a history is not linearizable or -budget has passed.
// It prints a table: each mutant, its adapter, whether it was caught, runs
// caught out of runs tried, and the median and worst time to detect.
//
// Usage (from the module root; `make mutants` runs it with the defaults):
//
//	go run ./fuzz/mutants/cmd/mutants [-runs 20] [-budget 20s] [-only a,b] [-adapter memory,redis,sqlite,core|all]
//
// A mutant of core (Worker, Broker) runs the runtime harness
// (TestRuntimeHistories) on the memory adapter instead. The Redis mutants
// need redis-server on PATH (each run starts its own) or REDIS_URL pointing
// at a server the runs may share. It exits 1 when a
// mutant was caught in fewer than -want of its runs (19 of 20 by default), a
// run failed without a verdict, or the unpatched module was flagged.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/leasehold/leasehold/fuzz/mutants"
)

// options are the command's flags.
type options struct {
	runs     int
	budget   time.Duration
	only     string
	adapter  string
	parallel int
	seed     uint64
	control  bool
	keep     string
	verbose  bool
	want     float64
}

func main() {
	var o options
	flag.IntVar(&o.runs, "runs", 20, "runs of each mutant, each with its own seed")
	flag.DurationVar(&o.budget, "budget", 20*time.Second, "time a run may take to catch the mutant")
	flag.StringVar(&o.only, "only", "", "comma-separated mutant names (default: the whole catalogue)")
	flag.StringVar(&o.adapter, "adapter", "all", "the targets whose mutants run, comma-separated: memory, redis, sqlite, postgres, core, or all")
	flag.IntVar(&o.parallel, "parallel", 0, "builds and runs under way at once (default GOMAXPROCS)")
	flag.Uint64Var(&o.seed, "seed", uint64(time.Now().UnixNano()%1e9), "seed of each mutant's first run")
	flag.BoolVar(&o.control, "control", true, "also run the unpatched module once per adapter")
	flag.StringVar(&o.keep, "keep", "", "keep the module copies, binaries and violations in this folder")
	flag.BoolVar(&o.verbose, "v", false, "print each run as its mutant finishes")
	flag.Float64Var(&o.want, "want", 0.95, "the share of its runs that must catch each mutant (19 of 20)")
	list := flag.Bool("list", false, "list the catalogue and exit")
	flag.Parse()

	if *list {
		for _, m := range mutants.Catalogue {
			fmt.Printf("%-34s %s (%s)\n", m.Name, m.Bug, m.Origin)
		}
		return
	}
	os.Exit(run(o))
}

func run(o options) int {
	root, err := mutants.ModuleRoot(".")
	if err != nil {
		return fail(err)
	}
	all, err := mutants.Patches()
	if err != nil {
		return fail(err)
	}
	var names []string
	if o.only != "" {
		names = strings.Split(o.only, ",")
	}
	patches, err := mutants.Select(all, names, o.adapter)
	if err != nil {
		return fail(err)
	}
	for _, p := range patches {
		if err := mutants.CheckApplies(root, p); err != nil {
			return fail(err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Printf("%d mutants, %d runs each, budget %v a run, seeds %d + run*%d\n",
		len(patches), o.runs, o.budget, o.seed, mutants.SeedStride)
	start := time.Now()
	cfg := mutants.Config{
		Root: root, Patches: patches, Runs: o.runs, Budget: o.budget, Seed: o.seed,
		Parallel: o.parallel, Control: o.control, WorkDir: o.keep, Keep: o.keep != "",
		Done: func(r mutants.Result) {
			fmt.Printf("%-34s %-7s %d/%d caught (build %v)\n", r.Name(), r.Patch.Adapter,
				r.Caught(), len(r.Runs), r.BuildTime.Round(100*time.Millisecond))
			if r.BuildErr != nil {
				fmt.Printf("  build failed: %v\n", r.BuildErr)
			}
			for _, run := range r.Runs {
				switch {
				case run.Err != nil:
					fmt.Printf("  seed %d: %v\n%s\n", run.Seed, run.Err, indent(run.Output))
				case o.verbose && run.Caught:
					fmt.Printf("  seed %d: caught after %d histories in %v; %s\n", run.Seed, run.Histories, run.Detect, run.Saved)
				case o.verbose:
					fmt.Printf("  seed %d: survived %v\n", run.Seed, o.budget)
				}
			}
		},
	}
	results, err := mutants.Evaluate(ctx, cfg)
	fmt.Println()
	_ = mutants.WriteTable(os.Stdout, results)
	fmt.Printf("\n%v in all\n", time.Since(start).Round(time.Second))
	if err != nil {
		return fail(err)
	}
	code := 0
	for _, r := range results {
		switch {
		case r.BuildErr != nil || len(r.Errors()) > 0:
			code = 1
		case r.Control && r.Caught() > 0:
			fmt.Printf("the unpatched %s adapter was flagged: the harness or the adapter is broken\n", r.Patch.Adapter)
			code = 1
		case !r.Control && float64(r.Caught()) < o.want*float64(len(r.Runs)):
			fmt.Printf("%s of the %s adapter was caught in %d of %d runs, fewer than %.0f%%\n",
				r.Name(), r.Patch.Adapter, r.Caught(), len(r.Runs), 100*o.want)
			code = 1
		}
	}
	return code
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "mutants:", err)
	return 2
}
