package sqlite_test

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// sameItems fails the test unless the store's answers to a batch are the
// model's: the same error kind and the same task for every item.
func sameItems(t *testing.T, what string, got []core.ItemResult, want []model.ItemResult) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d answers, the model gives %d", what, len(got), len(want))
	}
	for i := range want {
		if model.Kind(got[i].Err) != model.Kind(want[i].Err) || (got[i].Err == nil) != (want[i].Err == nil) {
			t.Errorf("%s item %d: error %v, the model says %v", what, i, got[i].Err, want[i].Err)
			continue
		}
		if !reflect.DeepEqual(got[i].Task, want[i].Task) {
			t.Errorf("%s item %d: task\n%+v\nthe model's\n%+v", what, i, got[i].Task, want[i].Task)
		}
	}
}

// TestBatchesAnswerEachItemAsTheModel runs an EnqueueBatch and an AckBatch
// whose items meet every refusal (a bad argument, an ID taken before the
// batch and by an earlier item, a full queue; a stale token, a claim named
// twice, a bad claim) beside items that succeed, and checks every answer
// and the final state against the model's.
func TestBatchesAnswerEachItemAsTheModel(t *testing.T) {
	for _, mode := range popModes {
		t.Run(mode.String(), func(t *testing.T) {
			clock := core.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			s := openStore(t, filepath.Join(t.TempDir(), "batch.db"), sqlite.WithClock(clock),
				sqlite.WithCapacity(4), sqlite.WithPopMode(mode), sqlite.WithSynchronous(sqlite.SyncNormal))
			m := model.NewQueue("q", 4)

			first := model.EnqueueArgs{ID: "a", Payload: []byte("a"), MaxAttempts: 2}
			if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: first}); err != nil {
				t.Fatal(err)
			}
			m, _, _ = m.Enqueue(clock.Now(), first)
			clock.Advance(time.Second)

			args := []model.EnqueueArgs{
				{ID: "b", Payload: []byte("b"), Priority: 3, MaxAttempts: 1},
				{ID: "a", MaxAttempts: 1},                    // taken before the batch
				{ID: "c", Priority: 1 << 20, MaxAttempts: 1}, // bad priority
				{ID: "b", MaxAttempts: 1},                    // taken by an earlier item
				{ID: "", MaxAttempts: 1},                     // bad ID
				{ID: "c", MaxAttempts: 0},                    // bad max attempts
				{ID: "later", RunAfter: clock.Now().Add(time.Hour), MaxAttempts: 1},
				{ID: "d", MaxAttempts: 1},
				{ID: "e", MaxAttempts: 1}, // the queue is full by now
			}
			res, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "q", Tasks: args})
			if err != nil {
				t.Fatal(err)
			}
			m, want, err := m.EnqueueBatch(clock.Now(), args)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Now.Equal(clock.Now()) {
				t.Errorf("Now %v, want %v", res.Now, clock.Now())
			}
			sameItems(t, "EnqueueBatch", res.Items, want)

			clock.Advance(time.Second)
			pop, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 3})
			if err != nil {
				t.Fatal(err)
			}
			m, mpop, err := m.Pop(clock.Now(), time.Minute, 3)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(pop.Tasks, mpop) {
				t.Fatalf("Pop:\n%+v\nthe model's\n%+v", pop.Tasks, mpop)
			}
			clock.Advance(time.Second)
			c0, c1, c2 := pop.Tasks[0].Claim(), pop.Tasks[1].Claim(), pop.Tasks[2].Claim()
			stale := c1
			stale.Token++
			noToken := c2
			noToken.Token = 0
			acks := []core.AckItem{
				{Claim: c0, Result: []byte("r0")},
				{Claim: stale},
				{Claim: c0}, // acknowledged already
				{Claim: noToken},
				{Claim: model.Claim{Queue: "q", TaskID: "gone", Token: 99}},
				{Claim: c2, Result: []byte("r2")},
			}
			ares, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q", Acks: acks})
			if err != nil {
				t.Fatal(err)
			}
			macks := make([]model.AckItem, len(acks))
			for i, a := range acks {
				macks[i] = model.AckItem{Claim: a.Claim, Result: a.Result}
			}
			m, mwant, err := m.AckBatch(clock.Now(), macks)
			if err != nil {
				t.Fatal(err)
			}
			sameItems(t, "AckBatch", ares.Items, mwant)

			// The stored tasks and the next version drawn are the model's.
			for _, mt := range m.Tasks() {
				got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: mt.ID})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, mt) {
					t.Errorf("Get(%s):\n%+v\nthe model's\n%+v", mt.ID, got, mt)
				}
			}
			m, mt, err := m.Ack(clock.Now(), c1, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Ack(ctx, core.AckParams{Claim: c1})
			if err != nil {
				t.Fatal(err)
			}
			if got.Task.Version != mt.Version || m.Seq() != mt.Version {
				t.Errorf("version after the batches %d, the model's %d", got.Task.Version, mt.Version)
			}
		})
	}
}

