package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/adapters/sqlite"

	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/linearizability/backends"
	"github.com/leasehold/leasehold/linearizability/report"
)

// checkFlags are the flags of `leasehold check`.
type checkFlags struct {
	histories    int
	duration     time.Duration
	seed         uint64
	clients      int
	mode         string
	faults       bool
	parallel     int
	memory       bool
	redis        string
	sqlite       string
	postgres     string
	out          string
	replay       string
	checkTimeout time.Duration
	keepGoing    bool
	progress     string
	outcomes     bool
	runtime      bool
	report       string
}

func parseCheckFlags(args []string, stderr io.Writer) (*checkFlags, error) {
	f := &checkFlags{}
	fs := flag.NewFlagSet("leasehold check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&f.histories, "histories", 0, "stop after `N` histories per adapter (0: run for --duration)")
	fs.DurationVar(&f.duration, "duration", 0, "stop after this long per adapter (default 10s when --histories is not set)")
	fs.Uint64Var(&f.seed, "seed", 0, "seed of the first history; history i uses seed+i (default: from the clock)")
	fs.IntVar(&f.clients, "clients", 6, "most clients in one history (producer, worker, broker, then drawn roles)")
	fs.StringVar(&f.mode, "mode", "mixed", "time: fake (a clock the plan advances), real (leases of a few ms), or mixed")
	fs.BoolVar(&f.faults, "faults", true, "inject faults: lost requests and replies (some operations become indeterminate) and, on SQLite, databases busy past the busy timeout (ErrBusy)")
	fs.IntVar(&f.parallel, "parallel", 0, "histories run at once (default: twice the CPUs, at least 4)")
	fs.BoolVar(&f.memory, "memory", false, "check the memory adapter too (it is checked by default when no other adapter is named)")
	fs.StringVar(&f.redis, "redis", "", "check the Redis adapter on the server at `URL` (redis://host:port/db); keys go under a prefix that is deleted afterwards")
	fs.StringVar(&f.sqlite, "sqlite", "", "check the SQLite adapter (both Pop implementations) with databases in `folder`; each history's database is deleted afterwards")
	fs.StringVar(&f.postgres, "postgres", "", "check the PostgreSQL adapter (both Pop implementations) on the database at `URL` (postgres://user@host:port/db); each history works in a schema of its own, dropped at the end")
	fs.StringVar(&f.out, "out", "", "`folder` for violations and the example visualization (default "+linearizability.DefaultOutDir()+")")
	fs.StringVar(&f.replay, "replay", "", "check the saved history `FILE` (a history.json of a violation) again and exit")
	fs.DurationVar(&f.checkTimeout, "check-timeout", 10*time.Second, "give up checking one history after this long (an Unknown verdict counts as a violation)")
	fs.BoolVar(&f.keepGoing, "keep-going", false, "do not stop at the first violation")
	fs.BoolVar(&f.outcomes, "outcomes", false, "also print how often each op had each outcome (what the histories exercised)")
	fs.BoolVar(&f.runtime, "runtime", false, "run real Workers, Brokers and an Inspector over recorded stores and check the runtime properties too (Redis goes through a fault proxy)")
	fs.StringVar(&f.report, "report", "", "write a report of each adapter's run to `folder` (report-ADAPTER.html: the first violation, else the example history)")
	fs.StringVar(&f.progress, "progress", "auto", "progress display: bar, lines, none, or auto (a bar on a terminal)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: leasehold check [flags]\n       leasehold check --replay FILE\n\n")
		fs.PrintDefaults()
		fmt.Fprint(stderr, exitCodes)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	switch {
	case f.histories < 0:
		return nil, fmt.Errorf("--histories %d: must not be negative", f.histories)
	case f.duration < 0 || set["duration"] && f.duration == 0:
		return nil, fmt.Errorf("--duration %v: must be positive", f.duration)
	case f.clients <= 0:
		return nil, fmt.Errorf("--clients %d: must be at least 1", f.clients)
	case f.parallel < 0:
		return nil, fmt.Errorf("--parallel %d: must not be negative (0: the default)", f.parallel)
	case f.checkTimeout < 0:
		return nil, fmt.Errorf("--check-timeout %v: must not be negative", f.checkTimeout)
	}
	switch f.progress {
	case "auto", "bar", "lines", "none":
	default:
		return nil, fmt.Errorf("--progress %q: want bar, lines, none or auto", f.progress)
	}
	if f.histories == 0 && f.duration == 0 {
		f.duration = 10 * time.Second
	}
	if f.seed == 0 {
		f.seed = uint64(time.Now().UnixNano() % 1e9)
	}
	if f.out == "" {
		f.out = linearizability.DefaultOutDir()
	}
	return f, nil
}

// adapter is one store under check.
type adapter struct {
	name    string
	factory linearizability.Factory
	tx      bool // its stores are linearizability.TxStores
}

func check(args []string, stdout, stderr io.Writer) int {
	f, err := parseCheckFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "leasehold check: %v\n", err)
		return 2
	}
	if f.replay != "" {
		return replay(f, stdout, stderr)
	}
	mode, err := linearizability.ParseTimeMode(f.mode)
	if err != nil {
		fmt.Fprintf(stderr, "leasehold check: %v\n", err)
		return 2
	}
	var adapters []adapter
	if f.memory || f.redis == "" && f.sqlite == "" && f.postgres == "" {
		adapters = append(adapters, adapter{"memory", backends.Memory(), false})
	}
	if f.redis != "" {
		redisFactory, name := backends.Redis, "redis"
		if f.runtime {
			redisFactory, name = backends.RedisProxy, "redis-proxy"
		}
		rf, err := redisFactory(f.redis)
		if err != nil {
			fmt.Fprintf(stderr, "leasehold check: %v\n", err)
			return 2
		}
		adapters = append(adapters, adapter{name, rf, false})
	}
	if f.sqlite != "" {
		for _, mode := range []sqlite.PopMode{sqlite.PopReturning, sqlite.PopSelectUpdate} {
			sf, err := backends.SQLite(f.sqlite, mode)
			if err != nil {
				fmt.Fprintf(stderr, "leasehold check: %v\n", err)
				return 2
			}
			adapters = append(adapters, adapter{"sqlite-" + mode.String(), sf, true})
		}
	}
	if f.postgres != "" {
		for _, mode := range []postgres.PopMode{postgres.PopUpdateReturning, postgres.PopSelectSkipLocked} {
			pf, cleanup, err := backends.Postgres(f.postgres, mode)
			if err != nil {
				fmt.Fprintf(stderr, "leasehold check: %v\n", err)
				return 2
			}
			defer func() {
				if err := cleanup(); err != nil {
					fmt.Fprintf(stderr, "leasehold check: %v\n", err)
				}
			}()
			adapters = append(adapters, adapter{"postgres-" + mode.String(), pf, true})
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	budget := fmt.Sprintf("%d histories", f.histories)
	switch {
	case f.histories == 0:
		budget = f.duration.String()
	case f.duration > 0:
		budget += " or " + f.duration.String()
	}
	if f.runtime {
		fmt.Fprintf(stdout, "leasehold check --runtime: %s time, seed %d, %s per adapter, faults %v\n",
			mode, f.seed, budget, f.faults)
	} else {
		fmt.Fprintf(stdout, "leasehold check: %s time, seed %d, up to %d clients, %s per adapter, faults %v\n",
			mode, f.seed, f.clients, budget, f.faults)
	}

	var reports []linearizability.Report
	status := 0
	for _, a := range adapters {
		show := newProgress(f.progress, stderr, a.name, f.histories, f.duration)
		cfg := linearizability.Config{
			Name: a.name, Factory: a.factory, Histories: f.histories, Duration: f.duration,
			Seed: f.seed, TimeMode: mode, Clients: f.clients, Faults: f.faults, Parallel: f.parallel,
			CheckTimeout: f.checkTimeout, OutDir: f.out, Tx: a.tx,
			ExampleHTML: filepath.Join(f.out, "example-"+a.name+".html"),
			Progress:    show.update,
			Logf:        func(format string, args ...any) { show.println(fmt.Sprintf(format, args...)) },
		}
		if f.keepGoing {
			cfg.MaxViolations = -1
		}
		runHarness := linearizability.Run
		if f.runtime {
			runHarness = linearizability.RunRuntime
		}
		rep, err := runHarness(ctx, cfg)
		show.done()
		reports = append(reports, rep)
		if err != nil {
			fmt.Fprintf(stderr, "leasehold check: %s: %v\n", a.name, err)
			status = 2
			break
		}
		if rep.Violations > 0 && status == 0 {
			status = 1
		}
	}
	paths := writeReports(stderr, reports, f)
	summary(stdout, reports, f, paths)
	return status
}

// writeReports writes the report of each violation into its folder and,
// with --report, one report of each adapter's run, whose paths it returns
// by adapter.
func writeReports(stderr io.Writer, reports []linearizability.Report, f *checkFlags) map[string]string {
	paths := map[string]string{}
	for ri := range reports {
		r := &reports[ri]
		for fi := range r.Failures {
			fl := &r.Failures[fi]
			if fl.Dir == "" || fl.History == nil {
				continue
			}
			if err := report.Write(filepath.Join(fl.Dir, "report.html"), fl.History, fl.Check, report.Options{Porcupine: "history.html"}); err != nil {
				fmt.Fprintf(stderr, "leasehold check: %v\n", err)
			}
		}
		if f.report == "" {
			continue
		}
		h, v := r.ExampleHistory, r.ExampleVerdict
		if len(r.Failures) > 0 && r.Failures[0].History != nil {
			h, v = r.Failures[0].History, r.Failures[0].Check
		}
		if h == nil {
			fmt.Fprintf(stderr, "leasehold check: %s: no history to report\n", r.Adapter)
			continue
		}
		if err := os.MkdirAll(f.report, 0o755); err != nil {
			fmt.Fprintf(stderr, "leasehold check: %v\n", err)
			return paths
		}
		name := safeFileName(r.Adapter)
		viz := "porcupine-" + name + ".html"
		if err := linearizability.WriteVisualization(h, v, filepath.Join(f.report, viz)); err != nil {
			viz = ""
		}
		sum := report.FromReport(*r)
		path := filepath.Join(f.report, "report-"+name+".html")
		title := fmt.Sprintf("leasehold check: %s, %d histories from seed %d", r.Adapter, r.Histories, f.seed)
		if err := report.Write(path, h, v, report.Options{Title: title, Porcupine: viz, Summary: &sum}); err != nil {
			fmt.Fprintf(stderr, "leasehold check: %v\n", err)
			continue
		}
		paths[r.Adapter] = path
	}
	return paths
}

func safeFileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// summary prints a table of the reports, each violation, and the example.
func summary(w io.Writer, reports []linearizability.Report, f *checkFlags, reportPaths map[string]string) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "adapter\thistories\toperations\tindeterminate\tviolations\tchecking\tslowest check\tslowest run\twall time\t")
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%v\t%v\t%v\t%v\t\n", r.Adapter, r.Histories, r.Operations, r.Indeterminate,
			r.Violations, r.CheckTime.Round(time.Millisecond), r.MaxCheck.Round(100*time.Microsecond),
			r.MaxRun.Round(100*time.Microsecond), r.Elapsed.Round(100*time.Millisecond))
	}
	tw.Flush()
	for _, r := range reports {
		for _, fl := range r.Failures {
			if fl.RuntimePlan != nil {
				fmt.Fprintf(w, "\nVIOLATION %s: runtime history %d, seed %d: %s\n", r.Adapter, fl.After, fl.Seed, fl.Verdict())
				for i, v := range fl.Properties {
					if i == 5 {
						fmt.Fprintf(w, "  ... (%d more in violations.txt)\n", len(fl.Properties)-i)
						break
					}
					fmt.Fprintf(w, "  %s\n", v)
				}
			} else {
				fmt.Fprintf(w, "\nVIOLATION %s: history %d, seed %d, %s (%d operations)\n", r.Adapter, fl.After, fl.Seed, fl.Result, len(fl.History.Operations))
			}
			if fl.Result == porcupine.Unknown {
				fmt.Fprintln(w, "  the check ran out of time: raise --check-timeout to get a verdict")
			}
			if fl.SaveError != nil {
				fmt.Fprintf(w, "  not saved: %v\n", fl.SaveError)
				continue
			}
			fmt.Fprintf(w, "  saved to   %s\n", fl.Dir)
			fmt.Fprintf(w, "  open       %s\n", filepath.Join(fl.Dir, "report.html"))
			fmt.Fprintf(w, "  replay     leasehold check --replay %s\n", filepath.Join(fl.Dir, "history.json"))
			// The plan of a seed depends on the mode, faults and clients
			// settings too (they bound what rapid draws).
			if fl.RuntimePlan != nil {
				fmt.Fprintf(w, "  rerun      leasehold check --runtime --seed %d --histories 1 --mode %s --faults=%v%s\n",
					fl.Seed, f.mode, f.faults, adapterFlag(r.Adapter, f))
				continue
			}
			fmt.Fprintf(w, "  rerun      leasehold check --seed %d --histories 1 --mode %s --faults=%v --clients %d%s\n",
				fl.Seed, f.mode, f.faults, f.clients, adapterFlag(r.Adapter, f))
		}
	}
	if f.outcomes {
		for _, r := range reports {
			fmt.Fprintf(w, "\noutcomes (%s):\n", r.Adapter)
			keys := slices.Sorted(maps.Keys(r.Outcomes))
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
			for i, k := range keys {
				fmt.Fprintf(tw, "%s\t%d\t", k, r.Outcomes[k])
				if i%4 == 3 || i == len(keys)-1 {
					fmt.Fprintln(tw)
				}
			}
			tw.Flush()
		}
	}
	for _, r := range reports {
		if r.Example != "" {
			fmt.Fprintf(w, "\nwhat was checked (%s): one history, as porcupine linearized it: %s\n", r.Adapter, r.Example)
		}
		if p := reportPaths[r.Adapter]; p != "" {
			fmt.Fprintf(w, "report (%s): %s\n", r.Adapter, p)
		}
	}
}

