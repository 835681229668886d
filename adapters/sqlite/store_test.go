package sqlite_test

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

var ctx = context.Background()

func enqueue(t *testing.T, s core.Store, queue, id string, args ...func(*model.EnqueueArgs)) core.Task {
	t.Helper()
	a := model.EnqueueArgs{ID: id, Payload: []byte("payload of " + id), MaxAttempts: 3}
	for _, f := range args {
		f(&a)
	}
	res, err := s.Enqueue(ctx, core.EnqueueParams{Queue: queue, EnqueueArgs: a})
	if err != nil {
		t.Fatalf("Enqueue(%s): %v", id, err)
	}
	return res.Task
}

// rawDB opens the database file directly, as a test that tampers with it.
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func execSQL(t testing.TB, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// dump returns every row of the tasks and queues tables as text.
func dump(t *testing.T, db *sql.DB) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{`SELECT * FROM tasks ORDER BY queue, id`, `SELECT * FROM queues ORDER BY name`} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%q\n", vals)
		}
		rows.Close()
	}
	return b.String()
}

func TestOperationsAfterCloseReturnErrClosed(t *testing.T) {
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "closed.db"))
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, s, "q", "a")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_, err = s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "b", MaxAttempts: 1}})
	if !errors.Is(err, core.ErrClosed) {
		t.Errorf("Enqueue after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "a"}); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	if err := s.Vacuum(ctx); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Vacuum after Close: %v, want ErrClosed", err)
	}
}

func TestReopenKeepsTasksAndNeverReusesAVersion(t *testing.T) {
	clock := core.NewFakeClock(spec.Epoch)
	path := filepath.Join(t.TempDir(), "reopen.db")
	s, err := sqlite.Open(path, sqlite.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, s, "q", "a")
	enqueue(t, s, "q", "b")
	popped := popOne(t, s, "q", time.Minute)
	if _, err := s.Remove(ctx, core.InspectParams{Queue: "q", ID: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openStore(t, path, sqlite.WithClock(clock))
	got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "a"})
	if err != nil || !got.Equal(popped) {
		t.Fatalf("after reopening, a = %+v (%v), want %+v", got, err, popped)
	}
	again := enqueue(t, s, "q", "b")
	if again.Version != popped.Version+1 {
		t.Errorf("re-enqueued b has version %d, want %d: the sequence must survive Remove and reopening", again.Version, popped.Version+1)
	}
	if _, err := s.Ack(ctx, core.AckParams{Claim: popped.Claim()}); err != nil {
		t.Errorf("the claim taken before reopening: %v", err)
	}
}

func TestOpenRefusesDatabasesItDoesNotOwn(t *testing.T) {
	dir := t.TempDir()

	foreign := filepath.Join(dir, "foreign.db")
	execSQL(t, rawDB(t, foreign), `CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)`)
	if s, err := sqlite.Open(foreign); err == nil {
		s.Close()
		t.Error("Open of a database with another application's table succeeded")
	}

	newer := filepath.Join(dir, "newer.db")
	s := openStore(t, newer)
	s.Close()
	execSQL(t, rawDB(t, newer), fmt.Sprintf(`PRAGMA user_version = %d`, sqlite.SchemaVersion+1))
	if s, err := sqlite.Open(newer); err == nil || !strings.Contains(err.Error(), "schema version") {
		if s != nil {
			s.Close()
		}
		t.Errorf("Open of a database from a newer build: %v, want a schema version error", err)
	}

	for _, path := range []string{"", ":memory:", "file:x.db", filepath.Join(dir, "what?.db")} {
		if s, err := sqlite.Open(path); !errors.Is(err, core.ErrInvalidArgument) {
			if s != nil {
				s.Close()
			}
			t.Errorf("Open(%q): %v, want ErrInvalidArgument", path, err)
		}
	}
}