// TestBatchErrorsChangeNothing checks the refusals of a batch as a whole: no
// items, too many, a claim of another queue, a bad queue name, a closed
// store.
func TestBatchErrorsChangeNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "batch.db")
	s := openStore(t, path, sqlite.WithSynchronous(sqlite.SyncNormal))
	enqueue(t, s, "q", "a")
	pop, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := pop.Tasks[0].Claim()
	before := dump(t, rawDB(t, path))
	other := c
	other.Queue = "other"
	tooMany := make([]model.EnqueueArgs, model.MaxBatch+1)
	for i := range tooMany {
		tooMany[i] = model.EnqueueArgs{ID: "x" + string(rune('a'+i%26)) + string(rune('a'+i/26)), MaxAttempts: 1}
	}
	for name, call := range map[string]func() error{
		"no tasks": func() error {
			_, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "q"})
			return err
		},
		"too many tasks": func() error {
			_, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "q", Tasks: tooMany})
			return err
		},
		"bad queue name": func() error {
			_, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "no spaces", Tasks: tooMany[:1]})
			return err
		},
		"no acks": func() error {
			_, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q"})
			return err
		},
		"a claim of another queue": func() error {
			_, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q", Acks: []core.AckItem{{Claim: c}, {Claim: other}}})
			return err
		},
	} {
		if err := call(); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if after := dump(t, rawDB(t, path)); after != before {
		t.Errorf("a refused batch changed the database:\nbefore %s\nafter %s", before, after)
	}
	s.Close()
	if _, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q", Acks: []core.AckItem{{Claim: c}}}); !errors.Is(err, core.ErrClosed) {
		t.Errorf("AckBatch after Close: %v, want ErrClosed", err)
	}
	if _, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "q", Tasks: tooMany[:1]}); !errors.Is(err, core.ErrClosed) {
		t.Errorf("EnqueueBatch after Close: %v, want ErrClosed", err)
	}
}

// TestBatchOverADamagedRowAnswersThatItem acknowledges two claims, the
// second of a row whose error history is damaged: that item is ErrCorrupt
// and leaves its row as it was, and the first is acknowledged (the
// statement that met the damaged row is undone with its transaction, and
// the batch runs again without it).
func TestBatchOverADamagedRowAnswersThatItem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "batch.db")
	s := openStore(t, path, sqlite.WithSynchronous(sqlite.SyncNormal))
	enqueue(t, s, "q", "a")
	enqueue(t, s, "q", "b")
	pop, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 2})
	if err != nil || len(pop.Tasks) != 2 {
		t.Fatalf("Pop: %d tasks, %v", len(pop.Tasks), err)
	}
	db := rawDB(t, path)
	execSQL(t, db, `UPDATE tasks SET errors = '{not json' WHERE id = ?1`, pop.Tasks[1].ID)
	damaged := func() string {
		var row string
		if err := db.QueryRow(`SELECT quote(state) || quote(version) || quote(errors) FROM tasks WHERE id = ?1`, pop.Tasks[1].ID).Scan(&row); err != nil {
			t.Fatal(err)
		}
		return row
	}
	before := damaged()
	res, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q", Acks: []core.AckItem{{Claim: pop.Tasks[0].Claim()}, {Claim: pop.Tasks[1].Claim()}}})
	if err != nil || len(res.Items) != 2 || res.Items[0].Err != nil || res.Items[0].Task.State != core.Succeeded || !errors.Is(res.Items[1].Err, core.ErrCorrupt) {
		t.Fatalf("AckBatch over a damaged row: %+v, %v; want the sound item acked and the damaged one ErrCorrupt", res.Items, err)
	}
	if after := damaged(); after != before {
		t.Errorf("the damaged row changed: %s, was %s", after, before)
	}
}
