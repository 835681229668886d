// Package webui is the web inspector `leasehold ui` serves: a store's queues
// with their counts by state, each queue's tasks by state a page at a time,
// and a task's page with its claim and its error history, from which an
// operator requeues or removes the task. A queue's page shows whether the
// queue is paused and pauses or resumes it.
//
// Pages are rendered on the server with html/template; there is no script.
// Every action is a POST form that carries the task's version as the page
// showed it, sent to the store as the action's expected version
// (core.InspectParams.Expect): if the task changed since the page was
// loaded, the store refuses the action with ErrConflict, nothing changes,
// and the page says so and shows the task as it is now. Forms carry a
// per-process secret token, which must also come back in a SameSite=Strict
// cookie, and a POST whose Origin is not the server's own is refused, so
// another site cannot make an operator's browser act. No GET changes
// anything. Pause and Resume are POST forms too, with the same token and
// origin checks; they carry no version (both are idempotent).
package webui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

//go:embed templates/*.html
var templateFS embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"stamp":     stamp,
	"queuePath": queuePath,
	"taskPath":  taskPath,
	"bytes":     showBytes,
}).ParseFS(templateFS, "templates/*.html"))

// PageSize is the number of tasks a list page shows unless ?limit= says
// otherwise (at most core.MaxBatch).
const PageSize = 50

// cookieName is the name of the cookie that carries the form token.
const cookieName = "leasehold_csrf"

// Server is the inspector's http.Handler.
type Server struct {
	store core.Store
	token string
	mux   *http.ServeMux
	// Timeout bounds each request's store calls.
	timeout time.Duration
}

// New returns the inspector of store, with a fresh secret form token.
func New(store core.Store) (*Server, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", core.ErrInvalidArgument)
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	s := &Server{store: store, token: hex.EncodeToString(b[:]), mux: http.NewServeMux(), timeout: 10 * time.Second}
	s.mux.HandleFunc("GET /{$}", s.queues)
	s.mux.HandleFunc("GET /queues/{queue}", s.list)
	s.mux.HandleFunc("GET /queues/{queue}/tasks/{id}", s.task)
	s.mux.HandleFunc("POST /queues/{queue}/tasks/{id}/{action}", s.act)
	s.mux.HandleFunc("POST /queues/{queue}/pause", s.pause)
	s.mux.HandleFunc("POST /queues/{queue}/resume", s.pause)
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	s.mux.ServeHTTP(w, r)
}

// base is what every page shows.
type base struct {
	Title string
	// Token is the form token, for the hidden field of every form.
	Token string
	// Notice and Problem are messages at the top of the page.
	Notice, Problem string
}

// queueRow is one queue on the front page.
type queueRow struct {
	Name   string
	Counts []stateCount
	Total  int
	Paused bool
	Err    string
}

// stateCount is the number of tasks in one state.
type stateCount struct {
	State model.State
	N     int
}

func counts(c core.Counts) []stateCount {
	out := make([]stateCount, 0, len(model.States))
	for _, st := range model.States {
		out = append(out, stateCount{st, c.Of(st)})
	}
	return out
}

type queuesPage struct {
	base
	States  []model.State
	Queues  []queueRow
	Listed  bool // the store can list its queues
	Queried string
}

func (s *Server) queues(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	p := queuesPage{base: s.base("queues", r), States: model.States}
	var names []string
	if ql, ok := s.store.(core.QueueLister); ok {
		p.Listed = true
		var err error
		if names, err = ql.Queues(ctx); err != nil {
			s.fail(w, err)
			return
		}
	}
	if q := r.URL.Query().Get("queue"); q != "" {
		if err := core.ValidateQueueName(q); err != nil {
			p.Problem = err.Error()
		} else {
			http.Redirect(w, r, queuePath(q, ""), http.StatusSeeOther)
			return
		}
	}
	for _, n := range names {
		row := queueRow{Name: n}
		c, err := s.store.Counts(ctx, core.CountsParams{Queue: n})
		if err != nil {
			row.Err = err.Error()
		} else {
			row.Counts, row.Total, row.Paused = counts(c), c.Total(), c.Paused
		}
		p.Queues = append(p.Queues, row)
	}
	s.render(w, http.StatusOK, "queues.html", p)
}

