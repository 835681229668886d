package spec

import (
	"math"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// rangeSuite checks the model's one range on every store: instants within
// model.MinTime..model.MaxTime, leases and claim TTLs within
// model.MaxDuration, and an empty payload or result returned as nil.
var rangeSuite = []suiteCase{
	{name: "RejectsARunAfterOutsideTheTimeRange", run: func(e *env) {
		for _, at := range []time.Time{
			model.MaxTime.Add(time.Microsecond), model.MinTime.Add(-time.Microsecond),
			time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC),
		} {
			e.rejects(core.ErrInvalidArgument, func() error {
				_, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "far", MaxAttempts: 1, RunAfter: at}})
				return err
			})
			e.rejects(core.ErrInvalidArgument, func() error {
				res, err := e.s.EnqueueBatch(e.ctx, core.EnqueueBatchParams{Queue: e.q, Tasks: []model.EnqueueArgs{{ID: "far", MaxAttempts: 1, RunAfter: at}}})
				if err == nil && len(res.Items) == 1 {
					err = res.Items[0].Err
				}
				return err
			})
		}
		// The ends of the range are in it.
		e.enqueue("last", runAfter(model.MaxTime))
		e.enqueue("first", runAfter(model.MinTime))
	}},
	{name: "RejectsALeaseOrClaimTTLBeyondMaxDuration", run: func(e *env) {
		_, c := e.running("held")
		e.enqueue("ready")
		for _, d := range []time.Duration{model.MaxDuration + time.Microsecond, math.MaxInt64} {
			e.rejects(core.ErrInvalidArgument, func() error {
				_, err := e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: d, N: 1})
				return err
			})
			e.rejects(core.ErrInvalidArgument, func() error {
				_, err := e.s.Extend(e.ctx, core.ExtendParams{Claim: c, Lease: d})
				return err
			})
			e.rejects(core.ErrInvalidArgument, func() error {
				_, err := e.s.ClaimExpired(e.ctx, core.ClaimExpiredParams{Queue: e.q, ClaimTTL: d})
				return err
			})
		}
		_, err := e.s.Extend(e.ctx, core.ExtendParams{Claim: c, Lease: model.MaxDuration})
		e.ok("Extend by model.MaxDuration", err)
		res, err := e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: model.MaxDuration, N: 1})
		e.ok("Pop with a lease of model.MaxDuration", err)
		if len(res.Tasks) != 1 {
			e.t.Fatalf("Pop with a lease of model.MaxDuration claimed %d tasks, want 1", len(res.Tasks))
		}
	}},
	{name: "AnEmptyPayloadOrResultIsNil", run: func(e *env) {
		res, err := e.s.Enqueue(e.ctx, core.EnqueueParams{Queue: e.q, EnqueueArgs: model.EnqueueArgs{ID: "empty", MaxAttempts: 1, Payload: []byte{}}})
		e.ok("Enqueue of an empty payload", err)
		if res.Task.Payload != nil {
			e.t.Errorf("Enqueue returned payload %#v, want nil", res.Task.Payload)
		}
		if got := e.get("empty"); got.Payload != nil {
			e.t.Errorf("Get returned payload %#v, want nil", got.Payload)
		}
		pop, err := e.s.Pop(e.ctx, core.PopParams{Queue: e.q, Lease: lease, N: 1})
		e.ok("Pop", err)
		if len(pop.Tasks) != 1 || pop.Tasks[0].Payload != nil {
			e.t.Fatalf("Pop returned %+v, want the task with payload nil", pop.Tasks)
		}
		ack, err := e.s.Ack(e.ctx, core.AckParams{Claim: pop.Tasks[0].Claim(), Result: []byte{}})
		e.ok("Ack with an empty result", err)
		if ack.Task.Result != nil {
			e.t.Errorf("Ack returned result %#v, want nil", ack.Task.Result)
		}
		if got := e.get("empty"); got.Result != nil || got.Payload != nil {
			e.t.Errorf("Get after Ack: payload %#v, result %#v; want nil", got.Payload, got.Result)
		}
	}},
}
