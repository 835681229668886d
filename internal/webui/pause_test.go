package webui

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
)

// TestPauseAndResumeAreCheckedForms pauses and resumes a queue from its
// page: a form without the token or from another origin changes nothing,
// the page and the front page show the paused state, and a worker's Pop
// finds nothing until the Resume.
func TestPauseAndResumeAreCheckedForms(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	defer store.Close()
	enqueue(t, store, "mail", "a")
	c := newClient(t, store)
	paused := func() bool {
		t.Helper()
		n, err := store.Counts(ctx, core.CountsParams{Queue: "mail"})
		if err != nil {
			t.Fatal(err)
		}
		return n.Paused
	}

	status, page := c.get("/queues/mail")
	if status != 200 || !strings.Contains(page, `id="pause"`) || strings.Contains(page, `id="paused"`) {
		t.Fatalf("the page of a running queue: status %d\n%s", status, page)
	}
	if status, _ := c.post("/queues/mail/pause", url.Values{}, ""); status != 403 || paused() {
		t.Fatalf("a pause without the token: status %d, paused %v", status, paused())
	}
	if status, _ := c.post("/queues/mail/pause", url.Values{"token": {c.token}}, "https://elsewhere.example"); status != 403 || paused() {
		t.Fatalf("a pause from another origin: status %d, paused %v", status, paused())
	}
	status, _ = c.post("/queues/mail/pause", url.Values{"token": {c.token}}, c.base)
	if status != 303 || !paused() {
		t.Fatalf("pause: status %d, paused %v", status, paused())
	}
	if res, err := store.Pop(ctx, core.PopParams{Queue: "mail", Lease: time.Minute, N: 1}); err != nil || len(res.Tasks) != 0 {
		t.Fatalf("a Pop of the paused queue: %d tasks, %v", len(res.Tasks), err)
	}
	status, page = c.get("/queues/mail?done=paused")
	if status != 200 || !strings.Contains(page, `id="paused"`) || !strings.Contains(page, `id="resume"`) || !strings.Contains(page, "Paused: workers claim none") {
		t.Fatalf("the page of a paused queue: status %d\n%s", status, page)
	}
	if _, front := c.get("/"); !strings.Contains(front, `<span class="paused">paused</span>`) {
		t.Errorf("the front page does not show the queue paused\n%s", front)
	}

	status, _ = c.post("/queues/mail/resume", url.Values{"token": {c.token}}, c.base)
	if status != 303 || paused() {
		t.Fatalf("resume: status %d, paused %v", status, paused())
	}
	if res, err := store.Pop(ctx, core.PopParams{Queue: "mail", Lease: time.Minute, N: 1}); err != nil || len(res.Tasks) != 1 {
		t.Fatalf("a Pop of the resumed queue: %d tasks, %v", len(res.Tasks), err)
	}
	if status, _ := c.post("/queues/bad%20name/pause", url.Values{"token": {c.token}}, c.base); status != 400 {
		t.Errorf("a pause of a queue whose name is not valid: status %d, want 400", status)
	}
}
