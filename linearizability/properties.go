package linearizability

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// Violation is a runtime property a history broke.
type Violation struct {
	Property string `json:"property"`
	Detail   string `json:"detail"`
}

// String shows the violation as "property: detail".
func (v Violation) String() string { return v.Property + ": " + v.Detail }

// Property is one rule the runtime mode checks on every history, besides
// linearizability.
type Property struct {
	// Name names the property in reports ("no-bypass").
	Name string
	// Rule is the rule it pins, in one sentence.
	Rule  string
	check func(*runtimeCase) []string
}

// RuntimeProperties are the properties CheckRuntime checks, each written
// once, as a function of properties.go whose doc says the rule it pins.
var RuntimeProperties = []Property{
	{"no-bypass", "a worker or broker never issues an operator op, and decides only through a claim its own Pop or ClaimExpired returned", noBypass},
	{"handler-outcome", "the outcome a worker records is the one its handler returned, as the retry policy says", handlerOutcome},
	{"attempt-timeout", "a handler's context has its task's attempt timeout as deadline, on its worker's clock, and no deadline when the task has none", attemptTimeout},
	{"heartbeat-lease", "every Extend carries the worker's lease, and a worker whose heartbeats reach the store in time never loses its claim", heartbeatLease},
	{"pass-decides-expired", "a broker pass claims until none is left expired, across batches, and decides each task it claimed", passDecidesExpired},
	{"store-clock-delays", "a broker decides as its policy says, its delay measured from the store's reading in ClaimExpired; a worker's retry delay from the store's clock as the worker last read it", storeClockDelays},
	{"periodic-occurrences", "a Client's scheduler enqueues each task under the ID of an occurrence of its schedule, and no occurrence is accepted twice", periodicOccurrences},
	{"cancel-final", "a task an operator cancelled is never acked, failed, retried, extended, requeued, reaped or popped afterwards, until an operator requeues it or it is enqueued again (or may have: a requeue or enqueue whose reply was lost)", cancelFinal},
	{"busy-resend", "a worker sends a decision the store answered busy (which it did not run) again through the same claim, unless a ShutdownError (of a Client's Shutdown or a worker's Run) named the claim held", busyResend},
	{"quiescence", "once producers stop and time passes, every task not removed is terminal, and each Succeeded task had exactly one accepted Ack, with its claim's token", quiescence},
	{"concurrency", "a worker runs at most its concurrency of handlers at once, however many tasks it holds claimed (its prefetch)", concurrencyBound},
}

// CheckRuntime checks the runtime properties on a history of plan p and
// returns the violations, none when it passes.
func CheckRuntime(p *RuntimePlan, rh *RuntimeHistory) []Violation {
	c := newRuntimeCase(p, rh)
	var out []Violation
	for _, prop := range RuntimeProperties {
		for _, d := range prop.check(c) {
			out = append(out, Violation{Property: prop.Name, Detail: d})
		}
	}
	return out
}

// --- the properties ----------------------------------------------------------

// cancelFinal pins "a cancelled task stays cancelled": after an accepted
// Cancel stamped task T with version V, no accepted op of a worker or a
// broker leaves T at a version above V until an operator's accepted
// InspectRequeue (or a new Enqueue of the ID) does. The versions of a
// queue are one sequence, so "afterwards" is a matter of versions, not of
// the recorder's clock.
func cancelFinal(c *runtimeCase) []string {
	var out []string
	accepted := func(op *Operation) bool { return op.Output.Err == "" && !op.Output.Indeterminate }
	for _, cop := range c.ops {
		if cop.Input.Op != model.OpCancel || !accepted(cop) || cop.Output.Task == nil {
			continue
		}
		id, v := cop.Output.Task.ID, cop.Output.Task.Version
		end := uint64(math.MaxUint64) // the first version an operator or producer gave the task again
		for _, op := range c.ops {
			if !accepted(op) || op.Output.Task == nil || op.Output.Task.ID != id || op.Output.Task.Version <= v {
				continue
			}
			if op.Input.Op == model.OpInspectRequeue || op.Input.Op == model.OpEnqueue {
				end = min(end, op.Output.Task.Version)
			}
		}
		// An operator's requeue or an enqueue of the task whose outcome is
		// unknown (its reply lost) may have given it a new life at any time
		// after its call, at a version no output shows: an op that may
		// follow that call is not judged.
		unknownFrom := int64(math.MaxInt64)
		for _, op := range c.ops {
			if op.Output.Indeterminate && givesLife(op, id) {
				unknownFrom = min(unknownFrom, op.Call)
			}
		}
		for _, op := range c.ops {
			if !accepted(op) || (!slices.Contains(workerOps, op.Input.Op) && !slices.Contains(brokerOps, op.Input.Op)) {
				continue
			}
			if op.Return > unknownFrom {
				continue
			}
			for _, t := range touchedBy(op) {
				if t.id == id && t.version > v && t.version < end {
					out = append(out, fmt.Sprintf("%s cancelled at version %d, then %s by %s left it at version %d", id, v, op.Input.Op, op.Actor, t.version))
				}
			}
		}
	}
	return out
}

