package linearizability_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/linearizability/backends"
	"github.com/leasehold/leasehold/model"
)

// TestClusterFailoverHistories runs the store-level harness on a Redis
// Cluster of three masters, each with a replica, and fails over the master
// of the plans' first queue (q0) to its replica mid-run, at a point drawn
// from the seed: the master is killed with SIGKILL and its replica takes
// over its slots (CLUSTER FAILOVER TAKEOVER). Histories keep running
// through it; a call in flight at the crash fails in transport and is
// checked as indeterminate (it may or may not have taken effect), as under
// the fault proxy.
//
// With WithReplicaAcks every history must stay linearizable: no claim
// handed out twice, no stale decision accepted, nothing acknowledged lost.
// With the default client configuration the promoted replica has what it
// had received: the test counts the histories the failover broke (and how:
// a claim token handed out twice, a decision accepted on one), and fails
// only when a history that did not run across the failover is broken.
//
// LEASEHOLD_FAILOVERS (default 1) sets how many failovers a run has, one
// after the other (make fuzz runs more); LEASEHOLD_SEED fixes the drawn
// points and the plans.
func TestClusterFailoverHistories(t *testing.T) {
	// Each on a cluster of its own; most of their time is spent waiting
	// for calls to the dead master to fail.
	t.Run("default", func(t *testing.T) { t.Parallel(); clusterFailoverHistories(t, false) })
	t.Run("replica-acks", func(t *testing.T) { t.Parallel(); clusterFailoverHistories(t, true) })
}

// gateHook makes every call of a go-redis client wait while its gate is
// locked.
type gateHook struct{ gate *sync.RWMutex }

func (gateHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h gateHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.gate.RLock()
		defer h.gate.RUnlock()
		return next(ctx, cmd)
	}
}

func (h gateHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.gate.RLock()
		defer h.gate.RUnlock()
		return next(ctx, cmds)
	}
}

// failoverWindow is the wall time of one history's backend, or of one
// failover (from the kill to the cluster healthy again).
type failoverWindow struct{ from, to time.Time }

func (w failoverWindow) overlaps(o failoverWindow) bool {
	return w.from.Before(o.to) && o.from.Before(w.to)
}

