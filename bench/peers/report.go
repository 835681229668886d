package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
)

// report collects the samples of a run and prints them as markdown.
type report struct {
	cfg     config
	samples map[cellKey][]sample // one per round, in round order
	started time.Time
	elapsed time.Duration
	machine []string // lines about the machine and the versions
	loadBeg string
	loadEnd string

	mu    sync.Mutex
	notes map[string]string // settings each system got, by group/system
}

func newReport(cfg config) *report {
	return &report{cfg: cfg, samples: map[cellKey][]sample{}, notes: map[string]string{}}
}

func (r *report) add(k cellKey, round int, s sample) {
	for len(r.samples[k]) < round {
		r.samples[k] = append(r.samples[k], sample{err: errUnsupported}) // not run
	}
	r.samples[k] = append(r.samples[k], s)
}

// note records a setting a system was observed to run with.
func (e *env) note(key, text string) {
	if e.rep == nil {
		return
	}
	e.rep.mu.Lock()
	e.rep.notes[key] = text
	e.rep.mu.Unlock()
}

func (r *report) start(ctx context.Context, e *env) {
	e.rep = r
	r.started = time.Now()
	r.loadBeg = loadavg()
	r.machine = append(r.machine, fmt.Sprintf("nproc %d, GOMAXPROCS %d, %s/%s, %s, CPU %s",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version(), cpuModel()))
	var versions []string
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/hibiken/asynq", "github.com/riverqueue/river", "github.com/riverqueue/river/riverdriver/riversqlite",
				"maragu.dev/goqite", "modernc.org/sqlite", "github.com/redis/go-redis/v9", "github.com/jackc/pgx/v5":
				versions = append(versions, d.Path+" "+d.Version)
			}
		}
	}
	if len(versions) > 0 {
		r.machine = append(r.machine, "modules: "+strings.Join(versions, ", ")+"; leasehold from "+treeRevision())
	}
	if e.admin != nil {
		if info, err := e.admin.Info(ctx, "server").Result(); err == nil {
			r.machine = append(r.machine, "redis-server "+infoField(info, "redis_version")+" at "+e.redisURL)
		}
	}
	if db, err := sql.Open("sqlite", ":memory:"); err == nil {
		var v string
		if db.QueryRowContext(ctx, "select sqlite_version()").Scan(&v) == nil {
			r.machine = append(r.machine, "SQLite "+v+" (modernc.org/sqlite) on files in "+e.dir)
		}
		db.Close()
	}
}

func (r *report) finish(context.Context, *env) {
	r.elapsed = time.Since(r.started)
	r.loadEnd = loadavg()
}

// treeRevision names the leasehold source the run was built from: the
// working tree around this module.
func treeRevision() string {
	rev, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "the source tree at ../.. (not a git checkout)"
	}
	out := "the working tree at commit " + strings.TrimSpace(string(rev))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", "../..").Output(); err == nil && len(st) > 0 {
		out += ", with uncommitted changes"
	}
	return out
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return "?"
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "?"
}

// line is the progress line of one measurement.
func (s sample) line(w string) string {
	if s.err != nil {
		return "error: " + s.err.Error()
	}
	mark := ""
	if !s.complete {
		mark = " † (cell limit)"
	}
	out := fmt.Sprintf("%9s tasks/s  (%d in %v)%s", num(s.rate()), s.done, s.elapsed.Round(time.Millisecond), mark)
	if s.redis != nil {
		out += fmt.Sprintf("  calls/task %.2f, scripts/task %.2f, script µs/task %.1f, CPU µs/task %.1f",
			s.redis.calls, s.redis.scripts, s.redis.scriptUsec, s.redis.cpuUsec)
	}
	if s.probe != nil {
		out += fmt.Sprintf("; PING p50/p99 %.2f/%.2f ms, longest call %.2f ms, %d calls > 1 ms",
			ms(s.probe.p50), ms(s.probe.p99), ms(s.probe.longest), s.probe.slow)
	}
	return out
}