// givesLife reports whether op is an operator's requeue of task id or an
// enqueue of it (alone or in a batch), which start a new life of the task.
func givesLife(op *Operation, id string) bool {
	switch {
	case op.Input.Op == model.OpInspectRequeue:
		return op.Input.ID == id
	case op.Input.Enqueue != nil:
		return op.Input.Enqueue.ID == id
	}
	return slices.ContainsFunc(op.Input.Batch, func(a model.EnqueueArgs) bool { return a.ID == id })
}

type touched struct {
	id      string
	version uint64
}

// touchedBy lists the tasks an accepted op left, with their versions.
func touchedBy(op *Operation) []touched {
	var out []touched
	if t := op.Output.Task; t != nil {
		out = append(out, touched{t.ID, t.Version})
	}
	for _, t := range op.Output.Tasks {
		out = append(out, touched{t.ID, t.Version})
	}
	for _, it := range op.Output.Items {
		if it.Task != nil {
			out = append(out, touched{it.Task.ID, it.Task.Version})
		}
	}
	for _, rc := range op.Output.Claims {
		out = append(out, touched{rc.TaskID, rc.Version})
	}
	return out
}

// noBypass pins "no component bypasses a claim": a worker or broker issues
// only its own ops (never InspectRequeue, Remove or another operator op),
// every decision of a worker carries the claim of a task its own Pop (or
// AckBatch's pop) returned, and every decision of a broker the ReapClaim its own
// ClaimExpired returned. A broker that, refused as stale, falls back on an
// unconditional operator requeue breaks it.
func noBypass(c *runtimeCase) []string {
	var out []string
	for _, actor := range c.actors {
		ops := c.byActor[actor]
		role := roleOf(actor)
		if role != "worker" && role != "broker" {
			continue
		}
		popped := map[claimID]bool{}
		reaped := map[claimID]bool{}
		for _, op := range ops {
			switch op.Input.Op {
			case model.OpPop, model.OpAckBatch: // an AckBatch's pop claims as a Pop does
				for _, t := range op.Output.Tasks {
					popped[claimID{t.ID, t.ClaimToken}] = true
				}
			case model.OpClaimExpired:
				for _, rc := range op.Output.Claims {
					reaped[claimID{rc.TaskID, rc.Version}] = true
				}
			}
		}
		allowed := workerOps
		if role == "broker" {
			allowed = brokerOps
		}
		for _, op := range ops {
			if !slices.Contains(allowed, op.Input.Op) {
				out = append(out, fmt.Sprintf("%s issued %s", actor, describeCall(&op.Input, c.epoch)))
				continue
			}
			for _, d := range decisionsOf(op) {
				if d.worker && !popped[claimID{d.task, d.token}] {
					out = append(out, fmt.Sprintf("%s decided %s with token %d, which no Pop of its own returned", actor, d.task, d.token))
				}
				if !d.worker && !reaped[claimID{d.task, d.token}] {
					out = append(out, fmt.Sprintf("%s decided %s with version %d, which no ClaimExpired of its own returned", actor, d.task, d.token))
				}
			}
		}
	}
	return out
}

// busyResend pins "a decision answered busy is sent again": core.ErrBusy
// says the store did not run the call, so the worker sends the same
// decision through the same claim again after a pause (5 ms, doubling with
// each busy answer to the claim's decisions, up to 1 s), until it is
// answered otherwise. Only a claim a *core.ShutdownError named held may be
// left undecided: a Client's Shutdown whose deadline passed during a pause,
// or a worker's Run whose last send, after its shutdown timeout, was
// answered busy too.
func busyResend(c *runtimeCase) []string {
	var out []string
	for _, actor := range c.actors {
		if roleOf(actor) != "worker" {
			continue
		}
		ops := c.byActor[actor]
		for i, op := range ops {
			if op.Output.Err != "busy" {
				continue
			}
			for _, d := range decisionsOf(op) {
				if d.kind == model.OpExtend {
					continue
				}
				if c.held[heldKey{d.task, d.token}] {
					continue
				}
				resent := slices.ContainsFunc(ops[i+1:], func(later *Operation) bool {
					return slices.ContainsFunc(decisionsOf(later), func(e decision) bool {
						return e.kind == d.kind && e.task == d.task && e.token == d.token
					})
				})
				if !resent {
					out = append(out, fmt.Sprintf("%s's %v of %s token %d was answered busy at %v and never sent again, and no ShutdownError named the claim held",
						actor, d.kind, d.task, d.token, time.Duration(op.Return)))
				}
			}
		}
	}
	return out
}

