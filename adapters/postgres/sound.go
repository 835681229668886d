package postgres

import (
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
)

// A transaction whose statements send its COMMIT with them (opTx.final)
// commits before the client has decoded a row they wrote, so the client
// can no longer undo a claim or an acknowledgement of a damaged record,
// as it does when rawTask.decode refuses a row (the transaction is rolled
// back and the record set aside, see scanWrite). Pop's and AckBatch's
// statements of such a transaction therefore check each row they write
// themselves, with soundSQL, and call the schema's unsure function on a
// row that fails the check: it raises SQLSTATE unsureCode, which aborts
// the statement, so the COMMIT sent after it never runs, and the
// operation runs again in a transaction that commits only after the
// client has decoded its rows (scanWrite's second attempt).
//
// soundSQL holds only for a row that rawTask.decode takes for a sound task
// (one not set aside): what it cannot vouch for with certainty, it
// refuses (an error history with a key decode does not know, say), and
// the operation then takes the slower way, which decides. It accepts every
// row the store's statements write (TestSoundSQLAgreesWithDecode).

// unsureCode is the SQLSTATE the schema's unsure function raises.
const unsureCode = "LH001"

// zeroMicros is the one time in Unix microseconds that fromMicros decodes
// to the zero time, which decode takes for a time that is not set.
var zeroMicros = time.Time{}.UnixMicro()

// soundSQL returns the condition that the task row whose columns are named
// through alias a (its errors as jsonb) is one rawTask.decode takes for a
// sound task. Each clause is one of decode's checks or of unsound's. It
// is used as CASE WHEN soundSQL THEN … ELSE unsure END, so that a NULL
// would fail the check too.
func soundSQL(a string) string {
	c := func(name string) string { return a + "." + name }
	unset := func(name string) string {
		return fmt.Sprintf("(%s IS NULL OR %s = %d)", c(name), c(name), zeroMicros)
	}
	set := func(name string) string { return "NOT " + unset(name) }
	st := func(s model.State) string { return fmt.Sprint(int(s)) }
	clauses := []string{
		fmt.Sprintf("%s BETWEEN %s AND %s", c("state"), st(model.Scheduled), st(model.Failed)),
		fmt.Sprintf("%s BETWEEN %d AND %d", c("priority"), model.MinPriority, model.MaxPriority),
		c("attempt") + " >= 0",
		c("max_attempts") + " >= 1",
		c("version") + " >= 1",
		c("claim_token") + " >= 0",
		set("enqueued_at"),
		fmt.Sprintf("%s BETWEEN 0 AND %d", c("timeout_ns"), int64(model.MaxDuration)),
		fmt.Sprintf("(%s = '[]'::jsonb OR %s)", c("errors"), historySQL(c("errors"))),
		// unsound's
		c("claim_token") + " <= " + c("version"),
		fmt.Sprintf("(%s <> %s OR (%s <> 0 AND %s AND %s AND %s >= 1))", c("state"), st(model.Running),
			c("claim_token"), set("claimed_at"), set("deadline"), c("attempt")),
		fmt.Sprintf("(%s NOT IN (%s, %s) OR (%s = 0 AND %s AND %s))", c("state"), st(model.Ready), st(model.Scheduled),
			c("claim_token"), unset("claimed_at"), unset("deadline")),
		fmt.Sprintf("(%s <> %s OR %s)", c("state"), st(model.Scheduled), set("run_after")),
		fmt.Sprintf("(%s NOT IN (%s, %s) OR (%s AND %s))", c("state"), st(model.Succeeded), st(model.Failed),
			set("finished_at"), unset("deadline")),
		fmt.Sprintf("(%s IN (%s, %s) OR %s)", c("state"), st(model.Succeeded), st(model.Failed), unset("finished_at")),
	}
	return "(" + strings.Join(clauses, "\n  AND ") + ")"
}

// historySQL is the condition that the error history h (jsonb) is one
// decodeErrors decodes: an array of objects whose keys are all errorEntry's
// own, each of a type encoding/json decodes into its field (or null, which
// it passes over): attempt an integer within int32 (an int on every
// platform), at one within int64, message a string, message_bytes
// standard base64 with its padding, lease_expired and cancelled booleans.
func historySQL(h string) string {
	keys := `'attempt', 'at', 'message', 'message_bytes', 'lease_expired', 'cancelled'`
	isType := func(key, types string) string {
		return fmt.Sprintf("coalesce(jsonb_typeof(e->'%s') IN (%s), true)", key, types)
	}
	integer := func(key string, lo, hi int64) string {
		return fmt.Sprintf(`(NOT e ? '%[1]s' OR jsonb_typeof(e->'%[1]s') = 'null' OR (jsonb_typeof(e->'%[1]s') = 'number'
      AND (e->'%[1]s')::text ~ '^-?[0-9]{1,19}$' AND (e->'%[1]s')::numeric BETWEEN %[2]d AND %[3]d))`, key, lo, hi)
	}
	entry := strings.Join([]string{
		"NOT EXISTS (SELECT 1 FROM jsonb_object_keys(e) k WHERE k NOT IN (" + keys + "))",
		integer("attempt", -1<<31, 1<<31-1),
		integer("at", -1<<63, 1<<63-1),
		isType("message", "'string', 'null'"),
		`(NOT e ? 'message_bytes' OR jsonb_typeof(e->'message_bytes') = 'null' OR (jsonb_typeof(e->'message_bytes') = 'string'
      AND e->>'message_bytes' ~ '^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$'))`,
		isType("lease_expired", "'boolean', 'null'"),
		isType("cancelled", "'boolean', 'null'"),
	}, "\n    AND ")
	// The CASEs keep jsonb_array_elements and jsonb_object_keys, which
	// fail on a value of another type, from all but an array and objects.
	return fmt.Sprintf(`(jsonb_typeof(%[1]s) = 'array' AND NOT EXISTS (
  SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(%[1]s) = 'array' THEN %[1]s ELSE '[]' END) e
  WHERE NOT coalesce(CASE WHEN jsonb_typeof(e) = 'object' THEN %[2]s ELSE false END, false)))`, h, entry)
}

// checked is the tail of a final statement, SELECT cols FROM u, with the
// rows of u that soundSQL does not vouch for answered by unsure (which
// raises).
func checked(cols string) string {
	return " SELECT " + cols + " FROM u WHERE CASE WHEN " + soundSQL("u") + " THEN true ELSE {s}.unsure(u.queue, u.id) END"
}
