package model

// Guard names the condition a transition checks before it applies.
type Guard uint8

// The guards.
const (
	// GuardNone: the op applies to the task without a further condition.
	GuardNone Guard = iota
	// GuardNewID: no task in the queue has the ID.
	GuardNewID
	// GuardClaimToken: claim.Token == task.ClaimToken (worker ops).
	GuardClaimToken
	// GuardReapVersion: reapClaim.Version == task.Version (broker decisions).
	GuardReapVersion
	// GuardExpectedVersion: the operator named no version, or task.Version
	// equals it (inspector actions).
	GuardExpectedVersion
	// GuardDue: task.RunAfter <= now.
	GuardDue
	// GuardExpired: task.Deadline <= now.
	GuardExpired
	// GuardFinishedBefore: task.FinishedAt < before.
	GuardFinishedBefore
	// GuardFirstInLine: the task is the Ready task of highest priority, and
	// the one that became Ready first among those.
	GuardFirstInLine
)

var guardText = [...]string{
	GuardNone:            "none",
	GuardNewID:           "no task has the ID",
	GuardClaimToken:      "claim.Token == task.ClaimToken",
	GuardReapVersion:     "reapClaim.Version == task.Version",
	GuardExpectedVersion: "expect == 0 or expect == task.Version",
	GuardDue:             "task.RunAfter <= now",
	GuardExpired:         "task.Deadline <= now",
	GuardFinishedBefore:  "task.FinishedAt < before",
	GuardFirstInLine:     "highest priority, then first to become Ready",
}

// String describes the guard as a condition.
func (g Guard) String() string {
	if int(g) < len(guardText) {
		return guardText[g]
	}
	return "guard(?)"
}

// Actor says who performs an operation.
type Actor uint8

// The actors.
const (
	Producer  Actor = iota + 1 // Enqueue
	Mover                      // Promote
	Worker                     // Pop, Extend, Ack, Fail, Retry
	Broker                     // ClaimExpired, Requeue, Finalize, RecoverExpired
	Inspector                  // InspectRequeue, Remove, Prune, Pause, Resume, Cancel, Get, List, Counts
)

// String returns the actor's name.
func (a Actor) String() string {
	return [...]string{"?", "producer", "mover", "worker", "broker", "inspector"}[min(int(a), 5)]
}

// Transition is one row of the transition table: op applied to a task in
// state From. From is 0 for Enqueue (the task does not exist yet); To lists
// the possible target states, empty when the op deletes the task.
type Transition struct {
	Op      Op
	Actor   Actor
	From    State
	To      []State
	Removes bool
	Guard   Guard
	// Refusal is the error returned when the guard does not hold, or nil when
	// the op then passes over the task (bulk operations).
	Refusal error
	// Effect describes what the transition writes besides the state.
	Effect string
}

const (
	stampVersion = "Version = next(seq)"
	clearClaim   = "ClaimToken, ClaimedAt, Deadline, FinishedAt cleared"
	byRunAfter   = "Scheduled if RunAfter > now, else Ready"
)

