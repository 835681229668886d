//go:build race

package linearizability_test

// raceEnabled tells budgets that the race detector slows everything down:
// the SQLite driver (C compiled to Go) runs about fifty times slower under it.
const raceEnabled = true
