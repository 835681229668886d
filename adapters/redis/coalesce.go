package redis

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// Concurrent Enqueue calls on one queue of one Store are coalesced: while
// maxEnqueueFlights calls of the queue are on their way to the server, a
// new call waits for the first of them to come back and then goes out with
// every call that arrived meanwhile, as one enqueue_batch script (at most
// model.MaxBatch per script). A call that finds a flight free goes out at
// once, alone, as the enqueue script: coalescing adds no latency at low
// load, and under load the server runs one script for many tasks.
//
// A batch's flight ends a moment after its calls are answered: its
// goroutine yields first (runtime.Gosched), so that callers which enqueue
// again at once, as a producer loop does, are back in the waiting list
// when the next batch is taken. Without it the producers split for good
// into two groups that take turns, the one that waited during a flight
// and the one that flew (with 8 producers: a lone call and a batch of 7,
// two round trips for 8 tasks); with it they go out as one batch.
//
// Each call takes effect when its script runs, which is after the call
// began and before it returns, and is answered with its own item: the
// task, or the typed error a lone Enqueue would have met at that point of
// the batch (the items run in order, each against what the ones before it
// left). A refusal of the whole batch (the sequence too close to its end
// for all of them, damage the script cannot set aside) wrote nothing, so
// each of its calls is then sent again alone and gets the answer it would
// have got on its own. A transport error answers every call of the batch (each may
// or may not have taken effect, as for a lone call). A caller whose context
// ends while it waits to be sent leaves and returns the context's error
// without having been sent; once sent it returns the context's error at
// once too (whether its task was added is then unknown, as for a lone
// call), and the other calls of its batch are unaffected: the script is
// sent with a context no single caller can cancel.

// maxEnqueueFlights is the number of Enqueue scripts of one queue a Store
// keeps on their way to the server before the next calls wait to go out
// together: one. With two, producers that call again at once split into
// more groups that take turns, and more of the flights are lone scripts.
const maxEnqueueFlights = 1

// enqueueGroup is the state of one queue's Enqueue calls in one Store.
type enqueueGroup struct {
	mu      sync.Mutex
	flights int            // scripts on their way (lone or batch)
	waiting []*enqueueCall // calls waiting for a flight, in arrival order
}

// enqueueCall is one Enqueue call waiting to go out in a batch.
type enqueueCall struct {
	ctx  context.Context
	args model.EnqueueArgs
	sent bool          // taken into a batch (under the group's lock)
	done chan struct{} // closed when res and err are set
	res  core.TaskResult
	err  error
}

// group returns the Enqueue state of queue.
func (s *Store) group(queue string) *enqueueGroup {
	if g, ok := s.enqueues.Load(queue); ok {
		return g.(*enqueueGroup)
	}
	g, _ := s.enqueues.LoadOrStore(queue, &enqueueGroup{})
	return g.(*enqueueGroup)
}

// coalesce runs a checked Enqueue: alone when a flight is free, else in the
// next batch of its queue.
func (s *Store) coalesce(ctx context.Context, p core.EnqueueParams, runAfter string) (core.TaskResult, error) {
	g := s.group(p.Queue)
	g.mu.Lock()
	if g.flights < maxEnqueueFlights {
		g.flights++
		g.mu.Unlock()
		res, err := s.enqueueAlone(ctx, p, runAfter)
		s.land(g, p.Queue)
		return res, err
	}
	c := &enqueueCall{ctx: ctx, args: p.EnqueueArgs, done: make(chan struct{})}
	g.waiting = append(g.waiting, c)
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		g.mu.Lock()
		if !c.sent {
			g.waiting = slices.DeleteFunc(g.waiting, func(w *enqueueCall) bool { return w == c })
			g.mu.Unlock()
			return core.TaskResult{}, ctx.Err() // never sent: it changed nothing
		}
		g.mu.Unlock()
		return core.TaskResult{}, ctx.Err()
	}
}