// transitions is the table. Every check of an op's source state in this
// package reads it (see legal), so the code cannot disagree with it.
var transitions = []Transition{
	{OpEnqueue, Producer, 0, []State{Ready, Scheduled}, false, GuardNewID, ErrConflict,
		stampVersion + "; Attempt = 0; EnqueuedAt = now; " + byRunAfter + "; UniqueKey taken, UniqueUntil = now + period (a *DuplicateError, ErrConflict, when another task holds the key); ErrQueueFull when pending tasks reach the capacity"},
	{OpPromote, Mover, Scheduled, []State{Ready}, false, GuardDue, nil,
		stampVersion + "; in order of RunAfter, then ID"},
	{OpPop, Worker, Ready, []State{Running}, false, GuardFirstInLine, nil,
		stampVersion + "; ClaimToken = Version; Attempt + 1; ClaimedAt = now; Deadline = now + lease; nothing is claimed while the queue is paused"},
	{OpExtend, Worker, Running, []State{Running}, false, GuardClaimToken, ErrStaleClaim,
		stampVersion + "; Deadline = now + lease"},
	{OpAck, Worker, Running, []State{Succeeded}, false, GuardClaimToken, ErrStaleClaim,
		stampVersion + "; Result = result; FinishedAt = now; Deadline cleared"},
	{OpFail, Worker, Running, []State{Failed}, false, GuardClaimToken, ErrStaleClaim,
		stampVersion + "; handler error appended; FinishedAt = now; Deadline cleared"},
	{OpRetry, Worker, Running, []State{Ready, Scheduled}, false, GuardClaimToken, ErrStaleClaim,
		stampVersion + "; handler error appended; RunAfter = now + delay on the store clock (unset for 0); " + byRunAfter + "; " + clearClaim},
	{OpClaimExpired, Broker, Running, []State{Running}, false, GuardExpired, nil,
		stampVersion + "; Deadline = now + claimTTL; ClaimToken unchanged; in order of Deadline, then ID"},
	{OpRequeue, Broker, Running, []State{Ready, Scheduled}, false, GuardReapVersion, ErrStaleClaim,
		stampVersion + "; lease-expired error appended; RunAfter = now + delay on the store clock (unset for 0); " + byRunAfter + "; " + clearClaim},
	{OpFinalize, Broker, Running, []State{Failed}, false, GuardReapVersion, ErrStaleClaim,
		stampVersion + "; lease-expired error appended; FinishedAt = now; Deadline cleared"},
	{OpRecoverExpired, Broker, Running, []State{Ready, Scheduled, Failed}, false, GuardExpired, nil,
		stampVersion + "; lease-expired error appended; Failed if Attempt >= MaxAttempts, else RunAfter = now + delay and " + byRunAfter + "; " + clearClaim},
	{OpInspectRequeue, Inspector, Scheduled, []State{Ready}, false, GuardExpectedVersion, ErrConflict, inspectRequeueEffect},
	{OpInspectRequeue, Inspector, Running, []State{Ready}, false, GuardExpectedVersion, ErrConflict, inspectRequeueEffect},
	{OpInspectRequeue, Inspector, Succeeded, []State{Ready}, false, GuardExpectedVersion, ErrConflict, inspectRequeueEffect},
	{OpInspectRequeue, Inspector, Failed, []State{Ready}, false, GuardExpectedVersion, ErrConflict, inspectRequeueEffect},
	{OpRemove, Inspector, Scheduled, nil, true, GuardExpectedVersion, ErrConflict, removeEffect},
	{OpRemove, Inspector, Ready, nil, true, GuardExpectedVersion, ErrConflict, removeEffect},
	{OpRemove, Inspector, Running, nil, true, GuardExpectedVersion, ErrConflict, removeEffect},
	{OpRemove, Inspector, Succeeded, nil, true, GuardExpectedVersion, ErrConflict, removeEffect},
	{OpRemove, Inspector, Failed, nil, true, GuardExpectedVersion, ErrConflict, removeEffect},
	{OpRemove, Inspector, Quarantined, nil, true, GuardExpectedVersion, ErrConflict, removeEffect + "; a quarantined record has Version 0"},
	{OpCancel, Inspector, Scheduled, []State{Failed}, false, GuardExpectedVersion, ErrConflict, cancelEffect},
	{OpCancel, Inspector, Ready, []State{Failed}, false, GuardExpectedVersion, ErrConflict, cancelEffect},
	{OpCancel, Inspector, Running, []State{Failed}, false, GuardExpectedVersion, ErrConflict, cancelEffect + "; ClaimToken kept: the worker's next op under it is ErrCancelled, a broker's claim is stale"},
	{OpPrune, Inspector, Succeeded, nil, true, GuardFinishedBefore, nil, pruneEffect},
	{OpPrune, Inspector, Failed, nil, true, GuardFinishedBefore, nil, pruneEffect},
}

const (
	inspectRequeueEffect = stampVersion + "; Attempt = 0; RunAfter, Result cleared; " + clearClaim + "; error history kept"
	removeEffect         = "task deleted; its ID may be enqueued again, and its versions are never reused"
	pruneEffect          = "task deleted, oldest FinishedAt first, up to the limit"
	cancelEffect         = stampVersion + "; cancellation error appended (Cancelled); FinishedAt = now; Deadline cleared"
)

// Transitions returns a copy of the transition table: one row for each op and
// each state it is legal from. An op applied to a task in a state with no row
// is an ErrInvalidTransition. The batch operations (EnqueueBatch, AckBatch)
// have no rows of their own: each item follows the rows of Enqueue or Ack.
func Transitions() []Transition {
	out := make([]Transition, len(transitions))
	for i, t := range transitions {
		t.To = append([]State(nil), t.To...)
		out[i] = t
	}
	return out
}

// legalFrom[op][state] is derived from the table once.
var legalFrom = func() (m [OpCounts + 1][Quarantined + 1]bool) {
	for _, t := range transitions {
		m[t.Op][t.From] = true
	}
	return m
}()

// legal reports whether the table has a row for op from state s.
func legal(op Op, s State) bool { return s <= Quarantined && legalFrom[op][s] }

// checkFrom returns a *TransitionError unless op is legal from t's state.
func checkFrom(op Op, t *Task) error {
	if !legal(op, t.State) {
		return &TransitionError{Op: op, State: t.State}
	}
	return nil
}

// Row returns the table's row for op from state s, if there is one.
func Row(op Op, s State) (Transition, bool) {
	for _, t := range transitions {
		if t.Op == op && t.From == s {
			return t, true
		}
	}
	return Transition{}, false
}
