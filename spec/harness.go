package spec

import (
	"testing"

	"github.com/leasehold/leasehold/core"
)

// Harness tells the conformance suite how to make stores of one adapter.
type Harness struct {
	// Name names the adapter in test output.
	Name string
	// New returns a new, empty store that judges time by clock and whose
	// queues hold at most capacity pending tasks (0: unlimited). It registers
	// its own cleanup with tb.Cleanup. Stores made by one harness must not
	// see each other's tasks.
	New func(tb testing.TB, clock core.Clock, capacity int) core.Store
	// Damage, when the adapter can hold a record it cannot read, damages
	// the stored record of task id of queue in store s (made by New) so
	// that it no longer parses, keeping its place in the indexes of its
	// state: the event model.Queue.Damage. The damage suite runs only on
	// harnesses that give it (the memory adapter's records are Go values,
	// which nothing but the adapter writes).
	Damage func(tb testing.TB, s core.Store, queue, id string)
	// Tx, when the adapter works inside the application's own transaction
	// on the store's database, opens such transactions. The transaction
	// scenarios (TxScenarios) run only on harnesses that give it; a
	// harness that gives it and whose store breaks them fails.
	Tx *TxHarness
	// Busy, when another connection can hold what the store's writes need
	// (SQLite's write lock) for longer than the store waits for it, makes
	// such stores busy. The busy suite runs only on harnesses that give it.
	Busy *BusyHarness
}

// BusyHarness makes a store busy: another connection holds what its
// writes need past the time it waits for it, so each write is answered
// core.ErrBusy and must change nothing.
type BusyHarness struct {
	// New returns a new, empty store as Harness.New does, that waits only
	// a short while (tens of milliseconds) for what another connection
	// holds.
	New func(tb testing.TB, clock core.Clock, capacity int) core.Store
	// Hold makes s (made by New) busy until the function it returns is
	// called.
	Hold func(tb testing.TB, s core.Store) (release func())
}
