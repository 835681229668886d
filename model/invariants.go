package model

import (
	"errors"
	"fmt"
)

// Invariants checks the invariants of DESIGN.md that a single state can show,
// and returns every violation it finds (nil when there is none):
//
//  1. Every task is in exactly one state, and the counts agree with the tasks.
//  3. Versions are distinct and drawn from the sequence; tokens are never
//     shared between tasks and never ahead of a task's Version.
//  4. Exactly the Running tasks hold a claim: a token, ClaimedAt and Deadline.
//  5. A Succeeded task is in no index an operation other than an operator's
//     reads from to run it.
//  6. No task is lost: every pending task is in the order index of its state,
//     where Promote, Pop, ClaimExpired or RecoverExpired reach it.
//
// Invariant 2 (a rejected op changes nothing) is a property of transitions,
// not of a state; the property tests in fuzz/ check it after every step.
func Invariants(q Queue) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	var counts Counts
	versions := map[uint64]string{}
	tokens := map[uint64]string{}
	q.tasks.Ascend("", func(id string, t *Task) bool {
		if t.ID != id {
			bad("task stored under %q has ID %q", id, t.ID)
		}
		if t.State == Quarantined {
			counts.add(t.State, 1)
			if _, in := q.byState[Quarantined].Get(id); !in {
				bad("quarantined record %q not in the quarantined index", id)
			}
			if q.isDamaged(id) || t.Version != 0 || t.ClaimToken != 0 || t.Quarantine == "" {
				bad("quarantined record %q: damaged %v, version %d, token %d, reason %q", id, q.isDamaged(id), t.Version, t.ClaimToken, t.Quarantine)
			}
			return true
		}
		if !t.State.Valid() {
			bad("task %q: invalid state %d", id, t.State)
			return true
		}
		counts.add(t.State, 1)
		for _, s := range States { // (1) in exactly its own state index
			_, in := q.byState[s].Get(id)
			if in != (s == t.State) {
				bad("task %q (%v): in the %v index = %v", id, t.State, s, in)
			}
		}
		if t.Version == 0 || t.Version > q.seq { // (3)
			bad("task %q: version %d outside 1..%d", id, t.Version, q.seq)
		}
		if other, dup := versions[t.Version]; dup {
			bad("tasks %q and %q share version %d", other, id, t.Version)
		}
		versions[t.Version] = id
		if t.ClaimToken != 0 {
			if t.ClaimToken > t.Version {
				bad("task %q: token %d ahead of version %d", id, t.ClaimToken, t.Version)
			}
			if other, dup := tokens[t.ClaimToken]; dup {
				bad("tasks %q and %q share token %d", other, id, t.ClaimToken)
			}
			tokens[t.ClaimToken] = id
		}
		running := t.State == Running // (4)
		holds := t.ClaimToken != 0 && !t.Deadline.IsZero() && !t.ClaimedAt.IsZero()
		released := t.ClaimToken == 0 && t.Deadline.IsZero() && t.ClaimedAt.IsZero()
		if (running && !holds) || ((t.State == Ready || t.State == Scheduled) && !released) {
			bad("task %q (%v): token %d, claimed %v, deadline %v", id, t.State, t.ClaimToken, t.ClaimedAt, t.Deadline)
		}
		if running && t.Attempt < 1 {
			bad("task %q: running with attempt %d", id, t.Attempt)
		}
		if t.State.Terminal() && (t.FinishedAt.IsZero() || !t.Deadline.IsZero()) {
			bad("task %q (%v): finished %v, deadline %v", id, t.State, t.FinishedAt, t.Deadline)
		}
		if !t.State.Terminal() && !t.FinishedAt.IsZero() {
			bad("task %q (%v): finished at %v", id, t.State, t.FinishedAt)
		}
		if t.State == Scheduled && t.RunAfter.IsZero() {
			bad("task %q: scheduled without RunAfter", id)
		}
		// (5) and (6): in the order index of its state and in no other.
		_, inReady := q.ready.Get(readyKey(t))
		_, inSched := q.scheduled.Get(timeKey(t.RunAfter, id))
		_, inRun := q.running.Get(timeKey(t.Deadline, id))
		_, inDone := q.finished.Get(timeKey(t.FinishedAt, id))
		want := [4]bool{t.State == Ready, t.State == Scheduled, t.State == Running, t.State.Terminal()}
		if got := [4]bool{inReady, inSched, inRun, inDone}; got != want {
			bad("task %q (%v): order indexes ready/scheduled/running/finished = %v", id, t.State, got)
		}
		return true
	})
	if counts != q.counts {
		bad("counts %+v, tasks say %+v", q.counts, counts)
	}
	for _, s := range append(States[:len(States):len(States)], Quarantined) {
		if q.byState[s].Len() != counts.Of(s) {
			bad("%v index holds %d tasks, %d are %v", s, q.byState[s].Len(), counts.Of(s), s)
		}
	}
	if n := q.ready.Len() + q.scheduled.Len() + q.running.Len() + q.finished.Len(); n != q.tasks.Len()-counts.Quarantined {
		bad("order indexes hold %d entries for %d tasks", n, q.tasks.Len()-counts.Quarantined)
	}
	q.damaged.Ascend("", func(id string, _ bool) bool {
		if t, ok := q.tasks.Get(id); !ok || t.State == Quarantined {
			bad("damaged record %q: not a task of the queue", id)
		}
		return true
	})
	return errors.Join(errs...)
}
