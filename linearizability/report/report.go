// Package report draws a checked history as one self-contained HTML page a
// person reads: a lane per task with its claims as segments (token, holder,
// lease and deadline), every operation on it marked accepted, refused (with
// the error kind) or indeterminate, in the order porcupine linearized them;
// a summary of the run with how often each guard fired, as a small chart;
// and, for a history that is not linearizable, the first step the model
// refused, with the state before it and the store's answer beside the
// model's.
//
// The page needs no network: its styles are inline and its charts are SVG.
// `leasehold check --report DIR` writes one per adapter, and the command
// writes one into the folder of every violation, next to porcupine's own
// visualization (history.html), which it links.
package report

import (
	"fmt"
	"html/template"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	_ "embed"

	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/model"
)

// Summary is what a run did: the numbers behind the report's chart.
type Summary struct {
	Histories  int
	Operations int
	Guards     linearizability.Guards
}

// FromReport is the summary of a harness run.
func FromReport(r linearizability.Report) Summary {
	return Summary{Histories: r.Histories, Operations: r.Operations, Guards: r.Guards}
}

// FromHistory is the summary of one history.
func FromHistory(h *linearizability.History) Summary {
	return Summary{Histories: 1, Operations: len(h.Operations), Guards: linearizability.CountGuards(h)}
}

// Data is what the page shows; Build makes it.
type Data struct {
	Title   string
	Adapter string
	Seed    uint64
	Mode    string
	// Result is porcupine's verdict: Ok, Illegal or Unknown.
	Result     string
	Operations int
	Summary    Summary
	// Bars are the summary's guard counts, drawn as a chart ChartHeight
	// pixels high.
	Bars        []Bar
	ChartHeight int
	// Porcupine is the link to porcupine's visualization of the same
	// history ("" for none).
	Porcupine string
	Queues    []Queue
}

// Bar is one bar of the summary chart.
type Bar struct {
	Label string
	Count int
	// Width is the bar's length in the chart, in pixels (the longest bar
	// is 240).
	Width int
	Y     int
}

// Queue is one queue of the history: its lanes and its steps in order.
type Queue struct {
	Name  string
	Lanes []Lane
	Steps []Step
	// Columns is the number of step columns the lanes are drawn over.
	Columns int
	// Width and Height are the lanes' SVG size in pixels.
	Width, Height int
	// Refused is the first step the model refused, nil if none.
	Refused *Refusal
	// Unplaced counts the operations porcupine could not place.
	Unplaced int
}

// Lane is one task: its claims and the operations on it.
type Lane struct {
	Task   string
	Y      int
	Claims []Claim
	Marks  []Mark
}

// Claim is one claim of a task, from the step that made it to the step
// that ended it (or the end of the history).
type Claim struct {
	// Broker is set for a broker's ReapClaim, clear for a worker's claim.
	Broker bool
	Holder string // the client that holds it: "worker 2", "broker 0"
	// Token is the worker claim's token, or the ReapClaim's version.
	Token    uint64
	Lease    string // the lease asked for ("30ms"); "" for a broker's claim
	Deadline string // the lease's deadline, relative to the history's start
	From, To int    // step columns
	X, Y, W  int    // pixels
	Label    string // the whole claim, for the tooltip
	Short    string // what fits under the segment
}

// Mark is one operation on a task's lane.
type Mark struct {
	Column  int
	X, CY   int
	Outcome string // "accepted", "refused", "indeterminate", "unplaced"
	Kind    string // the error kind of a refusal
	Op      string
	Text    string // the whole operation, for the tooltip
	Refused bool   // the step the model refused
	Abbrev  string // one or two letters naming the op
}

// Step is one operation in porcupine's order.
type Step struct {
	N       int // 1-based position; 0 for an operation porcupine could not place
	Actor   string
	Call    string
	Answer  string
	Outcome string
	Kind    string
	Refused bool
}

// Refusal is the step the model refused, explained.
type Refusal struct {
	Step   int
	Actor  string
	Before string
	Store  string
	Model  string
}

