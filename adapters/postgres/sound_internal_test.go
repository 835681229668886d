package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/damagetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// soundStore returns a store in a schema of its own (dropped when t ends),
// its pool and the schema's name.
func soundStore(t *testing.T) (*Store, *pgxpool.Pool, string) {
	pool := pgtest.Pool(t)
	schema := pgtest.Take()
	t.Cleanup(func() { pgtest.Give(t, schema) })
	s, err := New(context.Background(), pool, WithSchema(schema), WithoutNotifications())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, pool, schema
}

// TestSoundSQLAgreesWithDecode stores rows damaged in every column, one at
// a time and many at once, with the values at the edges of what decode
// takes and error histories of every shape, and asks the database whether
// soundSQL holds for each: it may hold only for a row decode takes for a
// sound task (a statement sent with its COMMIT would otherwise commit a
// row the store cannot read), and it must hold for every sound task the
// store writes (or each of its Pops and AckBatches would take the slow
// way).
func TestSoundSQLAgreesWithDecode(t *testing.T) {
	ctx := context.Background()
	_, pool, schema := soundStore(t)

	histories := []string{
		`[]`, `null`, `{}`, `"x"`, `1`, `true`, `[null]`, `[1]`, `["x"]`, `[[]]`, `[{}]`,
		`[{"attempt": 1}]`, `[{"attempt": 1.5}]`, `[{"attempt": 1.0}]`, `[{"attempt": "1"}]`, `[{"attempt": null}]`,
		`[{"attempt": 2147483647}]`, `[{"attempt": 2147483648}]`, `[{"attempt": -2147483648}]`, `[{"attempt": 1e2}]`,
		`[{"attempt": 99999999999999999999}]`, `[{"attempt": true}]`, `[{"Attempt": 1}]`, `[{"ATTEMPT": "x"}]`,
		`[{"at": 9223372036854775807}]`, `[{"at": 9223372036854775808}]`, `[{"at": -9223372036854775808}]`,
		`[{"at": -9223372036854775809}]`, `[{"at": 1.5}]`, `[{"at": "1"}]`, `[{"at": null}]`,
		`[{"message": "m"}]`, `[{"message": 1}]`, `[{"message": null}]`, `[{"message": ["m"]}]`,
		`[{"message_bytes": "QQ=="}]`, `[{"message_bytes": "QUI="}]`, `[{"message_bytes": "QUJD"}]`, `[{"message_bytes": "QQ"}]`,
		`[{"message_bytes": "!!"}]`, `[{"message_bytes": "QQ==\n"}]`, `[{"message_bytes": null}]`, `[{"message_bytes": 1}]`,
		`[{"lease_expired": true}]`, `[{"lease_expired": "true"}]`, `[{"lease_expired": null}]`, `[{"lease_expired": 1}]`,
		`[{"cancelled": false}]`, `[{"cancelled": "no"}]`, `[{"a": 1}]`, `[{"attempt": 1}, null]`, `[{"attempt": 1}, 2]`,
		`[{"attempt": 1, "at": 2, "message": "m", "lease_expired": false}, {"attempt": 2, "cancelled": true}]`,
	}
	zero := zeroMicros
	ints := []int64{0, 1, -1, 2, 3, 4, 5, 6, 7, 9, 10, 32767, 32768, -32768, -32769, math.MaxInt32, math.MinInt32,
		math.MaxInt64, math.MinInt64, zero, zero + 1, int64(model.MaxDuration), int64(model.MaxDuration) + 1}

	var rows []rawTask
	id := 0
	add := func(r rawTask) {
		id++
		r.queue, r.id = "q", []byte(fmt.Sprintf("row-%06d", id))
		rows = append(rows, r)
	}
	// The error histories of sound tasks, as the store writes them
	// (rawOf writes them as appendError does).
	ofTheStore := map[string]bool{}
	bases := damagetest.Bases()
	for _, b := range bases {
		r := rawOf(t, b)
		ofTheStore[r.errors] = true
		add(r)
	}
	// damage sets column i of r (damageColumn) from n, NULL when null and
	// the column allows it, history when it is the error history; never
	// the queue or the ID (columns 0 and 1), which name the row here.
	damage := func(r *rawTask, i int, n int64, null bool, history string) {
		damageColumn(r, i, n, null, history, []byte("x"))
	}
	const first = 2
	for _, b := range bases {
		for i := first; i < taskColumnCount; i++ {
			for _, n := range ints {
				for _, null := range []bool{false, true} {
					r := rawOf(t, b)
					damage(&r, i, n, null, histories[int(uint64(n)%uint64(len(histories)))])
					add(r)
				}
			}
		}
		for _, h := range histories {
			r := rawOf(t, b)
			r.errors = h
			add(r)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		r := rawOf(t, bases[rng.IntN(len(bases))])
		for range 1 + rng.IntN(3) {
			damage(&r, first+rng.IntN(taskColumnCount-first), ints[rng.IntN(len(ints))], rng.IntN(4) == 0, histories[rng.IntN(len(histories))])
		}
		add(r)
	}
	// A sound task of each state, as the store's own operations leave it.
	at := time.UnixMicro(1_700_000_000_000_000).UTC()
	for _, task := range []model.Task{
		{State: model.Scheduled, MaxAttempts: 1, Version: 2, EnqueuedAt: at, RunAfter: at.Add(time.Hour)},
		{State: model.Failed, Attempt: 3, MaxAttempts: 3, Version: 30, ClaimToken: 29, EnqueuedAt: at, ClaimedAt: at,
			FinishedAt: at, Errors: []model.TaskError{{Attempt: 1, Message: "m"}, {Attempt: 2, At: at, Message: "\x00"}}},
	} {
		r := rawOf(t, task)
		ofTheStore[r.errors] = true
		add(r)
	}

	quoted := pgx.Identifier{schema}.Sanitize()
	insert := `INSERT INTO ` + quoted + `.tasks (queue, id, payload, priority, state, attempt, max_attempts, version, claim_token,
  enqueued_at, run_after, claimed_at, deadline, finished_at, errors, result, timeout_ns, unique_key, unique_until, quarantine)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15::jsonb, $16, $17, $18, $19, $20)`
	stored := map[string]rawTask{}
	b := &pgx.Batch{}
	for _, r := range rows {
		if _, err := pool.Exec(ctx, `SELECT $1::jsonb`, r.errors); err != nil {
			continue // not JSON: the column cannot hold it
		}
		stored[string(r.id)] = r
		b.Queue(insert, r.queue, r.id, r.payload, r.priority, r.state, r.attempt, r.maxAttempts, r.version, r.token,
			r.enqueuedAt, r.runAfter, r.claimedAt, r.deadline, r.finAt, r.errors, r.result, r.timeout, r.uniqueKey, r.uniqueUntil, r.quarantine)
	}
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	// Each row is decoded as the statements give it back (the history
	// as jsonb writes it out: 1e2 comes back as 100).
	res, err := pool.Query(ctx, `SELECT coalesce(`+soundSQL("t")+`, false), `+taskColumns+` FROM `+quoted+`.tasks t`)
	if err != nil {
		t.Fatal(err)
	}
	var vouched, refused, slow int
	var ok bool
	sc := newRowScanner(&ok)
	for res.Next() {
		if err := sc.scan(res); err != nil {
			t.Fatal(err)
		}
		r := sc.r
		delete(stored, string(r.id))
		task, derr := r.decode()
		sound := derr == nil && task.State != model.Quarantined
		switch {
		case ok && !sound:
			t.Errorf("soundSQL holds for %+v (errors %s), which decodes to %+v, %v", r, r.errors, task, derr)
		case ok:
			vouched++
		case sound:
			slow++
			if ofTheStore[r.errors] {
				t.Errorf("soundSQL does not hold for %+v (errors %s), a sound task", r, r.errors)
			}
		default:
			refused++
		}
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if len(stored) > 0 {
		t.Fatalf("%d rows not read back", len(stored))
	}
	if vouched < 100 || refused < 100 {
		t.Fatalf("%d rows vouched for and %d refused: the rows do not test both ways", vouched, refused)
	}
	t.Logf("%d rows: %d vouched for, %d refused, %d sound ones refused", vouched+refused+slow, vouched, refused, slow)
}

// TestFinalStatementsLeaveDamageToTheSlowWay damages a Ready task, then a
// claimed one: the Pop and the AckBatch whose statements, sent with their
// COMMIT, meet it are undone and run again, and answer as the model does
// (the damaged Ready task set aside and the next claimed; the damaged
// claim answered ErrCorrupt, the other acknowledged); the operations that
// meet no damage are not run again.
func TestFinalStatementsLeaveDamageToTheSlowWay(t *testing.T) {
	ctx := context.Background()
	s, pool, schema := soundStore(t)
	var again int
	afterUnsure = func() { again++ }
	defer func() { afterUnsure = nil }()
	damage := func(id string) {
		t.Helper()
		tag, err := pool.Exec(ctx, `UPDATE `+pgx.Identifier{schema}.Sanitize()+`.tasks SET errors = '{"a": 1}' WHERE queue = 'q' AND id = $1`, []byte(id))
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("damage %s: %v, %v", id, tag, err)
		}
	}
	var tasks []model.EnqueueArgs
	for _, id := range []string{"a", "b", "c", "d"} {
		tasks = append(tasks, model.EnqueueArgs{ID: id, MaxAttempts: 1})
	}
	if _, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "q", Tasks: tasks}); err != nil {
		t.Fatal(err)
	}
	damage("a")
	popped, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 2})
	if err != nil || len(popped.Tasks) != 2 || popped.Tasks[0].ID != "b" || popped.Tasks[1].ID != "c" {
		t.Fatalf("Pop past the damaged task = %+v, %v; want b and c", popped.Tasks, err)
	}
	if got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "a"}); err != nil || got.State != model.Quarantined {
		t.Fatalf("the damaged Ready task after the Pop: %v, %v; want it set aside", got.State, err)
	}
	if again != 1 {
		t.Fatalf("the Pop ran again %d times, want 1", again)
	}
	damage("c")
	acked, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q", Acks: []core.AckItem{
		{Claim: popped.Tasks[0].Claim()}, {Claim: popped.Tasks[1].Claim()}}})
	if err != nil || acked.Items[0].Err != nil || acked.Items[0].Task.State != model.Succeeded || !errors.Is(acked.Items[1].Err, core.ErrCorrupt) {
		t.Fatalf("AckBatch of a sound claim and a damaged one = %+v, %v; want the first acknowledged, the second ErrCorrupt", acked.Items, err)
	}
	if again != 2 {
		t.Fatalf("the AckBatch ran again: %d in all, want 2", again)
	}
	// The acknowledged claim again (refused), and a claim of the last task.
	res, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q", Acks: []core.AckItem{{Claim: popped.Tasks[0].Claim()}},
		Pop: core.AckPop{Lease: time.Minute, N: 1}})
	if err != nil || !errors.Is(res.Items[0].Err, core.ErrInvalidTransition) || len(res.Claimed) != 1 || res.Claimed[0].ID != "d" {
		t.Fatalf("AckBatch of an acknowledged claim that claims the last task = %+v, %v", res, err)
	}
	if again != 2 {
		t.Fatalf("a sound AckBatch ran again: %d in all, want 2", again)
	}
}