// handlerOutcome pins "the outcome recorded is the one the handler
// returned": a nil error is an Ack with the handler's result; an error (with
// or without a result) and a panic are a failed attempt, a Retry or a Fail
// as the worker's retry policy says; a Permanent error is a Fail. An attempt
// that ran past its task's timeout is a failed attempt whose message is the
// context's cause, whatever the handler returned: required when the handler
// saw the timeout, allowed when it fired between the handler's return and
// its worker's look at the context. A worker
// decides a claim only after its handler returned, except when it gives an
// unfinished task back at shutdown, and records every outcome unless its
// claim was superseded first.
func handlerOutcome(c *runtimeCase) []string {
	var out []string
	decided := map[claimKey]bool{}
	for _, actor := range c.actors {
		ops := c.byActor[actor]
		if roleOf(actor) != "worker" {
			continue
		}
		spec := c.plan.Workers[indexOf(actor)]
		for _, op := range ops {
			for _, d := range decisionsOf(op) {
				if d.kind == model.OpExtend {
					continue
				}
				key := claimKey{actor, d.task, d.token}
				decided[key] = true
				inv := c.inv[key]
				if d.kind == model.OpRetry && d.message == core.ErrWorkerStopped.Error() && d.delay == 0 && op.Call >= c.rh.StopAt {
					continue // given back at shutdown
				}
				switch {
				case inv == nil:
					out = append(out, fmt.Sprintf("%s recorded %v for %s token %d, whose handler never ran", actor, d.kind, d.task, d.token))
					continue
				case !inv.Returned && !inv.Panicked || inv.End > op.Call:
					out = append(out, fmt.Sprintf("%s recorded %v for %s token %d before its handler returned", actor, d.kind, d.task, d.token))
					continue
				}
				want, why := c.expectedOutcome(spec, inv)
				if timeout := c.tasks[inv.TaskID].Timeout; timeout > 0 && !inv.TimedOut && d.message == timeoutMessage(timeout) {
					// The timeout fired after the handler returned and
					// before its worker looked: a timed-out attempt too.
					inv = &Invocation{Attempt: inv.Attempt, TaskID: inv.TaskID, Returned: true, TimedOut: true, Cause: d.message, End: inv.End}
					want, why = c.expectedOutcome(spec, inv)
				}
				if d.kind != want {
					out = append(out, fmt.Sprintf("%s recorded %v for %s token %d; the handler %s, so %v was due", actor, d.kind, d.task, d.token, why, want))
					continue
				}
				switch {
				case want == model.OpAck && !bytes.Equal(d.result, inv.Result):
					out = append(out, fmt.Sprintf("%s acked %s token %d with result %q; the handler returned %q", actor, d.task, d.token, d.result, inv.Result))
				case inv.TimedOut && d.message != inv.Cause:
					out = append(out, fmt.Sprintf("%s recorded %s token %d with message %q; its attempt timed out (%q)", actor, d.task, d.token, d.message, inv.Cause))
				case inv.TimedOut:
				case want != model.OpAck && inv.Panicked && !strings.HasPrefix(d.message, "panic: "):
					out = append(out, fmt.Sprintf("%s recorded the panic of %s token %d as %q", actor, d.task, d.token, d.message))
				case want != model.OpAck && inv.Returned && d.message != inv.Err:
					out = append(out, fmt.Sprintf("%s recorded %s token %d with message %q; the handler returned %q", actor, d.task, d.token, d.message, inv.Err))
				}
			}
		}
	}
	for _, inv := range c.rh.Invocations {
		key := claimKey{inv.Worker, inv.TaskID, inv.Token}
		if decided[key] || !inv.Returned && !inv.Panicked || c.superseded[key] || c.held[heldKey{inv.TaskID, inv.Token}] {
			continue // a claim a Client's Shutdown left held is decided by a broker
		}
		out = append(out, fmt.Sprintf("%s recorded nothing for %s token %d, whose handler returned (%s) while its claim held", inv.Worker, inv.TaskID, inv.Token, inv.Behaviour.Kind))
	}
	return out
}

