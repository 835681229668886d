package sqlite_test

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/damagetest"
)

func TestAckBatchItemAnsweredAsOfTheCommittingTransaction(t *testing.T) {
	var paths sync.Map // *sqlite.Store -> its database file
	damagetest.AckBatchAnsweredAsOfTheCommittingTransaction(t,
		func(clock core.Clock) damagetest.Store {
			path := filepath.Join(t.TempDir(), "leasehold.db")
			s := openStore(t, path, sqlite.WithClock(clock))
			paths.Store(s, path)
			return s
		},
		func(s damagetest.Store, queue, id string) {
			path, _ := paths.Load(s)
			execSQL(t, rawDB(t, path.(string)), `UPDATE tasks SET errors = '{not json' WHERE queue = ?1 AND id = ?2`, queue, id)
		},
		sqlite.SetAfterDamagedItem)
}