// A worker's decision alone on a damaged record (its claim held, its
// errors not a JSON array) sends its COMMIT with its statement, which
// cannot vouch for the row it wrote: that transaction is undone, and the
// decision runs again the slow way, which answers ErrCorrupt and changes
// nothing. A decision on a sound record commits in its one round trip.
func TestALoneDecisionLeavesDamageToTheSlowWay(t *testing.T) {
	ctx := context.Background()
	s, pool, schema := soundStore(t)
	var again int
	afterUnsure = func() { again++ }
	defer func() { afterUnsure = nil }()
	ids := []string{"a", "b", "c", "d", "e"}
	var tasks []model.EnqueueArgs
	for _, id := range ids {
		tasks = append(tasks, model.EnqueueArgs{ID: id, MaxAttempts: 3})
	}
	if _, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "q", Tasks: tasks}); err != nil {
		t.Fatal(err)
	}
	popped, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: len(ids)})
	if err != nil || len(popped.Tasks) != len(ids) {
		t.Fatalf("Pop: %d tasks, %v", len(popped.Tasks), err)
	}
	claim := map[string]model.Claim{}
	for _, task := range popped.Tasks {
		claim[task.ID] = task.Claim()
	}
	seq := func() int64 {
		t.Helper()
		var n int64
		if err := pool.QueryRow(ctx, `SELECT seq FROM `+pgx.Identifier{schema}.Sanitize()+`.queues WHERE name = 'q'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	decisions := []struct {
		id string
		do func(c model.Claim) (core.TaskResult, error)
	}{
		{"a", func(c model.Claim) (core.TaskResult, error) {
			return s.Extend(ctx, core.ExtendParams{Claim: c, Lease: time.Minute})
		}},
		{"b", func(c model.Claim) (core.TaskResult, error) { return s.Ack(ctx, core.AckParams{Claim: c}) }},
		{"c", func(c model.Claim) (core.TaskResult, error) {
			return s.Fail(ctx, core.FailParams{Claim: c, Message: "m"})
		}},
		{"d", func(c model.Claim) (core.TaskResult, error) {
			return s.Retry(ctx, core.RetryParams{Claim: c, Message: "m"})
		}},
	}
	for i, d := range decisions {
		tag, err := pool.Exec(ctx, `UPDATE `+pgx.Identifier{schema}.Sanitize()+`.tasks SET errors = '{"a": 1}' WHERE queue = 'q' AND id = $1`, []byte(d.id))
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("damage %s: %v, %v", d.id, tag, err)
		}
		before := seq()
		if _, err := d.do(claim[d.id]); !errors.Is(err, core.ErrCorrupt) {
			t.Errorf("decision on damaged %s: %v, want ErrCorrupt", d.id, err)
		}
		if again != i+1 {
			t.Errorf("decision on damaged %s: ran again %d times in all, want %d", d.id, again, i+1)
		}
		if n := seq(); n != before {
			t.Errorf("decision on damaged %s: sequence %d, was %d", d.id, n, before)
		}
	}
	res, err := s.Ack(ctx, core.AckParams{Claim: claim["e"]})
	if err != nil || res.Task.State != model.Succeeded {
		t.Fatalf("Ack of a sound claim: %+v, %v", res.Task, err)
	}
	if again != len(decisions) {
		t.Errorf("a sound Ack ran again: %d in all, want %d", again, len(decisions))
	}
}