// ok returns the samples of k that ran without error.
func (r *report) ok(k cellKey) []sample {
	var out []sample
	for _, s := range r.samples[k] {
		if s.err == nil {
			out = append(out, s)
		}
	}
	return out
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// num formats a rate with a thin space between thousands.
func num(f float64) string {
	n := int64(f + 0.5)
	s := fmt.Sprint(n)
	if f < 100 {
		s = fmt.Sprintf("%.3g", f)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && n >= 1000 {
			b.WriteString(" ")
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (r *report) write(w io.Writer, args []string) {
	fmt.Fprintf(w, "## leasehold and its peers, %s\n\n", r.started.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "`%s`: %d tasks per measurement, %d round(s), cell limit %v; %v in all.\n\n",
		strings.Join(args, " "), r.cfg.tasks, r.cfg.rounds, r.cfg.cellLimit, r.elapsed.Round(time.Second))
	for _, m := range r.machine {
		fmt.Fprintf(w, "- %s\n", m)
	}
	fmt.Fprintf(w, "- load average (1, 5, 15 min) at start %s, at end %s\n\n", r.loadBeg, r.loadEnd)
	fmt.Fprintf(w, "Cells are medians over the rounds of tasks/s; a ratio is leasehold's rate over the peer's, "+
		"taken within each round, then the median. † marks a cell where a round reached the cell limit "+
		"before all tasks were done (the rate is of the tasks done by then).\n\n")

	for _, g := range groups {
		var names []string
		var cols []workload
		for _, s := range systems() {
			if s.group != g.name {
				continue
			}
			for _, wl := range workloads {
				if len(r.ok(cellKey{g.name, s.name, wl.name})) > 0 {
					if !slices.Contains(names, s.name) {
						names = append(names, s.name)
					}
					if !slices.ContainsFunc(cols, func(c workload) bool { return c.name == wl.name }) {
						cols = append(cols, wl)
					}
				}
			}
		}
		if len(names) == 0 {
			continue
		}
		slices.SortFunc(cols, func(a, b workload) int { return slices.Index(workloads, a) - slices.Index(workloads, b) })
		fmt.Fprintf(w, "### %s\n\n", g.title)
		r.rateTable(w, g.name, names, cols)
		if slices.ContainsFunc(cols, func(c workload) bool { return c.kind == kindBatch }) {
			fmt.Fprintf(w, "The EnqueueBatch columns are leasehold's core.BatchStore.EnqueueBatch, 100 tasks per call, "+
				"beside its one-at-a-time Enqueue in the enqueue columns. The peers are measured one task per call "+
				"in the enqueue columns only (asynq has no batch enqueue), so they have no EnqueueBatch figure and no ratio there.\n\n")
		}
		r.ratioTable(w, g.name, names, cols)
		if g.name == "redis" {
			r.redisTable(w, names, cols)
		}
		r.notesFor(w, g.name, names)
	}
	r.errors(w)
}

func (r *report) rateTable(w io.Writer, group string, names []string, cols []workload) {
	fmt.Fprintf(w, "| tasks/s |")
	for _, c := range cols {
		fmt.Fprintf(w, " %s |", c.title)
	}
	fmt.Fprintf(w, "\n| --- |%s\n", strings.Repeat(" ---: |", len(cols)))
	for _, n := range names {
		label := n
		if n == "ceiling" {
			label = "ceiling: EVALSHA `return 1` per task"
		}
		fmt.Fprintf(w, "| %s |", label)
		for _, c := range cols {
			ss := r.ok(cellKey{group, n, c.name})
			if len(ss) == 0 {
				fmt.Fprintf(w, " — |")
				continue
			}
			var rates []float64
			mark := ""
			for _, s := range ss {
				rates = append(rates, s.rate())
				if !s.complete {
					mark = " †"
				}
			}
			fmt.Fprintf(w, " %s%s |", num(median(rates)), mark)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

func (r *report) ratioTable(w io.Writer, group string, names []string, cols []workload) {
	if !slices.Contains(names, "leasehold") {
		return
	}
	var lines []string
	for _, peer := range names {
		if peer == "leasehold" {
			continue
		}
		line := fmt.Sprintf("| leasehold / %s |", peer)
		any := false
		for _, c := range cols {
			lh, pr := r.samples[cellKey{group, "leasehold", c.name}], r.samples[cellKey{group, peer, c.name}]
			var ratios []float64
			for i := range min(len(lh), len(pr)) {
				if lh[i].err == nil && pr[i].err == nil && pr[i].rate() > 0 {
					ratios = append(ratios, lh[i].rate()/pr[i].rate())
				}
			}
			if len(ratios) == 0 {
				line += " — |"
				continue
			}
			any = true
			line += fmt.Sprintf(" %.2f |", median(ratios))
		}
		if any {
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "| ratio |")
	for _, c := range cols {
		fmt.Fprintf(w, " %s |", c.title)
	}
	fmt.Fprintf(w, "\n| --- |%s\n", strings.Repeat(" ---: |", len(cols)))
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
}

func (r *report) redisTable(w io.Writer, names []string, cols []workload) {
	fmt.Fprintf(w, "Server work per task, from INFO commandstats (CONFIG RESETSTAT before each measurement) and INFO cpu, medians. "+
		"Redis counts the commands a script runs among the calls, and a script's time includes theirs; "+
		"CPU is the server process's user+system time, parsing and network included.\n\n")
	fmt.Fprintf(w, "The last three columns are what other clients of the server saw meanwhile, medians of the rounds: "+
		"the round trip of a PING sent every millisecond on a connection of its own (50th / 99th percentile), "+
		"and the longest call the server ran with the number of calls over 1 ms (SLOWLOG); "+
		"the server runs one command at a time, so a long script delays every other client.\n\n")
	fmt.Fprintf(w, "| system | workload | calls/task | scripts/task | script µs/task | server CPU µs/task | PING p50 / p99 ms | longest call ms | calls > 1 ms |\n")
	fmt.Fprintf(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, n := range names {
		for _, c := range cols {
			ss := r.ok(cellKey{"redis", n, c.name})
			if len(ss) == 0 {
				continue
			}
			var calls, scripts, usec, cpu, p50, p99, longest, slow []float64
			for _, s := range ss {
				if s.redis != nil {
					calls, scripts = append(calls, s.redis.calls), append(scripts, s.redis.scripts)
					usec, cpu = append(usec, s.redis.scriptUsec), append(cpu, s.redis.cpuUsec)
				}
				if s.probe != nil {
					p50, p99 = append(p50, ms(s.probe.p50)), append(p99, ms(s.probe.p99))
					longest, slow = append(longest, ms(s.probe.longest)), append(slow, float64(s.probe.slow))
				}
			}
			fmt.Fprintf(w, "| %s | %s | %.2f | %.2f | %.1f | %.1f | %.2f / %.2f | %.2f | %.0f |\n", n, c.title, median(calls), median(scripts), median(usec), median(cpu),
				median(p50), median(p99), median(longest), median(slow))
		}
	}
	fmt.Fprintln(w)
}

func (r *report) notesFor(w io.Writer, group string, names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, n := range names {
		if v, ok := r.notes[group+"/"+n]; ok {
			out = append(out, fmt.Sprintf("%s: %s", n, v))
		}
	}
	if len(out) > 0 {
		fmt.Fprintf(w, "Observed settings: %s.\n\n", strings.Join(out, "; "))
	}
}

func (r *report) errors(w io.Writer) {
	var keys []cellKey
	for k := range r.samples {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b cellKey) int { return strings.Compare(a.String(), b.String()) })
	first := true
	for _, k := range keys {
		for i, s := range r.samples[k] {
			if s.err == nil || errors.Is(s.err, errUnsupported) {
				continue
			}
			if first {
				fmt.Fprintf(w, "### Errors\n\n")
				first = false
			}
			fmt.Fprintf(w, "- %s, round %d: %v\n", k, i+1, s.err)
		}
	}
	if !first {
		fmt.Fprintln(w)
	}
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
