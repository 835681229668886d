package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/damagetest"
	"github.com/leasehold/leasehold/model"
)

func TestAckBatchItemAnsweredAsOfTheCommittingTransaction(t *testing.T) {
	damagetest.AckBatchAnsweredAsOfTheCommittingTransaction(t,
		func(clock core.Clock) damagetest.Store { return newStore(t, postgres.WithClock(clock)) },
		func(s damagetest.Store, queue, id string) { damageRow(t, s, queue, id) },
		postgres.SetAfterDamagedItem)
}

// An AckBatch's items are answered as of its transaction: two claims with
// wrong tokens on a damaged record are both ErrCorrupt (the model reports
// the damage first), even when the record is repaired the moment the
// transaction commits. The store once read each refused item's record
// again after the transaction, one read per item, so that a record set
// aside or repaired in between gave the items of one batch answers of
// two different instants (a violation the store-level harness found).
func TestAckBatchAnswersDamageAsOfItsTransaction(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 2}}); err != nil {
		t.Fatal(err)
	}
	popped, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	if err != nil || len(popped.Tasks) != 1 {
		t.Fatalf("Pop: %+v, %v", popped, err)
	}
	claim := popped.Tasks[0].Claim()
	damageRow(t, s, "q", "a")
	repair := `UPDATE ` + pgx.Identifier{s.Schema()}.Sanitize() + `.tasks SET errors = '[]' WHERE queue = $1 AND id = $2`
	defer postgres.SetAfterAckBatch(func() {
		if _, err := s.Pool().Exec(ctx, repair, "q", []byte("a")); err != nil {
			t.Errorf("repair: %v", err)
		}
	})()
	wrong1, wrong2 := claim, claim
	wrong1.Token, wrong2.Token = claim.Token+10, claim.Token+20
	for _, acks := range [][]core.AckItem{
		{{Claim: wrong1}, {Claim: wrong2}}, // one claim after the other (a task named twice)
		{{Claim: wrong1}},                  // the claims of distinct tasks, in one statement
	} {
		damageRow(t, s, "q", "a")
		res, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q", Acks: acks})
		if err != nil {
			t.Fatal(err)
		}
		for i, it := range res.Items {
			if !errors.Is(it.Err, core.ErrCorrupt) {
				t.Errorf("%d claims: item %d: %v, want ErrCorrupt", len(acks), i, it.Err)
			}
		}
	}
}
