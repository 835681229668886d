// Command leasehold checks leasehold's stores for linearizability and looks
// into a store's queues.
//
//	leasehold check [flags]            run the linearizability harness (the main job)
//	leasehold check --runtime [flags]  run real Workers, Brokers and an Inspector under it
//	leasehold check --replay FILE      check a saved history again, offline
//	leasehold inspect [flags] queues   the queues the store holds
//	leasehold inspect [flags] counts   the number of tasks in each state
//	leasehold inspect [flags] list STATE
//	leasehold inspect [flags] get ID
//	leasehold ui [flags]               a web inspector of a store (package internal/webui)
//
// `leasehold check` draws concurrent plans with rapid (producers, workers,
// brokers and an inspector, with stalls and clock advances), runs each
// against a fresh store, records every call and return, and checks each
// history with porcupine against the model in package model. By default it
// runs the in-process memory adapter for 10 seconds; --redis URL checks a
// Redis server and --sqlite FOLDER the SQLite adapter (each Pop
// implementation) instead; add --memory to check it too. On a violation it
// saves the plan, the history and porcupine's visualization to a folder,
// prints the folder and the seed, and exits with status 1. Either way it
// writes the visualization of one passing history, so a newcomer can see
// what was checked.
//
// `leasehold check --runtime` runs the same harness one layer up: each
// history is a generated schedule for real core.Worker, core.Broker and
// core.Inspector values (handlers that succeed, fail, panic, ignore their
// context or outlive their lease; stalled and lost store calls; clock
// jumps), every store call recorded, checked for linearizability and for
// the runtime properties of package linearizability (RuntimeProperties).
// A violation names the broken property. With --redis the stores reach
// the server through a fault proxy with the client configuration
// redis.Open gives.
//
// Run `leasehold check -h` or `leasehold inspect -h` for the flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	goredis "github.com/redis/go-redis/v9"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// The exit statuses of every subcommand.
const (
	exitOK      = 0 // success
	exitFinding = 1 // a violation, a history that is not linearizable, a task not found or changed
	exitUsage   = 2 // bad usage, a store that cannot be reached, a harness error
)

// exitCodes is the exit statuses, as the usage texts print them.
const exitCodes = `
exit status: 0 ok; 1 a finding (a violation, a history that is not linearizable,
a task not found, an action refused because the task changed); 2 bad usage,
a store that cannot be opened or reached, or a harness error.
`

// run runs the command line args and returns the exit status: exitOK,
// exitFinding or exitUsage.
func run(args []string, stdout, stderr io.Writer) int {
	// go-redis logs on its own to the process's standard error (a failed
	// dial, a pool hook's refusal); every error that matters reaches the
	// command as a returned error and is reported once, in its own words.
	goredis.SetLogger(quietRedisLog{})
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "check":
		return check(args[1:], stdout, stderr)
	case "inspect":
		return inspect(args[1:], stdout, stderr)
	case "ui":
		return ui(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "leasehold: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  leasehold check [flags]           check the stores for linearizability (memory adapter by default;
                                    --redis URL, --sqlite FOLDER for the others)
  leasehold check --runtime [flags] the same for real Workers, Brokers and an Inspector, and the
                                    runtime properties (Redis through a fault proxy)
  leasehold check --replay FILE     check a saved history.json again
  leasehold inspect [flags] queues|counts|list STATE|get ID
                                    look into a Redis (--redis URL), SQLite (--sqlite PATH) or
                                    PostgreSQL (--postgres URL) store
  leasehold ui [flags]              a web inspector of a store, on 127.0.0.1:8080 by default
                                    (--memory: a demonstration store)

Run "leasehold check -h", "leasehold inspect -h" or "leasehold ui -h" for the flags.
`+exitCodes)
}

// quietRedisLog is go-redis's logger in the command: it drops every line.
type quietRedisLog struct{}

// Printf drops the line.
func (quietRedisLog) Printf(context.Context, string, ...any) {}