// TestCorruptRowsAreReportedAndChangeNothing tampers with rows behind the
// store's back: every operation that reads such a row fails with ErrCorrupt
// and leaves the database as it was.
func TestCorruptRowsAreReportedAndChangeNothing(t *testing.T) {
	clock := core.NewFakeClock(spec.Epoch)
	path := filepath.Join(t.TempDir(), "corrupt.db")
	s := openStore(t, path, sqlite.WithClock(clock))
	db := rawDB(t, path)

	enqueue(t, s, "q", "ready")
	enqueue(t, s, "q", "running")
	running := popOne(t, s, "q", time.Second)
	if running.ID != "ready" {
		t.Fatalf("popped %s", running.ID)
	}
	clock.Advance(2 * time.Second)

	type op struct {
		name string
		run  func() error
	}
	claim := running.Claim()
	// The operations that name the damaged task: ErrCorrupt, and nothing
	// changes. (The reads and the scans are checked after them.)
	ops := []op{
		{"Extend", func() error { _, err := s.Extend(ctx, core.ExtendParams{Claim: claim, Lease: time.Minute}); return err }},
		{"Ack", func() error { _, err := s.Ack(ctx, core.AckParams{Claim: claim}); return err }},
		{"Fail", func() error { _, err := s.Fail(ctx, core.FailParams{Claim: claim, Message: "x"}); return err }},
		{"Retry", func() error { _, err := s.Retry(ctx, core.RetryParams{Claim: claim}); return err }},
		{"InspectRequeue", func() error {
			_, err := s.InspectRequeue(ctx, core.InspectParams{Queue: "q", ID: "ready"})
			return err
		}},
		{"Remove with a version", func() error {
			_, err := s.Remove(ctx, core.InspectParams{Queue: "q", ID: "ready", Expect: running.Version})
			if errors.Is(err, core.ErrConflict) {
				return core.ErrCorrupt // its version cannot be trusted: refused, as the model says
			}
			return err
		}},
	}
	// overwrites lists the operations that overwrite a damaged field without
	// reading it: they succeed and leave a sound row (see the package doc).
	for _, damage := range []struct {
		name, sql  string
		overwrites []string
	}{
		{"an error history that is not JSON", `UPDATE tasks SET errors = '{not json' WHERE id = 'ready'`, nil},
		{"an error history that is not an array", `UPDATE tasks SET errors = '{"attempt": 1}' WHERE id = 'ready'`, nil},
		{"an error history that is JSON null", `UPDATE tasks SET errors = 'null' WHERE id = 'ready'`, nil},
		{"an error history holding null", `UPDATE tasks SET errors = '[null]' WHERE id = 'ready'`, nil},
		{"an enqueue time that is text", `UPDATE tasks SET enqueued_at = 'yesterday' WHERE id = 'ready'`, nil},
		{"a priority out of range", `UPDATE tasks SET priority = 99999 WHERE id = 'ready'`, nil},
		{"no attempts allowed", `UPDATE tasks SET max_attempts = 0 WHERE id = 'ready'`, nil},
		{"a claim token that is text", `UPDATE tasks SET claim_token = 'abc' WHERE id = 'ready'`,
			[]string{"RecoverExpired", "InspectRequeue"}},
	} {
		t.Run(damage.name, func(t *testing.T) {
			execSQL(t, db, `SAVEPOINT damage`)
			execSQL(t, db, damage.sql)
			execSQL(t, db, `RELEASE damage`)
			before := dump(t, db)
			for _, o := range ops {
				if slices.Contains(damage.overwrites, o.name) {
					continue
				}
				if err := o.run(); !errors.Is(err, core.ErrCorrupt) {
					t.Errorf("%s on a row with %s: %v, want ErrCorrupt", o.name, damage.name, err)
				}
				if after := dump(t, db); after != before {
					t.Fatalf("%s on a corrupt row changed the database:\nbefore %s\nafter  %s", o.name, before, after)
				}
			}
			// Reads write nothing: Get reports the row as quarantined, List
			// passes over it.
			if got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "ready"}); err != nil || got.State != core.Quarantined || got.Quarantine == "" {
				t.Errorf("Get of a row with %s: %+v, %v; want it quarantined with a reason", damage.name, got, err)
			}
			if res, err := s.List(ctx, core.ListParams{Queue: "q", State: core.Running, Limit: 10}); err != nil || len(res.Tasks) != 0 {
				t.Errorf("List(running) with %s: %+v, %v; want it passed over", damage.name, res.Tasks, err)
			}
			if after := dump(t, db); after != before {
				t.Fatalf("a read changed the database:\nbefore %s\nafter  %s", before, after)
			}
			// The broker's scan meets the expired row and sets it aside.
			if res, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "q", ClaimTTL: time.Minute}); err != nil || len(res.Claims) != 0 {
				t.Errorf("ClaimExpired with %s: %+v, %v; want no claim and no error", damage.name, res.Claims, err)
			}
			if c, err := s.Counts(ctx, core.CountsParams{Queue: "q"}); err != nil || c.Quarantined != 1 || c.Running != 0 {
				t.Errorf("Counts after ClaimExpired met a row with %s: %+v, %v", damage.name, c, err)
			}
		})
		execSQL(t, db, `UPDATE tasks SET errors = '[]', enqueued_at = ?1, priority = 0, max_attempts = 3, claim_token = ?2, state = 3, quarantine = NULL WHERE id = 'ready'`,
			running.EnqueuedAt.UnixMicro(), running.ClaimToken)
		if got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "ready"}); err != nil || !got.Equal(running) {
			t.Fatalf("repair failed: %+v, %v", got, err)
		}
	}

	// A row whose state is unknown is counted, listed and shown as
	// quarantined (Counts used to refuse the whole queue).
	for _, bad := range []string{`9`, `'x'`} {
		execSQL(t, db, `UPDATE tasks SET state = `+bad+` WHERE id = 'running'`)
		if c, err := s.Counts(ctx, core.CountsParams{Queue: "q"}); err != nil || c.Quarantined != 1 || c.Ready != 0 {
			t.Errorf("Counts with state %s: %+v, %v; want 1 quarantined", bad, c, err)
		}
		if res, err := s.List(ctx, core.ListParams{Queue: "q", State: core.Quarantined, Limit: 10}); err != nil || len(res.Tasks) != 1 || res.Tasks[0].ID != "running" {
			t.Errorf("List(quarantined) with state %s: %+v, %v", bad, res.Tasks, err)
		}
		if got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "running"}); err != nil || got.State != core.Quarantined || !strings.Contains(got.Quarantine, "state") {
			t.Errorf("Get with state %s: %+v, %v", bad, got, err)
		}
	}
	// The Pop that meets a Ready row that does not parse sets it aside and
	// claims the next sound one.
	execSQL(t, db, `UPDATE tasks SET state = 2, payload = 42 WHERE id = 'running'`)
	enqueue(t, s, "q", "sound")
	res, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Second, N: 5})
	if err != nil || len(res.Tasks) != 1 || res.Tasks[0].ID != "sound" {
		t.Errorf("Pop past a row whose payload is a number: %+v, %v; want the sound task", res.Tasks, err)
	}
	if c, err := s.Counts(ctx, core.CountsParams{Queue: "q"}); err != nil || c.Quarantined != 1 || c.Ready != 0 {
		t.Errorf("Counts after the Pop: %+v, %v", c, err)
	}
	gone, err := s.Remove(ctx, core.InspectParams{Queue: "q", ID: "running"})
	if err != nil || gone.Task.State != core.Quarantined || gone.Task.Quarantine == "" {
		t.Errorf("Remove of the quarantined row: %+v, %v", gone, err)
	}
}

