package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// payload is the body of every task: the JSON of River's empty args, so every
// system stores the same bytes.
var payload = []byte("{}")

// target is one system on a fresh queue (a flushed Redis, a new SQLite file,
// a new PostgreSQL schema), driven through that system's public API.
type target interface {
	// enqueue adds one task; it is called from several goroutines at once.
	enqueue(ctx context.Context) error
	// fill adds n tasks before a processing measurement (not timed), by the
	// system's quickest public means.
	fill(ctx context.Context, n int) error
	// process runs the system's own workers at the given concurrency with a
	// no-op handler until n tasks are done (recorded as done by the system)
	// or ctx ends, calls finished at that moment, stops the workers (which is
	// not measured), and returns how many tasks were done.
	process(ctx context.Context, workers, n int, finished func()) (int, error)
	close() error
}

// batcher is a target that can also add many tasks in one call.
type batcher interface {
	// enqueueBatch adds k tasks in one call; errUnsupported when the
	// system (or this build of it) cannot.
	enqueueBatch(ctx context.Context, k int) error
}

var errUnsupported = errors.New("not supported")

// batchSize is the number of tasks of one EnqueueBatch call.
const batchSize = 100

type kind int

const (
	kindEnqueue kind = iota
	kindBatch
	kindProcess
)

// workload is one column of the tables.
type workload struct {
	name  string
	title string
	kind  kind
	n     int // producers or workers
}

var workloads = []workload{
	{"enqueue-1", "enqueue, 1 producer", kindEnqueue, 1},
	{"enqueue-8", "enqueue, 8 producers", kindEnqueue, 8},
	{"batch-1", "leasehold EnqueueBatch of 100, 1 producer", kindBatch, 1},
	{"batch-8", "leasehold EnqueueBatch of 100, 8 producers", kindBatch, 8},
	{"process-1", "process, 1 worker", kindProcess, 1},
	{"process-8", "process, 8 workers", kindProcess, 8},
	{"process-64", "process, 64 workers", kindProcess, 64},
}

// system is one row: a queue library on one backend.
type system struct {
	group     string // redis, sqlite, sqlite-normal, postgres
	name      string
	workloads []string
	open      func(ctx context.Context, e *env) (target, error)
}

func (s system) runs(w string) bool {
	for _, x := range s.workloads {
		if x == w {
			return true
		}
	}
	return false
}

var (
	enqueueAndProcess = []string{"enqueue-1", "enqueue-8", "process-1", "process-8", "process-64"}
	withBatch         = []string{"enqueue-1", "enqueue-8", "batch-1", "batch-8", "process-1", "process-8", "process-64"}
	processOnly       = []string{"process-1", "process-8", "process-64"}
)

// riverFast is River with the one setting changed that bounds its
// processing rate: FetchCooldown at its minimum, 1 ms, instead of 100 ms.
// It is not a default; it shows what the database allows River.
const riverFast = "river-cooldown-1ms"

// riverBench is River at the settings of River's own benchmark (riverbench
// in River's command-line tool): FetchCooldown 2 ms and FetchPollInterval
// 20 ms, MaxWorkers the workload's concurrency (riverbench uses 2 000
// workers; here each workload has its own number).
const riverBench = "river-riverbench"

// groups in the order of the report.
var groups = []struct{ name, title string }{
	{"redis", "Redis (one redis-server, no persistence)"},
	{"sqlite", "SQLite, each system at its defaults"},
	{"sqlite-normal", "SQLite at matched durability: WAL, synchronous=NORMAL for all"},
	{"postgres", "PostgreSQL: leasehold and River on the same database, each in a schema of its own"},
}

func systems() []system {
	return []system{
		{"redis", "leasehold", withBatch, openLeaseholdRedis},
		{"redis", "asynq", enqueueAndProcess, openAsynq},
		{"redis", "ceiling", []string{"enqueue-1", "enqueue-8"}, openCeiling},
		{"sqlite", "leasehold", withBatch, openLeaseholdSQLite(false)},
		{"sqlite", "river", enqueueAndProcess, openRiverSQLite(false, 0)},
		{"sqlite", riverFast, processOnly, openRiverSQLite(false, time.Millisecond)},
		{"sqlite", "goqite", enqueueAndProcess, openGoqite(false)},
		{"sqlite-normal", "leasehold", withBatch, openLeaseholdSQLite(true)},
		{"sqlite-normal", "river", enqueueAndProcess, openRiverSQLite(true, 0)},
		{"sqlite-normal", riverFast, processOnly, openRiverSQLite(true, time.Millisecond)},
		{"sqlite-normal", "goqite", enqueueAndProcess, openGoqite(true)},
		{"postgres", "leasehold", withBatch, openLeaseholdPostgres},
		{"postgres", "river", enqueueAndProcess, openRiverPostgres(0, 0)},
		{"postgres", riverFast, processOnly, openRiverPostgres(time.Millisecond, 0)},
		{"postgres", riverBench, processOnly, openRiverPostgres(2*time.Millisecond, 20*time.Millisecond)},
	}
}

