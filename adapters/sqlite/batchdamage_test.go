package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// An AckBatch that meets an item's damaged record runs again without it;
// if a scan sets the record aside in between, the item is answered as of
// the transaction that commits: a claim on a record set aside is
// ErrStaleClaim, not ErrCorrupt (the batch's claims are stamped after the
// scan's, so the batch takes effect after the record was set aside).
func TestAckBatchItemAnsweredAsOfTheCommittingTransaction(t *testing.T) {
	ctx := context.Background()
	clock := core.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "leasehold.db")
	s := openStore(t, path, sqlite.WithClock(clock))
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
	execSQL(t, rawDB(t, path), `UPDATE tasks SET errors = '{not json' WHERE queue = ?1 AND id = ?2`, "q", "a")
	scanned := false
	defer sqlite.SetAfterDamagedItem(func() {
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