// attemptTimeout pins "a task's attempt timeout bounds each of its
// attempts": the handler's context has a deadline no later than the attempt
// timeout stored with the task after the handler started, as its worker's
// clock reads (the harness's clock plus the worker's skew), and none when
// the task has no timeout (the plans give workers no timeout of their own).
func attemptTimeout(c *runtimeCase) []string {
	var out []string
	for _, inv := range c.rh.Invocations {
		timeout := c.tasks[inv.TaskID].Timeout
		skew := time.Duration(0)
		if i := indexOf(inv.Worker); i >= 0 && i < len(c.plan.Workers) {
			skew = c.plan.Workers[i].Skew
		}
		switch {
		case timeout == 0 && !inv.Deadline.IsZero():
			out = append(out, fmt.Sprintf("%s ran %s token %d, a task without a timeout, with a deadline %s after its start", inv.Worker, inv.TaskID, inv.Token, ms(inv.Deadline.Add(-skew).Sub(inv.StartedAt))))
		case timeout > 0 && inv.Deadline.IsZero():
			out = append(out, fmt.Sprintf("%s ran %s token %d without a deadline; the task's timeout is %s", inv.Worker, inv.TaskID, inv.Token, ms(timeout)))
		case timeout > 0 && inv.Deadline.Add(-skew).After(inv.StartedAt.Add(timeout)):
			out = append(out, fmt.Sprintf("%s ran %s token %d with a deadline %s after its start; the task's timeout is %s", inv.Worker, inv.TaskID, inv.Token, ms(inv.Deadline.Add(-skew).Sub(inv.StartedAt)), ms(timeout)))
		}
	}
	return out
}

// heartbeatLease pins "a worker whose heartbeats reach the store in time
// never loses its lease, and every Extend carries the worker's configured
// lease": an Extend for any other duration (the heartbeat interval, say) is
// a violation; so is a worker op on a claim refused as stale although every
// earlier op on the claim reached the store before the deadline the one
// before it set, the refused op was sent before that deadline too, no
// operator acted on the task and the worker had not decided it itself.
func heartbeatLease(c *runtimeCase) []string {
	var out []string
	for _, actor := range c.actors {
		ops := c.byActor[actor]
		if roleOf(actor) != "worker" {
			continue
		}
		spec := c.plan.Workers[indexOf(actor)]
		deadline := map[claimID]time.Time{} // the claim is held in time until then
		for _, op := range ops {
			if op.Input.Op == model.OpExtend && op.Input.Lease != spec.Lease {
				out = append(out, fmt.Sprintf("%s extended %s for %s; its lease is %s", actor, op.Input.Claim.TaskID, ms(op.Input.Lease), ms(spec.Lease)))
			}
			if op.Input.Op == model.OpPop || op.Input.Op == model.OpAckBatch {
				for _, t := range op.Output.Tasks {
					deadline[claimID{t.ID, t.ClaimToken}] = t.Deadline
				}
				if op.Input.Op == model.OpPop {
					continue
				}
			}
			for _, d := range decisionsOf(op) {
				if !d.worker {
					continue
				}
				id := claimID{d.task, d.token}
				dl, held := deadline[id]
				if !held {
					continue
				}
				switch {
				case d.indeterminate:
					// If it took effect the deadline only moved later.
				case d.refused == "stale_claim" || d.refused == "cancelled" || d.refused == "invalid_transition":
					delete(deadline, id)
					if c.readingBefore(op.Return).Before(dl) && !c.operatorActed(d.task, op.Return) && !c.decidedBy(actor, id, op.Return) {
						out = append(out, fmt.Sprintf("%s lost its claim on %s token %d (%v refused: %s) while it held the lease until %s and no operator acted",
							actor, d.task, d.token, d.kind, d.refused, at(dl, c.epoch)))
					}
				case d.refused != "":
					delete(deadline, id)
				case !d.now.Before(dl) || d.kind != model.OpExtend:
					delete(deadline, id) // late, or decided: no longer held in time
				default:
					deadline[id] = d.taskOut.Deadline
				}
			}
		}
	}
	return out
}

// concurrencyBound pins "a worker runs at most its concurrency of handlers
// at once": its handler invocations, each from its Start to its End on the
// recorder's timeline (to the end of the history for one that never
// ended), overlap at most WorkerSpec.Concurrency at any moment. The tasks
// a worker claims ahead (core.WithPrefetch) wait for a handler to return;
// a gate that let them start at once breaks it.
func concurrencyBound(c *runtimeCase) []string {
	type edge struct {
		at    int64
		delta int
	}
	byWorker := map[string][]edge{}
	for i := range c.rh.Invocations {
		inv := &c.rh.Invocations[i]
		end := inv.End
		if end == 0 {
			end = math.MaxInt64
		}
		byWorker[inv.Worker] = append(byWorker[inv.Worker], edge{inv.Start, 1}, edge{end, -1})
	}
	var out []string
	for _, worker := range slices.Sorted(maps.Keys(byWorker)) {
		i := indexOf(worker)
		if i < 0 || i >= len(c.plan.Workers) {
			continue
		}
		limit := c.plan.Workers[i].Concurrency
		edges := byWorker[worker]
		// An end and a start at one tick: the end first (the ticks are
		// distinct, so this only orders equal sentinels).
		slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
		running, most, at := 0, 0, int64(0)
		for _, e := range edges {
			running += e.delta
			if running > most {
				most, at = running, e.at
			}
		}
		if most > limit {
			out = append(out, fmt.Sprintf("%s ran %d handlers at once (at tick %d); its concurrency is %d", worker, most, at, limit))
		}
	}
	return out
}

