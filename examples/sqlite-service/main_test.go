package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
)

// The service, built and run as a process on a database file of its own,
// does the tasks it enqueued, and on SIGTERM shuts down and exits 0.
func TestTheServiceDoesItsTasksAndStopsOnSIGTERM(t *testing.T) {
	db := filepath.Join(t.TempDir(), "jobs.db")
	const n = 3
	out := runService(t, "-db", db, "-enqueue", "3", "-grace", "5s")

	store, err := sqlite.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, q := range []string{"emails", "reports"} {
		c, err := store.Counts(context.Background(), core.CountsParams{Queue: q})
		if err != nil {
			t.Fatal(err)
		}
		if c.Succeeded != n || c.Ready+c.Running+c.Scheduled+c.Failed != 0 {
			t.Errorf("queue %s: %+v, want %d succeeded\n%s", q, c, n, out)
		}
	}
}

// runService builds the program, runs it with args until it has reported
// every task done, sends SIGTERM and checks that it stopped cleanly. It
// returns the program's output.
func runService(t *testing.T, args ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "service")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(stdout)
	done := 0
	for done < 6 && sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.HasPrefix(sc.Text(), "done ") {
			done++
		}
	}
	if done < 6 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the service reported %d tasks done, want 6:\n%s", done, strings.Join(lines, "\n"))
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	out := strings.Join(lines, "\n")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the service exited with %v after SIGTERM:\n%s", err, out)
	}
	if !strings.HasSuffix(out, "stopped") {
		t.Fatalf("the service did not report its shutdown:\n%s", out)
	}
	return out
}
