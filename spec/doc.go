// Package spec is the executable specification of leasehold, rendered for
// readers and enforced on every store.
//
//   - SPEC.md (generated from model.Transitions and the scenarios by
//     `go generate ./spec`, that is `make spec`) states the rules in prose
//     and tables.
//   - Scenarios are the races of the seed reports, written once as data.
//   - Run is the conformance suite every adapter's tests call with a
//     Harness: the scenarios, one subtest per transition, guard, error kind
//     and ordering rule, the batch operations (a store must implement
//     core.BatchStore; the batch subtests fail with that message when it
//     does not), and a few concurrent checks of atomicity. A harness
//     whose adapter works inside the application's own database
//     transaction (SQLite, PostgreSQL) gives a TxHarness, and Run plays
//     the transaction scenarios on it too (TxScenarios): enqueues, batches
//     and acks inside a transaction that commits or rolls back, with the
//     application's row beside them, each step compared with the model's
//     ModelTx.
//   - Differential drives a store and the model side by side with random
//     operations (rapid) and requires identical answers and states.
//   - ModelStore is the model behind a mutex: the reference store the others
//     are compared with.
//
// An adapter's conformance test is a few lines:
//
//	func TestConformance(t *testing.T) {
//		h := spec.Harness{Name: "memory", New: func(tb testing.TB, clock core.Clock, capacity int) core.Store {
//			s := memory.New(memory.WithClock(clock), memory.WithCapacity(capacity))
//			tb.Cleanup(func() { s.Close() })
//			return s
//		}}
//		spec.Run(t, h)
//		spec.Differential(t, h)
//	}
package spec

//go:generate go run ./internal/gen -o SPEC.md
