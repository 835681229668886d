package linearizability

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// HistoryFormat is the version of the JSON form of a History.
const HistoryFormat = 1

// History is everything needed to check one run again, offline: the
// recorded operations and the parameters the model needs.
type History struct {
	Format   int      `json:"format"`
	Adapter  string   `json:"adapter"`
	Seed     uint64   `json:"seed"`
	Mode     TimeMode `json:"mode"`
	Capacity int      `json:"capacity"`
	// Epoch is the store clock's reading when the history began; times in
	// descriptions are shown relative to it.
	Epoch      time.Time   `json:"epoch"`
	Operations []Operation `json:"operations"`
	Events     []Event     `json:"events,omitempty"`
}

// Model returns the porcupine model the history is checked against.
func (h *History) Model() porcupine.Model {
	return NewModel(ModelOptions{Capacity: h.Capacity, Epoch: h.Epoch})
}

// Porcupine returns the operations in porcupine's form. Their inputs and
// outputs point into h.
func (h *History) Porcupine() []porcupine.Operation {
	out := make([]porcupine.Operation, len(h.Operations))
	for i := range h.Operations {
		op := &h.Operations[i]
		out[i] = porcupine.Operation{
			ClientId: op.Client, Input: &op.Input, Output: &op.Output,
			Call: op.Call, Return: op.Return, Metadata: op.Actor,
		}
	}
	return out
}

// Indeterminate counts the operations whose outcome is unknown.
func (h *History) Indeterminate() int {
	n := 0
	for _, op := range h.Operations {
		if op.Output.Indeterminate {
			n++
		}
	}
	return n
}

// Verdict is the result of checking one history.
type Verdict struct {
	// Result is porcupine's answer: Ok, Illegal, or Unknown when the check
	// ran out of time. Only Ok passes.
	Result porcupine.CheckResult
	// Info is what the visualization is drawn from.
	Info porcupine.LinearizationInfo
	// Elapsed is the time the check took.
	Elapsed time.Duration
	// WithoutIndeterminate is set when the verdict (Ok) is that of the
	// history without all or all but one of its indeterminate operations
	// (see Check); Info then draws that history.
	WithoutIndeterminate bool
}

// OK reports whether the history was found linearizable.
func (v Verdict) OK() bool { return v.Result == porcupine.Ok }

// Check checks a history for linearizability against the model, giving up
// after timeout (0: no limit) with the result Unknown.
//
// A history with indeterminate operations (calls whose answer was lost) is
// first checked without them, then with each of them alone: the model
// lets such an operation not have happened (its state unchanged, any
// answer accepted; see step), and it can take its place anywhere in its
// interval, so a linearization of a history without some of them is one
// of the whole history. (A transaction whose commit's answer was lost
// always stays: the answers its statements gave must fit the state it
// met.) Such a linearization is found in milliseconds to a second where
// the whole history can take many minutes: every indeterminate operation
// multiplies the states the check carries by the clock readings it may
// have taken effect at. These tries share one timeout; when none of them
// finds a linearization, the whole history is checked, with a timeout of
// its own.
func Check(h *History, timeout time.Duration) Verdict {
	var lost []int
	for i, op := range h.Operations {
		if op.Output.Indeterminate && op.Input.Tx == nil {
			lost = append(lost, i)
		}
	}
	if len(lost) == 0 {
		return check(h, timeout)
	}
	start := time.Now()
	// keeping: the history with, of the lost calls, only lost[k] (k < 0:
	// none of them).
	keeping := func(k int) *History {
		sub := *h
		sub.Operations = make([]Operation, 0, len(h.Operations))
		for i, op := range h.Operations {
			if !slices.Contains(lost, i) || (k >= 0 && i == lost[k]) {
				sub.Operations = append(sub.Operations, op)
			}
		}
		return &sub
	}
	tries := len(lost) + 1
	if len(lost) == 1 {
		tries = 1 // with it is the whole history
	}
	for k := -1; k < tries-1; k++ {
		left := timeout
		if timeout > 0 {
			if left = timeout - time.Since(start); left <= 0 {
				break
			}
		}
		if v := check(keeping(k), left); v.OK() {
			v.WithoutIndeterminate, v.Elapsed = true, time.Since(start)
			return v
		}
	}
	v := check(h, timeout)
	v.Elapsed = time.Since(start)
	return v
}

// check is Check of the whole history.
func check(h *History, timeout time.Duration) Verdict {
	start := time.Now()
	if timeout <= 0 {
		res, info := porcupine.CheckOperationsVerbose(h.Model(), h.Porcupine(), timeout)
		return Verdict{Result: res, Info: info, Elapsed: time.Since(start)}
	}
	// porcupine reads its timeout between steps only, and one step of a
	// history full of indeterminate calls can merge state sets for many
	// minutes: past the timeout and a grace of half of it, the check is
	// given up as Unknown (its goroutine runs on, unheard, until it ends).
	type answer struct {
		res  porcupine.CheckResult
		info porcupine.LinearizationInfo
	}
	done := make(chan answer, 1)
	go func() {
		res, info := porcupine.CheckOperationsVerbose(h.Model(), h.Porcupine(), timeout)
		done <- answer{res, info}
	}()
	grace := time.NewTimer(timeout + timeout/2)
	defer grace.Stop()
	select {
	case a := <-done:
		return Verdict{Result: a.res, Info: a.info, Elapsed: time.Since(start)}
	case <-grace.C:
		return Verdict{Result: porcupine.Unknown, Elapsed: time.Since(start)}
	}
}

// WriteVisualization writes porcupine's HTML visualization of a checked
// history to path, with the history's events (clock advances, rounds) as
// annotations.
func WriteVisualization(h *History, v Verdict, path string) error {
	info := v.Info
	var notes []porcupine.Annotation
	for _, e := range h.Events {
		notes = append(notes, porcupine.Annotation{Tag: "timeline", Start: e.At, Description: e.Text})
	}
	info.AddAnnotations(notes)
	if err := porcupine.VisualizePath(h.Model(), info, path); err != nil {
		return fmt.Errorf("linearizability: visualize: %w", err)
	}
	return nil
}

// SaveJSON writes v as indented JSON to path.
func SaveJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("linearizability: encode %s: %w", path, err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// LoadHistory reads a history saved as JSON (history.json of a violation).
func LoadHistory(path string) (*History, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("linearizability: %s: %w", path, err)
	}
	if h.Format != HistoryFormat {
		return nil, fmt.Errorf("linearizability: %s: history format %d, want %d", path, h.Format, HistoryFormat)
	}
	return &h, nil
}