// TestTimesBetweenMicrosecondsDecideAsTheModel gives times that the store
// cannot keep exactly: each comparison with the clock must still come out as
// the model's.
func TestTimesBetweenMicrosecondsDecideAsTheModel(t *testing.T) {
	clock := core.NewFakeClock(spec.Epoch)
	s := openStore(t, filepath.Join(t.TempDir(), "micro.db"), sqlite.WithClock(clock))
	now := clock.Now()
	task := enqueue(t, s, "q", "soon", func(a *model.EnqueueArgs) { a.RunAfter = now.Add(300 * time.Nanosecond) })
	if task.State != core.Ready || !task.RunAfter.Equal(now) {
		t.Fatalf("RunAfter 300ns after now: %v at %v, want Ready, kept as now (model.Round truncates)", task.State, task.RunAfter)
	}
	popped, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: 1500 * time.Nanosecond, N: 1})
	if err != nil || len(popped.Tasks) != 1 || !popped.Tasks[0].Deadline.Equal(now.Add(time.Microsecond)) {
		t.Fatal(popped, err)
	}
	if res, _ := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "q", ClaimTTL: time.Second}); len(res.Claims) != 0 {
		t.Errorf("a lease of 1.5µs expired at once")
	}
	clock.Advance(time.Microsecond) // a lease of 1.5µs ends 1µs after now
	if res, _ := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "q", ClaimTTL: time.Second}); len(res.Claims) != 1 {
		t.Errorf("a lease of 1.5µs did not expire after 1µs")
	}
	if got, _ := s.Get(ctx, core.GetParams{Queue: "q", ID: "soon"}); got.EnqueuedAt.Location() != time.UTC || !got.FinishedAt.IsZero() {
		t.Errorf("times come back as %v (%v), want UTC and the zero time for unset ones", got.EnqueuedAt, got.FinishedAt)
	}
}

