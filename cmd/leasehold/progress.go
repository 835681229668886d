package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/leasehold/leasehold/linearizability"
)

// progress shows how a run goes: a bar on a terminal, a plain line every few
// seconds otherwise (CI logs, pipes), or nothing.
type progress struct {
	w         io.Writer
	name      string
	histories int
	bar       *progressbar.ProgressBar
	lines     bool
	last      time.Time
	printed   string // the last line printed
	p         linearizability.Progress
}

// lineEvery is how often the plain display prints a line.
const lineEvery = 2 * time.Second

func newProgress(kind string, w io.Writer, name string, histories int, duration time.Duration) *progress {
	p := &progress{w: w, name: name, histories: histories, last: time.Now()}
	if kind == "auto" {
		kind = "lines"
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			kind = "bar"
		}
	}
	switch kind {
	case "bar":
		// The bar counts histories when that is the budget, else
		// milliseconds of the duration.
		max := int64(histories)
		if histories == 0 {
			max = duration.Milliseconds()
		}
		p.bar = progressbar.NewOptions64(max,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(name),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionClearOnFinish(),
		)
	case "lines":
		p.lines = true
	}
	return p
}

func (p *progress) describe() string {
	return fmt.Sprintf("%s: %d histories, %d operations, %d violations (%v)",
		p.name, p.p.Histories, p.p.Operations, p.p.Violations, p.p.Elapsed.Round(100*time.Millisecond))
}

// update is Config.Progress.
func (p *progress) update(s linearizability.Progress) {
	p.p = s
	switch {
	case p.bar != nil:
		p.bar.Describe(p.describe())
		if p.histories > 0 {
			_ = p.bar.Set64(int64(s.Histories))
		} else {
			_ = p.bar.Set64(min(s.Elapsed.Milliseconds(), p.bar.GetMax64()))
		}
	case p.lines && time.Since(p.last) >= lineEvery:
		p.last = time.Now()
		p.printed = p.describe()
		fmt.Fprintln(p.w, p.printed)
	}
}

// println prints a line without garbling the bar.
func (p *progress) println(s string) {
	if p.bar != nil {
		_ = p.bar.Clear()
	}
	fmt.Fprintln(p.w, s)
}

// done ends the display.
func (p *progress) done() {
	if p.bar != nil {
		_ = p.bar.Finish()
		return
	}
	if line := p.describe(); p.lines && line != p.printed {
		fmt.Fprintln(p.w, line)
	}
}
