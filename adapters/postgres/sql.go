package postgres

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/leasehold/leasehold/model"
)

// The SQL of every operation. A statement that changes a task carries the
// guard of its operation in its WHERE clause (task ID with claim token and
// a state the op is legal from for a worker, version and state for a
// broker, the version the operator saw for an inspector), so it can only
// change the task it was meant for; when it matches no row the operation
// reads the task to say why. Every write runs after the queue's row lock
// (queries.lock), in a statement of its own, so it sees every write
// committed before the lock was granted. A statement that stamps tasks
// numbers them from the sequence (seqBase) by rank and advances the
// sequence by the number it stamped, in the same statement: a refused
// operation stamps nothing and draws nothing.
//
// Numbers in the SQL are model.State values; the source states of each
// operation are read from model.Transitions, so the SQL cannot disagree with
// the table. "{s}" is the quoted schema name.

// from returns the states op is legal from, as a SQL list ("1, 3, 4").
func from(op model.Op) string {
	var s []string
	for _, st := range model.States {
		if _, ok := model.Row(op, st); ok {
			s = append(s, fmt.Sprint(int(st)))
		}
	}
	if len(s) == 0 {
		panic("leasehold/postgres: model has no source state for " + op.String())
	}
	return strings.Join(s, ", ")
}

const (
	taskColumns = `queue, id, payload, priority, state, attempt, max_attempts, version, claim_token, enqueued_at, run_after, claimed_at, deadline, finished_at, errors::text, result, timeout_ns, unique_key, unique_until, quarantine`
	// nowMicros is the database's clock in Unix microseconds.
	nowMicros = `(extract(epoch FROM clock_timestamp()) * 1000000)::bigint`
	// seqBase is the sequence's value before the statement.
	seqBase = `(SELECT seq FROM {s}.queues WHERE name = $1)`
)

// txNow is the transaction's clock reading, set by queries.dbNow, in Unix
// microseconds.
const txNow = `current_setting('leasehold.now')::bigint`

// atTxNow turns the time parameters params of q into offsets from txNow, so
// that q can go to the server in the round trip that takes the lock, before
// the client knows the reading: $n becomes (txNow + $n).
func atTxNow(q string, params ...int) string {
	for _, n := range params {
		q = regexp.MustCompile(fmt.Sprintf(`\$%d\b`, n)).ReplaceAllString(q, fmt.Sprintf("(%s + $$%d::bigint)", txNow, n))
	}
	return q
}

// bump advances the queue's sequence by the number of rows of the CTE u.
const bump = `, bumped AS (UPDATE {s}.queues SET seq = seq + (SELECT count(*) FROM u) WHERE name = $1)`

// appendError is the errors column with one entry appended. at, message,
// raw and leaseExpired are SQL expressions; raw is the message's bytes in
// base64 when they cannot be JSON text as they are (NULL otherwise). A
// column that is not a JSON array is left as it is, and the row then fails
// to decode with ErrCorrupt, which rolls the operation back.
func appendError(at, message, raw, leaseExpired string) string {
	return `CASE WHEN jsonb_typeof(errors) <> 'array' THEN errors ELSE errors || jsonb_build_array(
  jsonb_build_object('attempt', attempt, 'at', ` + at + `, 'message', ` + message + `::text, 'lease_expired', ` + leaseExpired + `)
  || CASE WHEN ` + raw + `::text IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('message_bytes', ` + raw + `::text) END) END`
}

// probedState is the state column of the probes: the state, negated for a
// Failed task whose last error is an operator's cancellation, so the
// refusal of a claim on it can say so (probeRow reads it as
// failedCancelled).
var probedState = fmt.Sprintf(`CASE WHEN state = %[1]d AND jsonb_typeof(errors) = 'array' AND coalesce(errors->-1->>'cancelled' = 'true', false) THEN -%[1]d ELSE state END`, model.Failed)

