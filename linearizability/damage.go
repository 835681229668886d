package linearizability

import (
	"context"
	"slices"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/model"
)

// Damaged records in the store-level histories.
//
// A plan may damage one stored record mid-history: a DamageTask step, which
// one of its clients takes at a point of one round drawn with the rest of
// the plan, calls the backend's Damage hook on a task of the plan (one the
// client has seen in the queue, when it has seen one). The hook
// makes the record unreadable where it stands (a field no index reads does
// not parse), in one atomic step of the store, as a disk or an operator's
// stray write would. The step is recorded as an operation of its client
// (Input.Damage) that the model applies as the event model.Queue.Damage, so
// the checker knows from which point on the task is poison and holds the
// store to what the model says follows: the first Promote, Pop,
// ClaimExpired or RecoverExpired that reaches the record sets it aside as
// Quarantined in the same step and goes on with the sound tasks; every
// decision on it is ErrCorrupt and changes nothing; Get shows it
// quarantined and List passes over it; Remove with no version deletes it.
// A hook that finds no record answers ErrNotFound, which the model says too.

// DamageOdds is one in how many plans damages a record: few enough that
// most histories stay clean.
const DamageOdds = 6

// drawDamage adds, to one plan in DamageOdds, a DamageTask step at a place
// of one client's round in the second half of the plan (the tasks exist by
// then, and the ops after it meet the damage).
func drawDamage(t *rapid.T, p *Plan) {
	if rapid.IntRange(0, DamageOdds-1).Draw(t, "damage") != DamageOdds/2 {
		return // rapid favours the ends of a range: the damage is a middle value
	}
	s := Step{Kind: DamageTask,
		Queue: rapid.IntRange(0, len(p.Queues)-1).Draw(t, "damage queue"),
		Task:  rapid.IntRange(0, len(p.Tasks)-1).Draw(t, "damage task")}
	c := &p.Clients[rapid.IntRange(0, len(p.Clients)-1).Draw(t, "damage client")]
	r := rapid.IntRange(len(p.Gaps)/2, len(p.Gaps)-1).Draw(t, "damage round")
	at := rapid.IntRange(0, len(c.Rounds[r])).Draw(t, "damage at")
	c.Rounds[r] = slices.Insert(slices.Clone(c.Rounds[r]), at, s)
}

// Damages reports whether the plan has a DamageTask step.
func (p *Plan) Damages() bool {
	for _, c := range p.Clients {
		for _, r := range c.Rounds {
			for _, s := range r {
				if s.Kind == DamageTask {
					return true
				}
			}
		}
	}
	return false
}

// damageTask performs a DamageTask step through the backend's hook and
// records it as the client's operation; a backend without one skips it.
func (a *actor) damageTask(ctx context.Context, s Step) {
	if a.damage == nil {
		return
	}
	q, id := a.plan.Queues[s.Queue], a.plan.Tasks[s.Task]
	// A task the client has seen in the queue, pending if it saw one: most
	// of the plan's IDs name no record at a given moment, and the damage of
	// a pending task meets more ops than that of a finished one.
	var seen, pending []string
	for k := range a.seen {
		if k.queue == q {
			seen = append(seen, k.id)
			if a.pending[k] {
				pending = append(pending, k.id)
			}
		}
	}
	if len(pending) > 0 {
		seen = pending
	}
	if len(seen) > 0 {
		slices.Sort(seen)
		id = seen[s.Task%len(seen)]
	}
	in := Input{Queue: q, Damage: true, ID: id}
	_, _ = record(a.client, in, func() (struct{}, error) { return struct{}{}, a.damage(ctx, q, id) }, func(*Output, struct{}) {})
}

// damageStep is step for a Damage: the states after it, none when the
// hook's answer is not the model's.
func damageStep(q model.Queue, in *Input, out *Output) []any {
	n, err := q.Damage(in.ID)
	switch {
	case out.Indeterminate && err == nil:
		return []any{q, n}
	case out.Indeterminate:
		return []any{q}
	case ErrorKind(err) != out.Err:
		return nil
	case err != nil:
		return []any{q}
	}
	return []any{n}
}

// sameTask is Task.Equal but for the reason a record set aside gives: the
// model's is model.DamagedReason, a store says what it could not read, and
// only that there is one is the contract (as in the conformance suite).
func sameTask(m, o model.Task) bool {
	if m.Quarantine != "" && o.Quarantine != "" {
		o.Quarantine = m.Quarantine
	}
	return m.Equal(o)
}
