package sqlite

import (
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/model"
)

// The SQL of every write. A statement that changes a task carries the
// guard of its operation in its WHERE clause (task ID with claim token and
// Running state for a worker, version and Running state for a broker, the
// source states of the model's transition table for everyone), so it can
// only change the task it was meant for. When it matches no row the
// operation diagnoses why in the same transaction (see ops.go).
//
// Every LIMIT is written "LIMIT ?n + 0": SQLite 3.54 plans a statement for
// the value bound to a bare "LIMIT ?n" and re-prepares it whenever that value
// changes, which would cost a parse per call.
//
// Numbers in the SQL are model.State values; the source states of each
// operation are read from model.Transitions, so the SQL cannot disagree with
// the table.

// from returns the states op is legal from, as a SQL list ("1, 3, 4").
func from(op model.Op) string {
	var s []string
	for _, st := range model.States {
		if _, ok := model.Row(op, st); ok {
			s = append(s, fmt.Sprint(int(st)))
		}
	}
	if len(s) == 0 {
		panic("leasehold/sqlite: model has no source state for " + op.String())
	}
	return strings.Join(s, ", ")
}

// appendError is the errors column with one entry appended. A message that
// is not valid UTF-8 cannot be a JSON string as it is: raw then names a
// parameter holding its bytes in base64 (NULL otherwise), kept beside the
// repaired text so the message reads back exactly. A column that is not a
// JSON array is left as it is, and the row then fails to decode with
// ErrCorrupt, which rolls the operation back.
func appendError(at, message, raw, leaseExpired string) string {
	entry := func(extra string) string {
		return `json_object('attempt', attempt, 'at', ` + at + `, 'message', ` + message + extra +
			`, 'lease_expired', json('` + leaseExpired + `'))`
	}
	return `CASE WHEN NOT json_valid(errors) THEN errors
  WHEN json_type(errors) <> 'array' THEN errors
  ELSE json_insert(errors, '$[#]', CASE WHEN ` + raw + ` IS NULL THEN ` + entry("") + `
    ELSE ` + entry(`, 'message_bytes', `+raw) + ` END) END`
}

// newVersion is the version a statement changing one task stamps it with:
// the parameter ?9, the queue's next sequence value (see seq.go), which the
// caller draws (tx.advance) only once the statement matched, so an
// operation that is refused writes nothing.
const newVersion = `?9`

// notPaused is the condition of every Pop statement's choice of tasks: the
// queue ?1 is not paused. The statement reads the flag itself, in the Pop's
// write transaction, so a paused queue's Pop claims nothing.
const notPaused = `NOT EXISTS (SELECT 1 FROM queues WHERE name = ?1 AND paused = 1)`