// land ends a flight of queue's group: the calls waiting, if any, take it
// over as the next batch.
func (s *Store) land(g *enqueueGroup, queue string) {
	g.mu.Lock()
	g.flights--
	if len(g.waiting) == 0 {
		if g.flights == 0 {
			// Idle: forget the group, so that a store of many queues does
			// not keep one for each. A call that still holds it goes on
			// with it; one that comes later makes a new one (for a moment
			// two flights, which costs only a missed batch).
			s.enqueues.CompareAndDelete(queue, g)
		}
		g.mu.Unlock()
		return
	}
	n := min(len(g.waiting), model.MaxBatch)
	calls := slices.Clone(g.waiting[:n])
	g.waiting = slices.Delete(g.waiting, 0, n)
	for _, c := range calls {
		c.sent = true
	}
	g.flights++
	g.mu.Unlock()
	go func() {
		s.sendEnqueues(queue, calls)
		runtime.Gosched() // let the callers just answered come back (see above)
		s.land(g, queue)
	}()
}

// sendEnqueues sends calls (taken from the waiting list) as one script and
// answers each.
func (s *Store) sendEnqueues(queue string, calls []*enqueueCall) {
	answer := func(c *enqueueCall, res core.TaskResult, err error) {
		c.res, c.err = res, err
		close(c.done)
	}
	// No caller's cancellation may stop the script the others wait for;
	// once the last caller's deadline has passed none waits for it, and no
	// attempt of it starts after that (which bounds how long its reply is
	// kept: resend.go).
	ctx := context.WithoutCancel(calls[0].ctx)
	if last, ok := lastDeadline(calls); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, last)
		defer cancel()
	}
	if len(calls) == 1 {
		c := calls[0]
		runAfter, _ := micros("run after", c.args.RunAfter) // checked by Enqueue
		res, err := s.enqueueAlone(ctx, core.EnqueueParams{Queue: queue, EnqueueArgs: c.args}, runAfter)
		answer(c, res, err)
		return
	}
	now, _, err := s.now()
	if err != nil {
		for _, c := range calls {
			answer(c, core.TaskResult{}, err)
		}
		return
	}
	args := make([]any, 0, 2+8*len(calls)+1)
	args = append(args, now, s.capacity)
	sent := make([]int, len(calls))
	for i, c := range calls {
		runAfter, _ := micros("run after", c.args.RunAfter) // checked by Enqueue
		args = append(args, enqueueArgs(c.args, runAfter)...)
		sent[i] = i
	}
	s.batched.Add(uint64(len(calls)))
	code, rest, err := s.call(ctx, enqueueBatchScript, s.queueKeys(queue), args...)
	if err == nil && code != codeOK {
		// The script refused the whole batch (the sequence's end, damage it
		// cannot set aside) and wrote nothing: each call alone
		// gets the answer it would have had without company.
		for _, c := range calls {
			runAfter, _ := micros("run after", c.args.RunAfter)
			res, err := s.enqueueAlone(ctx, core.EnqueueParams{Queue: queue, EnqueueArgs: c.args}, runAfter)
			answer(c, res, err)
		}
		return
	}
	var r core.BatchResult
	if err == nil && len(rest) < 1 {
		err = fmt.Errorf("leasehold/redis: %v: short reply from %s", enqueueBatchScript.op, enqueueBatchScript.name)
	}
	if err == nil {
		items := make([]core.ItemResult, len(calls))
		r, err = batchItems(enqueueBatchScript, queue, items, sent, func(i int) string { return calls[i].args.ID },
			reply{head: rest[0], rest: rest[1:]})
	}
	for i, c := range calls {
		switch {
		case err != nil: // a transport error or a reply that does not parse
			answer(c, core.TaskResult{}, err)
		case r.Items[i].Err != nil:
			answer(c, core.TaskResult{}, r.Items[i].Err)
		default:
			answer(c, core.TaskResult{Now: r.Now, Task: r.Items[i].Task}, nil)
		}
	}
}

// lastDeadline returns the latest of the calls' deadlines, and false when a
// call has none.
func lastDeadline(calls []*enqueueCall) (time.Time, bool) {
	var last time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return time.Time{}, false
		}
		if d.After(last) {
			last = d
		}
	}
	return last, true
}
