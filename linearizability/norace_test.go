//go:build !race

package linearizability_test

// raceEnabled tells budgets that the race detector slows everything down.
const raceEnabled = false