// Options adjust Build.
type Options struct {
	// Title heads the page (default: "leasehold check: <adapter>, seed N").
	Title string
	// Porcupine links porcupine's visualization of the history.
	Porcupine string
	// Summary is the run's summary (default: FromHistory).
	Summary *Summary
}

// Layout of the lanes, in pixels.
const (
	labelWidth = 150
	colWidth   = 26
	laneHeight = 42
	laneTop    = 22
)

// Build makes the page's data from a checked history.
func Build(h *linearizability.History, v linearizability.Verdict, o Options) Data {
	d := Data{
		Title: o.Title, Adapter: h.Adapter, Seed: h.Seed, Mode: h.Mode.String(), Result: string(v.Result),
		Operations: len(h.Operations), Porcupine: o.Porcupine,
	}
	if d.Title == "" {
		d.Title = fmt.Sprintf("leasehold check: %s, seed %d", h.Adapter, h.Seed)
	}
	if o.Summary != nil {
		d.Summary = *o.Summary
	} else {
		d.Summary = FromHistory(h)
	}
	d.Bars = bars(d.Summary.Guards)
	d.ChartHeight = len(d.Bars)*24 + 4
	for _, qe := range linearizability.Explain(h, v).Queues {
		d.Queues = append(d.Queues, buildQueue(h, qe))
	}
	// A queue the model refused comes first.
	slices.SortStableFunc(d.Queues, func(a, b Queue) int {
		switch {
		case a.Refused != nil && b.Refused == nil:
			return -1
		case a.Refused == nil && b.Refused != nil:
			return 1
		}
		return 0
	})
	return d
}

func bars(g linearizability.Guards) []Bar {
	bs := []Bar{
		{Label: "stale acks refused", Count: g.StaleAcks},
		{Label: "stale extends, fails, retries refused", Count: g.StaleWorkerCalls},
		{Label: "stale broker decisions dropped", Count: g.StaleDecisions},
		{Label: "operator conflicts", Count: g.Conflicts},
		{Label: "indeterminate calls", Count: g.Indeterminate},
	}
	top := 0
	for _, b := range bs {
		top = max(top, b.Count)
	}
	for i := range bs {
		bs[i].Y = i * 24
		if top > 0 {
			bs[i].Width = max(bs[i].Count*240/top, min(bs[i].Count, 2))
		}
	}
	return bs
}

