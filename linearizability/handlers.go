package linearizability

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
)

// Invocation is one run of a generated handler: which worker ran which
// claim, what the plan told the handler to do, and what it returned.
type Invocation struct {
	Worker    string    `json:"worker"`
	TaskID    string    `json:"taskID"`
	Token     uint64    `json:"token"`
	Attempt   int       `json:"attempt"`
	Behaviour Behaviour `json:"behaviour"`
	// Returned is false while the handler runs (and for one that panicked:
	// see Panicked).
	Returned bool   `json:"returned"`
	Panicked bool   `json:"panicked,omitempty"`
	Result   []byte `json:"result,omitempty"`
	Err      string `json:"err,omitempty"`
	// Permanent: Err was wrapped with core.Permanent.
	Permanent bool `json:"permanent,omitempty"`
	// Cancelled: the handler's context was done when it returned.
	Cancelled bool `json:"cancelled,omitempty"`
	// StartedAt is the harness clock's reading when the handler started;
	// Deadline is its context's deadline then, zero for none.
	StartedAt time.Time `json:"startedAt"`
	Deadline  time.Time `json:"deadline,omitzero"`
	// TimedOut: the handler's context was done by the attempt timeout when
	// it returned (or panicked); Cause is then the context's cause.
	TimedOut bool   `json:"timedOut,omitempty"`
	Cause    string `json:"cause,omitempty"`
	// Start and End are on the recorder's timeline.
	Start int64 `json:"start"`
	End   int64 `json:"end,omitempty"`
}

// errHandler is the error a generated handler fails with.
var errHandler = errors.New("handler failed")

// handlers makes the handler of each worker and logs every invocation.
type handlers struct {
	plan  *RuntimePlan
	clock core.Clock // timers for the handlers' sleeps
	rec   *Recorder
	tasks map[string]RuntimeTask

	mu   sync.Mutex
	log  []*Invocation
	live int // invocations running
}

func newHandlers(p *RuntimePlan, clock core.Clock, rec *Recorder) *handlers {
	h := &handlers{plan: p, clock: clock, rec: rec, tasks: map[string]RuntimeTask{}}
	for _, t := range p.Tasks {
		h.tasks[t.ID] = t
	}
	return h
}

// running returns the number of handlers that have not returned.
func (h *handlers) running() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.live
}

// invocations returns a copy of the log.
func (h *handlers) invocations() []Invocation {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Invocation, len(h.log))
	for i, inv := range h.log {
		out[i] = *inv
	}
	return out
}

// handler returns the handler of the named worker.
func (h *handlers) handler(worker string) core.Handler {
	return func(ctx context.Context, c core.Claim, t core.Task) (result []byte, err error) {
		b := h.tasks[t.ID].Behaviour(c.Attempt)
		inv := &Invocation{Worker: worker, TaskID: c.TaskID, Token: c.Token, Attempt: c.Attempt, Behaviour: b, Start: h.rec.tick(),
			StartedAt: h.clock.Now()}
		inv.Deadline, _ = ctx.Deadline()
		h.mu.Lock()
		h.log = append(h.log, inv)
		h.live++
		h.mu.Unlock()
		returned := false
		defer func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.live--
			inv.End = h.rec.tick()
			inv.Cancelled = ctx.Err() != nil
			if cause := context.Cause(ctx); errors.Is(cause, core.ErrAttemptTimeout) {
				inv.TimedOut, inv.Cause = true, cause.Error()
			}
			if !returned {
				inv.Panicked = true
				return
			}
			inv.Returned = true
			inv.Result = result
			if err != nil {
				inv.Err = err.Error()
				inv.Permanent = core.IsPermanent(err)
			}
		}()
		result, err = h.run(ctx, b, c)
		returned = true
		return result, err
	}
}

// resultOf is the result a handler returns for a claim.
func resultOf(c core.Claim) []byte { return fmt.Appendf(nil, "%s:%d", c.TaskID, c.Token) }

func (h *handlers) run(ctx context.Context, b Behaviour, c core.Claim) ([]byte, error) {
	switch b.Kind {
	case IgnoreCtx:
		h.sleep(context.Background(), b.Sleep) // not ctx: it ignores it
		return resultOf(c), nil
	case Outlive:
		if !h.sleep(ctx, b.Sleep) {
			return nil, context.Cause(ctx)
		}
		return resultOf(c), nil
	}
	if !h.sleep(ctx, b.Sleep) {
		return nil, context.Cause(ctx)
	}
	switch b.Kind {
	case Error:
		return nil, fmt.Errorf("%w: attempt %d", errHandler, c.Attempt)
	case ResultAndError:
		return resultOf(c), fmt.Errorf("%w with a result: attempt %d", errHandler, c.Attempt)
	case PermanentError:
		return nil, core.Permanent(fmt.Errorf("%w for good: attempt %d", errHandler, c.Attempt))
	case Panic:
		panic(fmt.Sprintf("generated panic on attempt %d", c.Attempt))
	}
	return resultOf(c), nil
}

// sleep waits d on the harness's clock, or until ctx is done (then it
// reports false).
func (h *handlers) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := h.clock.NewTimer(d)
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		t.Stop()
		return false
	}
}
