package spec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// This file compares what a store answers with what the model answers: one
// result at a time, and a queue's whole state.

// sameError reports whether two errors are the same answer of the
// specification: the same kind (model.Kind), and for a *model.TransitionError
// the same op and state. Errors of no kind (core.ErrClosed, a context error)
// must match with errors.Is.
func sameError(got, want error) bool {
	if (got == nil) != (want == nil) {
		return false
	}
	if got == nil {
		return true
	}
	if model.Kind(got) != model.Kind(want) {
		return false
	}
	var gt, wt *model.TransitionError
	if errors.As(want, &wt) {
		return errors.As(got, &gt) && gt.Op == wt.Op && gt.State == wt.State
	}
	var gd, wd *model.DuplicateError
	if errors.As(got, &gd) != errors.As(want, &wd) {
		return false // a held key told apart from a taken ID
	}
	if wd != nil {
		return gd.Key == wd.Key && gd.TaskID == wd.TaskID
	}
	if model.Kind(want) == nil {
		return errors.Is(got, want) || errors.Is(want, got) || got.Error() == want.Error()
	}
	return true
}

// describeError names an error by its kind, and a transition error by its op
// and state.
func describeError(err error) string {
	if err == nil {
		return "ok"
	}
	var te *model.TransitionError
	if errors.As(err, &te) {
		return fmt.Sprintf("invalid transition (%v from %v)", te.Op, te.State)
	}
	var de *model.DuplicateError
	if errors.As(err, &de) {
		return fmt.Sprintf("duplicate (key %q held by %q)", de.Key, de.TaskID)
	}
	if k := model.Kind(err); k != nil {
		return strings.TrimPrefix(k.Error(), "leasehold: ")
	}
	return fmt.Sprintf("%q", err.Error())
}

// formatTime renders an instant the way failure messages and the spec
// document show it: UTC with microseconds and its zone, or "zero".
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "zero"
	}
	return t.Format("2006-01-02T15:04:05.000000Z07:00")
}

// formatTask renders every field of a task, for failure messages.
func formatTask(t core.Task) string {
	var errs []string
	for _, e := range t.Errors {
		errs = append(errs, fmt.Sprintf("{attempt %d at %s %q lease=%v}", e.Attempt, formatTime(e.At), e.Message, e.LeaseExpired))
	}
	unique := ""
	if t.UniqueKey != "" {
		unique = fmt.Sprintf(" key=%q until=%s", t.UniqueKey, formatTime(t.UniqueUntil))
	}
	return fmt.Sprintf("%s/%s %v version=%d token=%d attempt=%d/%d timeout=%v priority=%d payload=%q result=%q enqueued=%s runAfter=%s claimed=%s deadline=%s finished=%s%s errors=[%s]",
		t.Queue, t.ID, t.State, t.Version, t.ClaimToken, t.Attempt, t.MaxAttempts, t.Timeout, t.Priority, t.Payload, t.Result,
		formatTime(t.EnqueuedAt), formatTime(t.RunAfter), formatTime(t.ClaimedAt), formatTime(t.Deadline), formatTime(t.FinishedAt),
		unique, strings.Join(errs, " "))
}

// diffError compares the error halves of two answers. It returns "" when they
// agree, and whether the results must still be compared (both succeeded).
func diffError(got, want error) (string, bool) {
	if !sameError(got, want) {
		return fmt.Sprintf("store returned %s (%v), model %s (%v)", describeError(got), got, describeError(want), want), false
	}
	return "", got == nil
}

func diffNow(got, want time.Time) string {
	if !got.Equal(want) {
		return fmt.Sprintf("Now: store %s, model %s", formatTime(got), formatTime(want))
	}
	return ""
}

func diffTask(what string, got, want core.Task) string {
	if got.State == core.Quarantined && want.State == core.Quarantined && got.Quarantine != "" && want.Quarantine != "" {
		got.Quarantine = want.Quarantine // each store says in its own words why
	}
	if !got.Equal(want) {
		return fmt.Sprintf("%s differs:\n\tstore: %s\n\tmodel: %s", what, formatTask(got), formatTask(want))
	}
	return ""
}

