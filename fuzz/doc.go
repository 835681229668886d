// Package fuzz holds the long-running property tests of leasehold: rapid
// state-machine tests of the model, the go test -fuzz targets built on them,
// and (under fuzz/mutants) the catalogue of historical bugs the harness must
// catch.
//
// The package has no API; everything is in its tests. The model properties
// (model_test.go) drive one model.Queue with random op sequences and check,
// after every step, the invariants of DESIGN.md together with an independent
// oracle of each op's guards, selection order and effects. Run them longer
// with
//
//	go test ./fuzz -run TestModel -rapid.checks=20000
//	go test ./fuzz -run '^$' -fuzz FuzzModel -fuzztime 30s
//
// A failing rapid run leaves a fail file under testdata/rapid/ that the next
// run replays first.
package fuzz