// passDecidesExpired pins "a broker pass decides every task that was expired
// when it started, across all batches": within one pass over the queue (a
// Promote starts it), the broker calls ClaimExpired until a call returns
// fewer claims than its limit, and decides each task it claimed, unless a
// store call of the pass failed in transport or the pass was cut short by
// the broker's shutdown. A reaper that stops after its first batch breaks
// it.
func passDecidesExpired(c *runtimeCase) []string {
	var out []string
	for _, actor := range c.actors {
		ops := c.byActor[actor]
		if roleOf(actor) != "broker" {
			continue
		}
		for _, pass := range passes(ops) {
			last := pass[len(pass)-1]
			if last.Return >= c.rh.StopAt {
				continue // cancelled with the broker
			}
			transport := false
			var claims []model.ReapClaim
			var lastClaim *Operation
			decided := map[claimID]bool{}
			for _, op := range pass {
				o := &op.Output
				if o.Indeterminate || o.Err != "" && o.Err != "stale_claim" && o.Err != "cancelled" && o.Err != "invalid_transition" {
					transport = true
				}
				switch op.Input.Op {
				case model.OpClaimExpired:
					lastClaim = op
					claims = append(claims, o.Claims...)
				case model.OpRequeue, model.OpFinalize:
					decided[claimID{op.Input.ReapClaim.TaskID, op.Input.ReapClaim.Version}] = true
				}
			}
			if transport {
				continue
			}
			start := at(pass[0].Output.Now, c.epoch)
			switch {
			case lastClaim == nil:
				out = append(out, fmt.Sprintf("%s: the pass from %s never claimed expired tasks", actor, start))
			case lastClaim.Input.Limit > 0 && len(lastClaim.Output.Claims) >= lastClaim.Input.Limit:
				out = append(out, fmt.Sprintf("%s: the pass from %s stopped after a full batch of %d claims; expired tasks may be left", actor, start, len(lastClaim.Output.Claims)))
			}
			for _, rc := range claims {
				if !decided[claimID{rc.TaskID, rc.Version}] {
					out = append(out, fmt.Sprintf("%s: the pass from %s claimed %s (version %d) and never decided it", actor, start, rc.TaskID, rc.Version))
				}
			}
		}
	}
	return out
}

// storeClockDelays pins "delays are measured on the store's clock": a
// broker's Requeue passes its policy's delay for the task as the
// ClaimExpired result left it, and it requeues exactly when its policy
// retries (Finalize otherwise); a worker's Retry passes its policy's delay.
// The store adds the delay to its own reading (the model checks the
// RunAfter that follows), so a component that folds its own clock into the
// delay (skewed in the harness) breaks it.
func storeClockDelays(c *runtimeCase) []string {
	var out []string
	for _, actor := range c.actors {
		ops := c.byActor[actor]
		switch roleOf(actor) {
		case "broker":
			spec := c.plan.Brokers[indexOf(actor)]
			claimed := map[claimID]struct {
				now  time.Time
				task model.Task
			}{}
			for _, op := range ops {
				switch op.Input.Op {
				case model.OpClaimExpired:
					for _, rc := range op.Output.Claims {
						claimed[claimID{rc.TaskID, rc.Version}] = struct {
							now  time.Time
							task model.Task
						}{op.Output.Now, rc.Task}
					}
				case model.OpRequeue, model.OpFinalize:
					rc := op.Input.ReapClaim
					cl, ok := claimed[claimID{rc.TaskID, rc.Version}]
					if !ok {
						continue // no-bypass reports it
					}
					delay, retry := spec.Policy.Policy()(cl.task, core.ErrLeaseExpired)
					if retry != (op.Input.Op == model.OpRequeue) {
						out = append(out, fmt.Sprintf("%s decided %v for %s (attempt %d of %d); its policy says retry=%v", actor, op.Input.Op, rc.TaskID, cl.task.Attempt, cl.task.MaxAttempts, retry))
						continue
					}
					if !retry {
						continue
					}
					if want := boundDelay(delay); op.Input.Delay != want {
						out = append(out, fmt.Sprintf("%s requeued %s with a delay of %s; its policy's delay is %s",
							actor, rc.TaskID, op.Input.Delay, want))
					}
				}
			}
		case "worker":
			spec := c.plan.Workers[indexOf(actor)]
			for _, op := range ops {
				for _, d := range decisionsOf(op) {
					inv := c.inv[claimKey{actor, d.task, d.token}]
					if d.kind != model.OpRetry || inv == nil || d.message == core.ErrWorkerStopped.Error() {
						continue
					}
					delay, _ := spec.Policy.Policy()(model.Task{Attempt: inv.Attempt, MaxAttempts: c.tasks[d.task].MaxAttempts}, errHandler)
					if want := boundDelay(delay); d.delay != want {
						out = append(out, fmt.Sprintf("%s retried %s with a delay of %s; its policy's delay is %s", actor, d.task, d.delay, want))
					}
				}
			}
		}
	}
	return out
}