// queries holds every statement with the schema filled in.
type queries struct {
	schema string

	ensureQueue, ensureQueueFinal, lock, dbNow, dbNowOwn, anyTask, probe, pending string

	enqueue, promote, popReturning, popSelect, popClaim string
	enqueueMany, keyHolder, takeKey                     string
	extend, ack, fail, retry                            string
	ackMany                                             string
	damagedDeadline, claimExpired, requeue, finalize    string
	recoverExpired, inspectRequeue, remove, prune       string
	setAside                                            string
	get, counts, queues, setPaused, cancel              string
	list                                                map[model.State]string
	notify                                              string

	// The same statements with their times as offsets from txNow
	// (atTxNow), sent with the lock, and what follows them.
	enqueueNow, popNow, ackNow, ackManyProbedNow string
	extendNow, failNow, retryNow                 string
	enqueueManyProbedNow                         string
	// A worker's decision sent with its COMMIT (workerOp): checked as
	// popNowFinal is, keyed by its statement with offsets (ackNow, …).
	decisionFinal map[string]string
	// popNow and ackManyProbedNow for a transaction that sends its COMMIT
	// with them (opTx.final): each row they write is checked by soundSQL
	// (checked), and they write nothing on a queue whose sequence row is
	// missing or 0 (which the client finds only after the COMMIT).
	popNowFinal, ackManyProbedFinal string
}

// replaceOnce replaces the one occurrence of old in s; a statement built
// from another must find its place in it exactly once.
func replaceOnce(s, old, new string) string {
	if n := strings.Count(s, old); n != 1 {
		panic(fmt.Sprintf("leasehold/postgres: %d occurrences of %q in a statement, want 1", n, old))
	}
	return strings.Replace(s, old, new, 1)
}

