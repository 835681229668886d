package webui

import (
	"context"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// TestTaskPageShowsTheUniqueKey: a task's page shows its unique key and
// its hold; a task without one shows none.
func TestTaskPageShowsTheUniqueKey(t *testing.T) {
	store := memory.New()
	defer store.Close()
	if _, err := store.Enqueue(context.Background(), core.EnqueueParams{Queue: "mail", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1, UniqueKey: "digest:<ada>"}}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, store, "mail", "b")
	c := newClient(t, store)
	status, page := c.get("/queues/mail/tasks/a")
	if status != 200 || !strings.Contains(page, `id="unique-key"`) || !strings.Contains(page, "digest:&lt;ada&gt;") || !strings.Contains(page, "held while pending") {
		t.Fatalf("the page of a task with a key: status %d\n%s", status, page)
	}
	if status, page := c.get("/queues/mail/tasks/b"); status != 200 || strings.Contains(page, `id="unique-key"`) {
		t.Fatalf("the page of a task without a key: status %d\n%s", status, page)
	}
}
