package redis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/model"
)

// commandLog is a go-redis hook that records every command sent to the
// server, one entry per round trip (a pipeline counts once, with its
// commands joined by "+").
type commandLog struct {
	mu   sync.Mutex
	sent []string
}

func (l *commandLog) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (l *commandLog) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		l.mu.Lock()
		l.sent = append(l.sent, cmd.Name())
		l.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (l *commandLog) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		l.mu.Lock()
		l.sent = append(l.sent, strings.Join(names, "+"))
		l.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns the commands recorded since the last take.
func (l *commandLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.sent
	l.sent = nil
	return out
}

// Every operation of the store, accepted or refused, is exactly one round
// trip: one FCALL of its function.
func TestEachOperationIsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	clock := core.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s, c := newStore(t, redis.WithClock(clock))
	// Open the connection first, so its handshake is not counted.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	log := &commandLog{}
	c.AddHook(log)
	if err := s.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); !slices.Equal(got, []string{"function"}) {
		t.Fatalf("Preload sent %v, want one FUNCTION LOAD", got)
	}

	const q = "rt"
	var claim core.Claim
	var rc core.ReapClaim
	enqueue := func(id string, runAfter time.Duration) func() error {
		return func() error {
			var at time.Time
			if runAfter > 0 {
				at = clock.Now().Add(runAfter)
			}
			_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: q, EnqueueArgs: model.EnqueueArgs{ID: id, MaxAttempts: 1, RunAfter: at}})
			return err
		}
	}
	pop := func() error {
		r, err := s.Pop(ctx, core.PopParams{Queue: q, Lease: time.Second, N: 1})
		if err == nil && len(r.Tasks) == 1 {
			claim = r.Tasks[0].Claim()
		}
		return err
	}
	claimExpired := func() error {
		clock.Advance(2 * time.Second)
		r, err := s.ClaimExpired(ctx, core.ClaimExpiredParams{Queue: q, ClaimTTL: time.Second})
		if err == nil && len(r.Claims) == 1 {
			rc = r.Claims[0]
		}
		return err
	}
	steps := []struct {
		name    string
		op      func() error
		refused error // the error the op must return, nil for success
	}{
		{"Enqueue", enqueue("a", 0), nil},
		{"Enqueue scheduled", enqueue("b", time.Minute), nil},
		{"Enqueue duplicate", enqueue("a", 0), core.ErrConflict},
		{"Enqueue c", enqueue("c", 0), nil},
		{"Promote", func() error { _, err := s.Promote(ctx, core.PromoteParams{Queue: q}); return err }, nil},
		{"Pop", pop, nil},
		{"Extend", func() error { _, err := s.Extend(ctx, core.ExtendParams{Claim: claim, Lease: time.Second}); return err }, nil},
		{"Ack", func() error { _, err := s.Ack(ctx, core.AckParams{Claim: claim, Result: []byte("r")}); return err }, nil},
		{"Ack stale", func() error {
			_, err := s.Ack(ctx, core.AckParams{Claim: core.Claim{Queue: q, TaskID: "a", Token: 999}})
			return err
		}, core.ErrStaleClaim},
		{"Pop c", pop, nil},
		{"Fail", func() error { _, err := s.Fail(ctx, core.FailParams{Claim: claim, Message: "m"}); return err }, nil},
		{"Enqueue d", enqueue("d", 0), nil},
		{"Pop d", pop, nil},
		{"Retry", func() error { _, err := s.Retry(ctx, core.RetryParams{Claim: claim, Message: "m"}); return err }, nil},
		{"Pop d again", pop, nil},
		{"ClaimExpired", claimExpired, nil},
		{"Requeue", func() error { _, err := s.Requeue(ctx, core.RequeueParams{ReapClaim: rc}); return err }, nil},
		{"Requeue stale", func() error { _, err := s.Requeue(ctx, core.RequeueParams{ReapClaim: rc}); return err }, core.ErrStaleClaim},
		{"Pop d a third time", pop, nil},
		{"ClaimExpired again", claimExpired, nil},
		{"Finalize", func() error { _, err := s.Finalize(ctx, core.FinalizeParams{ReapClaim: rc}); return err }, nil},
		{"Enqueue e", enqueue("e", 0), nil},
		{"Pop e", pop, nil},
		{"RecoverExpired", func() error {
			clock.Advance(2 * time.Second)
			r, err := s.RecoverExpired(ctx, core.RecoverExpiredParams{Queue: q})
			if err == nil && len(r.Tasks) != 1 {
				return errors.New("recovered nothing")
			}
			return err
		}, nil},
		{"InspectRequeue", func() error {
			_, err := s.InspectRequeue(ctx, core.InspectParams{Queue: q, ID: "c"})
			return err
		}, nil},
		{"Remove", func() error { _, err := s.Remove(ctx, core.InspectParams{Queue: q, ID: "b"}); return err }, nil},
		{"Remove missing", func() error { _, err := s.Remove(ctx, core.InspectParams{Queue: q, ID: "b"}); return err }, core.ErrNotFound},
		{"Prune", func() error {
			r, err := s.Prune(ctx, core.PruneParams{Queue: q, States: []core.State{core.Succeeded, core.Failed}, Before: clock.Now().Add(time.Hour)})
			if err == nil && len(r.IDs) != 3 {
				return errors.New("pruned " + strings.Join(r.IDs, ","))
			}
			return err
		}, nil},
		{"Get", func() error { _, err := s.Get(ctx, core.GetParams{Queue: q, ID: "c"}); return err }, nil},
		{"List", func() error {
			_, err := s.List(ctx, core.ListParams{Queue: q, State: core.Ready, Limit: 10})
			return err
		}, nil},
		{"Counts", func() error { _, err := s.Counts(ctx, core.CountsParams{Queue: q}); return err }, nil},
		{"Enqueue f", enqueue("f", 0), nil},
		{"Enqueue g", enqueue("g", 0), nil},
		{"Pop c", pop, nil}, // requeued by the operator above
		{"AckBatch with a pop", func() error {
			r, err := s.AckBatch(ctx, core.AckBatchParams{Queue: q, Acks: []core.AckItem{{Claim: claim}}, Pop: core.AckPop{Lease: time.Second, N: 2}})
			if err == nil && (r.Items[0].Err != nil || len(r.Claimed) != 2 || r.Claimed[0].ID != "f" || r.Claimed[1].ID != "g") {
				return fmt.Errorf("acked %v, claimed %v", r.Items[0].Err, r.Claimed)
			}
			return err
		}, nil},
	}
	for _, st := range steps {
		log.take()
		err := st.op()
		if st.refused == nil && err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if st.refused != nil && !errors.Is(err, st.refused) {
			t.Fatalf("%s: %v, want %v", st.name, err, st.refused)
		}
		if got := log.take(); !slices.Equal(got, []string{"fcall"}) {
			t.Errorf("%s sent %v, want one fcall", st.name, got)
		}
	}
}

