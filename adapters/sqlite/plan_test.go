package sqlite

import (
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/model"
)

// TestPlansReadIndexesInOrder checks that no statement scans the whole tasks
// table, and that every statement that takes the first tasks in an order
// reads an index in that order instead of sorting (except those of sorts).
func TestPlansReadIndexesInOrder(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "plan.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	statements := map[string]string{
		"insert": sqlInsertNew, "set seq": sqlSetSeq, "seq": sqlSeq, "top version": sqlTopVersion, "release seq": sqlReleaseSeq, "any task": sqlAnyTask, "damaged deadline": sqlDamagedDeadline, "pending": sqlPending, "promote": sqlPromote,
		"pop returning": sqlPopReturning, "pop one": sqlPopOne, "pop select": sqlPopSelect, "pop claim": sqlPopClaim,
		"pop returned": sqlPopReturned, "pop one returned": sqlPopOneReturned, "ack returned": sqlAckReturned,
		"extend": sqlExtend, "ack": sqlAck, "fail": sqlFail, "retry": sqlRetry,
		"claim expired": sqlClaimExpired, "requeue": sqlRequeue, "finalize": sqlFinalize,
		"recover expired": sqlRecoverExpired, "inspect requeue": sqlInspectRequeue, "remove": sqlRemove,
		"prune": sqlPrune, "get": sqlGet, "counts": sqlCounts, "probe": sqlProbe,
		"set paused": sqlSetPaused, "cancel": sqlCancel, "cancelled": sqlCancelled,
		"ack many 2": sqlAckMany[2], "ack many max": sqlAckMany[ackManyMax],
	}
	for st, q := range sqlList {
		statements["list "+st.String()] = q
	}
	// Prune merges its two ordered scans of at most limit rows each; an
	// AckBatch's statement numbers the claims it matched, at most
	// ackManyMax, in the batch's order.
	sorts := map[string]bool{"prune": true, "ack many 2": true, "ack many max": true}
	// The statements that change the first tasks in an order read them from
	// their index in order, then reach each by its rowid.
	want := map[string][]string{
		"promote":          {"INDEX tasks_scheduled", "SEARCH tasks USING INTEGER PRIMARY KEY (rowid=?)"},
		"pop returning":    {"INDEX tasks_ready", "SEARCH tasks USING INTEGER PRIMARY KEY (rowid=?)"},
		"pop one":          {"INDEX tasks_ready", "SEARCH tasks USING INTEGER PRIMARY KEY (rowid=?)"},
		"pop returned":     {"INDEX tasks_ready", "SEARCH tasks USING INTEGER PRIMARY KEY (rowid=?)"},
		"pop one returned": {"INDEX tasks_ready", "SEARCH tasks USING INTEGER PRIMARY KEY (rowid=?)"},
		"pop select":       {"INDEX tasks_ready"},
		"claim expired":    {"INDEX tasks_running", "SEARCH tasks USING INTEGER PRIMARY KEY (rowid=?)"},
		"recover expired":  {"INDEX tasks_running", "SEARCH tasks USING INTEGER PRIMARY KEY (rowid=?)"},
		"prune":            {"INDEX tasks_succeeded", "INDEX tasks_failed"},
		// Counts and the capacity check count each state in its own
		// partial index; List reads the primary key in order.
		"counts": {"INDEX tasks_scheduled", "INDEX tasks_ready", "INDEX tasks_running", "INDEX tasks_succeeded",
			"INDEX tasks_failed", "INDEX tasks_other"},
		"pending":          {"INDEX tasks_scheduled", "INDEX tasks_ready", "INDEX tasks_running"},
		"top version":      {"SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (queue=?)"},
		"list ready":       {"SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (queue=? AND id>?)"},
		"list succeeded":   {"SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (queue=? AND id>?)"},
		"list quarantined": {"INDEX tasks_other (queue=? AND id>?)"},
		// An AckBatch's claims reach their tasks by the primary key.
		"ack many 2":   {"SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (queue=? AND id=?)", "SEARCH tasks USING INTEGER PRIMARY KEY (rowid=?)"},
		"ack many max": {"SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (queue=? AND id=?)", "SEARCH tasks USING INTEGER PRIMARY KEY (rowid=?)"},
	}
	for name, q := range statements {
		args := []any{"q"}
		// Unnumbered parameters (the INSERT's) take the arguments in order.
		for len(args) < len(regexp.MustCompile(`\?([^0-9]|$)`).FindAllString(q, -1)) {
			args = append(args, 1)
		}
		for _, m := range regexp.MustCompile(`\?([0-9]+)`).FindAllStringSubmatch(q, -1) {
			n, _ := strconv.Atoi(m[1])
			for len(args) < n {
				args = append(args, 1)
			}
		}
		rows, err := s.r.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		text := strings.Join(plan, "; ")
		t.Logf("%s: %s", name, text)
		for _, w := range want[name] {
			if !strings.Contains(text, w) {
				t.Errorf("%s: plan lacks %q: %s", name, w, text)
			}
		}
		for _, step := range plan {
			if strings.HasPrefix(step, "SCAN tasks") {
				t.Errorf("%s scans the tasks table: %s", name, text)
			}
			if strings.Contains(step, "TEMP B-TREE") && !sorts[name] {
				t.Errorf("%s sorts: %s", name, text)
			}
		}
	}
}

// TestOtherStatesAreTheStatesOfNoLife checks that tasks_other's condition
// names the five states of a task's life, as the model numbers them.
func TestOtherStatesAreTheStatesOfNoLife(t *testing.T) {
	var life []string
	for _, st := range model.States {
		life = append(life, strconv.Itoa(int(st)))
	}
	if want := "state NOT IN (" + strings.Join(life, ", ") + ")"; otherStates != want {
		t.Fatalf("otherStates = %s, want %s", otherStates, want)
	}
}