type listPage struct {
	base
	Queue  string
	State  model.State
	Paused bool
	Counts []stateCount
	Tasks  []model.Task
	After  string
	Next   string
	Limit  int
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	queue := r.PathValue("queue")
	if err := core.ValidateQueueName(queue); err != nil {
		s.fail(w, err)
		return
	}
	q := r.URL.Query()
	state := model.Ready
	if v := q.Get("state"); v != "" {
		st, err := model.ParseState(v)
		if err != nil {
			s.fail(w, fmt.Errorf("%w: %v", core.ErrInvalidArgument, err))
			return
		}
		state = st
	}
	limit := PageSize
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > core.MaxBatch {
			s.fail(w, fmt.Errorf("%w: limit %q: want 1..%d", core.ErrInvalidArgument, v, core.MaxBatch))
			return
		}
		limit = n
	}
	c, err := s.store.Counts(ctx, core.CountsParams{Queue: queue})
	if err != nil {
		s.fail(w, err)
		return
	}
	after := q.Get("after")
	page, err := s.store.List(ctx, core.ListParams{Queue: queue, State: state, After: after, Limit: limit})
	if err != nil {
		s.fail(w, err)
		return
	}
	s.render(w, http.StatusOK, "list.html", listPage{
		base: s.base(queue, r), Queue: queue, State: state, Paused: c.Paused, Counts: counts(c),
		Tasks: page.Tasks, After: after, Next: page.Next, Limit: limit,
	})
}

type taskPage struct {
	base
	Queue string
	Task  model.Task
	// CanRequeue is false for a Ready task (the store refuses it).
	CanRequeue bool
	// CanCancel is true for a task that has not finished.
	CanCancel bool
	Gone      bool // the task is not in the store (any more)
}

func (s *Server) task(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	queue, id := r.PathValue("queue"), r.PathValue("id")
	p := s.base("task "+id, r)
	switch r.URL.Query().Get("done") {
	case "requeue":
		p.Notice = "Requeued: the task is ready, with a fresh set of attempts."
	case "cancel":
		p.Notice = "Cancelled: the task failed and will not run; a worker holding it is told at its next heartbeat."
	}
	s.showTask(ctx, w, http.StatusOK, queue, id, p)
}

func (s *Server) showTask(ctx context.Context, w http.ResponseWriter, status int, queue, id string, b base) {
	t, err := s.store.Get(ctx, core.GetParams{Queue: queue, ID: id})
	if errors.Is(err, core.ErrNotFound) {
		s.render(w, http.StatusNotFound, "task.html", taskPage{base: b, Queue: queue, Task: model.Task{ID: id}, Gone: true})
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	s.render(w, status, "task.html", taskPage{base: b, Queue: queue, Task: t, CanRequeue: t.State != model.Ready,
		CanCancel: t.State == model.Scheduled || t.State == model.Ready || t.State == model.Running})
}

// checkForm checks what every form's POST must carry: the page's origin, a
// form of reasonable size and the page's token. It answers a refusal itself
// and reports false.
func (s *Server) checkForm(w http.ResponseWriter, r *http.Request) bool {
	if !s.sameOrigin(r) {
		http.Error(w, "refused: the request comes from another site", http.StatusForbidden)
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, 1<<14)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return false
	}
	if !s.validToken(r) {
		http.Error(w, "refused: the form's token is missing or out of date; load the page again", http.StatusForbidden)
		return false
	}
	return true
}

// act performs an operator's action, conditional on the version the page
// showed.
func (s *Server) act(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	if !s.checkForm(w, r) {
		return
	}
	queue, id, action := r.PathValue("queue"), r.PathValue("id"), r.PathValue("action")
	version, err := strconv.ParseUint(r.PostFormValue("version"), 10, 64)
	if err != nil || version == 0 {
		http.Error(w, "refused: the form carries no version of the task", http.StatusBadRequest)
		return
	}
	p := core.InspectParams{Queue: queue, ID: id, Expect: version}
	b := s.base("task "+id, r)
	switch action {
	case "requeue":
		_, err = s.store.InspectRequeue(ctx, p)
		if err == nil {
			http.Redirect(w, r, taskPath(queue, id)+"?done=requeue", http.StatusSeeOther)
			return
		}
	case "cancel":
		_, err = s.store.Cancel(ctx, p)
		if err == nil {
			http.Redirect(w, r, taskPath(queue, id)+"?done=cancel", http.StatusSeeOther)
			return
		}
	case "remove":
		var res core.TaskResult
		res, err = s.store.Remove(ctx, p)
		if err == nil {
			http.Redirect(w, r, queuePath(queue, res.Task.State.String())+"&removed="+url.QueryEscape(id), http.StatusSeeOther)
			return
		}
	default:
		http.Error(w, "unknown action "+strconv.Quote(action), http.StatusNotFound)
		return
	}
	switch {
	case errors.Is(err, core.ErrConflict):
		b.Problem = fmt.Sprintf("Not done: the task changed after you loaded the page (you saw version %d). Nothing was changed. Here it is as it is now; act again if you still mean to.", version)
		s.showTask(ctx, w, http.StatusConflict, queue, id, b)
	case errors.Is(err, core.ErrNotFound):
		b.Problem = "Not done: the task is no longer in the store."
		s.showTask(ctx, w, http.StatusNotFound, queue, id, b)
	case errors.Is(err, core.ErrInvalidTransition):
		b.Problem = "Not done: " + err.Error() + ". Nothing was changed."
		s.showTask(ctx, w, http.StatusConflict, queue, id, b)
	default:
		s.fail(w, err)
	}
}