var (
	// ?1 queue, ?2 capacity: the pending tasks, counted up to the capacity
	// in the partial index of each pending state.
	sqlPending = fmt.Sprintf(`SELECT (SELECT count(*) FROM (SELECT 1 FROM tasks WHERE queue = ?1 AND state = %d LIMIT ?2 + 0))
  + (SELECT count(*) FROM (SELECT 1 FROM tasks WHERE queue = ?1 AND state = %d LIMIT ?2 + 0))
  + (SELECT count(*) FROM (SELECT 1 FROM tasks WHERE queue = ?1 AND state = %d LIMIT ?2 + 0))`,
		model.Scheduled, model.Ready, model.Running)
	// The queue's sequence (seq.go). ?1 queue, ?2 the last value drawn, ?3
	// the owner (0: seq is exact).
	sqlSetSeq = `INSERT INTO queues (name, seq, owner) VALUES (?1, ?2, ?3)
ON CONFLICT (name) DO UPDATE SET seq = ?2, owner = ?3`
	sqlSeq = `SELECT seq, typeof(seq) = 'integer', owner FROM queues WHERE name = ?1`
	// ?1 queue: the largest version of its tasks (NULL for none).
	sqlTopVersion = `SELECT max(version) FROM tasks WHERE queue = ?1 AND typeof(version) = 'integer'`
	// ?1 queue, ?2 the last value drawn, ?3 the owner giving the row back.
	sqlReleaseSeq = `UPDATE queues SET seq = max(seq, ?2), owner = 0
WHERE name = ?1 AND owner = ?3 AND typeof(seq) = 'integer'`
	sqlAnyTask = `SELECT 1 FROM tasks WHERE queue = ?1 LIMIT 1`
	// Enqueue: insertTaskSQL, refusing an ID already taken.
	sqlInsertNew = insertTaskSQL + ` ON CONFLICT (queue, id) DO NOTHING`
	sqlProbe     = `SELECT state, claim_token, version FROM tasks WHERE queue = ?1 AND id = ?2`
	// ?1 queue, ?2 key: the key's last taker and what its hold depends on
	// (model.Queue.KeyHolder); the task columns are NULL when it is gone.
	sqlKeyHolder = `SELECT k.task_id, t.state, t.unique_key, t.unique_until FROM unique_keys k
LEFT JOIN tasks t ON t.queue = k.queue AND t.id = k.task_id WHERE k.queue = ?1 AND k.key = ?2`
	// ?1 queue, ?2 key, ?3 the task that takes it
	sqlTakeKey = `INSERT INTO unique_keys (queue, key, task_id) VALUES (?1, ?2, ?3)
ON CONFLICT (queue, key) DO UPDATE SET task_id = excluded.task_id`

	// ?1 queue, ?2 now, ?3 limit (-1: none), ?4 the sequence (the tasks
	// are stamped with the values after it, in order)
	sqlPromote = fmt.Sprintf(`WITH due AS (
  SELECT rowid AS rid, run_after, id FROM tasks WHERE queue = ?1 AND state = %[1]d AND run_after <= ?2 ORDER BY run_after, id LIMIT ?3 + 0
), picked AS MATERIALIZED (SELECT rid, row_number() OVER (ORDER BY run_after, id) AS rank FROM due)
UPDATE tasks SET state = %[2]d, version = ?4 + picked.rank
FROM picked WHERE tasks.rowid = picked.rid AND tasks.queue = ?1 AND tasks.state IN (%[3]s)
RETURNING %[4]s`, model.Scheduled, model.Ready, from(model.OpPromote), qualifiedColumns)

	// ?1 queue, ?2 n, ?3 now, ?4 deadline, ?5 the last value used (the
	// claims are stamped with the values after it)
	sqlPopReturning = fmt.Sprintf(`WITH first AS (
  SELECT rowid AS rid, priority, version FROM tasks WHERE queue = ?1 AND state = %[1]d AND %[5]s ORDER BY priority DESC, version LIMIT ?2 + 0
), picked AS MATERIALIZED (SELECT rid, row_number() OVER (ORDER BY priority DESC, version) AS rank FROM first)
UPDATE tasks SET state = %[2]d, version = ?5 + picked.rank, claim_token = ?5 + picked.rank,
  attempt = attempt + 1, claimed_at = ?3, deadline = ?4
FROM picked WHERE tasks.rowid = picked.rid AND tasks.queue = ?1 AND tasks.state IN (%[3]s)
RETURNING %[4]s`, model.Ready, model.Running, from(model.OpPop), qualifiedColumns, notPaused)

	// sqlPopReturning returning only what it does not set itself
	// (popReturned).
	sqlPopReturned = strings.Replace(sqlPopReturning, "RETURNING "+qualifiedColumns, "RETURNING "+popReturned.list, 1)

	// sqlPopReturning for n = 1 (?2): the first Ready task, found by a
	// subquery on the index, stamped with the next sequence value, without
	// the ranking of a batch.
	sqlPopOne = fmt.Sprintf(`UPDATE tasks SET state = %[1]d, version = ?5 + 1, claim_token = ?5 + 1,
  attempt = attempt + 1, claimed_at = ?3, deadline = ?4
WHERE rowid = (SELECT rowid FROM tasks WHERE queue = ?1 AND state = %[2]d AND %[5]s ORDER BY priority DESC, version LIMIT ?2 + 0)
  AND queue = ?1 AND state IN (%[3]s)
RETURNING %[4]s`, model.Running, model.Ready, from(model.OpPop), taskColumns, notPaused)

	// sqlPopOne returning only what it does not set itself (popOneKnown).
	sqlPopOneReturned = strings.Replace(sqlPopOne, "RETURNING "+taskColumns, "RETURNING "+popOneReturned.list, 1)

	// ?1 queue, ?2 n
	sqlPopSelect = fmt.Sprintf(`SELECT %s FROM tasks WHERE queue = ?1 AND state = %d AND %s ORDER BY priority DESC, version LIMIT ?2 + 0`,
		taskColumns, model.Ready, notPaused)
	// ?1 queue, ?2 id, ?3 new version (and token), ?4 now, ?5 deadline, ?6 version seen by the select
	sqlPopClaim = fmt.Sprintf(`UPDATE tasks SET state = %d, version = ?3, claim_token = ?3, attempt = attempt + 1,
  claimed_at = ?4, deadline = ?5
WHERE queue = ?1 AND id = ?2 AND state IN (%s) AND version = ?6`, model.Running, from(model.OpPop))

	// Worker ops: ?1 queue, ?2 id, ?3 claim token; then their own.
	workerGuard = `WHERE queue = ?1 AND id = ?2 AND claim_token = ?3 AND state IN (%s) RETURNING ` + taskColumns

	// ?4 deadline
	sqlExtend = fmt.Sprintf(`UPDATE tasks SET version = %s, deadline = ?4 `+workerGuard,
		newVersion, from(model.OpExtend))
	// ?4 now, ?5 result
	sqlAck = fmt.Sprintf(`UPDATE tasks SET version = %s, state = %d, result = ?5, finished_at = ?4, deadline = NULL `+workerGuard,
		newVersion, model.Succeeded, from(model.OpAck))
	// sqlAck returning only what it does not set itself or match
	// (ackKnown), for AckBatch.
	sqlAckReturned = strings.Replace(sqlAck, "RETURNING "+taskColumns, "RETURNING "+ackReturned.list, 1)
	// ?4 now, ?5 message, ?6 its bytes if not UTF-8
	sqlFail = fmt.Sprintf(`UPDATE tasks SET version = %s, state = %d, errors = %s, finished_at = ?4, deadline = NULL `+workerGuard,
		newVersion, model.Failed, appendError("?4", "?5", "?6", "false"), from(model.OpFail))
	// ?4 now, ?5 message, ?6 new state, ?7 run after, ?8 the message's bytes if not UTF-8
	sqlRetry = fmt.Sprintf(`UPDATE tasks SET version = %s, state = ?6, errors = %s, run_after = ?7,
  claim_token = 0, claimed_at = NULL, deadline = NULL, finished_at = NULL `+workerGuard,
		newVersion, appendError("?4", "?5", "?8", "false"), from(model.OpRetry))

	// ?1 queue. A task whose time in its order index is not an integer
	// (NULL, text or a blob, which sort before and after every number)
	// would never be found due, expired or old enough: the scans look for
	// one first, at both ends of the index, and set it aside.
	sqlDamagedDeadline = damagedTime(model.Running, "deadline")
	sqlDamagedRunAfter = damagedTime(model.Scheduled, "run_after")
	sqlDamagedFinished = [...]string{damagedTime(model.Succeeded, "finished_at"), damagedTime(model.Failed, "finished_at")}

	// ?1 queue, ?2 id, ?3 why: a damaged record is set aside (state 6,
	// which no order index holds).
	sqlSetAside = fmt.Sprintf(`UPDATE tasks SET state = %d, quarantine = ?3 WHERE queue = ?1 AND id = ?2`, model.Quarantined)

	// ?1 queue, ?2 now, ?3 limit, ?4 new deadline, ?5 the sequence
	sqlClaimExpired = fmt.Sprintf(`WITH expired AS (
  SELECT rowid AS rid, deadline, id FROM tasks WHERE queue = ?1 AND state = %[1]d AND deadline <= ?2 ORDER BY deadline, id LIMIT ?3 + 0
), picked AS MATERIALIZED (SELECT rid, row_number() OVER (ORDER BY deadline, id) AS rank FROM expired)
UPDATE tasks SET version = ?5 + picked.rank, deadline = ?4
FROM picked WHERE tasks.rowid = picked.rid AND tasks.queue = ?1 AND tasks.state IN (%[2]s)
RETURNING %[3]s`, model.Running, from(model.OpClaimExpired), qualifiedColumns)

	// Broker decisions: ?1 queue, ?2 id, ?3 version of the reap claim; then their own.
	brokerGuard = `WHERE queue = ?1 AND id = ?2 AND version = ?3 AND state IN (%s) RETURNING ` + taskColumns

	// ?4 now, ?5 message, ?6 new state, ?7 run after, ?8 the message's bytes if not UTF-8
	sqlRequeue = fmt.Sprintf(`UPDATE tasks SET version = %s, state = ?6, errors = %s, run_after = ?7,
  claim_token = 0, claimed_at = NULL, deadline = NULL, finished_at = NULL `+brokerGuard,
		newVersion, appendError("?4", "?5", "?8", "true"), from(model.OpRequeue))
	// ?4 now, ?5 message, ?6 its bytes if not UTF-8
	sqlFinalize = fmt.Sprintf(`UPDATE tasks SET version = %s, state = %d, errors = %s, finished_at = ?4, deadline = NULL `+brokerGuard,
		newVersion, model.Failed, appendError("?4", "?5", "?6", "true"), from(model.OpFinalize))

	// ?1 queue, ?2 now, ?3 limit, ?4 state when retried, ?5 run after when
	// retried, ?6 the sequence
	sqlRecoverExpired = fmt.Sprintf(`WITH expired AS (
  SELECT rowid AS rid, deadline, id FROM tasks WHERE queue = ?1 AND state = %[1]d AND deadline <= ?2 ORDER BY deadline, id LIMIT ?3 + 0
), picked AS MATERIALIZED (SELECT rid, row_number() OVER (ORDER BY deadline, id) AS rank FROM expired)
UPDATE tasks SET version = ?6 + picked.rank,
  errors = %[2]s,
  state       = CASE WHEN attempt >= max_attempts THEN %[3]d ELSE ?4 END,
  finished_at = CASE WHEN attempt >= max_attempts THEN ?2 ELSE NULL END,
  run_after   = CASE WHEN attempt >= max_attempts THEN run_after ELSE ?5 END,
  claim_token = CASE WHEN attempt >= max_attempts THEN claim_token ELSE 0 END,
  claimed_at  = CASE WHEN attempt >= max_attempts THEN claimed_at ELSE NULL END,
  deadline = NULL
FROM picked WHERE tasks.rowid = picked.rid AND tasks.queue = ?1 AND tasks.state IN (%[4]s)
RETURNING %[5]s`, model.Running, appendError("?2", "'"+model.LeaseExpiredMessage+"'", "NULL", "true"),
		model.Failed, from(model.OpRecoverExpired), qualifiedColumns)

	// Inspector actions: ?1 queue, ?2 id, ?3 expected version (0: any).
	// ?1 queue, ?2 id, ?3 expect (0: any), ?4 now, ?5 message
	sqlCancel = fmt.Sprintf(`UPDATE tasks SET version = %s, state = %d, errors = %s, finished_at = ?4, deadline = NULL
WHERE queue = ?1 AND id = ?2 AND (?3 = 0 OR version = ?3) AND state IN (%s) RETURNING %s`,
		newVersion, model.Failed, strings.Replace(appendError("?4", "?5", "NULL", "false"), `, 'lease_expired', json('false'))`, `, 'lease_expired', json('false'), 'cancelled', json('true'))`, 2),
		from(model.OpCancel), taskColumns)
	// ?1 queue, ?2 id: the task is Failed and its last error is a
	// cancellation (diagnoseClaim: the claim's token still matches).
	sqlCancelled = fmt.Sprintf(`SELECT 1 FROM tasks WHERE queue = ?1 AND id = ?2 AND state = %d AND json_valid(errors)
  AND json_extract(errors, '$[#-1].cancelled') = 1`, model.Failed)
	sqlInspectRequeue = fmt.Sprintf(`UPDATE tasks SET version = %s, state = %d, attempt = 0, result = NULL, run_after = NULL,
  claim_token = 0, claimed_at = NULL, deadline = NULL, finished_at = NULL
WHERE queue = ?1 AND id = ?2 AND (?3 = 0 OR version = ?3) AND state IN (%s) RETURNING %s`,
		newVersion, model.Ready, from(model.OpInspectRequeue), taskColumns)
	// Remove is legal from every state, Quarantined included; the caller
	// refuses an expected version on a record it cannot read.
	sqlRemove = `DELETE FROM tasks WHERE queue = ?1 AND id = ?2 AND (?3 = 0 OR version = ?3) RETURNING ` + taskColumns

	// ?1 queue, ?2 before, ?3 succeeded wanted, ?4 failed wanted, ?5 limit
	// (-1: none). Each state is scanned in index order up to the limit, and
	// the oldest of both are taken.
	sqlPrune = fmt.Sprintf(`DELETE FROM tasks WHERE rowid IN (
  SELECT rid FROM (
    SELECT * FROM (SELECT rowid AS rid, finished_at, id FROM tasks
      WHERE ?3 AND queue = ?1 AND state = %[1]d AND finished_at < ?2 ORDER BY finished_at, id LIMIT ?5 + 0)
    UNION ALL
    SELECT * FROM (SELECT rowid AS rid, finished_at, id FROM tasks
      WHERE ?4 AND queue = ?1 AND state = %[2]d AND finished_at < ?2 ORDER BY finished_at, id LIMIT ?5 + 0)
  ) ORDER BY finished_at, id LIMIT ?5 + 0)
RETURNING id, finished_at`, model.Succeeded, model.Failed)
)

