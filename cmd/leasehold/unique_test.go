package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// TestInspectGetShowsTheUniqueKey: get shows a task's unique key and how
// long it is held, and nothing of the kind for a task without one.
func TestInspectGetShowsTheUniqueKey(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tasks.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []model.EnqueueArgs{
		{ID: "pending", MaxAttempts: 1, UniqueKey: "digest:ada"},
		{ID: "period", MaxAttempts: 1, UniqueKey: "remind:ada", UniqueFor: time.Hour},
		{ID: "plain", MaxAttempts: 1},
	} {
		if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "jobs", EnqueueArgs: a}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	for id, want := range map[string]string{"pending": `"digest:ada" held while pending`, "period": `"remind:ada" held until `} {
		status, stdout, stderr := runCmd(t, "inspect", "--sqlite", path, "--queue", "jobs", "get", id)
		if status != 0 || !strings.Contains(stdout, "unique key") || !strings.Contains(stdout, want) {
			t.Errorf("get %s: status %d, want %q\n%s\n%s", id, status, want, stdout, stderr)
		}
	}
	if status, stdout, _ := runCmd(t, "inspect", "--sqlite", path, "--queue", "jobs", "get", "plain"); status != 0 || strings.Contains(stdout, "unique key") {
		t.Errorf("get plain: status %d\n%s", status, stdout)
	}
}
