// Package browser drives headless Chromium (through chromedp) against the
// pages people read: the check report of a violating history and the web
// inspector's task page. It is a module of its own, so the library's
// go.mod does not carry chromedp.
//
// Chromium is /usr/bin/chromium, or the program LEASEHOLD_CHROMIUM names.
// Without it the tests skip, except in CI (CI=true), where they fail.
// With LEASEHOLD_SCREENSHOTS=FOLDER they save report.png and
// inspector-task.png there (the README's pictures: run
// `LEASEHOLD_SCREENSHOTS=../../docs/img go test .` in this folder).
package browser

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/webui"
	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/linearizability/report"
	"github.com/leasehold/leasehold/model"
)

// chromium returns the browser's path, or skips (fails in CI) without one.
func chromium(t *testing.T) string {
	t.Helper()
	path := os.Getenv("LEASEHOLD_CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		if p, lerr := exec.LookPath("chromium"); lerr == nil {
			return p
		}
		msg := "no Chromium at " + path + " (" + err.Error() + "): install it (apt-get install chromium) or set LEASEHOLD_CHROMIUM"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// browser starts a headless Chromium with a fresh profile and returns a
// tab's context, ended with the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile(t)),
		chromedp.WindowSize(1200, 1100),
	)
	// The timeout bounds the whole browser, so a hang fails the test.
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTime(); cancelTab(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // start the browser
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// profile returns a fresh user-data-dir, removed after the test (Chromium's
// helpers may still write into it for a moment after it stops).
func profile(t *testing.T) string {
	dir, err := os.MkdirTemp("", "leasehold-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for range 50 {
			if os.RemoveAll(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return dir
}

// screenshot saves the viewport as name in LEASEHOLD_SCREENSHOTS, if set.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("LEASEHOLD_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %s", filepath.Join(dir, name))
}

// The report of a violating history: the lease-expiry-off-by-one mutant's
// (see linearizability/report/testdata/README.md for how it was made).
func TestTheReportShowsLanesSummaryAndTheRefusedStep(t *testing.T) {
	h, err := linearizability.LoadHistory("../../linearizability/report/testdata/lease-expiry-off-by-one.json")
	if err != nil {
		t.Fatal(err)
	}
	v := linearizability.Check(h, 10*time.Second)
	dir := t.TempDir()
	path := filepath.Join(dir, "report.html")
	if err := report.Write(path, h, v, report.Options{Porcupine: "history.html"}); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate("file://"+path),
		chromedp.WaitVisible(chromedp.CSS("#summary svg")),
		chromedp.WaitVisible(chromedp.ID("refusal")),
	); err != nil {
		t.Fatal(err)
	}
	text := func(sel chromedp.CSS) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(sel)+`).length`))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return n
	}
	want := report.Build(h, v, report.Options{})
	lanes, marks := 0, 0
	for _, q := range want.Queues {
		lanes += len(q.Lanes)
		for _, l := range q.Lanes {
			marks += len(l.Marks)
		}
	}
	if v := text("#verdict"); v != "Illegal" {
		t.Errorf("verdict %q, want Illegal", v)
	}
	if l, m := count("g.lane"), count("circle.mark"); l != lanes || m != marks || l < 2 {
		t.Errorf("%d lanes and %d marks drawn, want %d and %d", l, m, lanes, marks)
	}
	if n := count("g.lane rect.claim"); n < 1 {
		t.Errorf("%d claims drawn", n)
	}
	if n := count("#summary svg g"); n != 5 {
		t.Errorf("%d bars in the summary chart, want 5", n)
	}
	refusal, model := text("#refusal"), text("#refusal pre.model")
	if !strings.Contains(refusal, "ClaimExpired") || !strings.Contains(model, "claim t1") {
		t.Errorf("the refusal shows %q; the model's answer %q", refusal, model)
	}
	// The highlighted mark is on a lane, where a person sees it.
	if n := count("g.lane circle.hit"); n != 1 {
		t.Errorf("%d highlighted marks on the lanes, want 1", n)
	}
	if err := chromedp.Do(ctx, chromedp.ScrollIntoView(chromedp.ID("refusal"))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.scrollBy(0, -300); 0`)); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "report.png")
}

// The inspector's requeue of a task that changed after its page was loaded
// is refused, says so, and changes nothing; from the page it then shows,
// the requeue goes through.
func TestTheInspectorRefusesARequeueOfATaskThatChanged(t *testing.T) {
	bg := context.Background()
	store := memory.New()
	defer store.Close()
	if _, err := store.Enqueue(bg, core.EnqueueParams{Queue: "invoices", EnqueueArgs: model.EnqueueArgs{ID: "invoice-42", Payload: []byte(`{"customer":"ada","amount":1200}`), MaxAttempts: 3}}); err != nil {
		t.Fatal(err)
	}
	pop, err := store.Pop(bg, core.PopParams{Queue: "invoices", Lease: time.Minute, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	first := pop.Tasks[0]
	if _, err := store.Retry(bg, core.RetryParams{Claim: core.Claim{Queue: "invoices", TaskID: first.ID, Token: first.ClaimToken, Attempt: first.Attempt}, Message: "payment gateway timed out"}); err != nil {
		t.Fatal(err)
	}
	if pop, err = store.Pop(bg, core.PopParams{Queue: "invoices", Lease: time.Minute, N: 1}); err != nil || len(pop.Tasks) != 1 {
		t.Fatal(pop, err)
	}
	claimed := pop.Tasks[0]
	srv, err := webui.New(store)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	ctx := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(ts.URL+"/queues/invoices/tasks/invoice-42"),
		chromedp.WaitVisible(chromedp.ID("requeue")),
	); err != nil {
		t.Fatal(err)
	}
	text := func(id chromedp.ID) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(id))
		if err != nil {
			t.Fatalf("#%s: %v", id, err)
		}
		return strings.TrimSpace(s)
	}
	if shown := text("version"); shown != itoa(claimed.Version) {
		t.Fatalf("the page shows version %s, the task has %d", shown, claimed.Version)
	}
	// Behind the page, the worker extends its lease: a new version.
	ext, err := store.Extend(bg, core.ExtendParams{Claim: core.Claim{Queue: "invoices", TaskID: claimed.ID, Token: claimed.ClaimToken}, Lease: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	click := func(id chromedp.ID) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(id))); err != nil {
			t.Fatalf("click #%s: %v", id, err)
		}
	}
	click("requeue")
	problem := text("problem")
	if !strings.Contains(problem, "changed after you loaded the page") || !strings.Contains(problem, "Nothing was changed") {
		t.Errorf("the page says %q", problem)
	}
	now, err := store.Get(bg, core.GetParams{Queue: "invoices", ID: "invoice-42"})
	if err != nil {
		t.Fatal(err)
	}
	if now.Version != ext.Task.Version || now.State != model.Running || now.ClaimToken != claimed.ClaimToken {
		t.Fatalf("the refused requeue changed the task: %+v", now)
	}
	if state := text("state"); state != "running" {
		t.Errorf("the page shows the task %s, it is running", state)
	}
	screenshot(t, ctx, "inspector-task.png")

	// The page now carries the current version: requeue from it.
	click("requeue")
	notice := text("notice")
	if now, _ := store.Get(bg, core.GetParams{Queue: "invoices", ID: "invoice-42"}); now.State != model.Ready || !strings.HasPrefix(notice, "Requeued") {
		t.Errorf("after the second requeue the task is %v; the page says %q", now.State, notice)
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// The inspector's operator buttons do what they say: Pause on the queue's
// page stops claims (Counts shows the queue paused, a Pop gets nothing)
// until Resume; Cancel on a task's page ends a Ready task and a Running
// one, each then shown failed with the cancellation, and the Running one's
// worker is refused.
func TestTheInspectorPausesResumesAndCancels(t *testing.T) {
	bg := context.Background()
	store := memory.New()
	defer store.Close()
	for _, id := range []string{"mail-1", "mail-2", "mail-3"} {
		if _, err := store.Enqueue(bg, core.EnqueueParams{Queue: "mail", EnqueueArgs: model.EnqueueArgs{ID: id, Payload: []byte(`{"to":"ada"}`), MaxAttempts: 3}}); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := webui.New(store)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	ctx := browser(t)
	text := func(id chromedp.ID) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(id))
		if err != nil {
			t.Fatalf("#%s: %v", id, err)
		}
		return strings.TrimSpace(s)
	}
	click := func(id chromedp.ID) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(id))); err != nil {
			t.Fatalf("click #%s: %v", id, err)
		}
	}
	open := func(path string, id chromedp.ID) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+path), chromedp.WaitVisible(id)); err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
	}
	pop := func() []model.Task {
		t.Helper()
		r, err := store.Pop(bg, core.PopParams{Queue: "mail", Lease: time.Minute, N: 1})
		if err != nil {
			t.Fatal(err)
		}
		return r.Tasks
	}
	counts := func() core.Counts {
		t.Helper()
		c, err := store.Counts(bg, core.CountsParams{Queue: "mail"})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// Pause from the queue's page.
	open("/queues/mail", "pause")
	click("pause")
	if n := text("notice"); !strings.HasPrefix(n, "Paused") {
		t.Errorf("after Pause the page says %q", n)
	}
	if _, err := chromedp.Run(ctx, chromedp.WaitVisible(chromedp.ID("resume"))); err != nil {
		t.Fatalf("no Resume button on the paused queue's page: %v", err)
	}
	if c := counts(); !c.Paused || c.Ready != 3 {
		t.Errorf("after Pause, Counts = %+v, want paused with 3 ready", c)
	}
	if got := pop(); len(got) != 0 {
		t.Fatalf("a Pop of the paused queue claimed %v", got[0].ID)
	}
	open("/", "queues")
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#queues span.paused").length`)); err != nil || n != 1 {
		t.Errorf("the queues page marks %d queues paused (%v), want 1", n, err)
	}

	// Resume, and a worker claims again.
	open("/queues/mail", "resume")
	click("resume")
	if n := text("notice"); !strings.HasPrefix(n, "Resumed") {
		t.Errorf("after Resume the page says %q", n)
	}
	if c := counts(); c.Paused {
		t.Errorf("after Resume, Counts = %+v", c)
	}
	claimed := pop()
	if len(claimed) != 1 {
		t.Fatalf("a Pop after Resume claimed %d tasks", len(claimed))
	}
	running := claimed[0]

	// Cancel a Ready task and the Running one from their pages.
	ready := "mail-3"
	if running.ID == ready {
		ready = "mail-2"
	}
	for _, id := range []string{ready, running.ID} {
		open("/queues/mail/tasks/"+id, "cancel")
		click("cancel")
		if n := text("notice"); !strings.HasPrefix(n, "Cancelled") {
			t.Errorf("after cancelling %s the page says %q", id, n)
		}
		if s := text("state"); s != "failed" {
			t.Errorf("the page shows cancelled %s %s, want failed", id, s)
		}
		if e := text("errors"); !strings.Contains(e, "cancelled") {
			t.Errorf("the errors of cancelled %s read %q", id, e)
		}
		task, err := store.Get(bg, core.GetParams{Queue: "mail", ID: id})
		if err != nil || task.State != model.Failed {
			t.Errorf("cancelled %s is %v (%v)", id, task.State, err)
		}
	}
	_, err = store.Ack(bg, core.AckParams{Claim: running.Claim(), Result: []byte("sent")})
	if !errors.Is(err, core.ErrCancelled) {
		t.Errorf("the worker's Ack of the cancelled task: %v, want ErrCancelled", err)
	}
}
