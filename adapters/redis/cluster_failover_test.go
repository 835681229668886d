package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/redistest"
)

// runClusterFailover runs, through the public API and one go-redis cluster
// client, a producer, two workers and a broker on three queues, one on each
// master of a three-master Cluster whose masters each have a replica; kills
// the master of the first queue with SIGKILL mid-run and lets its replica
// take over its slots (CLUSTER FAILOVER TAKEOVER), gives the new master a
// replica again (which WithReplicaAcks needs), lets the load carry on, and
// measures the first queue as runFailover does. It returns the outcome and
// how many tasks the other two queues finished.
func runClusterFailover(t *testing.T, opts ...redis.Option) (failoverOutcome, int) {
	cl := redistest.StartCluster3(t, true)
	c := cl.Client()
	store, err := redis.New(c, append([]redis.Option{redis.WithPrefix(uniquePrefix(t, c))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	// A queue on each master; the first is on the master that dies.
	queues := make([]string, 3)
	for i, found := 0, 0; found < 3 && i < 1000; i++ {
		q := fmt.Sprintf("q%d", i)
		if m := cl.MasterOf(store.QueueKeys(q)["seq"]); queues[m] == "" {
			queues[m] = q
			found++
		}
	}
	victim := 1
	queues[0], queues[victim] = queues[victim], queues[0]

	rec := &recorder{Store: store, issued: map[claimKey]int{}}
	var replicaErrs atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	handler := func(ctx context.Context, c core.Claim, tk core.Task) ([]byte, error) {
		select {
		case <-time.After(time.Duration(10+rand.IntN(40)) * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []byte("done"), nil
	}
	for _, q := range queues {
		for range 2 {
			w, err := core.NewWorker(rec, q, handler, core.WithConcurrency(4), core.WithLease(time.Second),
				core.WithPollInterval(2*time.Millisecond, 20*time.Millisecond), core.WithShutdownTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() { _ = w.Run(ctx) })
		}
	}
	b, err := core.NewBroker(rec, core.WithQueues(queues...), core.WithInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { _ = b.Run(ctx) })

	var mu sync.Mutex
	ids := make([][]string, len(queues))
	produce, stopProducing := context.WithCancel(ctx)
	for i, name := range queues {
		q, err := core.NewQueue(rec, name)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			wg.Go(func() {
				for produce.Err() == nil {
					tk, err := q.Enqueue(produce, []byte("job"))
					if errors.Is(err, redis.ErrReplicaAcks) {
						replicaErrs.Add(1)
					}
					if err == nil {
						mu.Lock()
						ids[i] = append(ids[i], tk.ID)
						mu.Unlock()
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
	}

	time.Sleep(time.Second)
	cl.Failover(victim)
	if store.WaitsForReplicas() {
		cl.AddReplica(victim)
	}
	time.Sleep(700 * time.Millisecond)
	stopProducing()

	// Let the workers finish what the cluster holds.
	var out failoverOutcome
	others := 0
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		all := make([][]string, len(ids))
		for i := range ids {
			all[i] = append([]string(nil), ids[i]...)
		}
		mu.Unlock()
		out.enqueued, out.lost, out.unfinished, others = len(all[0]), 0, 0, 0
		for i, q := range queues {
			for _, id := range all[i] {
				tk, err := store.Get(context.Background(), core.GetParams{Queue: q, ID: id})
				switch {
				case errors.Is(err, core.ErrNotFound) && i == 0:
					out.lost++
				case err != nil:
					t.Fatalf("Get %s/%s after the failover: %v", q, id, err)
				case tk.State != core.Succeeded && tk.State != core.Failed:
					out.unfinished++
				case i > 0:
					others++
				}
			}
		}
		if out.unfinished == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	wg.Wait()

	rec.mu.Lock()
	defer rec.mu.Unlock()
	for k, n := range rec.issued {
		if n > 1 {
			out.reissued++
			t.Logf("claim %s token %d handed out %d times", k.id, k.token, n)
		}
	}
	for _, k := range rec.acked {
		if rec.issued[k] != 1 {
			out.staleAcked++
		}
	}
	out.acks = len(rec.acked)
	out.replicaErrs = int(replicaErrs.Load())
	return out, others
}

// On a Cluster with WithReplicaAcks, a master's failover to its replica
// loses nothing acknowledged: no claim is handed out twice, no stale Ack is
// accepted, no acknowledged Enqueue is missing, every task finishes, and
// the queues of the other masters carry on throughout.
func TestClusterFailoverWithReplicaAcks(t *testing.T) {
	out, others := runClusterFailover(t, redis.WithReplicaAcks(1, 500*time.Millisecond))
	t.Logf("cluster, WithReplicaAcks(1, 500ms): %+v; the other masters' queues finished %d tasks", out, others)
	if out.acks == 0 || out.enqueued == 0 || others == 0 {
		t.Fatalf("no load ran: %+v, %d on the other masters", out, others)
	}
	if out.reissued != 0 || out.staleAcked != 0 {
		t.Errorf("%d claims handed out twice, %d stale Acks accepted; want 0", out.reissued, out.staleAcked)
	}
	if out.lost != 0 || out.unfinished != 0 {
		t.Errorf("%d of %d acknowledged Enqueues lost, %d unfinished; want 0", out.lost, out.enqueued, out.unfinished)
	}
}

// Without it the promoted replica has what it had received: the test
// reports what was lost, and that the store carried on.
func TestClusterFailoverDefault(t *testing.T) {
	out, others := runClusterFailover(t)
	t.Logf("cluster, default: %+v (lost %d of %d acknowledged Enqueues; %d claims handed out twice; %d stale Acks accepted); the other masters' queues finished %d tasks",
		out, out.lost, out.enqueued, out.reissued, out.staleAcked, others)
	if out.acks == 0 || out.enqueued == 0 || others == 0 {
		t.Fatalf("no load ran: %+v, %d on the other masters", out, others)
	}
	if out.replicaErrs != 0 {
		t.Errorf("%d ErrReplicaAcks without WithReplicaAcks", out.replicaErrs)
	}
}