func diffTasks(what string, got, want []core.Task) string {
	var b strings.Builder
	if len(got) != len(want) {
		fmt.Fprintf(&b, "%s: store returned %d tasks %v, model %d %v", what, len(got), taskIDs(got), len(want), taskIDs(want))
		return b.String()
	}
	for i := range got {
		if d := diffTask(fmt.Sprintf("%s[%d]", what, i), got[i], want[i]); d != "" {
			b.WriteString(d)
			b.WriteString("\n")
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func diffIDs(got, want []string) string {
	if !slices.Equal(got, want) {
		return fmt.Sprintf("IDs: store %q, model %q", got, want)
	}
	return ""
}

func diffReapClaims(got, want []core.ReapClaim) string {
	if len(got) != len(want) {
		return fmt.Sprintf("claims: store %d %v, model %d %v", len(got), reapIDs(got), len(want), reapIDs(want))
	}
	for i, g := range got {
		w := want[i]
		if g.Queue != w.Queue || g.TaskID != w.TaskID || g.Version != w.Version || !g.Deadline.Equal(w.Deadline) {
			return fmt.Sprintf("claim[%d]: store {%s %s version %d deadline %s}, model {%s %s version %d deadline %s}",
				i, g.Queue, g.TaskID, g.Version, formatTime(g.Deadline), w.Queue, w.TaskID, w.Version, formatTime(w.Deadline))
		}
		if d := diffTask(fmt.Sprintf("claim[%d].Task", i), g.Task, w.Task); d != "" {
			return d
		}
	}
	return ""
}

func taskIDs(ts []core.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

func reapIDs(cs []core.ReapClaim) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.TaskID
	}
	return out
}

func joinDiffs(ds ...string) string {
	var out []string
	for _, d := range ds {
		if d != "" {
			out = append(out, d)
		}
	}
	return strings.Join(out, "\n")
}

// queueState is everything a store shows of one queue through its read
// operations: every task (listed state by state, then sorted by ID) and the
// counts.
type queueState struct {
	Tasks  []core.Task
	Counts core.Counts
}

// readQueue reads a queue's whole state through List (every page of every
// state) and Counts. It checks what List promises on the way: pages in ID
// order, each task in the state asked for, cursors that move forward.
func readQueue(ctx context.Context, s core.Store, queue string) (queueState, error) {
	var st queueState
	for _, state := range append(model.States[:len(model.States):len(model.States)], model.Quarantined) {
		after := ""
		for page := 0; ; page++ {
			res, err := s.List(ctx, core.ListParams{Queue: queue, State: state, After: after, Limit: model.MaxBatch})
			if err != nil {
				return st, fmt.Errorf("List(%s, %v, after %q): %w", queue, state, after, err)
			}
			for i, t := range res.Tasks {
				if t.State != state {
					return st, fmt.Errorf("List(%s, %v) returned task %q in state %v", queue, state, t.ID, t.State)
				}
				if t.ID <= after || (i > 0 && t.ID <= res.Tasks[i-1].ID) {
					return st, fmt.Errorf("List(%s, %v, after %q) is not in ID order: %v", queue, state, after, taskIDs(res.Tasks))
				}
			}
			st.Tasks = append(st.Tasks, res.Tasks...)
			if res.Next == "" {
				break
			}
			if res.Next <= after || page > 1000 {
				return st, fmt.Errorf("List(%s, %v, after %q): cursor %q does not advance", queue, state, after, res.Next)
			}
			after = res.Next
		}
	}
	slices.SortFunc(st.Tasks, func(a, b core.Task) int { return strings.Compare(a.ID, b.ID) })
	c, err := s.Counts(ctx, core.CountsParams{Queue: queue})
	if err != nil {
		return st, fmt.Errorf("Counts(%s): %w", queue, err)
	}
	st.Counts = c
	return st, nil
}

// modelQueue is the state of a queue in the model, as List shows it: a
// damaged record that no operation has set aside yet is passed over.
func modelQueue(m *ModelStore, queue string) queueState {
	q := m.Queue(queue)
	tasks := q.Tasks()
	tasks = slices.DeleteFunc(tasks, func(t core.Task) bool { return q.Damaged(t.ID) })
	return queueState{Tasks: tasks, Counts: q.Counts()}
}

// diffQueueState describes how two states of a queue differ, "" if they agree.
func diffQueueState(queue string, got, want queueState) string {
	var b strings.Builder
	if got.Counts != want.Counts {
		fmt.Fprintf(&b, "queue %s: counts: store %+v, model %+v\n", queue, got.Counts, want.Counts)
	}
	i, j := 0, 0
	for i < len(got.Tasks) || j < len(want.Tasks) {
		switch {
		case j == len(want.Tasks) || (i < len(got.Tasks) && got.Tasks[i].ID < want.Tasks[j].ID):
			fmt.Fprintf(&b, "queue %s: store has a task the model has not: %s\n", queue, formatTask(got.Tasks[i]))
			i++
		case i == len(got.Tasks) || want.Tasks[j].ID < got.Tasks[i].ID:
			fmt.Fprintf(&b, "queue %s: store lacks a task of the model: %s\n", queue, formatTask(want.Tasks[j]))
			j++
		default:
			if d := diffTask(fmt.Sprintf("queue %s: task %q", queue, got.Tasks[i].ID), got.Tasks[i], want.Tasks[j]); d != "" {
				b.WriteString(d)
				b.WriteString("\n")
			}
			i++
			j++
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}
