package spec

import (
	"bytes"
	"flag"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/core"
)

// modelHarness makes ModelStores: the suite run on the model itself, so every
// scenario is checked against the model's own answers.
var modelHarness = Harness{
	Name: "model",
	New: func(tb testing.TB, clock core.Clock, capacity int) core.Store {
		s := NewModelStore(clock, capacity)
		tb.Cleanup(func() { s.Close() })
		return s
	},
	// The model's application transactions: they enqueue, enqueue a
	// batch and ack.
	Tx: &TxHarness{Open: func(tb testing.TB, s core.Store) TxDB { return s.(*ModelStore) }, Ack: true},
}

func TestRunOnTheModel(t *testing.T) { Run(t, modelHarness) }

func TestDifferentialOnTheModel(t *testing.T) { Differential(t, modelHarness) }

// TestDifferentialReachesEveryOutcome checks that the generator of
// Differential is not blunt: over its sequences, every mutating operation
// succeeds a fair number of times, claim operations meet stale claims and
// invalid transitions, bulk operations return tasks, and every error kind
// turns up.
//
// It measures one fixed sample (rapid seed 1), so the counts it requires do
// not vary from run to run.
func TestDifferentialReachesEveryOutcome(t *testing.T) {
	seed := flag.Lookup("rapid.seed")
	old := seed.Value.String()
	if err := seed.Value.Set("1"); err != nil {
		t.Fatal(err)
	}
	defer seed.Value.Set(old)
	seen := map[string]map[string]int{}
	steps := 0
	differential(t, t, modelHarness, func(desc string, err error) {
		steps++
		op, _, _ := strings.Cut(strings.TrimLeft(desc, "+0123456789.µms "), "(")
		outcome := describeError(err)
		if err == nil && strings.HasSuffix(desc, "= []") {
			outcome = "empty"
		}
		if seen[op] == nil {
			seen[op] = map[string]int{}
		}
		seen[op][outcome]++
		// A batch's items are counted apart: "AckBatch item" and so on.
		if _, items, ok := strings.Cut(desc, " = ["); ok && err == nil && strings.Contains(op, "Batch") {
			if seen[op+" item"] == nil {
				seen[op+" item"] = map[string]int{}
			}
			for _, it := range strings.Split(strings.TrimSuffix(items, "]"), "|") {
				seen[op+" item"][it]++
			}
		}
	})
	checks, _ := strconv.Atoi(flag.Lookup("rapid.checks").Value.String())
	if testing.Short() {
		checks /= 5
	}
	if checks < 100 && os.Getenv("RAPID_CHECKS") == "" && !testing.Short() {
		t.Errorf("rapid runs %d sequences by default, want at least 100", checks)
	}
	if steps != checks*DifferentialSteps || DifferentialSteps != 50 {
		t.Errorf("%d operations in %d sequences, want %d each", steps, checks, DifferentialSteps)
	}
	for _, op := range slices.Sorted(maps.Keys(seen)) {
		t.Logf("%-15s %v", op, seen[op])
	}
	atLeast := func(op, outcome string, n int) {
		t.Helper()
		if got := seen[op][outcome]; got < n {
			t.Errorf("%s answered %q %d times, want at least %d", op, outcome, got, n)
		}
	}
	for _, op := range []string{"Enqueue", "Pop", "Extend", "Ack", "Fail", "Retry", "ClaimExpired", "Requeue",
		"Finalize", "RecoverExpired", "Promote", "InspectRequeue", "Remove", "Prune"} {
		atLeast(op, "ok", 10)
		atLeast(op, "invalid argument", 3)
	}
	for _, op := range []string{"Extend", "Ack", "Fail", "Retry", "Requeue", "Finalize"} {
		atLeast(op, "stale claim", 20)
	}
	for _, op := range []string{"Ack", "Fail", "Retry", "Extend"} {
		atLeast(op, "invalid transition ("+op+" from succeeded)", 3)
		atLeast(op, "invalid transition ("+op+" from failed)", 3)
	}
	notRunning := 0
	for _, op := range []string{"Requeue", "Finalize"} {
		for outcome, n := range seen[op] {
			if strings.HasPrefix(outcome, "invalid transition") {
				notRunning += n
			}
		}
	}
	if notRunning < 3 {
		t.Errorf("broker decisions met a task that was not running %d times, want at least 3", notRunning)
	}
	atLeast("InspectRequeue", "invalid transition (InspectRequeue from ready)", 3)
	atLeast("Enqueue", "conflict", 20)
	atLeast("Enqueue", "queue full", 5)
	atLeast("Remove", "conflict", 3)
	atLeast("Remove", "task not found", 3)
	for _, op := range []string{"EnqueueBatch", "AckBatch"} {
		atLeast(op, "ok", 10)
		atLeast(op, "invalid argument", 3)
		atLeast(op+" item", "ok", 10)
		atLeast(op+" item", "invalid argument", 3)
	}
	atLeast("EnqueueBatch item", "conflict", 10)
	atLeast("EnqueueBatch item", "queue full", 3)
	atLeast("AckBatch item", "stale claim", 10)
	atLeast("AckBatch item", "invalid transition (Ack from succeeded)", 3)
}

// TestSpecDocumentIsFresh fails when the committed SPEC.md is not what the
// model and the scenarios generate.
func TestSpecDocumentIsFresh(t *testing.T) {
	committed, err := os.ReadFile("SPEC.md")
	if err != nil {
		t.Fatalf("%v: run `make spec` to generate spec/SPEC.md", err)
	}
	generated := Document()
	if bytes.Equal(committed, generated) {
		return
	}
	c, g := strings.Split(string(committed), "\n"), strings.Split(string(generated), "\n")
	line := 0
	for line < len(c) && line < len(g) && c[line] == g[line] {
		line++
	}
	var have, want string
	if line < len(c) {
		have = c[line]
	}
	if line < len(g) {
		want = g[line]
	}
	t.Errorf("spec/SPEC.md is stale: run `make spec` (go generate ./spec) and commit it.\nFirst difference, line %d:\n\tcommitted: %s\n\tgenerated: %s", line+1, have, want)
}