// The columns sqlPopOne and sqlAck set or match, which need not come back:
// the queue, the claim's ID and token, the state, version, result and
// times they write; and quarantine, which a row in a state of a task's
// life (as these leave it) does not use.
var (
	popOneReturned = returning(colQueue, colState, colVersion, colClaimToken, colClaimedAt, colDeadline, colQuarantine)
	// sqlPopReturning numbers its claims by rank: each one's version comes
	// back, and is its token.
	popReturned = func() returned {
		r := returning(colQueue, colState, colClaimToken, colClaimedAt, colDeadline, colQuarantine)
		r.list = "tasks." + strings.ReplaceAll(r.list, ", ", ", tasks.")
		r.tokenIsVersion = true
		return r
	}()
	ackReturned = returning(colQueue, colID, colState, colVersion, colClaimToken, colFinishedAt, colDeadline, colResult, colQuarantine)
)

// ackManyMax is the most claims one sqlAckMany statement acknowledges: an
// AckBatch of more runs one statement per ackManyMax of them.
const ackManyMax = 32

// sqlAckMany[n] acknowledges n claims of an AckBatch in one statement, each
// by the guard of sqlAck (its ID, its token, a state Ack is legal from).
// ?1 queue, ?2 now, ?3 the sequence's value before the statement; claim i
// (from 0) binds its task ID, token and result as ?(4+3i), ?(5+3i) and
// ?(6+3i). The claims it matches are stamped in their order in the batch,
// the first with ?3 + 1; the others are left for the caller to diagnose.
// Each row comes back with its ID, version and token, and the columns
// sqlAck does not know either (ackManyReturned): one statement's work in
// place of n, whose cost is mostly the statement's own (its cursors, the
// table RETURNING keeps its rows in, its journal).
var sqlAckMany = func() (qs [ackManyMax + 1]string) {
	for n := 2; n <= ackManyMax; n++ {
		var v strings.Builder
		for i := range n {
			if i > 0 {
				v.WriteString(", ")
			}
			fmt.Fprintf(&v, "(%d, ?%d, ?%d, ?%d)", i, 4+3*i, 5+3*i, 6+3*i)
		}
		qs[n] = fmt.Sprintf(`WITH v(i, id, token, r) AS (VALUES %s),
picked AS MATERIALIZED (
  SELECT tasks.rowid AS rid, v.r AS r, row_number() OVER (ORDER BY v.i) AS rank
  FROM v JOIN tasks ON tasks.queue = ?1 AND tasks.id = v.id
  WHERE tasks.claim_token = v.token AND tasks.state IN (%s))
UPDATE tasks SET version = ?3 + picked.rank, state = %d, result = picked.r, finished_at = ?2, deadline = NULL
FROM picked WHERE tasks.rowid = picked.rid RETURNING %s`,
			v.String(), from(model.OpAck), model.Succeeded, ackManyReturned.list)
	}
	return qs
}()