// tasksOf names the tasks an operation is about.
func tasksOf(op *linearizability.Operation) []string {
	in, out := &op.Input, &op.Output
	var ids []string
	add := func(id string) {
		if id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if in.Tx != nil { // a transaction is about the tasks of its ops
		for _, sub := range subOps(op) {
			for _, id := range tasksOf(&sub) {
				add(id)
			}
		}
		return ids
	}
	switch {
	case in.Enqueue != nil:
		add(in.Enqueue.ID)
	case in.Claim != nil:
		add(in.Claim.TaskID)
	case in.ReapClaim != nil:
		add(in.ReapClaim.TaskID)
	case in.Op == model.OpInspectRequeue || in.Op == model.OpRemove || in.Op == model.OpGet:
		add(in.ID)
	}
	for _, e := range in.Batch {
		add(e.ID)
	}
	for _, a := range in.Acks {
		add(a.TaskID)
	}
	if in.Op == model.OpList || in.Op == model.OpCounts {
		return ids // reads of the queue: shown as steps only
	}
	for _, t := range out.Tasks {
		add(t.ID)
	}
	for _, c := range out.Claims {
		add(c.TaskID)
	}
	for _, id := range out.IDs {
		add(id)
	}
	return ids
}

// outcome names an operation's outcome and error kind.
func outcome(op *linearizability.Operation) (string, string) {
	switch {
	case op.Output.Indeterminate:
		return "indeterminate", ""
	case op.Output.Err != "":
		return "refused", op.Output.Err
	}
	for _, it := range op.Output.Items {
		if it.Err != "" {
			return "refused", it.Err // a batch with a refused item
		}
	}
	return "accepted", ""
}

// tasksAfter returns the tasks an accepted operation answered with, by ID.
func tasksAfter(op *linearizability.Operation) map[string]model.Task {
	out := map[string]model.Task{}
	if op.Input.Tx != nil {
		if !op.Input.Tx.Commit {
			return out // rolled back: no task changed
		}
		for _, sub := range subOps(op) {
			if sub.Output.Err == "" && !sub.Output.Indeterminate {
				maps.Copy(out, tasksAfter(&sub))
			}
		}
		return out
	}
	o := &op.Output
	if o.Task != nil {
		out[o.Task.ID] = *o.Task
	}
	for _, t := range o.Tasks {
		out[t.ID] = t
	}
	for _, c := range o.Claims {
		out[c.TaskID] = c.Task
	}
	for _, it := range o.Items {
		if it.Task != nil {
			out[it.Task.ID] = *it.Task
		}
	}
	return out
}

// subOps returns the ops of a transaction as operations of their own.
func subOps(op *linearizability.Operation) []linearizability.Operation {
	var out []linearizability.Operation
	for i, in := range op.Input.Tx.Ops {
		if i < len(op.Output.Tx) {
			out = append(out, linearizability.Operation{Client: op.Client, Actor: op.Actor, Call: op.Call, Return: op.Return, Input: in, Output: op.Output.Tx[i]})
		}
	}
	return out
}

func buildQueue(h *linearizability.History, qe linearizability.QueueExplanation) Queue {
	q := Queue{Name: qe.Queue}
	order := slices.Clone(qe.Order)
	placed := map[int]bool{}
	for _, i := range order {
		placed[i] = true
	}
	// Operations porcupine could not place follow, in call order.
	for i := range h.Operations {
		if h.Operations[i].Input.Queue == qe.Queue && !placed[i] {
			order = append(order, i)
			q.Unplaced++
		}
	}
	refused := -1
	if qe.Refused != nil {
		refused = qe.Refused.Op
	}
	lanes := map[string]*Lane{}
	var laneOrder []string
	lane := func(id string) *Lane {
		if l, ok := lanes[id]; ok {
			return l
		}
		l := &Lane{Task: id}
		lanes[id] = l
		laneOrder = append(laneOrder, id)
		return l
	}
	// open holds each task's claims under way, as indexes into its lane's
	// Claims: a worker's claim outlives its lease until someone acts.
	open := map[string][]int{}
	for col, i := range order {
		op := &h.Operations[i]
		res, kind := outcome(op)
		n := col + 1
		if !placed[i] && i != refused {
			n = 0
			if res != "indeterminate" {
				res = "unplaced"
			}
		}
		step := Step{N: n, Actor: op.Actor, Call: h.DescribeCall(i), Answer: h.DescribeOperation(i), Outcome: res, Kind: kind, Refused: i == refused}
		q.Steps = append(q.Steps, step)
		if step.Refused {
			q.Refused = &Refusal{Step: col + 1, Actor: op.Actor, Before: qe.Refused.Before, Store: qe.Refused.Store, Model: qe.Refused.Model}
		}
		after := map[string]model.Task{}
		if placed[i] && !op.Output.Indeterminate && op.Output.Err == "" {
			after = tasksAfter(op)
		}
		ids := tasksOf(op)
		if step.Refused {
			for _, id := range qe.Refused.Tasks {
				if !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
		}
		for _, id := range ids {
			l := lane(id)
			l.Marks = append(l.Marks, Mark{Column: col, Outcome: res, Kind: kind, Op: op.Input.Op.String(), Text: step.Answer, Refused: step.Refused})
			t, changed := after[id]
			if !changed {
				continue
			}
			// A claim open on the task ends where an accepted step changes
			// it: a worker's when the task leaves Running or gets another
			// token, a broker's at any change of version.
			var still []int
			for _, c := range open[id] {
				cl := &l.Claims[c]
				ends := t.State != model.Running || t.ClaimToken != cl.Token
				if cl.Broker {
					ends = t.State != model.Running || t.Version != cl.Token
				}
				if ends {
					cl.To = col
					continue
				}
				if op.Input.Op == model.OpExtend {
					cl.Deadline = h.At(t.Deadline)
				}
				still = append(still, c)
			}
			open[id] = still
			switch op.Input.Op {
			case model.OpPop, model.OpAckBatch: // an AckBatch's pop claims as a Pop does
				if t.State != model.Running {
					break // an item the AckBatch acknowledged
				}
				l.Claims = append(l.Claims, Claim{Holder: op.Actor, Token: t.ClaimToken, Lease: ms(op.Input.Lease), Deadline: h.At(t.Deadline), From: col, To: -1})
				open[id] = append(open[id], len(l.Claims)-1)
			case model.OpClaimExpired:
				for _, c := range op.Output.Claims {
					if c.TaskID == id {
						l.Claims = append(l.Claims, Claim{Broker: true, Holder: op.Actor, Token: c.Version, Deadline: h.At(c.Deadline), From: col, To: -1})
						open[id] = append(open[id], len(l.Claims)-1)
					}
				}
			}
		}
	}
	q.Columns = len(order)
	q.Width = labelWidth + max(q.Columns, 1)*colWidth + 240 // room for the last claim's label
	for y, id := range laneOrder {
		l := lanes[id]
		l.Y = laneTop + y*laneHeight
		for k := range l.Marks {
			l.Marks[k].X = labelWidth + l.Marks[k].Column*colWidth + colWidth/2
			l.Marks[k].CY = l.Y + 13
			l.Marks[k].Abbrev = abbrev(l.Marks[k].Op)
		}
		for k := range l.Claims {
			c := &l.Claims[k]
			if c.To < 0 {
				c.To = q.Columns
			}
			c.X = labelWidth + c.From*colWidth + colWidth/2
			c.W = max((c.To-c.From)*colWidth, colWidth/2)
			c.Y = l.Y + 2
			if c.Broker {
				c.Label = fmt.Sprintf("%s · version %d · until %s", c.Holder, c.Token, c.Deadline)
				c.Short = fmt.Sprintf("%s · version %d", c.Holder, c.Token)
			} else {
				c.Label = fmt.Sprintf("%s · token %d · lease %s → %s", c.Holder, c.Token, c.Lease, c.Deadline)
				c.Short = fmt.Sprintf("%s · token %d · %s → %s", c.Holder, c.Token, c.Lease, c.Deadline)
			}
		}
		q.Lanes = append(q.Lanes, *l)
	}
	q.Height = laneTop + len(q.Lanes)*laneHeight + 8
	return q
}

// abbrev names an op in a mark.
func abbrev(op string) string {
	switch op {
	case "Enqueue":
		return "+"
	case "EnqueueBatch":
		return "+b"
	case "Promote":
		return "Pm"
	case "Prune":
		return "Pr"
	case "Pop":
		return "P"
	case "Ack":
		return "A"
	case "AckBatch":
		return "Ab"
	case "Extend":
		return "X"
	case "Fail":
		return "F"
	case "Retry":
		return "Rt"
	case "ClaimExpired":
		return "C"
	case "Requeue":
		return "Rq"
	case "Finalize":
		return "Fz"
	case "RecoverExpired":
		return "Rx"
	case "InspectRequeue":
		return "IR"
	case "Remove":
		return "Rm"
	case "Get":
		return "G"
	}
	if op == "" {
		return "?"
	}
	return op[:1]
}

// ms shows a duration in milliseconds.
func ms(d time.Duration) string {
	return fmt.Sprintf("%gms", float64(d.Microseconds())/1000)
}

//go:embed report.html.tmpl
var pageText string

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"add": func(a, b int) int { return a + b },
}).Parse(pageText))

// Render writes the page of d to w.
func Render(w io.Writer, d Data) error { return page.Execute(w, d) }

// Write builds the page of a checked history and writes it to path.
func Write(path string, h *linearizability.History, v linearizability.Verdict, o Options) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Render(f, Build(h, v, o)); err != nil {
		f.Close()
		return fmt.Errorf("report: %s: %w", path, err)
	}
	return f.Close()
}
