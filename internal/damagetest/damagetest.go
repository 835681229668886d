// Package damagetest holds a scenario of damaged records that the SQLite
// and PostgreSQL adapters run through test hooks of their own (the moment
// between an AckBatch's undone attempt and the one that commits), and the
// checks their decoders' fuzz tests make of what they decoded.
package damagetest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// Store is a store with AckBatch.
type Store interface {
	core.Store
	core.BatchStore
}

// AckBatchAnsweredAsOfTheCommittingTransaction checks an AckBatch that
// meets an item's damaged record and runs again without it, when a scan
// sets the record aside in between: the item is answered as of the
// transaction that commits, and a claim on a record set aside is
// ErrStaleClaim, not ErrCorrupt (the batch's claims are stamped after the
// scan's, so the batch takes effect after the record was set aside).
//
// open returns an empty store on clock; damage damages the record of a
// task the way the adapter's damage hook does; between makes its function
// run when an AckBatch is about to run again without a damaged item, and
// returns the function that undoes that.
func AckBatchAnsweredAsOfTheCommittingTransaction(t *testing.T, open func(clock core.Clock) Store, damage func(s Store, queue, id string), between func(f func()) (undo func())) {
	t.Helper()
	ctx := context.Background()
	clock := core.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := open(clock)
	for _, id := range []string{"a", "b"} {
		if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: id, MaxAttempts: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	popped, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Second, N: 1})
	if err != nil || len(popped.Tasks) != 1 || popped.Tasks[0].ID != "a" {
		t.Fatalf("Pop: %+v, %v", popped, err)
	}
	claim := popped.Tasks[0].Claim()
	damage(s, "q", "a")
	scanned := false
	defer between(func() {
		if scanned {
			return
		}
		scanned = true
		clock.Advance(2 * time.Second)
		if _, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: "q", ClaimTTL: time.Second}); err != nil {
			t.Errorf("ClaimExpired: %v", err)
		}
	})()
	res, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q", Acks: []core.AckItem{{Claim: claim}}, Pop: core.AckPop{Lease: time.Second, N: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !scanned {
		t.Fatal("the AckBatch did not meet the damaged record")
	}
	if err := res.Items[0].Err; !errors.Is(err, core.ErrStaleClaim) || errors.Is(err, core.ErrCorrupt) {
		t.Fatalf("the item on the record set aside: %v, want ErrStaleClaim", err)
	}
	if len(res.Claimed) != 1 || res.Claimed[0].ID != "b" {
		t.Fatalf("claimed %+v, want b", res.Claimed)
	}
	got, err := s.Get(ctx, core.GetParams{Queue: "q", ID: "a"})
	if err != nil || got.State != model.Quarantined {
		t.Fatalf("Get(a): %+v, %v; want it set aside", got, err)
	}
}

// Appendable says whether an error history, as stored, is one the SQL of
// both adapters appends an entry to: a JSON array, of objects. A column
// that is not an array is left as it is by the append, so a decoder that
// took one for a sound history (JSON null decodes as no entries) would let
// a Fail commit without its error.
func Appendable(text []byte) bool {
	var elems []json.RawMessage
	if err := json.Unmarshal(text, &elems); err != nil || elems == nil {
		return false
	}
	for _, e := range elems {
		if len(e) == 0 || e[0] != '{' {
			return false
		}
	}
	return true
}

// CheckDecoded checks what a decoder made of a stored row (row describes
// it): an error must be core.ErrCorrupt; a task set aside is taken as it
// is; any other task must be sound (unsound says what is wrong, or ""),
// with an error history (history, as the row stores it) the SQL can
// append to, and stored again and decoded (again) it must come back as
// itself.
func CheckDecoded(t *testing.T, row any, task model.Task, err error, unsound func(model.Task) string, history []byte, again func(model.Task) (model.Task, error)) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, core.ErrCorrupt) {
			t.Fatalf("decoding %+v: %v, want ErrCorrupt", row, err)
		}
		return
	}
	if task.State == model.Quarantined {
		return
	}
	if why := unsound(task); why != "" {
		t.Fatalf("%+v decoded to %+v: %s", row, task, why)
	}
	if !Appendable(history) {
		t.Fatalf("%+v decoded to %+v, but an error appended to its history %q would be lost", row, task, history)
	}
	if back, err := again(task); err != nil || !reflect.DeepEqual(back, task) {
		t.Fatalf("%+v decoded to %+v, stored again to %+v, %v", row, task, back, err)
	}
}

// Bases are the sound tasks the decoders' fuzz tests start from: a Ready
// one, a Running one with a lease expiry in its history (its message not
// UTF-8, with a NUL), and a Succeeded one with a unique key and an
// operator's cancellation in its history.
func Bases() []model.Task {
	at := time.UnixMicro(1_700_000_000_000_000).UTC()
	return []model.Task{
		{Queue: "q", ID: "ready", Payload: []byte("p"), State: model.Ready, MaxAttempts: 3, Version: 1, EnqueuedAt: at},
		{Queue: "q", ID: "running", State: model.Running, Attempt: 2, MaxAttempts: 3, Version: 9, ClaimToken: 9,
			EnqueuedAt: at, ClaimedAt: at, Deadline: at.Add(time.Minute), Timeout: time.Second,
			Errors: []model.TaskError{{Attempt: 1, At: at, Message: "not \xffUTF-8 \x00", LeaseExpired: true}}},
		{Queue: "q", ID: "done", State: model.Succeeded, Attempt: 1, MaxAttempts: 1, Version: 4, ClaimToken: 3,
			EnqueuedAt: at, ClaimedAt: at, FinishedAt: at, Result: []byte("r"), UniqueKey: "k", UniqueUntil: at.Add(time.Hour),
			Errors: []model.TaskError{{Attempt: 1, At: at, Message: "cancelled", Cancelled: true}}},
	}
}