// boundDelay is the delay a component passes for its policy's: within
// 0..model.MaxDuration.
func boundDelay(d time.Duration) time.Duration { return min(max(d, 0), model.MaxDuration) }

// quiescence pins "at quiescence every task not removed is terminal, and
// each Succeeded task had exactly one accepted Ack (or AckBatch item),
// whose token is its claim's": once the producer stopped and time passed,
// every component stopped when told to, the final listing holds every task
// whose Enqueue was accepted and that no operator removed, none of them
// Scheduled, Ready or Running, and since the last operator requeue of
// a Succeeded task exactly one Ack of it was accepted, with the token the
// task holds (or, when that Ack's answer was lost, none was and an
// indeterminate one carried that token).
func quiescence(c *runtimeCase) []string {
	var out []string
	if !c.rh.Drained {
		out = append(out, "tasks were left unfinished: "+c.rh.Left)
	}
	if !c.rh.Stopped {
		out = append(out, "workers or brokers did not return within "+ms(stopBudget+stopWait)+" of being told to stop")
		return out
	}
	listed := map[string]bool{}
	for _, t := range c.rh.Final {
		listed[t.ID] = true
	}
	for _, op := range c.ops {
		if op.Input.Op != model.OpEnqueue || op.Output.Err != "" || op.Output.Indeterminate || listed[op.Input.Enqueue.ID] {
			continue
		}
		id := op.Input.Enqueue.ID
		removed := slices.ContainsFunc(c.ops, func(r *Operation) bool {
			return r.Input.Op == model.OpRemove && r.Input.ID == id && (r.Output.Err == "" || r.Output.Indeterminate)
		})
		if !removed {
			out = append(out, fmt.Sprintf("%s was enqueued (version %d), never removed, and is not in the final listing", id, op.Output.Task.Version))
		}
	}
	for _, t := range c.rh.Final {
		if t.State != model.Succeeded && t.State != model.Failed {
			out = append(out, fmt.Sprintf("%s is %v at the end", t.ID, t.State))
		}
		if t.State != model.Succeeded {
			continue
		}
		var since uint64 // the version of the last operator requeue
		open := false    // an operator requeue whose outcome is unknown
		for _, op := range c.ops {
			if op.Input.Op == model.OpInspectRequeue && op.Input.ID == t.ID {
				switch {
				case op.Output.Indeterminate:
					open = true
				case op.Output.Err == "" && op.Output.Task != nil:
					since = max(since, op.Output.Task.Version)
				}
			}
		}
		if open {
			continue // which Acks count is not known
		}
		accepted, lost := 0, 0
		for _, op := range c.ops {
			for _, d := range decisionsOf(op) {
				if d.kind != model.OpAck || d.task != t.ID {
					continue
				}
				switch {
				case d.ok() && d.taskOut.Version > since:
					accepted++
					if d.token != t.ClaimToken {
						out = append(out, fmt.Sprintf("%s was acked with token %d; its claim's token is %d", t.ID, d.token, t.ClaimToken))
					}
				case d.indeterminate && d.token == t.ClaimToken:
					lost++
				}
			}
		}
		switch {
		case accepted > 1:
			out = append(out, fmt.Sprintf("%s is Succeeded with %d accepted Acks", t.ID, accepted))
		case accepted == 0 && lost == 0:
			out = append(out, fmt.Sprintf("%s is Succeeded with no Ack of token %d", t.ID, t.ClaimToken))
		}
	}
	return out
}

// periodicOccurrences pins "each occurrence of a schedule is enqueued
// once, under its own ID": every Enqueue a Client's scheduler sends names an
// occurrence of the plan's schedule (model.OccurrenceID of PeriodicName and a
// time the schedule gives, within the ticks), and no occurrence's Enqueue is
// accepted twice. A scheduler that derives the ID from anything but the
// occurrence (its clock when it wakes, a counter) breaks it, and so would two
// Clients enqueueing one occurrence under different IDs.
func periodicOccurrences(c *runtimeCase) []string {
	var out []string
	accepted := map[string]int{}
	for i, cs := range c.plan.Clients {
		if cs.Every <= 0 {
			continue
		}
		every, err := core.Every(cs.Every)
		if err != nil {
			return []string{fmt.Sprintf("%s: %v", clientName(i), err)}
		}
		until := c.epoch.Add(c.plan.Duration())
		for _, op := range c.byActor[schedulerName(i)] {
			if op.Input.Op != model.OpEnqueue {
				out = append(out, fmt.Sprintf("%s sent %v, not an Enqueue", schedulerName(i), op.Input.Op))
				continue
			}
			id := op.Input.Enqueue.ID
			name, at, ok := model.ParseOccurrenceID(id)
			switch {
			case !ok || name != PeriodicName:
				out = append(out, fmt.Sprintf("%s enqueued %q, not an occurrence ID of schedule %q", schedulerName(i), id, PeriodicName))
				continue
			case !every.Next(at.Add(-time.Microsecond)).Equal(at) || at.After(until):
				out = append(out, fmt.Sprintf("%s enqueued %q: %v is not an occurrence of every %v until %v", schedulerName(i), id, at, cs.Every, until))
				continue
			}
		}
	}
	for _, op := range c.ops {
		if op.Input.Op == model.OpEnqueue && op.Output.Err == "" && !op.Output.Indeterminate {
			if _, _, ok := model.ParseOccurrenceID(op.Input.Enqueue.ID); ok {
				accepted[op.Input.Enqueue.ID]++
			}
		}
	}
	for id, n := range accepted {
		if n > 1 {
			out = append(out, fmt.Sprintf("occurrence %s was accepted %d times", id, n))
		}
	}
	slices.Sort(out)
	return out
}