func TestVacuumShrinksTheFileAndKeepsTheTasks(t *testing.T) {
	clock := core.NewFakeClock(spec.Epoch)
	path := filepath.Join(t.TempDir(), "vacuum.db")
	s := openStore(t, path, sqlite.WithClock(clock))
	big := make([]byte, 8<<10)
	for i := range 40 {
		enqueue(t, s, "q", fmt.Sprintf("t%02d", i), func(a *model.EnqueueArgs) { a.Payload = big })
	}
	res, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 39})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range res.Tasks {
		if _, err := s.Ack(ctx, core.AckParams{Claim: task.Claim()}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Second)
	if _, err := s.Prune(ctx, core.PruneParams{Queue: "q", States: []core.State{core.Succeeded}, Before: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	db := rawDB(t, path)
	pages := func() (n int) {
		if err := db.QueryRow(`PRAGMA page_count`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := pages()
	if err := s.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	if after := pages(); after >= before/2 {
		t.Errorf("Vacuum left %d pages of %d", after, before)
	}
	if c, err := s.Counts(ctx, core.CountsParams{Queue: "q"}); err != nil || c.Ready != 1 || c.Total() != 1 {
		t.Errorf("after Vacuum: %+v, %v; want the one Ready task", c, err)
	}
}

// TestIDsAndMessagesKeepEveryByte: task IDs sort by their bytes, and IDs and
// error messages that are not UTF-8, or hold NUL bytes, read back as given.
func TestIDsAndMessagesKeepEveryByte(t *testing.T) {
	clock := core.NewFakeClock(spec.Epoch)
	s := openStore(t, filepath.Join(t.TempDir(), "bytes.db"), sqlite.WithClock(clock))
	ids := []string{"a\xffz", "a\x00b", "a\x00a", "é"}
	for _, id := range ids {
		enqueue(t, s, "q", id)
	}
	page, err := s.List(ctx, core.ListParams{Queue: "q", State: core.Ready, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, task := range page.Tasks {
		got = append(got, task.ID)
	}
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("List order %q, want byte order %q", got, want)
	}
	messages := []string{"bad \xff byte", "nul \x00 inside", "ok ✓", ""}
	for i, m := range messages {
		task := popOne(t, s, "q", time.Second)
		var res core.TaskResult
		if i%2 == 0 {
			res, err = s.Fail(ctx, core.FailParams{Claim: task.Claim(), Message: m})
		} else {
			clock.Advance(2 * time.Second)
			rc, cerr := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "q", ClaimTTL: time.Second})
			if cerr != nil || len(rc.Claims) != 1 {
				t.Fatal(rc, cerr)
			}
			res, err = s.Requeue(ctx, core.RequeueParams{ReapClaim: rc.Claims[0], Message: m})
		}
		if err != nil {
			t.Fatal(err)
		}
		stored, err := s.Get(ctx, core.GetParams{Queue: "q", ID: task.ID})
		if err != nil || !stored.Equal(res.Task) {
			t.Fatalf("stored %+v (%v), returned %+v", stored, err, res.Task)
		}
		if wantMsg := cmp.Or(m, model.LeaseExpiredMessage); i%2 == 0 && stored.Errors[0].Message != m || i%2 == 1 && stored.Errors[0].Message != wantMsg {
			t.Errorf("message %q read back as %q", m, stored.Errors[0].Message)
		}
	}
}

func TestQueuesNamesTheQueuesOfTheDatabase(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "q.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, q := range []string{"b.q", "a:q", "b.q"} {
		if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: q, EnqueueArgs: model.EnqueueArgs{ID: fmt.Sprint(time.Now().UnixNano()), MaxAttempts: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "c", EnqueueArgs: model.EnqueueArgs{ID: "x"}}); err == nil {
		t.Fatal("an Enqueue with MaxAttempts 0 was accepted")
	}
	got, err := s.Queues(ctx)
	if err != nil || fmt.Sprint(got) != "[a:q b.q]" {
		t.Errorf("Queues = %q, %v; want [a:q b.q]", got, err)
	}
}
