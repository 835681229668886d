package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// TestInspectPausesAndResumesAQueue pauses a SQLite queue through the CLI,
// checks that a Pop then claims nothing and that counts shows the flag, and
// resumes it.
func TestInspectPausesAndResumesAQueue(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tasks.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "jobs", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	pop := func() int {
		t.Helper()
		s, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		res, err := s.Pop(ctx, core.PopParams{Queue: "jobs", Lease: time.Minute, N: 1})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Tasks)
	}

	status, stdout, stderr := runCmd(t, "inspect", "--sqlite", path, "--queue", "jobs", "pause")
	if status != 0 || !strings.Contains(stdout, "queue jobs paused") {
		t.Fatalf("pause: status %d\n%s\n%s", status, stdout, stderr)
	}
	status, stdout, stderr = runCmd(t, "inspect", "--sqlite", path, "--queue", "jobs", "counts")
	if status != 0 || !strings.Contains(stdout, "paused") || !strings.Contains(stdout, "yes") {
		t.Errorf("counts of a paused queue: status %d\n%s\n%s", status, stdout, stderr)
	}
	status, stdout, _ = runCmd(t, "inspect", "--sqlite", path, "--queue", "jobs", "--json", "counts")
	var c core.Counts
	if err := json.Unmarshal([]byte(stdout), &c); status != 0 || err != nil || !c.Paused || c.Ready != 1 {
		t.Errorf("counts --json of a paused queue: status %d, %+v, %v\n%s", status, c, err, stdout)
	}
	if n := pop(); n != 0 {
		t.Fatalf("a Pop of the paused queue claimed %d tasks", n)
	}

	status, stdout, _ = runCmd(t, "inspect", "--sqlite", path, "--queue", "jobs", "--json", "resume")
	var st struct {
		Queue  string
		Paused bool
	}
	if err := json.Unmarshal([]byte(stdout), &st); status != 0 || err != nil || st.Paused || st.Queue != "jobs" {
		t.Fatalf("resume --json: status %d, %+v, %v\n%s", status, st, err, stdout)
	}
	if n := pop(); n != 1 {
		t.Fatalf("a Pop of the resumed queue claimed %d tasks, want 1", n)
	}
	if status, _, _ := runCmd(t, "inspect", "--sqlite", path, "--queue", "jobs", "pause", "extra"); status != 2 {
		t.Errorf("pause with an extra argument: status %d, want 2", status)
	}
}

// TestInspectCancelsATask cancels a running SQLite task through the CLI:
// with a version it has left the command exits 1 and changes nothing; then
// it cancels, the worker's ack is refused as cancelled, and get shows the
// cancellation in the task's errors.
func TestInspectCancelsATask(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tasks.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "jobs", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Pop(ctx, core.PopParams{Queue: "jobs", Lease: time.Minute, N: 1})
	if err != nil || len(res.Tasks) != 1 {
		t.Fatal(res, err)
	}
	s.Close()
	claim := res.Tasks[0].Claim()
	if status, _, _ := runCmd(t, "inspect", "--sqlite", path, "--queue", "jobs", "--expect", "1", "cancel", "a"); status != 1 {
		t.Fatalf("cancel with a version the task left: status %d, want 1", status)
	}
	status, stdout, stderr := runCmd(t, "inspect", "--sqlite", path, "--queue", "jobs", "cancel", "a")
	if status != 0 || !strings.Contains(stdout, "failed") || !strings.Contains(stdout, "(cancelled)") {
		t.Fatalf("cancel: status %d\n%s\n%s", status, stdout, stderr)
	}
	s, err = sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Ack(ctx, core.AckParams{Claim: claim}); !errors.Is(err, core.ErrCancelled) {
		t.Fatalf("the worker's ack after the cancel: %v, want ErrCancelled", err)
	}
}
