package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// storeFlags name the store a command looks into.
type storeFlags struct {
	redis, prefix, sqlite, postgres, schema string
}

// add adds the flags to fs.
func (f *storeFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&f.redis, "redis", "", "the Redis store at `URL` (redis://host:port/db)")
	fs.StringVar(&f.prefix, "prefix", "", "the Redis store's key prefix (default "+redis.DefaultPrefix+")")
	fs.StringVar(&f.sqlite, "sqlite", "", "the SQLite store in the database file `PATH`")
	fs.StringVar(&f.postgres, "postgres", "", "the PostgreSQL store at `URL` (postgres://user@host/db)")
	fs.StringVar(&f.schema, "schema", "", "the PostgreSQL store's schema (default "+postgres.DefaultSchema+")")
}

// open opens the store.
func (f *storeFlags) open(ctx context.Context) (core.Store, error) {
	named := 0
	for _, v := range []string{f.redis, f.sqlite, f.postgres} {
		if v != "" {
			named++
		}
	}
	if named > 1 {
		return nil, errors.New("name one store: --redis URL, --sqlite PATH or --postgres URL")
	}
	if f.postgres != "" {
		var opts []postgres.Option
		if f.schema != "" {
			opts = append(opts, postgres.WithSchema(f.schema))
		}
		return postgres.Open(ctx, f.postgres, opts...)
	}
	return openStore(f.redis, f.prefix, f.sqlite)
}

// openStore opens a Redis or SQLite store.
func openStore(redisURL, prefix, sqlitePath string) (core.Store, error) {
	switch {
	case redisURL != "" && sqlitePath != "":
		return nil, errors.New("name one store: --redis URL or --sqlite PATH")
	case sqlitePath != "":
		if _, err := os.Stat(sqlitePath); err != nil {
			return nil, err // do not create a database to look into
		}
		return sqlite.Open(sqlitePath)
	case redisURL == "":
		return nil, errors.New("name a store: --redis URL, --sqlite PATH or --postgres URL")
	}
	var opts []redis.Option
	if prefix != "" {
		opts = append(opts, redis.WithPrefix(prefix))
	}
	return redis.Open(redisURL, opts...)
}

func inspect(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("leasehold inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sf storeFlags
	sf.add(fs)
	queue := fs.String("queue", "default", "the `queue` to look into")
	after := fs.String("after", "", "list: start after this task `ID`")
	limit := fs.Int("limit", 50, "list: at most `N` tasks")
	expect := fs.Uint64("expect", 0, "remove, cancel: only if the task is at this `version` (0: any; a quarantined record has none)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: leasehold inspect [flags] queues | counts | list STATE | get ID | remove ID | cancel ID | pause | resume\n\nSTATE is one of scheduled, ready, running, succeeded, failed, quarantined\n(records the store could not read, set aside; remove deletes one).\ncancel fails a scheduled, ready or running task at once; its worker is told at\nits next heartbeat and neither retries nor acknowledges it.\npause stops workers from claiming the queue's tasks (running ones go on)\nuntil resume; counts shows whether the queue is paused.\n\n")
		fs.PrintDefaults()
		fmt.Fprint(stderr, exitCodes)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cmd := fs.Args()
	if len(cmd) == 0 {
		fs.Usage()
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sf.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "leasehold inspect: %v\n", err)
		return exitUsage
	}
	defer s.Close()

	var out any
	switch {
	case cmd[0] == "queues" && len(cmd) == 1:
		ql, ok := s.(core.QueueLister)
		if !ok {
			fmt.Fprintf(stderr, "leasehold inspect: this store cannot list its queues\n")
			return exitUsage
		}
		var names []string
		names, err = ql.Queues(ctx)
		out = queueNames(names)
	case cmd[0] == "counts" && len(cmd) == 1:
		out, err = s.Counts(ctx, core.CountsParams{Queue: *queue})
	case cmd[0] == "list" && len(cmd) == 2:
		var state model.State
		if state, err = model.ParseState(cmd[1]); err != nil {
			fmt.Fprintf(stderr, "leasehold inspect: %v\n", err)
			return exitUsage
		}
		out, err = s.List(ctx, core.ListParams{Queue: *queue, State: state, After: *after, Limit: *limit})
	case cmd[0] == "get" && len(cmd) == 2:
		out, err = s.Get(ctx, core.GetParams{Queue: *queue, ID: cmd[1]})
	case (cmd[0] == "pause" || cmd[0] == "resume") && len(cmd) == 1:
		var ins *core.Inspector
		if ins, err = core.NewInspector(s, *queue); err == nil {
			st := pauseState{Queue: *queue}
			if cmd[0] == "pause" {
				st.Paused, err = ins.Pause(ctx)
			} else {
				st.Paused, err = ins.Resume(ctx)
			}
			out = st
		}
	case cmd[0] == "remove" && len(cmd) == 2:
		var ins *core.Inspector
		if ins, err = core.NewInspector(s, *queue); err == nil {
			out, err = ins.Remove(ctx, cmd[1], *expect)
		}
	case cmd[0] == "cancel" && len(cmd) == 2:
		var ins *core.Inspector
		if ins, err = core.NewInspector(s, *queue); err == nil {
			out, err = ins.Cancel(ctx, cmd[1], *expect)
		}
	default:
		fs.Usage()
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "leasehold inspect: %v\n", err)
		return exitStatus(err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(stderr, "leasehold inspect: %v\n", err)
			return 2
		}
		return 0
	}
	printInspection(stdout, out)
	return 0
}

