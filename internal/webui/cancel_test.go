package webui

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
)

// TestCancelIsACheckedForm cancels a running task from its page: a form
// carrying a version the task has left is a conflict and changes nothing;
// the current version cancels it, and the page shows it failed, cancelled,
// with no cancel form left.
func TestCancelIsACheckedForm(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	defer store.Close()
	enqueue(t, store, "mail", "a")
	res, err := store.Pop(ctx, core.PopParams{Queue: "mail", Lease: time.Minute, N: 1})
	if err != nil || len(res.Tasks) != 1 {
		t.Fatal(res, err)
	}
	task := res.Tasks[0]
	c := newClient(t, store)
	status, page := c.get("/queues/mail/tasks/a")
	if status != 200 || !strings.Contains(page, `id="cancel"`) {
		t.Fatalf("the page of a running task: status %d\n%s", status, page)
	}
	old := strconv.FormatUint(task.Version-1, 10)
	if status, _ := c.post("/queues/mail/tasks/a/cancel", url.Values{"token": {c.token}, "version": {old}}, c.base); status != 409 {
		t.Fatalf("a cancel of a version the task left: status %d, want 409", status)
	}
	if got, _ := store.Get(ctx, core.GetParams{Queue: "mail", ID: "a"}); got.State != core.Running {
		t.Fatalf("a refused cancel changed the task: %v", got.State)
	}
	cur := strconv.FormatUint(task.Version, 10)
	if status, _ := c.post("/queues/mail/tasks/a/cancel", url.Values{"token": {c.token}, "version": {cur}}, c.base); status != 303 {
		t.Fatalf("cancel: status %d, want 303", status)
	}
	got, err := store.Get(ctx, core.GetParams{Queue: "mail", ID: "a"})
	if err != nil || !got.Cancelled() {
		t.Fatalf("after the cancel: %+v, %v", got, err)
	}
	if _, err := store.Ack(ctx, core.AckParams{Claim: task.Claim()}); !errors.Is(err, core.ErrCancelled) {
		t.Fatalf("the worker's ack after the cancel: %v", err)
	}
	status, page = c.get("/queues/mail/tasks/a?done=cancel")
	if status != 200 || !strings.Contains(page, "Cancelled: the task failed") || strings.Contains(page, `id="cancel"`) || !strings.Contains(page, "<td>cancelled</td>") {
		t.Fatalf("the page of the cancelled task: status %d\n%s", status, page)
	}
}
