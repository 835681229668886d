package postgres_test

import (
	"testing"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/damagetest"
)

func TestAckBatchItemAnsweredAsOfTheCommittingTransaction(t *testing.T) {
	damagetest.AckBatchAnsweredAsOfTheCommittingTransaction(t,
		func(clock core.Clock) damagetest.Store { return newStore(t, postgres.WithClock(clock)) },
		func(s damagetest.Store, queue, id string) { damageRow(t, s, queue, id) },
		postgres.SetAfterDamagedItem)
}