func buildQueries(schema string) queries {
	r := strings.NewReplacer("{s}", schema)
	f := func(format string, args ...any) string { return r.Replace(fmt.Sprintf(format, args...)) }
	workerGuard := `WHERE queue = $1 AND id = $2 AND claim_token = $3 AND state IN (%s) RETURNING ` + taskColumns + `)` + bump + ` SELECT ` + taskColumns + ` FROM u`
	brokerGuard := `WHERE queue = $1 AND id = $2 AND version = $3 AND state IN (%s) RETURNING ` + taskColumns + `)` + bump + ` SELECT ` + taskColumns + ` FROM u`
	q := queries{
		schema:      schema,
		ensureQueue: f(`INSERT INTO {s}.queues (name, seq) VALUES ($1, 0) ON CONFLICT (name) DO NOTHING`),
		// ensureQueue for a transaction that commits with its statements
		// (opTx.final): a queue that has tasks but no row is left without
		// one (its operations are ErrCorrupt, and change nothing).
		ensureQueueFinal: f(`INSERT INTO {s}.queues (name, seq) SELECT $1, 0 WHERE NOT EXISTS (SELECT 1 FROM {s}.tasks WHERE queue = $1)
ON CONFLICT (name) DO NOTHING`),
		// The lock also says whether the queue has tasks while its
		// sequence is 0 (what anyTask asks; only then is the search made).
		lock:      f(`SELECT seq, paused, seq = 0 AND EXISTS (SELECT 1 FROM {s}.tasks WHERE queue = $1) FROM {s}.queues WHERE name = $1 FOR UPDATE`),
		setPaused: f(`UPDATE {s}.queues SET paused = $2 WHERE name = $1`),
		// Whether the queue has tasks, asked only when its row (read after
		// the lock) is missing or its sequence is 0: a search of the tasks
		// passes over the index entries of every earlier version of the
		// queue's tasks until one is live, which grows with the number of
		// tasks a queue has processed until a vacuum removes them (0.27 ms
		// a transaction after 6 000 tasks).
		anyTask: f(`SELECT CASE WHEN (SELECT seq FROM {s}.queues WHERE name = $1) > 0 THEN false
  ELSE EXISTS (SELECT 1 FROM {s}.tasks WHERE queue = $1) END`),
		// The state is negated for a task an operator cancelled (see
		// probedState).
		probe: f(`SELECT %s, claim_token, version FROM {s}.tasks WHERE queue = $1 AND id = $2`, probedState),
		pending: f(`SELECT count(*) FROM (SELECT 1 FROM {s}.tasks WHERE queue = $1 AND state IN (%d, %d, %d) LIMIT $2) p`,
			model.Scheduled, model.Ready, model.Running),
		notify: `SELECT pg_notify($1, $2)`,
		// $1 the injected clock's reading (NULL: the database's clock).
		// The operations' statements sent with the lock read it back
		// (txNow).
		dbNow: `SELECT set_config('leasehold.now', coalesce($1::bigint, ` + nowMicros + `)::text, true)::bigint`,
		// dbNow for a transaction of the store's own, which also keeps
		// every statement after it off sequential scans of the tables
		// (enable_seqscan, for the rest of the transaction): each of them
		// reads by an index or by ctid. A prepared statement's plan cache
		// settles, after five executions, on a generic plan if it looks no
		// dearer, and keeps it until an ANALYZE: AckBatch's, made while the
		// tasks table was small, found the claimed rows by a sequential
		// scan of the whole table (a hash join on ctid) and kept doing so
		// at 100 000 rows, 8.0 ms an AckBatch of 8 against 1.1 ms on a new
		// connection. Forcing custom plans instead cost 9 to 18% of
		// BenchmarkWorker; this costs nothing measurable.
		//
		// It also makes every later statement run on its generic plan
		// (plan_cache_mode), planned once per connection. Left to choose,
		// the server compared AckBatch's generic plan, which expects ten
		// claims from each array, with its plans for the batch at hand,
		// found those cheaper for a batch of one or a few, and planned the
		// statement anew on every call: 0.39 ms of bind (planning) in a
		// Worker's 1.3 ms transaction at one slot, from
		// log_min_duration_statement. With the generic plan, BenchmarkWorker
		// (benchstat, six alternations) took 48% less time per task at one
		// slot and 27% less at eight; at 64 the change was within the
		// noise. Every statement has an index or a ctid to read by, and
		// sequential scans are off (above), so the generic plans read by
		// those.
		// TestStoreStatementsKeepTheirGenericPlans counts the custom plans.
		// In the caller's transaction (EnqueueTx, AckTx) the caller's
		// settings stand.
		dbNowOwn: `SELECT set_config('leasehold.now', coalesce($1::bigint, ` + nowMicros + `)::text, true)::bigint
FROM (SELECT set_config('enable_seqscan', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)) p`,
		// A queue's row is made before its first task; seq is 0 until one
		// is added.
		queues: f(`SELECT name FROM {s}.queues WHERE seq > 0 ORDER BY name`),

		// $1 queue, $2 id, $3 payload, $4 priority, $5 state, $6 max
		// attempts, $7 now, $8 run after, $9 capacity (NULL: none), $10 the
		// attempt timeout (ns), $11 the unique key (NULL: none), $12 the end
		// of its hold (NULL: while pending). The
		// model looks at the ID first: a taken ID is a conflict even when
		// the queue is full (ON CONFLICT never sees a row the WHERE
		// filtered out, so the caller probes the ID when nothing came back).
		enqueue: f(`WITH u AS (
  INSERT INTO {s}.tasks (queue, id, payload, priority, state, attempt, max_attempts, version, claim_token, enqueued_at, run_after, errors, timeout_ns, unique_key, unique_until)
  SELECT $1::text, $2::bytea, $3::bytea, $4::integer, $5::smallint, 0, $6::bigint, %[1]s + 1, 0, $7::bigint, $8::bigint, '[]', $10::bigint, $11::bytea, $12::bigint
  WHERE ($9::bigint IS NULL OR (SELECT count(*) FROM (SELECT 1 FROM {s}.tasks WHERE queue = $1 AND state IN (%[2]d, %[3]d, %[4]d) LIMIT $9) p) < $9)
    AND (%[1]s > 0 OR NOT EXISTS (SELECT 1 FROM {s}.tasks WHERE queue = $1)) -- nothing in a queue whose sequence is missing or reset
  ON CONFLICT (queue, id) DO NOTHING RETURNING version)`+bump+` SELECT version FROM u`,
			seqBase, model.Scheduled, model.Ready, model.Running),

		// EnqueueBatch's items in one statement, for a batch without a
		// unique key on a store without a capacity: $1 queue, $2 IDs, $3
		// payloads, $4 priorities, $5 states, $6 max attempts, $7 run
		// after (NULL: none), $8 attempt timeouts (ns), $9 now. The first
		// item of each ID whose ID no row of the queue holds is added,
		// stamped with the sequence's value + its rank among those added,
		// in the order of the batch; the others add nothing (the caller
		// probes their IDs, as Enqueue's caller does). The queue's lock is
		// held, so no other transaction adds a row in between: every row
		// the statement means to add is added, and the sequence advances
		// by their number. Each ID is looked up by the primary key on its
		// own (a lateral LIMIT 1): written as NOT EXISTS, the generic plan
		// ran the lookups as an anti join reading every task of the queue
		// (TestEnqueueBatchLooksUpItsIDsAlone).
		enqueueMany: f(`WITH items AS (
  SELECT * FROM unnest($2::bytea[], $3::bytea[], $4::integer[], $5::smallint[], $6::bigint[], $7::bigint[], $8::bigint[])
    WITH ORDINALITY AS i(id, payload, priority, state, max_attempts, run_after, timeout_ns, ord)
), firsts AS (
  SELECT DISTINCT ON (id) * FROM items ORDER BY id, ord
), fresh AS (
  SELECT f.*, row_number() OVER (ORDER BY f.ord) AS rank FROM firsts f
  LEFT JOIN LATERAL (SELECT true AS taken FROM {s}.tasks t WHERE t.queue = $1 AND t.id = f.id LIMIT 1) h ON true
  WHERE h.taken IS NULL
), u AS (
  INSERT INTO {s}.tasks (queue, id, payload, priority, state, attempt, max_attempts, version, claim_token, enqueued_at, run_after, errors, timeout_ns)
  SELECT $1::text, id, payload, priority, state, 0, max_attempts, %[1]s + rank, 0, $9::bigint, run_after, '[]', timeout_ns FROM fresh
  WHERE %[1]s > 0 OR NOT EXISTS (SELECT 1 FROM {s}.tasks WHERE queue = $1) -- nothing in a queue whose sequence is missing or reset
  RETURNING id, version)`+bump+` SELECT id, version FROM u`, seqBase),

		// $1 queue, $2 now, $3 limit (NULL: none)
		// Every promoted row comes back whole, so that a damaged one is
		// found (and set aside) rather than promoted.
		promote: f(`WITH due AS (
  SELECT id, row_number() OVER (ORDER BY run_after, id) AS rank FROM (
    SELECT id, run_after FROM {s}.tasks WHERE queue = $1 AND state = %[1]d AND run_after <= $2 ORDER BY run_after, id LIMIT $3 FOR UPDATE) d
), u AS (
  UPDATE {s}.tasks t SET state = %[2]d, version = %[3]s + due.rank
  FROM due WHERE t.queue = $1 AND t.id = due.id AND t.state IN (%[4]s) RETURNING %[5]s)`+bump+` SELECT %[6]s FROM u`,
			model.Scheduled, model.Ready, seqBase, from(model.OpPromote), qualified("t"), taskColumns),

		// $1 queue, $2 n, $3 now, $4 deadline
		// The claimed rows are found again by their physical address
		// (ctid, unchanged while this statement holds their lock): a join
		// by ID would let the planner scan every Ready task of the queue
		// for each claimed one when the table has no statistics yet.
		popReturning: f(`WITH first AS (
  SELECT tid, id, row_number() OVER (ORDER BY priority DESC, version) AS rank FROM (
    SELECT ctid AS tid, id, priority, version FROM {s}.tasks WHERE queue = $1 AND state = %[1]d ORDER BY priority DESC, version LIMIT $2 FOR UPDATE SKIP LOCKED) f
  WHERE NOT (SELECT paused FROM {s}.queues WHERE name = $1) -- a paused queue: nothing (read after the lock)
), u AS (
  UPDATE {s}.tasks t SET state = %[2]d, version = %[3]s + first.rank, claim_token = %[3]s + first.rank,
    attempt = t.attempt + 1, claimed_at = $3, deadline = $4
  FROM first WHERE t.ctid = first.tid AND t.queue = $1 AND t.id = first.id AND t.state IN (%[4]s) RETURNING %[5]s)`+bump+` SELECT %[6]s FROM u`,
			model.Ready, model.Running, seqBase, from(model.OpPop), qualified("t"), taskColumns),

		// $1 queue, $2 n
		popSelect: f(`SELECT %s FROM {s}.tasks WHERE queue = $1 AND state = %d ORDER BY priority DESC, version LIMIT $2 FOR UPDATE SKIP LOCKED`,
			taskColumns, model.Ready),
		// $1 queue, $2 ids, $3 now, $4 deadline; the versions are the
		// sequence's value + the rank in $2. It returns the number claimed
		// and the first version.
		popClaim: f(`WITH picked AS (SELECT id, ord FROM unnest($2::bytea[]) WITH ORDINALITY AS p(id, ord)),
u AS (
  UPDATE {s}.tasks t SET state = %[1]d, version = %[2]s + picked.ord, claim_token = %[2]s + picked.ord,
    attempt = t.attempt + 1, claimed_at = $3, deadline = $4
  FROM picked WHERE t.queue = $1 AND t.id = picked.id AND t.state IN (%[3]s) RETURNING t.id, t.version)`+bump+` SELECT count(*), coalesce(min(version), 0) FROM u`,
			model.Running, seqBase, from(model.OpPop)),

		// Worker ops: $1 queue, $2 id, $3 claim token; then their own.
		// $4 deadline
		extend: f(`WITH u AS (UPDATE {s}.tasks SET version = %s + 1, deadline = $4 `+workerGuard, seqBase, from(model.OpExtend)),
		// $4 now, $5 result
		ack: f(`WITH u AS (UPDATE {s}.tasks SET version = %s + 1, state = %d, result = $5, finished_at = $4, deadline = NULL `+workerGuard,
			seqBase, model.Succeeded, from(model.OpAck)),
		// AckBatch's claims in one statement: $1 queue, $2 IDs (no two
		// alike), $3 tokens, $4 results, $5 now. The claims that hold their
		// task are stamped in the order of the batch. Each claim's task is
		// looked up by its key on its own (LIMIT 1 keeps the lookup from
		// being turned into a join the planner may run the other way round,
		// over every Running task once per claim, and state + 0 keeps it off
		// the partial index of Running tasks, which it would scan whole),
		// then updated by ctid alone (with the lookups made once, before:
		// any other condition on the task lets the planner scan tasks and
		// run the lookups again for each), as Pop does: a nested loop
		// that fetches each row by its ctid. AckBatch runs only in the
		// store's own transactions, where sequential scans are off
		// (dbNowOwn), so a generic plan made while the table was small
		// does not hash the batch and scan the whole table for it
		// (TestAckBatchKeepsOffSequentialScansAfterTheTableGrows). The
		// ctids are not also given as an array (ctid = ANY (…)): the
		// nested loop checks that condition on every row against the
		// whole array, O(n²) in the batch, about a tenth of the
		// statement's time at 512 claims.
		ackMany: f(`WITH items AS (SELECT * FROM unnest($2::bytea[], $3::bigint[], $4::bytea[]) WITH ORDINALITY AS i(id, token, result, ord)),
hit AS MATERIALIZED (
  SELECT h.tid, items.result, row_number() OVER (ORDER BY items.ord) AS rank
  FROM items CROSS JOIN LATERAL (
    SELECT t.ctid AS tid FROM {s}.tasks t WHERE t.queue = $1 AND t.id = items.id AND t.claim_token = items.token AND t.state + 0 IN (%[3]s) LIMIT 1) h
), u AS (
  UPDATE {s}.tasks t SET version = %[1]s + hit.rank, state = %[2]d, result = hit.result, finished_at = $5, deadline = NULL
  FROM hit WHERE t.ctid = hit.tid RETURNING %[4]s)`+bump+` SELECT %[5]s FROM u`,
			seqBase, model.Succeeded, from(model.OpAck), qualified("t"), taskColumns),
		// $4 now, $5 message, $6 its bytes if it cannot be JSON text
		fail: f(`WITH u AS (UPDATE {s}.tasks SET version = %s + 1, state = %d, errors = %s, finished_at = $4, deadline = NULL `+workerGuard,
			seqBase, model.Failed, appendError("$4::bigint", "$5", "$6", "false"), from(model.OpFail)),
		// $4 now, $5 message, $6 new state, $7 run after, $8 the message's bytes
		retry: f(`WITH u AS (UPDATE {s}.tasks SET version = %s + 1, state = $6, errors = %s, run_after = $7,
  claim_token = 0, claimed_at = NULL, deadline = NULL, finished_at = NULL `+workerGuard,
			seqBase, appendError("$4::bigint", "$5", "$8", "false"), from(model.OpRetry)),

		// $1 queue. A Running task without a deadline would never be found
		// expired: ClaimExpired and RecoverExpired look for one first.
		damagedDeadline: f(`SELECT id FROM {s}.tasks WHERE queue = $1 AND state = %d AND deadline IS NULL LIMIT 1`, model.Running),

		// $1 queue, $2 now, $3 limit, $4 new deadline
		claimExpired: f(`WITH expired AS (
  SELECT id, row_number() OVER (ORDER BY deadline, id) AS rank FROM (
    SELECT id, deadline FROM {s}.tasks WHERE queue = $1 AND state = %[1]d AND deadline <= $2 ORDER BY deadline, id LIMIT $3 FOR UPDATE) e
), u AS (
  UPDATE {s}.tasks t SET version = %[2]s + expired.rank, deadline = $4
  FROM expired WHERE t.queue = $1 AND t.id = expired.id AND t.state IN (%[3]s) RETURNING %[4]s)`+bump+` SELECT %[5]s FROM u`,
			model.Running, seqBase, from(model.OpClaimExpired), qualified("t"), taskColumns),

		// Broker decisions: $1 queue, $2 id, $3 version of the reap claim; then their own.
		// $4 now, $5 message, $6 new state, $7 run after, $8 the message's bytes
		requeue: f(`WITH u AS (UPDATE {s}.tasks SET version = %s + 1, state = $6, errors = %s, run_after = $7,
  claim_token = 0, claimed_at = NULL, deadline = NULL, finished_at = NULL `+brokerGuard,
			seqBase, appendError("$4::bigint", "$5", "$8", "true"), from(model.OpRequeue)),
		// $4 now, $5 message, $6 its bytes
		finalize: f(`WITH u AS (UPDATE {s}.tasks SET version = %s + 1, state = %d, errors = %s, finished_at = $4, deadline = NULL `+brokerGuard,
			seqBase, model.Failed, appendError("$4::bigint", "$5", "$6", "true"), from(model.OpFinalize)),

		// $1 queue, $2 now, $3 limit, $4 state when retried, $5 run after when retried
		recoverExpired: f(`WITH expired AS (
  SELECT id, row_number() OVER (ORDER BY deadline, id) AS rank FROM (
    SELECT id, deadline FROM {s}.tasks WHERE queue = $1 AND state = %[1]d AND deadline <= $2 ORDER BY deadline, id LIMIT $3 FOR UPDATE) e
), u AS (
  UPDATE {s}.tasks t SET version = %[2]s + expired.rank,
    errors = %[3]s,
    state       = CASE WHEN t.attempt >= t.max_attempts THEN %[4]d ELSE $4::smallint END,
    finished_at = CASE WHEN t.attempt >= t.max_attempts THEN $2 ELSE NULL END,
    run_after   = CASE WHEN t.attempt >= t.max_attempts THEN t.run_after ELSE $5 END,
    claim_token = CASE WHEN t.attempt >= t.max_attempts THEN t.claim_token ELSE 0 END,
    claimed_at  = CASE WHEN t.attempt >= t.max_attempts THEN t.claimed_at ELSE NULL END,
    deadline = NULL
  FROM expired WHERE t.queue = $1 AND t.id = expired.id AND t.state IN (%[5]s) RETURNING %[6]s)`+bump+` SELECT %[7]s FROM u`,
			model.Running, seqBase, appendError("$2::bigint", "'"+model.LeaseExpiredMessage+"'", "NULL", "true"),
			model.Failed, from(model.OpRecoverExpired), qualified("t"), taskColumns),

		// Inspector actions: $1 queue, $2 id, $3 expected version (0: any).
		inspectRequeue: f(`WITH u AS (UPDATE {s}.tasks SET version = %s + 1, state = %d, attempt = 0, result = NULL, run_after = NULL,
  claim_token = 0, claimed_at = NULL, deadline = NULL, finished_at = NULL
  WHERE queue = $1 AND id = $2 AND ($3 = 0 OR version = $3) AND state IN (%s) RETURNING %s)`+bump+` SELECT %[4]s FROM u`,
			seqBase, model.Ready, from(model.OpInspectRequeue), taskColumns),
		// $1 queue, $2 id, $3 expected version (0: any), $4 now.
		cancel: f(`WITH u AS (UPDATE {s}.tasks SET version = %s + 1, state = %d, errors = %s, finished_at = $4, deadline = NULL
  WHERE queue = $1 AND id = $2 AND ($3 = 0 OR version = $3) AND state IN (%s) RETURNING %s)`+bump+` SELECT %[5]s FROM u`,
			seqBase, model.Failed,
			strings.Replace(appendError("$4::bigint", "'"+model.CancelledMessage+"'", "NULL", "false"), "'lease_expired', false)", "'lease_expired', false, 'cancelled', true)", 1),
			from(model.OpCancel), taskColumns),
		// Remove is legal from every state, Quarantined included (and a
		// row whose state is none); the caller refuses an expected version
		// on a record it cannot read.
		remove: f(`DELETE FROM {s}.tasks WHERE queue = $1 AND id = $2 AND ($3 = 0 OR version = $3 AND state IN (%s)) RETURNING %s`,
			lifeStates(), taskColumns),
		// $1 queue, $2 id, $3 why
		setAside: f(`UPDATE {s}.tasks SET state = %d, quarantine = $3 WHERE queue = $1 AND id = $2`, model.Quarantined),

		// $1 queue, $2 before, $3 succeeded wanted, $4 failed wanted, $5
		// limit (NULL: none). Each state is read in index order up to the
		// limit, and the oldest of both are taken.
		prune: f(`WITH doomed AS (
  SELECT id FROM (
    (SELECT id, finished_at FROM {s}.tasks WHERE $3 AND queue = $1 AND state = %[1]d AND finished_at < $2 ORDER BY finished_at, id LIMIT $5)
    UNION ALL
    (SELECT id, finished_at FROM {s}.tasks WHERE $4 AND queue = $1 AND state = %[2]d AND finished_at < $2 ORDER BY finished_at, id LIMIT $5)
  ) b ORDER BY finished_at, id LIMIT $5
)
DELETE FROM {s}.tasks t USING doomed WHERE t.queue = $1 AND t.id = doomed.id RETURNING t.id, t.finished_at`, model.Succeeded, model.Failed),

		get: f(`SELECT %s FROM {s}.tasks WHERE queue = $1 AND id = $2`, taskColumns),
		// $1 queue, $2 key: the key's last taker and what its hold depends
		// on (model.Queue.KeyHolder); the task's columns are NULL when it
		// is gone.
		keyHolder: f(`SELECT k.task_id, t.state, t.unique_key, t.unique_until FROM {s}.unique_keys k
LEFT JOIN {s}.tasks t ON t.queue = k.queue AND t.id = k.task_id WHERE k.queue = $1 AND k.key = $2`),
		// $1 queue, $2 key, $3 the task that takes it
		takeKey: f(`INSERT INTO {s}.unique_keys (queue, key, task_id) VALUES ($1, $2, $3)
ON CONFLICT (queue, key) DO UPDATE SET task_id = excluded.task_id`),
		counts: countsQuery(r),
		list:   map[model.State]string{},
	}
	// $5, the state, is the one the task gets unless it runs after now.
	q.enqueueNow = strings.Replace(atTxNow(q.enqueue, 7), "$5::smallint",
		fmt.Sprintf("(CASE WHEN $8::bigint > %s THEN %d ELSE $5::smallint END)", txNow, model.Scheduled), 1)
	q.popNow = atTxNow(q.popReturning, 3, 4)
	// enqueueMany sent with the lock ($9, now, an offset: 0; every state
	// given Ready, and Scheduled here when run_after is after now), which
	// also returns, for each ID it did not add, its task as the statement
	// found it (probe true; its state as probedState reads it, its token
	// and version), which says why. The probe sees the tasks as they were
	// before the statement, so an ID the batch names twice is added once
	// and not probed: the client answers its other items.
	q.enqueueManyProbedNow = replaceOnce(replaceOnce(atTxNow(q.enqueueMany, 9),
		"priority, state, 0, max_attempts", fmt.Sprintf("priority, (CASE WHEN run_after > %s THEN %d ELSE state END), 0, max_attempts", txNow, model.Scheduled)),
		" SELECT id, version FROM u", "") + f(` SELECT false AS probe, id, version, 0::smallint AS state, 0::bigint AS token FROM u
UNION ALL
SELECT true, p.id, p.version, p.state, p.token FROM (SELECT DISTINCT id FROM items) i CROSS JOIN LATERAL (
  SELECT t.id, %s AS state, t.claim_token AS token, t.version FROM {s}.tasks t WHERE t.queue = $1 AND t.id = i.id LIMIT 1) p
WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.id = i.id)`, probedState)
	q.ackNow = atTxNow(q.ack, 4)
	q.extendNow = atTxNow(q.extend, 4)
	q.failNow = atTxNow(q.fail, 4)
	q.retryNow = atTxNow(q.retry, 4, 7)
	// Each changes the one task its guard names, and writes nothing on a
	// queue whose sequence row is missing or 0. Its CTE returns the
	// errors as they are stored (jsonb), which the check reads, and the
	// statement's answer gives them as text, as everywhere.
	q.decisionFinal = map[string]string{}
	for _, stmt := range []string{q.extendNow, q.ackNow, q.failNow, q.retryNow} {
		final := replaceOnce(stmt, "WHERE queue = $1 AND id = $2 AND ", "WHERE queue = $1 AND id = $2 AND "+r.Replace(seqBase)+" > 0 AND ")
		final = replaceOnce(final, "RETURNING "+taskColumns+")", "RETURNING "+strings.Replace(taskColumns, "errors::text", "errors", 1)+")")
		q.decisionFinal[stmt] = replaceOnce(final, changedRows, r.Replace(checked(taskColumns)))
	}
	// ackMany that also says why for each claim it did not apply, for the
	// pipelined AckBatch (which cannot wait for its rows to know which):
	// a row per task it acknowledged (probe false, the task as it left
	// it), then a row per other claim whose task exists (probe true: the
	// task as the guard saw it, its state as probedState reads it, not
	// decoded, since only the state, token and version say why). The
	// claims name distinct tasks, so the statement changed none of those
	// tasks, and its snapshot shows them as they are.
	probed := strings.NewReplacer(", state, ", ", "+probedState+" AS state, ", "errors::text", "errors").Replace(taskColumns)
	// (ackMany ends with changedRows: TestAckManyProbedKeepsAckManysGuard.)
	q.ackManyProbedNow = atTxNow(strings.TrimSuffix(q.ackMany, changedRows)+f(` SELECT false AS probe, %[1]s FROM u
UNION ALL
SELECT true, %[2]s FROM items CROSS JOIN LATERAL (
  SELECT %[3]s FROM {s}.tasks t WHERE t.queue = $1 AND t.id = items.id LIMIT 1) p
WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.id = items.id)`, taskColumns, strings.Replace(qualified("p"), "p.errors", "p.errors::text", 1), probed), 5)
	q.popNowFinal = r.Replace(replaceOnce(replaceOnce(q.popNow,
		r.Replace(`WHERE NOT (SELECT paused FROM {s}.queues WHERE name = $1)`),
		`WHERE (SELECT NOT paused AND seq > 0 FROM {s}.queues WHERE name = $1)`),
		changedRows, checked(taskColumns)))
	q.ackManyProbedFinal = r.Replace(replaceOnce(replaceOnce(q.ackManyProbedNow,
		" LIMIT 1) h\n), u AS (", " LIMIT 1) h\n  WHERE "+seqBase+" > 0\n), u AS ("),
		" SELECT false AS probe, "+taskColumns+" FROM u\n", checked("false AS probe, "+taskColumns)+"\n"))
	for _, st := range model.States {
		q.list[st] = f(`SELECT %s FROM {s}.tasks WHERE queue = $1 AND state = %d AND id > $2 ORDER BY id LIMIT $3`, taskColumns, st)
	}
	// Records set aside, and rows whose state is none.
	q.list[model.Quarantined] = f(`SELECT %s FROM {s}.tasks WHERE queue = $1 AND state NOT IN (%s) AND id > $2 ORDER BY id LIMIT $3`,
		taskColumns, lifeStates())
	return q
}

