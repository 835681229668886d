// Command peers measures leasehold side by side with other Go task queues on
// the same machine, in one run: on Redis against asynq, on SQLite against
// River (riversqlite) and goqite, and River on PostgreSQL as a reference. See
// README.md for what is measured and how.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is what the flags choose.
type config struct {
	tasks     int
	rounds    int
	only      []string
	redisURL  string // "" starts a private redis-server
	pgURL     string // "" leaves PostgreSQL out
	cellLimit time.Duration
	dir       string
	quiet     bool
	cpuprof   string // "" : no CPU profile
	trace     string // "" : no execution trace
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.tasks, "tasks", 20000, "tasks per measurement")
	fs.IntVar(&c.rounds, "rounds", 3, "rounds; each round measures every cell once, systems interleaved")
	only := fs.String("only", "", "comma-separated filters on cell names group/system/workload, each a glob (path.Match) or a substring: e.g. redis, sqlite-normal/river, */leasehold/process-*")
	fs.StringVar(&c.redisURL, "redis", "", "URL of a Redis to use (its database is flushed before every measurement!); empty: start a private redis-server on a free port")
	fs.StringVar(&c.pgURL, "postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL URL for River (a schema of its own is created and dropped); empty: leave PostgreSQL out")
	fs.DurationVar(&c.cellLimit, "cell-limit", 20*time.Second, "time limit of one timed measurement; a cell that reaches it reports the rate of the tasks done so far, marked †")
	fs.StringVar(&c.dir, "dir", "", "folder for the SQLite files (default: a new temporary folder, removed at the end)")
	fs.BoolVar(&c.quiet, "quiet", false, "do not print a line per measurement on stderr")
	fs.StringVar(&c.cpuprof, "cpuprofile", "", "write a CPU profile of the whole run (this process: the clients, not the servers) to this file; pick one cell with -only")
	fs.StringVar(&c.trace, "trace", "", "write an execution trace of the whole run to this file (go tool trace); pick one cell with -only")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.tasks < 1 || c.rounds < 1 || c.cellLimit <= 0 {
		return c, fmt.Errorf("-tasks and -rounds must be at least 1 and -cell-limit positive")
	}
	for _, f := range strings.Split(*only, ",") {
		if f = strings.TrimSpace(f); f != "" {
			c.only = append(c.only, f)
		}
	}
	return c, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "peers:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	endProfiles, err := startProfiles(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "peers:", err)
		return 2
	}
	defer func() {
		if err := endProfiles(); err != nil {
			fmt.Fprintln(stderr, "peers:", err)
		}
	}()
	rep, err := bench(ctx, cfg, stderr)
	if rep != nil {
		rep.write(stdout, append([]string{"peers"}, args...))
	}
	if err != nil {
		fmt.Fprintln(stderr, "peers:", err)
		return 1
	}
	return 0
}

// startProfiles starts the CPU profile and the execution trace the flags
// ask for and returns the function that stops them and closes their files.
func startProfiles(cfg config) (func() error, error) {
	var stops []func() error
	end := func() error {
		var errs []error
		for _, f := range stops {
			errs = append(errs, f())
		}
		return errors.Join(errs...)
	}
	if cfg.cpuprof != "" {
		f, err := os.Create(cfg.cpuprof)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		stops = append(stops, func() error { pprof.StopCPUProfile(); return f.Close() })
	}
	if cfg.trace != "" {
		f, err := os.Create(cfg.trace)
		if err != nil {
			return nil, errors.Join(err, end())
		}
		if err := trace.Start(f); err != nil {
			return nil, errors.Join(err, f.Close(), end())
		}
		stops = append(stops, func() error { trace.Stop(); return f.Close() })
	}
	return end, nil
}
