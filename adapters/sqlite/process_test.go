package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// The tests in this file re-execute the test binary as helper processes that
// share one database file. The helper's role and arguments travel in the
// environment; TestHelperProcess does nothing without them.
const (
	envRole   = "LEASEHOLD_SQLITE_HELPER"
	envDB     = "LEASEHOLD_SQLITE_DB"
	envOut    = "LEASEHOLD_SQLITE_OUT"
	envWorker = "LEASEHOLD_SQLITE_WORKER"
	envTasks  = "LEASEHOLD_SQLITE_TASKS"
)

// TestHelperProcess is the body of the helper processes. Run directly, it
// returns at once.
func TestHelperProcess(t *testing.T) {
	role := os.Getenv(envRole)
	if role == "" {
		return
	}
	var err error
	switch role {
	case "worker":
		err = helperWorker()
	case "acker":
		err = helperAcker()
	default:
		err = fmt.Errorf("unknown helper role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// helper starts the test binary as a helper process with the given role.
func helper(t *testing.T, role string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(append(os.Environ(), envRole+"="+role), env...)
	cmd.Stderr = os.Stderr
	return cmd
}

// enqueueMany fills a new database with n tasks t000, t001, ...
func enqueueMany(t *testing.T, path string, n, maxAttempts int) {
	t.Helper()
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range n {
		if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{
			ID: fmt.Sprintf("t%03d", i), MaxAttempts: maxAttempts,
		}}); err != nil {
			t.Fatal(err)
		}
	}
}

// abandoned says which first attempts the workers give up on, as a worker
// that stops responding would: every third task.
func abandoned(id string, attempt int) bool {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "t"))
	return attempt == 1 && n%3 == 0
}

// helperWorker runs a worker and a recoverer against the shared file with
// the host's clock until every task has succeeded. It writes one line per
// decision to its output file: "ack ID TOKEN", "stale ID TOKEN",
// "abandon ID ATTEMPT" or "recover ID ATTEMPT".
func helperWorker() error {
	total, _ := strconv.Atoi(os.Getenv(envTasks))
	worker := os.Getenv(envWorker)
	out, err := os.Create(os.Getenv(envOut))
	if err != nil {
		return err
	}
	defer out.Close()
	w := bufio.NewWriter(out)
	s, err := sqlite.Open(os.Getenv(envDB))
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clock := core.SystemClock{}
	const lease = 40 * time.Millisecond
	for {
		rec, err := s.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: "q"})
		if err != nil {
			return err
		}
		for _, task := range rec.Tasks {
			fmt.Fprintf(w, "recover %s %d\n", task.ID, task.Attempt)
		}
		res, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: lease, N: 1})
		if err != nil {
			return err
		}
		if len(res.Tasks) == 0 {
			c, err := s.Counts(ctx, core.CountsParams{Queue: "q"})
			if err != nil {
				return err
			}
			if c.Succeeded == total {
				break
			}
			timer := clock.NewTimer(2 * time.Millisecond) // a worker's poll interval
			select {
			case <-timer.C():
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		task := res.Tasks[0]
		if abandoned(task.ID, task.Attempt) {
			fmt.Fprintf(w, "abandon %s %d\n", task.ID, task.Attempt)
			continue
		}
		_, err = s.Ack(ctx, core.AckParams{Claim: task.Claim(), Result: []byte(worker)})
		switch {
		case err == nil:
			fmt.Fprintf(w, "ack %s %d\n", task.ID, task.ClaimToken)
		case errors.Is(err, core.ErrStaleClaim):
			fmt.Fprintf(w, "stale %s %d\n", task.ID, task.ClaimToken) // this worker's lease lapsed first
		default:
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return out.Sync()
}

// TestRecoveryIsAtomicAcrossProcesses runs three processes, each a worker
// and a recoverer, on one database file. Workers abandon the first attempt
// of every third task, so its lease lapses and some process recovers it
// while the others pop and ack. Every task must end acknowledged by exactly
// one successful Ack, every lapsed attempt must have been recovered exactly
// once, and no task may be lost.
func TestRecoveryIsAtomicAcrossProcesses(t *testing.T) {
	const tasks, procs = 30, 3
	dir := t.TempDir()
	path := filepath.Join(dir, "shared.db")
	enqueueMany(t, path, tasks, 100)

	var cmds []*exec.Cmd
	for i := range procs {
		cmd := helper(t, "worker", envDB+"="+path, envTasks+"="+strconv.Itoa(tasks),
			envWorker+"="+strconv.Itoa(i), envOut+"="+filepath.Join(dir, fmt.Sprintf("worker%d.log", i)))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("worker process %d: %v", i, err)
		}
	}

	acks := map[string][]string{}   // task -> workers whose Ack succeeded
	recovered := map[string][]int{} // task -> attempts recovered
	abandons := map[string][]int{}  // task -> attempts abandoned
	lapsed := map[string]int{}      // task -> attempts that ended by lease expiry
	for i := range procs {
		data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("worker%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var kind, id string
			var n int
			if _, err := fmt.Sscanf(line, "%s %s %d", &kind, &id, &n); err != nil {
				continue // an empty log
			}
			switch kind {
			case "ack":
				acks[id] = append(acks[id], strconv.Itoa(i))
			case "recover":
				recovered[id] = append(recovered[id], n)
				lapsed[id]++
			case "abandon":
				abandons[id] = append(abandons[id], n)
			}
		}
	}

	s := openStore(t, path)
	counts, err := s.Counts(ctx, core.CountsParams{Queue: "q"})
	if err != nil || counts.Succeeded != tasks || counts.Total() != tasks {
		t.Fatalf("final counts %+v (%v), want all %d tasks succeeded", counts, err, tasks)
	}
	for i := range tasks {
		id := fmt.Sprintf("t%03d", i)
		task, err := s.Get(ctx, core.GetParams{Queue: "q", ID: id})
		if err != nil {
			t.Fatalf("task %s lost: %v", id, err)
		}
		if len(acks[id]) != 1 {
			t.Errorf("task %s: %d successful Acks (workers %v), want exactly one", id, len(acks[id]), acks[id])
			continue
		}
		if string(task.Result) != acks[id][0] {
			t.Errorf("task %s holds the result of worker %q, but worker %s's Ack succeeded", id, task.Result, acks[id][0])
		}
		seen := map[int]bool{}
		for _, a := range recovered[id] {
			if seen[a] {
				t.Errorf("task %s: attempt %d recovered twice", id, a)
			}
			seen[a] = true
		}
		if len(task.Errors) != lapsed[id] || task.LeaseLosses() != lapsed[id] {
			t.Errorf("task %s: %d lease-expired errors recorded, %d recoveries reported", id, task.LeaseLosses(), lapsed[id])
		}
		if task.Attempt != lapsed[id]+1 {
			t.Errorf("task %s: attempt %d after %d recoveries", id, task.Attempt, lapsed[id])
		}
		if len(abandons[id]) > 0 && !seen[1] {
			t.Errorf("task %s: its abandoned first attempt was never recovered", id)
		}
	}
}

// helperAcker pops and acks tasks one by one, forever. After each Ack that
// succeeded it appends the ID to its output file, syncs it, then prints the
// ID to stdout.
func helperAcker() error {
	out, err := os.OpenFile(os.Getenv(envOut), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	s, err := sqlite.Open(os.Getenv(envDB))
	if err != nil {
		return err
	}
	for {
		res, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Hour, N: 1})
		if err != nil {
			return err
		}
		if len(res.Tasks) == 0 {
			return errors.New("ran out of tasks before being killed")
		}
		if _, err := s.Ack(ctx, core.AckParams{Claim: res.Tasks[0].Claim(), Result: []byte("ok")}); err != nil {
			return err
		}
		if _, err := fmt.Fprintln(out, res.Tasks[0].ID); err != nil {
			return err
		}
		if err := out.Sync(); err != nil {
			return err
		}
		fmt.Println(res.Tasks[0].ID)
	}
}