// env is what the targets share: the Redis, the folder of the SQLite files,
// the PostgreSQL URL.
type env struct {
	cfg      config
	redisURL string
	admin    *goredis.Client // the bench's own connection: FLUSHDB, CONFIG RESETSTAT, INFO
	dir      string
	files    atomic.Int64 // names the SQLite files
	rep      *report
}

func (e *env) newFile(prefix string) string {
	return path.Join(e.dir, fmt.Sprintf("%s-%d.db", prefix, e.files.Add(1)))
}

type cellKey struct{ group, system, workload string }

func (k cellKey) String() string { return k.group + "/" + k.system + "/" + k.workload }

// sample is one measurement of a cell.
type sample struct {
	done     int
	elapsed  time.Duration
	complete bool        // all tasks done within the cell limit
	redis    *redisUsage // nil off Redis
	probe    *probeStats // nil off Redis
	err      error
}

func (s sample) rate() float64 {
	if s.err != nil || s.elapsed <= 0 {
		return 0
	}
	return float64(s.done) / s.elapsed.Seconds()
}

func selected(only []string, k cellKey) bool {
	if len(only) == 0 {
		return true
	}
	name := k.String()
	for _, f := range only {
		if ok, _ := path.Match(f, name); ok || strings.Contains(name, f) {
			return true
		}
	}
	return false
}

// bench runs every selected cell once per round, the systems of a cell one
// after the other (their order rotating from round to round), each on a
// fresh queue.
func bench(ctx context.Context, cfg config, log io.Writer) (*report, error) {
	if !cfg.quiet {
		fmt.Fprintf(log, "peers: %d tasks, %d rounds\n", cfg.tasks, cfg.rounds)
	}
	rep := newReport(cfg)
	e := &env{cfg: cfg}
	plan := planCells(cfg)
	var needRedis, needPG bool
	for _, k := range plan {
		needRedis = needRedis || k.group == "redis"
		needPG = needPG || k.group == "postgres"
	}
	if len(plan) == 0 {
		return nil, fmt.Errorf("no cell matches -only %q", strings.Join(cfg.only, ","))
	}

	if cfg.dir == "" {
		dir, err := os.MkdirTemp("", "leasehold-peers-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		e.dir = dir
	} else {
		e.dir = cfg.dir
	}
	if needRedis {
		e.redisURL = cfg.redisURL
		if e.redisURL == "" {
			srv, err := startRedis(ctx)
			if err != nil {
				return nil, err
			}
			defer srv.stop()
			e.redisURL = srv.url()
		}
		opt, err := goredis.ParseURL(e.redisURL)
		if err != nil {
			return nil, err
		}
		e.admin = goredis.NewClient(opt)
		defer e.admin.Close()
		if err := e.admin.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("redis %s: %w", e.redisURL, err)
		}
	}
	if needPG {
		if err := dropRiverSchema(ctx, cfg.pgURL); err != nil { // left by an interrupted run
			return nil, fmt.Errorf("postgres %s: %w", cfg.pgURL, err)
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			_ = dropRiverSchema(ctx, cfg.pgURL)
		}()
	}
	rep.start(ctx, e)

	bySystem := map[string]system{}
	for _, s := range systems() {
		bySystem[s.group+"/"+s.name] = s
	}
	var firstErr error
	for round := range cfg.rounds {
		for _, k := range roundOrder(plan, round) {
			if ctx.Err() != nil {
				rep.finish(ctx, e)
				return rep, ctx.Err()
			}
			smp := measure(ctx, e, bySystem[k.group+"/"+k.system], workloadNamed(k.workload))
			rep.add(k, round, smp)
			if smp.err != nil && firstErr == nil && !errors.Is(smp.err, errUnsupported) {
				firstErr = fmt.Errorf("%s: %w", k, smp.err)
			}
			if !cfg.quiet {
				fmt.Fprintf(log, "round %d %-40s %s\n", round+1, k, smp.line(k.workload))
			}
		}
	}
	rep.finish(ctx, e)
	return rep, firstErr
}

