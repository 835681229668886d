package spec

import (
	"errors"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// busySuite checks core.ErrBusy on a store the harness makes busy
// (Harness.Busy): the answer that the call did not run. Every write of the
// busy store is made on the store itself, not through the twin (the model
// has no busy state); once the store is free again, the twin compares the
// whole store with the model, which never saw those calls, so a write that
// changed anything fails there.
var busySuite = []suiteCase{
	{name: "EveryWriteOfABusyStoreIsAnsweredErrBusyAndChangesNothing", run: func(e *env) {
		running, c := e.running("running")
		e.enqueue("ready")
		e.enqueue("later", runAfter(e.now().Add(time.Hour)))
		release := e.h.Busy.Hold(e.t, e.raw)
		s, ctx, q := e.raw, e.ctx, e.q
		rc := core.ReapClaim{Queue: q, TaskID: running.ID, Version: running.Version, Deadline: e.now().Add(lease)}
		writes := []struct {
			name string
			call func() error
		}{
			{"Enqueue", func() error {
				_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: q, EnqueueArgs: model.EnqueueArgs{ID: "new", MaxAttempts: 1}})
				return err
			}},
			{"Promote", func() error {
				_, err := s.Promote(ctx, core.PromoteParams{Queue: q, Limit: 10})
				return err
			}},
			{"Pop", func() error { _, err := s.Pop(ctx, core.PopParams{Queue: q, Lease: lease, N: 1}); return err }},
			{"Extend", func() error { _, err := s.Extend(ctx, core.ExtendParams{Claim: c, Lease: lease}); return err }},
			{"Ack", func() error { _, err := s.Ack(ctx, core.AckParams{Claim: c, Result: []byte("r")}); return err }},
			{"Fail", func() error { _, err := s.Fail(ctx, core.FailParams{Claim: c, Message: "m"}); return err }},
			{"Retry", func() error { _, err := s.Retry(ctx, core.RetryParams{Claim: c, Message: "m"}); return err }},
			{"ClaimExpired", func() error {
				_, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: q, ClaimTTL: lease, Limit: 10})
				return err
			}},
			{"Requeue", func() error { _, err := s.Requeue(ctx, core.RequeueParams{ReapClaim: rc, Message: "m"}); return err }},
			{"Finalize", func() error { _, err := s.Finalize(ctx, core.FinalizeParams{ReapClaim: rc, Message: "m"}); return err }},
			{"RecoverExpired", func() error {
				_, err := s.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: q, Limit: 10})
				return err
			}},
			{"InspectRequeue", func() error {
				_, err := s.InspectRequeue(ctx, core.InspectParams{Queue: q, ID: "ready"})
				return err
			}},
			{"Cancel", func() error { _, err := s.Cancel(ctx, core.InspectParams{Queue: q, ID: "ready"}); return err }},
			{"Remove", func() error { _, err := s.Remove(ctx, core.InspectParams{Queue: q, ID: "ready"}); return err }},
			{"Prune", func() error {
				_, err := s.Prune(ctx, core.PruneParams{Queue: q, States: []core.State{core.Succeeded}, Before: e.now().Add(time.Hour), Limit: 10})
				return err
			}},
			{"Pause", func() error { _, err := s.Pause(ctx, core.PauseParams{Queue: q}); return err }},
		}
		if bs, ok := s.(core.BatchStore); ok {
			writes = append(writes, []struct {
				name string
				call func() error
			}{
				{"EnqueueBatch", func() error {
					_, err := bs.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: q, Tasks: []model.EnqueueArgs{{ID: "new", MaxAttempts: 1}}})
					return err
				}},
				{"AckBatch", func() error {
					_, err := bs.AckBatch(ctx, core.AckBatchParams{Queue: q, Acks: []core.AckItem{{Claim: c}}, Pop: core.AckPop{Lease: lease, N: 1}})
					return err
				}},
			}...)
		}
		for _, w := range writes {
			if err := w.call(); !errors.Is(err, core.ErrBusy) {
				e.t.Errorf("%s on the busy store: %v, want ErrBusy", w.name, err)
			}
		}
		release()
		e.s.checkAll("after the busy store's writes")
		// Free again, the store does what the model does.
		_, err := e.s.Ack(ctx, core.AckParams{Claim: c, Result: []byte("r")})
		e.ok("Ack once the store is free", err)
	}},
}