// ackManyReturned is what sqlAckMany returns: the columns of ackReturned,
// and the ID, version and token, which differ from row to row.
var ackManyReturned = func() returned {
	r := returning(colQueue, colState, colFinishedAt, colDeadline, colResult, colQuarantine)
	r.list = "tasks." + strings.ReplaceAll(r.list, ", ", ", tasks.")
	return r
}()

// Reads run on the read-only pool.
var (
	sqlGet = `SELECT ` + taskColumns + ` FROM tasks WHERE queue = ?1 AND id = ?2`
	// One statement per state. No index orders the tasks of a state by ID
	// (each transition would rewrite two of its entries): List reads the
	// primary key (queue, id) in order from After and keeps the tasks of
	// its state ("+state": not through the state's partial index, which is
	// in another order).
	sqlList = func() map[model.State]string {
		m := map[model.State]string{}
		for _, st := range model.States {
			m[st] = fmt.Sprintf(`SELECT %s FROM tasks WHERE queue = ?1 AND +state = %d AND id > ?2 ORDER BY id LIMIT ?3 + 0`, taskColumns, st)
		}
		// Records set aside, and rows whose state is not a state at all:
		// tasks_other, by ID.
		m[model.Quarantined] = fmt.Sprintf(`SELECT %s FROM tasks WHERE queue = ?1 AND %s AND id > ?2 ORDER BY id LIMIT ?3 + 0`,
			taskColumns, otherStates)
		return m
	}()
	// Counts: (0, state, count) per state, each counted in the state's
	// partial index, then (0, NULL, count) of the other records
	// (tasks_other) and (1, NULL, paused) when the queue has a row, in one
	// statement so it reads one committed state.
	sqlCounts = func() string {
		var b strings.Builder
		for _, st := range model.States {
			fmt.Fprintf(&b, "SELECT 0, %[1]d, count(*) FROM tasks WHERE queue = ?1 AND state = %[1]d\nUNION ALL ", st)
		}
		return b.String() + `SELECT 0, NULL, count(*) FROM tasks WHERE queue = ?1 AND ` + otherStates + `
UNION ALL SELECT 1, NULL, paused = 1 FROM queues WHERE name = ?1`
	}()
	// ?1 queue, ?2 the flag (0 or 1). A queue paused before its first task
	// gets its row with the sequence at 0.
	sqlSetPaused = `INSERT INTO queues (name, seq, paused) VALUES (?1, 0, ?2)
ON CONFLICT (name) DO UPDATE SET paused = ?2`
	sqlQueues = `SELECT name FROM queues ORDER BY name`
)

// damagedTime is the query for a task in state whose column col is not an
// integer (see sqlDamagedDeadline).
func damagedTime(state model.State, col string) string {
	return fmt.Sprintf(`SELECT id FROM (SELECT id FROM tasks WHERE queue = ?1 AND state = %[1]d AND %[2]s IS NULL LIMIT 1)
UNION ALL SELECT id FROM (SELECT id FROM tasks WHERE queue = ?1 AND state = %[1]d AND %[2]s >= '' LIMIT 1)`, state, col)
}