// planCells lists the selected cells by group, then workload, then system,
// so the systems of one (group, workload) are next to each other.
func planCells(cfg config) []cellKey {
	var plan []cellKey
	for _, g := range groups {
		if g.name == "postgres" && cfg.pgURL == "" {
			continue
		}
		for _, w := range workloads {
			for _, s := range systems() {
				k := cellKey{s.group, s.name, w.name}
				if s.group == g.name && s.runs(w.name) && selected(cfg.only, k) {
					plan = append(plan, k)
				}
			}
		}
	}
	return plan
}

// roundOrder is the plan of one round: within each (group, workload) the
// systems are rotated by the round's number, so none always runs first.
func roundOrder(plan []cellKey, round int) []cellKey {
	out := make([]cellKey, 0, len(plan))
	for i := 0; i < len(plan); {
		j := i
		for j < len(plan) && plan[j].group == plan[i].group && plan[j].workload == plan[i].workload {
			j++
		}
		for n := range j - i {
			out = append(out, plan[i+(n+round)%(j-i)])
		}
		i = j
	}
	return out
}

func workloadNamed(name string) workload {
	for _, w := range workloads {
		if w.name == name {
			return w
		}
	}
	panic("unknown workload " + name)
}

// setupLimit bounds the untimed parts of a measurement: opening, filling,
// closing.
const setupLimit = 5 * time.Minute

// measure runs one cell on a fresh target.
func measure(ctx context.Context, e *env, s system, w workload) (smp sample) {
	n := e.cfg.tasks
	setup, cancel := context.WithTimeout(ctx, setupLimit)
	defer cancel()
	if e.admin != nil && s.group == "redis" {
		if err := e.admin.FlushDB(setup).Err(); err != nil {
			return sample{err: err}
		}
	}
	t, err := s.open(setup, e)
	if err != nil {
		return sample{err: fmt.Errorf("open: %w", err)}
	}
	defer func() {
		if err := t.close(); err != nil && smp.err == nil {
			smp.err = fmt.Errorf("close: %w", err)
		}
	}()
	if w.kind == kindProcess {
		if err := t.fill(setup, n); err != nil {
			return sample{err: fmt.Errorf("fill: %w", err)}
		}
	}
	var before redisUsage
	if e.admin != nil && s.group == "redis" {
		if before, err = readUsage(setup, e.admin, true); err != nil {
			return sample{err: err}
		}
	}

	timed, stop := context.WithTimeout(ctx, e.cfg.cellLimit)
	defer stop()
	var end time.Time
	var after redisUsage
	var afterErr error
	var prb *probe
	if e.admin != nil && s.group == "redis" {
		if prb, err = startProbe(setup, e); err != nil {
			return sample{err: err}
		}
	}
	var once sync.Once
	finished := func() {
		once.Do(func() {
			end = time.Now()
			if prb != nil {
				smp.probe, afterErr = prb.finish(setup, e)
			}
			if e.admin != nil && s.group == "redis" && afterErr == nil {
				after, afterErr = readUsage(setup, e.admin, false)
			}
		})
	}
	start := time.Now()
	switch w.kind {
	case kindEnqueue:
		smp.done, err = produce(timed, w.n, n, 1, func(ctx context.Context, _ int) error { return t.enqueue(ctx) })
	case kindBatch:
		b, ok := t.(batcher)
		if !ok {
			return sample{err: errUnsupported}
		}
		smp.done, err = produce(timed, w.n, n, batchSize, b.enqueueBatch)
	case kindProcess:
		smp.done, err = t.process(timed, w.n, n, finished)
	}
	finished()
	smp.elapsed = end.Sub(start)
	smp.complete = smp.done >= n
	if err != nil && !(timed.Err() != nil && ctx.Err() == nil) {
		return sample{err: err}
	}
	if afterErr != nil {
		return sample{err: afterErr}
	}
	if e.admin != nil && s.group == "redis" {
		u := after.minus(before, smp.done)
		smp.redis = &u
	}
	return smp
}

// produce adds n tasks from p goroutines, each call adding up to per tasks,
// and returns how many were added before an error or the end of ctx.
func produce(ctx context.Context, p, n, per int, add func(ctx context.Context, k int) error) (int, error) {
	var next, done atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range p {
		wg.Go(func() {
			for ctx.Err() == nil {
				end := int(next.Add(int64(per)))
				k := min(per, n-(end-per))
				if k <= 0 {
					return
				}
				if err := add(ctx, k); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				done.Add(int64(k))
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return int(done.Load()), first
}

// waitFor polls cond every step until it holds or ctx ends.
func waitFor(ctx context.Context, step time.Duration, cond func() bool) error {
	t := time.NewTicker(step)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