func clusterFailoverHistories(t *testing.T, acks bool) {
	cl := redistest.StartCluster3(t, true)
	victim := cl.MasterOf("{q0}")
	var opts []redis.Option
	name := "redis-cluster-failover"
	if acks {
		opts = append(opts, redis.WithReplicaAcks(1, 300*time.Millisecond))
		name += "-acks"
	}
	// With WithReplicaAcks no call starts while the new master has no
	// replica yet (every write would wait out its timeout and be
	// indeterminate, and a history of many such calls is beyond what
	// porcupine checks in reasonable time): the calls wait at the gate.
	var gate sync.RWMutex
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = c.Close() })
	if acks {
		c.AddHook(gateHook{&gate})
	}
	f, err := backends.RedisClusterClient(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	// The wall time of every history's backend, to tell the histories that
	// ran across a failover from the others.
	var mu sync.Mutex
	var histories []failoverWindow
	cfg := budget(t, name, 1_000_000, 5*time.Minute) // stopped below, after the failovers
	cfg.MaxViolations = -1
	// A history of a few hundred operations can take seconds to check
	// under the race detector on a loaded machine (10 s, the default, ran
	// out once); a check that runs out is Unknown, a violation.
	cfg.CheckTimeout = time.Minute
	// Plans of at most three clients: a history that ran across the
	// failover holds a dozen or more indeterminate calls, and porcupine's
	// search grows fast with the clients that may have made them.
	cfg.Clients = envInt(t, "LEASEHOLD_CLIENTS", 3)
	cfg.WithoutContests = true // a contest brings four to seven clients more
	cfg.UnbatchedFills = true  // an indeterminate batch fill leaves porcupine too many states
	if !acks {
		cfg.OutDir = t.TempDir() // broken histories are expected; the counts are the result
	}
	cfg.Factory = func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
		b, err := f(clock, capacity)
		if err != nil {
			return nil, err
		}
		from, release := time.Now(), b.Close
		b.Close = func() error {
			err := release()
			mu.Lock()
			histories = append(histories, failoverWindow{from, time.Now()})
			mu.Unlock()
			return err
		}
		return b, nil
	}
	var done atomic.Int64
	cfg.Progress = func(p linearizability.Progress) { done.Store(int64(p.Histories)) }

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		rep linearizability.Report
		err error
	}
	results := make(chan result, 1)
	go func() {
		rep, err := linearizability.Run(ctx, cfg)
		results <- result{rep, err}
	}()
	defer func() {
		cancel()
		<-results
	}()

	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	var failovers []failoverWindow
	n := envInt(t, "LEASEHOLD_FAILOVERS", 1)
	for i := range n {
		if i > 0 && !acks {
			cl.AddReplica(victim) // one to fail over to
		}
		time.Sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond))))
		w := failoverWindow{from: time.Now()}
		cl.Failover(victim)
		w.to = time.Now()
		if acks {
			gate.Lock()
			cl.AddReplica(victim) // one to acknowledge the writes again
			gate.Unlock()
		}
		failovers = append(failovers, w)
		t.Logf("failover %d of master %d (q0's slot) after %d histories, in %v", i+1, victim, done.Load(), w.to.Sub(w.from).Round(time.Millisecond))
	}
	// Histories that start after the last failover must run (and pass).
	// The calls in flight at the crash take a while to fail: go-redis
	// dials the dead address a few times, and retries.
	after := done.Load()
	for deadline := time.Now().Add(30 * time.Second); done.Load() < after+4 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	r := <-results
	results <- r // for the deferred receive
	if r.err != nil && ctx.Err() == nil {
		t.Fatalf("seed %d: %v", cfg.Seed, r.err)
	}
	rep := r.rep

	mu.Lock()
	across, later := 0, 0
	for _, h := range histories {
		for _, fw := range failovers {
			if h.overlaps(fw) {
				across++
				break
			}
		}
		if h.from.After(failovers[len(failovers)-1].to) {
			later++
		}
	}
	mu.Unlock()
	var reissued, staleAccepted int
	for _, fl := range rep.Failures {
		ri, sa := reissuedClaims(fl.History)
		reissued += ri
		staleAccepted += sa
	}
	t.Logf("%s: %d histories, %d operations (%d indeterminate), %d across a failover, %d begun after the last; "+
		"%d histories not linearizable (%d unknown), %d claims handed out twice, %d decisions accepted on one; seed %d",
		name, rep.Histories, rep.Operations, rep.Indeterminate, across, later,
		rep.Violations, rep.Unknown, reissued, staleAccepted, cfg.Seed)
	for i, fl := range rep.Failures {
		if i == 3 {
			break
		}
		t.Logf("not linearizable: seed %d (%s), %s", fl.Seed, fl.Result, where(fl.Dir, fl.SaveError))
	}
	if rep.Histories == 0 || done.Load() <= after {
		t.Fatalf("no history finished after the failover (%d before it)", after)
	}
	if rep.Outcomes["Pop ok"] == 0 {
		t.Fatalf("no Pop handed out a claim: %v", rep.Outcomes)
	}
	if acks {
		// A check that ran out of time (Unknown) found no violation; it
		// is reported, not failed on: the histories across a failover
		// hold many indeterminate calls (every call that met the dead
		// master, or the new one before it had a replica again).
		if illegal := rep.Violations - rep.Unknown; illegal != 0 || reissued != 0 || staleAccepted != 0 {
			t.Errorf("with WithReplicaAcks: %d histories not linearizable, %d claims handed out twice, %d accepted decisions on one; want 0\n"+
				"run the plans again: LEASEHOLD_SEED=%d go test -run 'TestClusterFailoverHistories/replica-acks' ./linearizability/",
				illegal, reissued, staleAccepted, cfg.Seed)
		}
		return
	}
	// Only a history that ran across a failover may have lost a write.
	if rep.Violations > across {
		t.Errorf("%d histories not linearizable, but only %d ran across the failover", rep.Violations, across)
	}
}

// reissuedClaims counts, in h, the claims (a worker's task and token, or a
// broker's task and version) that the store handed out more than once, and
// the decisions it accepted that name one of them. A store whose sequence
// never goes back hands each out once; a promoted replica that lacks the
// last writes of its master can hand out again what a client still holds.
func reissuedClaims(h *linearizability.History) (reissued, accepted int) {
	type claim struct {
		queue, id string
		n         uint64
		broker    bool
	}
	issued := map[claim]int{}
	for _, op := range h.Operations {
		o := op.Output
		if o.Indeterminate || o.Err != "" {
			continue
		}
		switch op.Input.Op {
		case model.OpPop, model.OpAckBatch:
			for _, tk := range o.Tasks {
				issued[claim{op.Input.Queue, tk.ID, tk.ClaimToken, false}]++
			}
		case model.OpClaimExpired:
			for _, rc := range o.Claims {
				issued[claim{op.Input.Queue, rc.TaskID, rc.Version, true}]++
			}
		}
	}
	for _, n := range issued {
		if n > 1 {
			reissued++
		}
	}
	twice := func(c claim) bool { return issued[c] > 1 }
	for _, op := range h.Operations {
		in, o := op.Input, op.Output
		if o.Indeterminate || o.Err != "" {
			continue
		}
		switch {
		case in.Claim != nil && twice(claim{in.Queue, in.Claim.TaskID, in.Claim.Token, false}):
			accepted++
		case in.ReapClaim != nil && twice(claim{in.Queue, in.ReapClaim.TaskID, in.ReapClaim.Version, true}):
			accepted++
		}
		for i, a := range in.Acks {
			if i < len(o.Items) && o.Items[i].Err == "" && twice(claim{a.Queue, a.TaskID, a.Token, false}) {
				accepted++
			}
		}
	}
	return reissued, accepted
}
