package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/linearizability/backends"
	"github.com/leasehold/leasehold/model"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func runCmd(t *testing.T, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	status = run(args, &o, &e)
	return status, o.String(), e.String()
}

// checkTimeout is the --check-timeout of the tests that check many
// histories of the memory adapter: a verdict, not a timeout, is what they test.
const checkTimeout = "2m"

func TestCheckRunsTheMemoryAdapterAndSummarises(t *testing.T) {
	out := t.TempDir()
	// History 9 (seed 16) takes about 4 s to check on its own without the
	// race detector; under it, beside the other histories, more than the
	// default 10 s, and an Unknown verdict counts as a violation.
	status, stdout, stderr := runCmd(t, "check", "--histories", "200", "--seed", "7", "--progress", "lines", "--out", out, "--check-timeout", checkTimeout)
	if status != 0 {
		t.Fatalf("status %d\n%s\n%s", status, stdout, stderr)
	}
	for _, want := range []string{"seed 7", "adapter", "memory", "what was checked (memory)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "memory: 200 histories") {
		t.Errorf("the progress lines do not end with the total:\n%s", stderr)
	}
	html, err := os.ReadFile(filepath.Join(out, "example-memory.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(html, []byte("Enqueue(")) {
		t.Error("the example visualization shows no Enqueue")
	}
}

func TestCheckRunsRedis(t *testing.T) {
	url := redistest.URL(t)
	status, stdout, stderr := runCmd(t, "check", "--redis", url, "--memory", "--histories", "40", "--progress", "none", "--out", t.TempDir())
	if status != 0 {
		t.Fatalf("status %d\n%s\n%s", status, stdout, stderr)
	}
	for _, want := range []string{"memory", "redis"} {
		if !strings.Contains(stdout, "  "+want+"  ") && !strings.Contains(stdout, " "+want+" ") {
			t.Errorf("no %s row in the summary:\n%s", want, stdout)
		}
	}
}

func TestCheckRunsSQLiteWithBothPops(t *testing.T) {
	dir := t.TempDir()
	status, stdout, stderr := runCmd(t, "check", "--sqlite", dir, "--histories", "3", "--progress", "none", "--out", t.TempDir())
	if status != 0 {
		t.Fatalf("status %d\n%s\n%s", status, stdout, stderr)
	}
	for _, want := range []string{"sqlite-returning", "sqlite-select-update"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %s row in the summary:\n%s", want, stdout)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) > 0 {
		t.Errorf("databases left behind: %v", left)
	}
}

func TestInspectShowsASQLiteQueue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tasks.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(context.Background(), core.EnqueueParams{Queue: "jobs", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1, Timeout: 90 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	status, stdout, stderr := runCmd(t, "inspect", "--sqlite", path, "--queue", "jobs", "list", "ready")
	if status != 0 || !strings.Contains(stdout, "a   ready") {
		t.Errorf("list ready: status %d\n%s\n%s", status, stdout, stderr)
	}
	status, stdout, stderr = runCmd(t, "inspect", "--sqlite", path, "--queue", "jobs", "get", "a")
	if status != 0 || !regexp.MustCompile(`(?m)^timeout +1m30s$`).MatchString(stdout) {
		t.Errorf("get: status %d, want the timeout 1m30s\n%s\n%s", status, stdout, stderr)
	}
	status, stdout, stderr = runCmd(t, "inspect", "--sqlite", path, "--queue", "jobs", "--json", "get", "a")
	if status != 0 || !strings.Contains(stdout, `"Timeout": 90000000000,`) {
		t.Errorf("get --json: status %d, want the timeout in ns\n%s\n%s", status, stdout, stderr)
	}
	status, stdout, stderr = runCmd(t, "inspect", "--sqlite", path, "queues")
	if status != 0 || stdout != "jobs\n" {
		t.Errorf("queues: status %d\n%q\n%s", status, stdout, stderr)
	}
	missing := filepath.Join(t.TempDir(), "none.db")
	if status, _, _ := runCmd(t, "inspect", "--sqlite", missing, "counts"); status != 2 {
		t.Errorf("a missing database: status %d, want 2", status)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("inspect created the database it was to look into")
	}
}

// savedHistory runs one plan on the memory adapter and saves its history;
// spoil, when set, changes an answer first.
func savedHistory(t *testing.T, spoil bool) string {
	t.Helper()
	gen := linearizability.Plans(linearizability.PlanOptions{Mode: linearizability.FakeTime})
	for seed := 0; ; seed++ {
		plan := gen.Example(seed)
		h, err := linearizability.Execute(context.Background(), plan, backends.Memory())
		if err != nil {
			t.Fatal(err)
		}
		h.Adapter = "memory"
		popped := -1
		for i, op := range h.Operations {
			if op.Input.Op == model.OpPop && len(op.Output.Tasks) > 0 {
				popped = i
				break
			}
		}
		if popped < 0 {
			continue
		}
		if spoil { // the pop hands out a token the model never would
			h.Operations[popped].Output.Tasks[0].ClaimToken += 100
		}
		dir, err := linearizability.SaveFailure(t.TempDir(), h, plan, linearizability.Check(h, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, "history.json")
	}
}

func TestReplayChecksASavedHistoryAgain(t *testing.T) {
	good := savedHistory(t, false)
	status, stdout, stderr := runCmd(t, "check", "--replay", good)
	if status != 0 || !strings.Contains(stdout, ": Ok") {
		t.Errorf("good history: status %d\n%s\n%s", status, stdout, stderr)
	}
	bad := savedHistory(t, true)
	status, stdout, stderr = runCmd(t, "check", "--replay", bad)
	if status != 1 || !strings.Contains(stdout, ": Illegal") {
		t.Errorf("spoilt history: status %d\n%s\n%s", status, stdout, stderr)
	}
	if _, err := os.Stat(strings.TrimSuffix(bad, ".json") + "-replay.html"); err != nil {
		t.Error(err)
	}
	if b, err := os.ReadFile(strings.TrimSuffix(bad, ".json") + "-replay-report.html"); err != nil || !bytes.Contains(b, []byte(`class="refusal"`)) {
		t.Errorf("the replay's report shows no refusal (%v)", err)
	}
}

func TestBadUsageExitsWithTwo(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"check", "--mode", "sideways"},
		{"check", "--histories", "-1"},
		{"check", "stray"},
		{"check", "--replay", filepath.Join(t.TempDir(), "missing.json")},
		{"inspect", "counts"},
		{"inspect", "--sqlite", "x.db", "queues", "extra"},
		// Nothing listens on port 1: a store that cannot be reached.
		{"inspect", "--redis", "redis://127.0.0.1:1/0", "counts"},
	} {
		if status, _, _ := runCmd(t, args...); status != 2 {
			t.Errorf("%q: status %d, want 2", args, status)
		}
	}
}

func TestInspectShowsARedisQueue(t *testing.T) {
	url := redistest.URL(t)
	// A prefix of its own, so a rerun (-count) on the shared server starts
	// from an empty queue.
	prefix := fmt.Sprintf("inspect-test-%d:", time.Now().UnixNano())
	s, err := redis.Open(url, redis.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "jobs", EnqueueArgs: model.EnqueueArgs{ID: id, Payload: []byte("p-" + id), MaxAttempts: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Pop(ctx, core.PopParams{Queue: "jobs", Lease: time.Minute, N: 1}); err != nil {
		t.Fatal(err)
	}
	base := []string{"inspect", "--redis", url, "--prefix", prefix, "--queue", "jobs"}
	status, stdout, stderr := runCmd(t, append(base, "counts")...)
	if status != 0 || !strings.Contains(stdout, "scheduled  ready  running") || !strings.Contains(stdout, "0          1      1") {
		t.Errorf("counts: status %d\n%s\n%s", status, stdout, stderr)
	}
	status, stdout, stderr = runCmd(t, append(base, "list", "ready")...)
	if status != 0 || !strings.Contains(stdout, "b ") || strings.Contains(stdout, "a ") {
		t.Errorf("list ready: status %d\n%s\n%s", status, stdout, stderr)
	}
	status, stdout, stderr = runCmd(t, append(base, "--json", "get", "a")...)
	if status != 0 || !strings.Contains(stdout, `"State": "running"`) {
		t.Errorf("get a: status %d\n%s\n%s", status, stdout, stderr)
	}
	if status, _, _ := runCmd(t, append(base, "get", "zz")...); status != 1 {
		t.Errorf("get of a missing task: status %d, want 1", status)
	}
	if status, _, _ := runCmd(t, append(base, "list", "sideways")...); status != 2 {
		t.Errorf("list of an unknown state: status %d, want 2", status)
	}
	// A second queue, and one of another prefix that must not be listed.
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "mail.out", EnqueueArgs: model.EnqueueArgs{ID: "m", MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	other, err := redis.Open(url, redis.WithPrefix(prefix+"x*"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Enqueue(ctx, core.EnqueueParams{Queue: "elsewhere", EnqueueArgs: model.EnqueueArgs{ID: "e", MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	status, stdout, stderr = runCmd(t, "inspect", "--redis", url, "--prefix", prefix, "queues")
	if status != 0 || stdout != "jobs\nmail.out\n" {
		t.Errorf("queues: status %d\n%q\n%s", status, stdout, stderr)
	}
}

func TestCheckRuntimeRunsEveryAdapter(t *testing.T) {
	url := redistest.URL(t)
	out := t.TempDir()
	dir := t.TempDir()
	// Faults off for Redis: its transport faults through the proxy are the
	// linearizability package's tests; here the command is under test.
	for _, args := range [][]string{
		{"--histories", "40"},
		{"--redis", url, "--histories", "20", "--faults=false"},
		{"--sqlite", dir, "--histories", "3"},
	} {
		args = append([]string{"check", "--runtime", "--progress", "none", "--out", out, "--seed", "11"}, args...)
		status, stdout, stderr := runCmd(t, args...)
		if status != 0 {
			t.Fatalf("%v: status %d\n%s\n%s", args, status, stdout, stderr)
		}
		if !strings.Contains(stdout, "leasehold check --runtime:") {
			t.Errorf("%v: no runtime header:\n%s", args, stdout)
		}
	}
	for _, name := range []string{"memory", "redis-proxy", "sqlite-returning", "sqlite-select-update"} {
		if _, err := os.Stat(filepath.Join(out, "example-"+name+".html")); err != nil {
			t.Errorf("no example visualization of %s: %v", name, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) > 0 {
		t.Errorf("databases left behind: %v", left)
	}
}

func TestCheckRuntimeReportsTheBrokenProperty(t *testing.T) {
	// A runtime history of the first seed whose plan heartbeats has one of
	// its accepted Extends made to carry another lease and is saved: the summary names
	// the property, and --replay finds the saved history not linearizable
	// either (the deadline no longer follows from the lease).
	plans := linearizability.RuntimePlans(linearizability.RuntimeOptions{Mode: linearizability.FakeTime})
	var (
		seed int
		p    *linearizability.RuntimePlan
		rh   *linearizability.RuntimeHistory
	)
	broken := false
	for seed = 1; seed <= 200 && !broken; seed++ {
		p = plans.Example(seed)
		var err error
		if rh, err = linearizability.ExecuteRuntime(context.Background(), p, backends.Memory()); err != nil {
			t.Fatal(err)
		}
		for i := range rh.History.Operations {
			// An accepted Extend: its answer's deadline is now + lease.
			if op := &rh.History.Operations[i]; op.Input.Op == model.OpExtend && op.Output.Err == "" && !op.Output.Indeterminate {
				op.Input.Lease += time.Millisecond
				broken = true
				break
			}
		}
	}
	if !broken {
		t.Fatal("no plan of seeds 1..200 heartbeats: the runtime plans draw no Extend")
	}
	seed--
	rh.History.Adapter, rh.History.Seed = "memory", uint64(seed)
	props := linearizability.CheckRuntime(p, rh)
	v := linearizability.Check(rh.History, 10*time.Second)
	dir, err := linearizability.SaveRuntimeFailure(t.TempDir(), p, rh, v, props)
	if err != nil {
		t.Fatal(err)
	}
	f := linearizability.Failure{Seed: uint64(seed), Result: v.Result, History: rh.History, Properties: props, RuntimePlan: p, Dir: dir}
	var b bytes.Buffer
	summary(&b, []linearizability.Report{{Adapter: "memory", Histories: 1, Violations: 1, Failures: []linearizability.Failure{f}}}, &checkFlags{mode: "fake", runtime: true}, nil)
	for _, want := range []string{"breaks heartbeat-lease", "heartbeat-lease: worker", fmt.Sprintf("leasehold check --runtime --seed %d", seed)} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the summary lacks %q:\n%s", want, b.String())
		}
	}
	status, stdout, stderr := runCmd(t, "check", "--replay", filepath.Join(dir, "history.json"))
	if status != 1 || !strings.Contains(stdout, "Illegal") {
		t.Errorf("replay of the broken history: status %d\n%s\n%s", status, stdout, stderr)
	}
}

// A flag value out of range is refused before anything runs, with a message
// that names the flag, and exit status 2.
func TestCheckRefusesFlagsOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--clients", "0"}, "--clients"},
		{[]string{"--clients", "-3"}, "--clients"},
		{[]string{"--check-timeout", "-1s"}, "--check-timeout"},
		{[]string{"--duration", "0s"}, "--duration"},
		{[]string{"--duration", "-5s"}, "--duration"},
		{[]string{"--progress", "sparkles"}, "--progress"},
		{[]string{"--parallel", "-1"}, "--parallel"},
	} {
		out := t.TempDir()
		args := append([]string{"check", "--histories", "1", "--progress", "none", "--out", out}, tc.args...)
		status, stdout, stderr := runCmd(t, args...)
		if status != 2 {
			t.Errorf("%q: status %d, want 2\n%s", tc.args, status, stdout)
		}
		if !strings.Contains(stderr, tc.flag) {
			t.Errorf("%q: stderr does not name %s:\n%s", tc.args, tc.flag, stderr)
		}
		if strings.Contains(stdout, "leasehold check:") {
			t.Errorf("%q: the check ran:\n%s", tc.args, stdout)
		}
	}
	// In range, the same flags are accepted.
	status, stdout, stderr := runCmd(t, "check", "--histories", "2", "--clients", "1", "--check-timeout", "0s",
		"--duration", "1m", "--progress", "lines", "--parallel", "1", "--out", t.TempDir())
	if status != 0 {
		t.Fatalf("flags in range: status %d\n%s\n%s", status, stdout, stderr)
	}
}

func TestCheckWritesAReport(t *testing.T) {
	out, rep := t.TempDir(), t.TempDir()
	status, stdout, stderr := runCmd(t, "check", "--histories", "60", "--seed", "7", "--progress", "none", "--out", out, "--report", rep, "--check-timeout", checkTimeout)
	if status != 0 {
		t.Fatalf("status %d\n%s\n%s", status, stdout, stderr)
	}
	path := filepath.Join(rep, "report-memory.html")
	if !strings.Contains(stdout, "report (memory): "+path) {
		t.Errorf("the summary does not name the report:\n%s", stdout)
	}
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"60 histories", "Run summary", `href="porcupine-memory.html"`, `class="lane"`} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(rep, "porcupine-memory.html")); err != nil {
		t.Error(err)
	}
}

func TestAViolationIsSavedWithItsReport(t *testing.T) {
	h, err := linearizability.LoadHistory("../../linearizability/report/testdata/lease-expiry-off-by-one.json")
	if err != nil {
		t.Fatal(err)
	}
	v := linearizability.Check(h, 10*time.Second)
	dir, err := linearizability.SaveFailure(t.TempDir(), h, nil, v)
	if err != nil {
		t.Fatal(err)
	}
	rep := t.TempDir()
	r := linearizability.Report{Adapter: "memory", Histories: 1, Violations: 1,
		Failures: []linearizability.Failure{{Seed: h.Seed, Result: v.Result, Check: v, History: h, Dir: dir}}}
	var errs bytes.Buffer
	paths := writeReports(&errs, []linearizability.Report{r}, &checkFlags{report: rep})
	if errs.Len() > 0 {
		t.Fatal(errs.String())
	}
	for _, p := range []string{filepath.Join(dir, "report.html"), paths["memory"]} {
		page, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(page, []byte(`class="refusal"`)) || !bytes.Contains(page, []byte("Illegal")) {
			t.Errorf("%s shows no refusal", p)
		}
	}
	var b bytes.Buffer
	summary(&b, []linearizability.Report{r}, &checkFlags{mode: "fake"}, paths)
	if !strings.Contains(b.String(), filepath.Join(dir, "report.html")) {
		t.Errorf("the summary does not point at the violation's report:\n%s", b.String())
	}
}

func TestInspectShowsAPostgreSQLStore(t *testing.T) {
	url := pgtest.URL(t)
	schema := pgtest.Schema()
	defer pgtest.Drop(t, url, schema)
	ctx := context.Background()
	s, err := postgres.Open(ctx, url, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "jobs", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	status, stdout, stderr := runCmd(t, "inspect", "--postgres", url, "--schema", schema, "queues")
	if status != 0 || stdout != "jobs\n" {
		t.Errorf("queues: status %d\n%q\n%s", status, stdout, stderr)
	}
	status, stdout, stderr = runCmd(t, "inspect", "--postgres", url, "--schema", schema, "--queue", "jobs", "get", "a")
	if status != 0 || !strings.Contains(stdout, "ready") {
		t.Errorf("get: status %d\n%s\n%s", status, stdout, stderr)
	}
}

func TestUIRefusesToListenBeyondLoopbackUnlessAllowed(t *testing.T) {
	for _, args := range [][]string{
		{"ui", "--memory", "--addr", ":8080"},
		{"ui", "--memory", "--addr", "0.0.0.0:8080"},
		{"ui", "--memory", "--addr", "192.0.2.1:8080"},
		{"ui", "--memory", "--addr", "nonsense"},
		{"ui", "--memory", "--sqlite", "x.db"},
		{"ui", "--memory", "stray"},
	} {
		if status, _, stderr := runCmd(t, args...); status != 2 {
			t.Errorf("%q: status %d, want 2\n%s", args, status, stderr)
		}
	}
	for _, args := range [][]string{
		{"--memory", "--addr", "127.0.0.1:0"},
		{"--memory", "--addr", "[::1]:0"},
		{"--memory", "--addr", "localhost:0"},
		{"--memory", "--addr", "0.0.0.0:0", "--allow-remote"},
	} {
		if _, err := parseUIFlags(args, io.Discard); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
}

func TestUIServesTheDemonstrationStore(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := memory.New()
	defer s.Close()
	if err := demoTasks(ctx, s); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serveUI(ctx, s, ln) }()
	res, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{`href="/queues/emails"`, `href="/queues/reports"`} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("the front page lacks %s", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serveUI: %v", err)
	}
}

func TestHelpPrintsTheExitStatuses(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"check", "-h"}, {"inspect", "-h"}, {"ui", "-h"}} {
		status, stdout, stderr := runCmd(t, args...)
		if status != 0 || !strings.Contains(stdout+stderr, "exit status: 0 ok; 1 a finding") {
			t.Errorf("%q: status %d, no exit statuses in\n%s%s", args, status, stdout, stderr)
		}
	}
}