// pause pauses or resumes a queue (the last segment of the path says
// which), then shows the queue's page.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	if !s.checkForm(w, r) {
		return
	}
	queue := r.PathValue("queue")
	ins, err := core.NewInspector(s.store, queue)
	if err != nil {
		s.fail(w, err)
		return
	}
	done := "resumed"
	if strings.HasSuffix(r.URL.Path, "/pause") {
		done = "paused"
		_, err = ins.Pause(ctx)
	} else {
		_, err = ins.Resume(ctx)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	http.Redirect(w, r, queuePath(queue, "")+"?done="+done, http.StatusSeeOther)
}

// sameOrigin reports whether a POST comes from a page of this server: its
// Origin (or, without one, its Referer) names the request's host. A request
// with neither is let through to the token check (some clients send none).
func (s *Server) sameOrigin(r *http.Request) bool {
	src := r.Header.Get("Origin")
	if src == "" {
		src = r.Header.Get("Referer")
	}
	if src == "" {
		return true
	}
	u, err := url.Parse(src)
	return err == nil && u.Host == r.Host
}

// validToken reports whether the form and the cookie both carry the token.
func (s *Server) validToken(r *http.Request) bool {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return false
	}
	f := r.PostFormValue("token")
	return subtle.ConstantTimeCompare([]byte(f), []byte(s.token)) == 1 &&
		subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.token)) == 1
}

func (s *Server) base(title string, r *http.Request) base {
	b := base{Title: title, Token: s.token}
	if id := r.URL.Query().Get("removed"); id != "" {
		b.Notice = "Removed task " + id + "."
	}
	switch r.URL.Query().Get("done") {
	case "paused":
		b.Notice = "Paused: workers claim none of this queue's tasks until you resume it. Running tasks go on."
	case "resumed":
		b.Notice = "Resumed: workers claim this queue's tasks again."
	}
	return b
}

func (s *Server) render(w http.ResponseWriter, status int, name string, data any) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var b strings.Builder
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		http.Error(w, "render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	io.WriteString(w, b.String())
}

// fail answers a request whose store call failed.
func (s *Server) fail(w http.ResponseWriter, err error) {
	status := http.StatusBadGateway // the store could not be reached or failed
	switch {
	case errors.Is(err, core.ErrInvalidArgument):
		status = http.StatusBadRequest
	case errors.Is(err, core.ErrNotFound):
		status = http.StatusNotFound
	}
	s.render(w, status, "error.html", struct {
		base
		Status int
		Err    string
	}{base{Title: "error", Token: s.token}, status, err.Error()})
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000000Z")
}

func queuePath(queue, state string) string {
	p := "/queues/" + url.PathEscape(queue)
	if state != "" {
		p += "?state=" + url.QueryEscape(state)
	}
	return p
}

func taskPath(queue, id string) string {
	return "/queues/" + url.PathEscape(queue) + "/tasks/" + url.PathEscape(id)
}

// showBytes shows a payload or result: as text when it is short UTF-8,
// else its length and its first bytes in hex.
func showBytes(b []byte) string {
	const most = 2048
	switch {
	case len(b) == 0:
		return "–"
	case utf8.Valid(b) && len(b) <= most:
		return string(b)
	case utf8.Valid(b):
		return string(b[:most]) + fmt.Sprintf("… (%d bytes)", len(b))
	}
	n := min(len(b), 64)
	return fmt.Sprintf("%d bytes: %x…", len(b), b[:n])
}