// When the server lacks the library (a restarted or flushed server), the
// operation loads it and works.
func TestAServerWithoutTheLibraryGetsItLoaded(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client() // a private server: FUNCTION FLUSH affects no other test
	s, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	log := &commandLog{}
	c.AddHook(log)
	if _, err := s.Counts(ctx, core.CountsParams{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); !slices.Equal(got, []string{"fcall", "function", "fcall"}) {
		t.Errorf("first Counts after FUNCTION FLUSH sent %v, want fcall, function load, fcall", got)
	}
	if _, err := s.Counts(ctx, core.CountsParams{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); !slices.Equal(got, []string{"fcall"}) {
		t.Errorf("second Counts sent %v, want one fcall", got)
	}
}

// A user the ACL denies Functions gets the same store through EVALSHA
// (EVAL when the server lacks a script), as on a server before Redis 7.0.
func TestWithoutFunctionsTheStoreUsesScripts(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client()
	if err := admin.Do(ctx, "ACL", "SETUSER", "worker", "on", ">pw", "~*", "+@all", "-function", "-fcall", "-fcall_ro").Err(); err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, Username: "worker", Password: "pw"})
	t.Cleanup(func() { c.Close() })
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	log := &commandLog{}
	c.AddHook(log)
	s, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); !slices.Equal(got, []string{"fcall", "evalsha", "eval"}) {
		t.Errorf("first Enqueue sent %v, want fcall (refused), evalsha, eval", got)
	}
	r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
	if err != nil || len(r.Tasks) != 1 {
		t.Fatalf("pop: %v, %v", r, err)
	}
	if got := log.take(); !slices.Equal(got, []string{"evalsha", "eval"}) {
		t.Errorf("Pop sent %v, want evalsha, eval", got)
	}
	if err := s.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); len(got) != 22 || got[0] != "script" {
		t.Errorf("Preload sent %v, want a SCRIPT LOAD for each of the 22 scripts", got)
	}
	if _, err := s.Ack(ctx, core.AckParams{Claim: r.Tasks[0].Claim(), Result: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); !slices.Equal(got, []string{"evalsha"}) {
		t.Errorf("Ack after Preload sent %v, want one evalsha", got)
	}
}
