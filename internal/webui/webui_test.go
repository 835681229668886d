package webui

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

func enqueue(t testing.TB, s core.Store, queue, id string) core.Task {
	t.Helper()
	res, err := s.Enqueue(context.Background(), core.EnqueueParams{Queue: queue, EnqueueArgs: model.EnqueueArgs{ID: id, Payload: []byte("payload " + id), MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	return res.Task
}

// client is a browser of the inspector: it keeps the cookie and reads the
// form token from the pages.
type client struct {
	t     *testing.T
	base  string
	http  *http.Client
	token string
}

func newClient(t *testing.T, store core.Store) *client {
	t.Helper()
	srv, err := New(store)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	c := ts.Client()
	jar := &jar{}
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &client{t: t, base: ts.URL, http: c}
}

type jar struct{ cookies []*http.Cookie }

func (j *jar) SetCookies(_ *url.URL, cs []*http.Cookie) { j.cookies = cs }
func (j *jar) Cookies(*url.URL) []*http.Cookie          { return j.cookies }

var tokenField = regexp.MustCompile(`name="token" value="([0-9a-f]+)"`)

func (c *client) get(path string) (int, string) {
	c.t.Helper()
	res, err := c.http.Get(c.base + path)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if m := tokenField.FindSubmatch(b); m != nil {
		c.token = string(m[1])
	}
	return res.StatusCode, string(b)
}

func (c *client) post(path string, form url.Values, origin string) (int, string) {
	c.t.Helper()
	req, _ := http.NewRequest("POST", c.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	res, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestTheQueuesPageCountsEachState(t *testing.T) {
	store := memory.New()
	defer store.Close()
	enqueue(t, store, "mail", "a")
	enqueue(t, store, "mail", "b")
	enqueue(t, store, "jobs", "c")
	if _, err := store.Pop(context.Background(), core.PopParams{Queue: "mail", Lease: time.Minute, N: 1}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, store)
	status, page := c.get("/")
	if status != 200 {
		t.Fatalf("status %d\n%s", status, page)
	}
	// jobs before mail; mail: 0 scheduled, 1 ready, 1 running.
	rows := regexp.MustCompile(`(?s)<tr><td><a href="/queues/(\w+)">.*?</tr>`).FindAllStringSubmatch(page, -1)
	if len(rows) != 2 || rows[0][1] != "jobs" || rows[1][1] != "mail" {
		t.Fatalf("rows %q", rows)
	}
	cells := regexp.MustCompile(`<td class="n">(?:<a [^>]*>)?(\d+)`).FindAllStringSubmatch(rows[1][0], -1)
	var got []string
	for _, m := range cells {
		got = append(got, m[1])
	}
	if strings.Join(got, " ") != "0 1 1 0 0 2" {
		t.Errorf("mail's counts %v, want 0 1 1 0 0 2", got)
	}
}

func TestTheListPagesThroughAState(t *testing.T) {
	store := memory.New()
	defer store.Close()
	for i := range 7 {
		enqueue(t, store, "q", fmt.Sprintf("t%02d", i))
	}
	c := newClient(t, store)
	var seen []string
	path := "/queues/q?state=ready&limit=3"
	for pages := 0; path != ""; pages++ {
		if pages > 5 {
			t.Fatal("the pages do not end")
		}
		status, page := c.get(path)
		if status != 200 {
			t.Fatalf("%s: status %d", path, status)
		}
		for _, m := range regexp.MustCompile(`<td><a href="/queues/q/tasks/(t\d+)">`).FindAllStringSubmatch(page, -1) {
			seen = append(seen, m[1])
		}
		path = ""
		if m := regexp.MustCompile(`id="next" href="([^"]+)"`).FindStringSubmatch(page); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if strings.Join(seen, " ") != "t00 t01 t02 t03 t04 t05 t06" {
		t.Errorf("pages showed %v", seen)
	}
	if status, _ := c.get("/queues/q?state=sideways"); status != 400 {
		t.Errorf("an unknown state: status %d, want 400", status)
	}
	if status, page := c.get("/queues/q?state=running"); status != 200 || !strings.Contains(page, "No running tasks") {
		t.Errorf("an empty state: status %d\n%s", status, page)
	}
}

func TestARequeueCarriesTheVersionThePageShowed(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	defer store.Close()
	enqueue(t, store, "q", "a")
	pop, err := store.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, store)
	status, page := c.get("/queues/q/tasks/a")
	if status != 200 || !strings.Contains(page, `id="requeue"`) || c.token == "" {
		t.Fatalf("task page: status %d\n%s", status, page)
	}
	shown := pop.Tasks[0].Version
	// The worker extends its lease after the page was loaded.
	ext, err := store.Extend(ctx, core.ExtendParams{Claim: core.Claim{Queue: "q", TaskID: "a", Token: pop.Tasks[0].ClaimToken}, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"token": {c.token}, "version": {fmt.Sprint(shown)}}
	status, page = c.post("/queues/q/tasks/a/requeue", form, c.base)
	if status != http.StatusConflict || !strings.Contains(page, "changed after you loaded the page") {
		t.Fatalf("stale requeue: status %d\n%s", status, page)
	}
	if now, _ := store.Get(ctx, core.GetParams{Queue: "q", ID: "a"}); now.Version != ext.Task.Version || now.State != model.Running {
		t.Fatalf("a refused requeue changed the task: %+v", now)
	}
	// The conflict page shows the task as it is now: acting from it works.
	if !strings.Contains(page, fmt.Sprintf(`name="version" value="%d"`, ext.Task.Version)) {
		t.Fatalf("the conflict page does not carry the current version\n%s", page)
	}
	form.Set("version", fmt.Sprint(ext.Task.Version))
	if status, _ := c.post("/queues/q/tasks/a/requeue", form, c.base); status != http.StatusSeeOther {
		t.Fatalf("requeue at the current version: status %d", status)
	}
	if now, _ := store.Get(ctx, core.GetParams{Queue: "q", ID: "a"}); now.State != model.Ready {
		t.Errorf("after the requeue the task is %v", now.State)
	}
	// Remove, at a stale and then the current version.
	cur, _ := store.Get(ctx, core.GetParams{Queue: "q", ID: "a"})
	form.Set("version", fmt.Sprint(cur.Version-1))
	if status, _ := c.post("/queues/q/tasks/a/remove", form, ""); status != http.StatusConflict {
		t.Errorf("stale remove: status %d", status)
	}
	form.Set("version", fmt.Sprint(cur.Version))
	if status, _ := c.post("/queues/q/tasks/a/remove", form, ""); status != http.StatusSeeOther {
		t.Errorf("remove: status %d", status)
	}
	if _, err := store.Get(ctx, core.GetParams{Queue: "q", ID: "a"}); err == nil {
		t.Error("the task is still there")
	}
}

func TestActionsNeedTheTokenTheOriginAndAPost(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	defer store.Close()
	task := enqueue(t, store, "q", "a")
	if _, err := store.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1}); err != nil {
		t.Fatal(err)
	}
	task, _ = store.Get(ctx, core.GetParams{Queue: "q", ID: "a"})
	c := newClient(t, store)
	c.get("/queues/q/tasks/a")
	v := fmt.Sprint(task.Version)
	for _, tc := range []struct {
		name   string
		form   url.Values
		origin string
		want   int
	}{
		{"no token", url.Values{"version": {v}}, "", http.StatusForbidden},
		{"a wrong token", url.Values{"version": {v}, "token": {strings.Repeat("0", 32)}}, "", http.StatusForbidden},
		{"another site", url.Values{"version": {v}, "token": {c.token}}, "http://evil.example", http.StatusForbidden},
		{"no version", url.Values{"token": {c.token}}, "", http.StatusBadRequest},
		{"version 0", url.Values{"token": {c.token}, "version": {"0"}}, "", http.StatusBadRequest},
	} {
		if status, _ := c.post("/queues/q/tasks/a/requeue", tc.form, tc.origin); status != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, status, tc.want)
		}
	}
	// Without the cookie the token alone does not do.
	bare := &http.Client{CheckRedirect: c.http.CheckRedirect}
	res, err := bare.PostForm(c.base+"/queues/q/tasks/a/requeue", url.Values{"version": {v}, "token": {c.token}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("no cookie: status %d", res.StatusCode)
	}
	if status, _ := c.get("/queues/q/tasks/a/requeue"); status != http.StatusMethodNotAllowed {
		t.Errorf("GET of an action: status %d, want 405", status)
	}
	if now, _ := store.Get(ctx, core.GetParams{Queue: "q", ID: "a"}); now.Version != task.Version {
		t.Errorf("a refused action changed the task: %+v", now)
	}
}

func TestATaskPageShowsTheClaimAndTheErrors(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	defer store.Close()
	enqueue(t, store, "q", "a<b>")
	pop, _ := store.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	claim := core.Claim{Queue: "q", TaskID: "a<b>", Token: pop.Tasks[0].ClaimToken, Attempt: 1}
	if _, err := store.Retry(ctx, core.RetryParams{Claim: claim, Message: "disk <full>"}); err != nil {
		t.Fatal(err)
	}
	pop, _ = store.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	c := newClient(t, store)
	status, page := c.get("/queues/q/tasks/" + url.PathEscape("a<b>"))
	if status != 200 {
		t.Fatalf("status %d\n%s", status, page)
	}
	for _, want := range []string{"Task a&lt;b&gt;", "disk &lt;full&gt;", "handler", fmt.Sprintf("<dt>token</dt><dd>%d</dd>", pop.Tasks[0].ClaimToken)} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if status, _ := c.get("/queues/q/tasks/nope"); status != 404 {
		t.Errorf("a missing task: status %d", status)
	}
}

// The task page shows the attempt timeout stored with the task, and says
// when there is none.
func TestTheTaskPageShowsTheAttemptTimeout(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	defer store.Close()
	if _, err := store.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "slow", MaxAttempts: 1, Timeout: 90 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, store, "q", "plain")
	c := newClient(t, store)
	if status, page := c.get("/queues/q/tasks/slow"); status != 200 || !strings.Contains(page, `<dd id="timeout">1m30s</dd>`) {
		t.Errorf("task page of slow: status %d, want its timeout 1m30s\n%s", status, page)
	}
	if status, page := c.get("/queues/q/tasks/plain"); status != 200 || !strings.Contains(page, `<dd id="timeout"><span class="muted">none`) {
		t.Errorf("task page of plain: status %d, want no timeout\n%s", status, page)
	}
}