// --- what the properties read ------------------------------------------------

var (
	workerOps = []model.Op{model.OpPop, model.OpExtend, model.OpAck, model.OpFail, model.OpRetry, model.OpAckBatch}
	brokerOps = []model.Op{model.OpPromote, model.OpClaimExpired, model.OpRequeue, model.OpFinalize, model.OpRecoverExpired}
)

type claimID struct {
	task  string
	token uint64 // a worker claim's token, a broker claim's version
}

type claimKey struct {
	actor, task string
	token       uint64
}

// runtimeCase is a history arranged for the properties.
type runtimeCase struct {
	plan    *RuntimePlan
	rh      *RuntimeHistory
	epoch   time.Time
	ops     []*Operation            // in call order
	byActor map[string][]*Operation // in call order
	actors  []string                // the keys of byActor, sorted
	inv     map[claimKey]*Invocation
	tasks   map[string]RuntimeTask
	// superseded: the worker was told its claim no longer holds (a refused
	// Extend or decision), so it records nothing more for it.
	superseded map[claimKey]bool
	held       map[heldKey]bool // claims a *core.ShutdownError named held
}

func newRuntimeCase(p *RuntimePlan, rh *RuntimeHistory) *runtimeCase {
	c := &runtimeCase{plan: p, rh: rh, epoch: rh.History.Epoch, byActor: map[string][]*Operation{},
		inv: map[claimKey]*Invocation{}, tasks: map[string]RuntimeTask{}, superseded: map[claimKey]bool{}}
	for i := range rh.History.Operations {
		op := &rh.History.Operations[i]
		c.ops = append(c.ops, op)
		c.byActor[op.Actor] = append(c.byActor[op.Actor], op)
	}
	c.actors = slices.Sorted(maps.Keys(c.byActor))
	for i := range rh.Invocations {
		inv := &rh.Invocations[i]
		c.inv[claimKey{inv.Worker, inv.TaskID, inv.Token}] = inv
	}
	for _, t := range p.Tasks {
		c.tasks[t.ID] = t
	}
	for _, op := range c.ops {
		for _, d := range decisionsOf(op) {
			if d.worker && (d.refused == "stale_claim" || d.refused == "cancelled" || d.refused == "invalid_transition") {
				c.superseded[claimKey{op.Actor, d.task, d.token}] = true
			}
		}
	}
	c.held = map[heldKey]bool{}
	for _, cl := range rh.Held {
		c.held[heldKey{cl.TaskID, cl.Token}] = true
	}
	return c
}

// heldKey names a claim by its task and token (tokens are never reused in a
// queue).
type heldKey struct {
	task  string
	token uint64
}

// expectedOutcome is the decision a worker owes the invocation's outcome.
func (c *runtimeCase) expectedOutcome(spec WorkerSpec, inv *Invocation) (model.Op, string) {
	var err error
	switch {
	case inv.TimedOut:
		// Whatever the handler did after its timeout, the attempt failed
		// by it.
		err = core.ErrAttemptTimeout
	case inv.Panicked:
		err = &core.PanicError{Value: "generated"}
	case inv.Err == "":
		return model.OpAck, "returned a nil error"
	case inv.Permanent:
		return model.OpFail, "returned a Permanent error"
	default:
		err = errHandler
	}
	t := model.Task{Attempt: inv.Attempt, MaxAttempts: c.tasks[inv.TaskID].MaxAttempts}
	if _, retry := spec.Policy.Policy()(t, err); retry {
		return model.OpRetry, fmt.Sprintf("failed attempt %d of %d", inv.Attempt, t.MaxAttempts)
	}
	return model.OpFail, fmt.Sprintf("failed its last attempt (%d of %d)", inv.Attempt, t.MaxAttempts)
}