func printInspection(w io.Writer, out any) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	switch v := out.(type) {
	case queueNames:
		for _, n := range v {
			fmt.Fprintln(tw, n)
		}
	case core.Counts:
		fmt.Fprintln(tw, "scheduled\tready\trunning\tsucceeded\tfailed\tquarantined\ttotal\tpaused")
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", v.Scheduled, v.Ready, v.Running, v.Succeeded, v.Failed, v.Quarantined, v.Total(), yesNo(v.Paused))
	case pauseState:
		state := "resumed: workers claim its tasks"
		if v.Paused {
			state = "paused: workers claim none of its tasks until resume"
		}
		fmt.Fprintf(tw, "queue %s %s\n", v.Queue, state)
	case core.ListResult:
		fmt.Fprintln(tw, "id\tstate\tpriority\tattempt\tversion\ttoken\tenqueued\tdeadline\terrors")
		for _, t := range v.Tasks {
			if t.State == model.Quarantined {
				fmt.Fprintf(tw, "%s\t%v\t-\t-\t-\t-\t-\t-\t%s\n", t.ID, t.State, t.Quarantine)
				continue
			}
			fmt.Fprintf(tw, "%s\t%v\t%d\t%d/%d\t%d\t%d\t%s\t%s\t%d\n", t.ID, t.State, t.Priority, t.Attempt, t.MaxAttempts,
				t.Version, t.ClaimToken, stamp(t.EnqueuedAt), stamp(t.Deadline), len(t.Errors))
		}
		if v.Next != "" {
			fmt.Fprintf(tw, "(more: --after %s)\n", v.Next)
		}
	case core.Task:
		row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
		row("queue", v.Queue)
		row("id", v.ID)
		row("state", v.State)
		if v.State == model.Quarantined {
			row("reason", v.Quarantine)
			return
		}
		row("priority", v.Priority)
		row("attempt", fmt.Sprintf("%d of %d", v.Attempt, v.MaxAttempts))
		row("timeout", timeoutText(v.Timeout))
		if v.UniqueKey != "" {
			row("unique key", fmt.Sprintf("%q held %s", v.UniqueKey, holdText(v.UniqueUntil)))
		}
		row("version", v.Version)
		row("claim token", v.ClaimToken)
		row("enqueued", stamp(v.EnqueuedAt))
		row("run after", stamp(v.RunAfter))
		row("claimed", stamp(v.ClaimedAt))
		row("deadline", stamp(v.Deadline))
		row("finished", stamp(v.FinishedAt))
		row("payload", fmt.Sprintf("%q", v.Payload))
		row("result", fmt.Sprintf("%q", v.Result))
		for i, e := range v.Errors {
			kind := "handler"
			switch {
			case e.LeaseExpired:
				kind = "lease expired"
			case e.Cancelled:
				kind = "cancelled"
			}
			row(fmt.Sprintf("error %d", i+1), fmt.Sprintf("attempt %d at %s (%s): %s", e.Attempt, stamp(e.At), kind, e.Message))
		}
	}
}

// holdText says how long a task's unique key is held.
func holdText(until time.Time) string {
	if until.IsZero() {
		return "while pending"
	}
	return "until " + stamp(until)
}

// timeoutText shows a task's attempt timeout, "-" when it has none (its
// worker's applies).
func timeoutText(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.String()
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// pauseState is the answer of `inspect pause` and `inspect resume`.
type pauseState struct {
	Queue  string `json:"queue"`
	Paused bool   `json:"paused"`
}

// queueNames is the answer of `inspect queues`.
type queueNames []string

// exitStatus is the exit status of a command whose store call failed with
// err: 1 when the store answered with a finding about the data (no such
// task, a conflict, a corrupt record), 2 for a bad argument or a store that
// could not be reached.
func exitStatus(err error) int {
	for _, finding := range []error{core.ErrNotFound, core.ErrConflict, core.ErrInvalidTransition, core.ErrStaleClaim, core.ErrCorrupt} {
		if errors.Is(err, finding) {
			return exitFinding
		}
	}
	return exitUsage
}