// TestAcknowledgedTasksSurviveAProcessKilledMidBatch kills (SIGKILL) a
// process in the middle of a run of acks, then reopens the database: it
// must open cleanly, pass SQLite's integrity check, hold every task, and
// show every ack the process saw succeed.
func TestAcknowledgedTasksSurviveAProcessKilledMidBatch(t *testing.T) {
	const tasks, killAfter = 400, 25
	dir := t.TempDir()
	path := filepath.Join(dir, "crash.db")
	enqueueMany(t, path, tasks, 1)
	logPath := filepath.Join(dir, "acked.log")

	cmd := helper(t, "acker", envDB+"="+path, envOut+"="+logPath)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	for n := 0; n < killAfter; n++ {
		if !lines.Scan() {
			cmd.Wait()
			t.Fatalf("the acker stopped after %d acks: %v", n, lines.Err())
		}
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no chance to clean up
		t.Fatal(err)
	}
	cmd.Wait()

	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	acked := strings.Fields(string(data))
	if len(acked) < killAfter {
		t.Fatalf("the acker logged %d acks, it had printed at least %d", len(acked), killAfter)
	}

	s := openStore(t, path)
	var check string
	if err := rawDB(t, path).QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q, %v", check, err)
	}
	for _, id := range acked {
		task, err := s.Get(ctx, core.GetParams{Queue: "q", ID: id})
		if err != nil || task.State != core.Succeeded || string(task.Result) != "ok" {
			t.Errorf("task %s was acknowledged before the kill but is %v (%v)", id, task.State, err)
		}
	}
	counts, err := s.Counts(ctx, core.CountsParams{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	// At most one ack committed after the last one logged, and at most one
	// task was popped and not yet acked.
	if counts.Total() != tasks || counts.Succeeded < len(acked) || counts.Succeeded > len(acked)+1 || counts.Running > 1 {
		t.Errorf("after the kill: %+v with %d acks logged", counts, len(acked))
	}
}