// changedRows is how popReturning and ackMany end: their answer, the rows
// they changed.
const changedRows = " SELECT " + taskColumns + " FROM u"

// qualified is taskColumns named through the table alias a.
func qualified(a string) string {
	cols := strings.Split(taskColumns, ", ")
	for i, c := range cols {
		if c == "errors::text" {
			cols[i] = a + ".errors"
			continue
		}
		cols[i] = a + "." + c
	}
	return strings.Join(cols, ", ")
}

// countsQuery is the statement of Counts: (false, state, count) for each of
// the five states, each counted in its own partial index, and for each
// state that is none of them (in tasks_other), then (true, 0, paused) for
// the queue's row; one statement, one committed state.
func countsQuery(r *strings.Replacer) string {
	var b strings.Builder
	for _, st := range model.States {
		fmt.Fprintf(&b, "SELECT false, %[1]d::smallint, count(*) FROM {s}.tasks WHERE queue = $1 AND state = %[1]d\nUNION ALL ", int(st))
	}
	fmt.Fprintf(&b, "SELECT false, state, count(*) FROM {s}.tasks WHERE queue = $1 AND state NOT IN (%s) GROUP BY state\n", lifeStates())
	b.WriteString("UNION ALL SELECT true, 0, paused::int FROM {s}.queues WHERE name = $1")
	return r.Replace(b.String())
}