// adapterFlag is the flag that selects adapter again.
func adapterFlag(adapter string, f *checkFlags) string {
	switch {
	case strings.HasPrefix(adapter, "redis"):
		return " --redis " + f.redis
	case strings.HasPrefix(adapter, "sqlite"):
		return " --sqlite " + f.sqlite
	case strings.HasPrefix(adapter, "postgres"):
		return " --postgres " + f.postgres
	}
	return ""
}

// replay checks a saved history again and writes its visualization.
func replay(f *checkFlags, stdout, stderr io.Writer) int {
	h, err := linearizability.LoadHistory(f.replay)
	if err != nil {
		fmt.Fprintf(stderr, "leasehold check: %v\n", err)
		return 2
	}
	v := linearizability.Check(h, f.checkTimeout)
	html := strings.TrimSuffix(f.replay, filepath.Ext(f.replay)) + "-replay.html"
	if err := linearizability.WriteVisualization(h, v, html); err != nil {
		fmt.Fprintf(stderr, "leasehold check: %v\n", err)
		html = ""
	}
	how := ""
	if v.WithoutIndeterminate {
		how = ", found with all or all but one of the indeterminate calls left out"
	}
	fmt.Fprintf(stdout, "%s: %s history of %d operations (%d indeterminate), seed %d, %s time: %s (checked in %v%s)\n",
		f.replay, h.Adapter, len(h.Operations), h.Indeterminate(), h.Seed, h.Mode, v.Result, v.Elapsed.Round(time.Microsecond), how)
	if html != "" {
		fmt.Fprintf(stdout, "visualization: %s\n", html)
	}
	rp := strings.TrimSuffix(f.replay, filepath.Ext(f.replay)) + "-replay-report.html"
	if err := report.Write(rp, h, v, report.Options{Porcupine: filepath.Base(html)}); err != nil {
		fmt.Fprintf(stderr, "leasehold check: %v\n", err)
	} else {
		fmt.Fprintf(stdout, "report: %s\n", rp)
	}
	if !v.OK() {
		return 1
	}
	return 0
}