// timeoutMessage is the message a worker records for an attempt that ran
// past the task's timeout d.
func timeoutMessage(d time.Duration) string {
	return fmt.Errorf("%w after %v", core.ErrAttemptTimeout, d).Error()
}

// readingBefore returns the latest reading of the stores' clock taken
// before recorder time at (the zero time if none): an op that returned by
// then read no later time.
func (c *runtimeCase) readingBefore(at int64) time.Time {
	var latest time.Time
	for _, rd := range c.rh.Readings {
		if rd.At <= at && rd.Now.After(latest) {
			latest = rd.Now
		}
	}
	return latest
}

// operatorActed reports whether an operator requeue or remove of the task
// was called before recorder time at and may have taken effect.
func (c *runtimeCase) operatorActed(task string, before int64) bool {
	for _, op := range c.ops {
		if (op.Input.Op == model.OpInspectRequeue || op.Input.Op == model.OpRemove || op.Input.Op == model.OpCancel) && op.Input.ID == task &&
			op.Call < before && (op.Output.Err == "" || op.Output.Indeterminate) {
			return true
		}
	}
	return false
}

// decidedBy reports whether the worker sent a decision (Ack, Fail, Retry)
// on the claim that was called before recorder time at and may have taken
// effect: its own decision, not a lost lease, then ends the claim.
func (c *runtimeCase) decidedBy(actor string, id claimID, before int64) bool {
	for _, op := range c.byActor[actor] {
		if op.Call >= before {
			break
		}
		for _, d := range decisionsOf(op) {
			if d.kind != model.OpExtend && d.worker && d.task == id.task && d.token == id.token && (d.ok() || d.indeterminate) {
				return true
			}
		}
	}
	return false
}

// decision is one claim an operation decides (or extends): a worker's
// Extend, Ack, Fail, Retry or AckBatch item, a broker's Requeue or
// Finalize.
type decision struct {
	kind    model.Op
	worker  bool
	task    string
	token   uint64 // token of a worker claim, version of a broker claim
	result  []byte
	message string
	delay   time.Duration // of Retry and Requeue
	// The answer: refused is the error kind of a definite refusal;
	// indeterminate an unknown outcome; else taskOut and now.
	refused       string
	indeterminate bool
	taskOut       model.Task
	now           time.Time
}

func (d decision) ok() bool { return d.refused == "" && !d.indeterminate }

// decisionsOf returns the claims op decides.
func decisionsOf(op *Operation) []decision {
	in, o := &op.Input, &op.Output
	answer := func(d decision) decision {
		d.refused, d.indeterminate, d.now = o.Err, o.Indeterminate, o.Now
		if o.Task != nil {
			d.taskOut = *o.Task
		}
		return d
	}
	switch in.Op {
	case model.OpExtend, model.OpAck, model.OpFail, model.OpRetry:
		if in.Claim == nil {
			return nil
		}
		return []decision{answer(decision{kind: in.Op, worker: true, task: in.Claim.TaskID, token: in.Claim.Token,
			result: in.Result, message: in.Message, delay: in.Delay})}
	case model.OpRequeue, model.OpFinalize:
		if in.ReapClaim == nil {
			return nil
		}
		return []decision{answer(decision{kind: in.Op, task: in.ReapClaim.TaskID, token: in.ReapClaim.Version,
			message: in.Message, delay: in.Delay})}
	case model.OpAckBatch:
		return batchAcks(op)
	}
	return nil
}

// passes splits a broker's ops into its passes over a queue: a pass starts
// with the Promote calls that follow any other op.
func passes(ops []*Operation) [][]*Operation {
	var out [][]*Operation
	for i, op := range ops {
		if op.Input.Op == model.OpPromote && (i == 0 || ops[i-1].Input.Op != model.OpPromote) || len(out) == 0 {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], op)
	}
	return out
}

// roleOf returns "worker" of "worker 2".
func roleOf(actor string) string {
	role, _, _ := strings.Cut(actor, " ")
	return role
}

// indexOf returns 2 of "worker 2".
func indexOf(actor string) int {
	_, n, _ := strings.Cut(actor, " ")
	i := 0
	fmt.Sscan(n, &i)
	return i
}

// batchAcks returns the items of an AckBatch as worker Ack decisions.
func batchAcks(op *Operation) []decision {
	o := &op.Output
	out := make([]decision, len(op.Input.Acks))
	for i, a := range op.Input.Acks {
		d := decision{kind: model.OpAck, worker: true, task: a.TaskID, token: a.Token, result: a.Result,
			refused: o.Err, indeterminate: o.Indeterminate, now: o.Now}
		if o.Err == "" && !o.Indeterminate && i < len(o.Items) {
			it := o.Items[i]
			d.refused = it.Err
			if it.Task != nil {
				d.taskOut = *it.Task
			}
		}
		out[i] = d
	}
	return out
}
