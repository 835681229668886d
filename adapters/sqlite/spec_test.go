package sqlite_test

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/spec"
)

var popModes = []sqlite.PopMode{sqlite.PopReturning, sqlite.PopSelectUpdate}

// harness makes stores on fresh database files with the given pop mode.
// They commit with synchronous=NORMAL: the semantics are the same, the suite
// runs faster, and durability has its own test (a process killed mid-batch,
// with the default synchronous=FULL).
func harness(mode sqlite.PopMode) spec.Harness {
	var paths sync.Map // *sqlite.Store -> its database file
	return spec.Harness{
		Name: "sqlite/" + mode.String(),
		New: func(tb testing.TB, clock core.Clock, capacity int) core.Store {
			path := filepath.Join(tb.TempDir(), "leasehold.db")
			s := openStore(tb, path,
				sqlite.WithClock(clock), sqlite.WithCapacity(capacity), sqlite.WithPopMode(mode),
				sqlite.WithSynchronous(sqlite.SyncNormal))
			paths.Store(s, path)
			return s
		},
		// A row's error history that is not JSON: every column its state's
		// index reads stays as it was.
		Damage: func(tb testing.TB, s core.Store, queue, id string) {
			tb.Helper()
			path, ok := paths.Load(s)
			if !ok {
				tb.Fatalf("Damage: not a store of this harness")
			}
			execSQL(tb, rawDB(tb, path.(string)), `UPDATE tasks SET errors = '{not json' WHERE queue = ?1 AND id = ?2`, queue, id)
		},
	}
}

// openStore opens a store and closes it when the test ends.
func openStore(tb testing.TB, path string, opts ...sqlite.Option) *sqlite.Store {
	tb.Helper()
	s, err := sqlite.Open(path, opts...)
	if err != nil {
		tb.Fatalf("Open(%s): %v", path, err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	for _, mode := range popModes {
		t.Run(mode.String(), func(t *testing.T) { spec.Run(t, harness(mode)) })
	}
}

func TestDifferential(t *testing.T) {
	for _, mode := range popModes {
		t.Run(mode.String(), func(t *testing.T) { spec.Differential(t, harness(mode)) })
	}
}
