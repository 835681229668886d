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

	goredis "github.com/redis/go-redis/v9"

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

	return loadThroughFailover(t, store, queues, func() {
		cl.Failover(victim)
		if store.WaitsForReplicas() {
			cl.AddReplica(victim)
		}
	})
}

// producerPause is how long each producer of loadThroughFailover waits
// between Enqueues. Its two producers then add at most 500 tasks a second
// to a queue (300 to 1 500 in a run), which the queue's eight handler slots
// (10 to 50 ms a task) finish well inside the run's 10 s wait. With 1 ms,
// batched Enqueues let them add over 4 000 to a queue, more than its slots
// can finish in that wait, and about one run in four failed on unfinished
// tasks, though none was lost or stuck.
const producerPause = 4 * time.Millisecond

// loadThroughFailover runs a producer, two Workers and a Broker on each
// queue through store, calls crash mid-run (it kills the server of the
// first queue and makes another take its place), lets the load carry on,
// then measures the first queue as runFailover does. It returns the
// outcome and how many tasks the other queues finished.
func loadThroughFailover(t *testing.T, store *redis.Store, queues []string, crash func()) (failoverOutcome, int) {
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
	// Tasks whose lease lapsed during the outage run again soon, and a
	// broker claim whose answer was lost (ErrReplicaAcks) lapses soon, so
	// the run can wait for every task to finish.
	retry := core.WithRetryPolicy(core.FixedDelay(50 * time.Millisecond))
	for _, q := range queues {
		for range 2 {
			w, err := core.NewWorker(rec, q, handler, core.WithConcurrency(4), core.WithLease(time.Second), retry,
				core.WithPollInterval(2*time.Millisecond, 20*time.Millisecond), core.WithShutdownTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() { _ = w.Run(ctx) })
		}
	}
	b, err := core.NewBroker(rec, core.WithQueues(queues...), core.WithInterval(50*time.Millisecond), core.WithClaimTTL(time.Second), retry)
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
					time.Sleep(producerPause)
				}
			})
		}
	}

	time.Sleep(700 * time.Millisecond)
	crash()
	time.Sleep(500 * time.Millisecond)
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
		var lastErr error // a Get lost in transport, while the client catches up
		for i, q := range queues {
			for _, id := range all[i] {
				tk, err := store.Get(context.Background(), core.GetParams{Queue: q, ID: id})
				switch {
				case errors.Is(err, core.ErrNotFound) && i == 0:
					out.lost++
				case err != nil && time.Now().After(deadline):
					t.Fatalf("Get %s/%s after the failover: %v", q, id, err)
				case err != nil:
					lastErr = err
					out.unfinished++
				case tk.State != core.Succeeded && tk.State != core.Failed:
					out.unfinished++
					if time.Now().After(deadline) {
						t.Logf("unfinished: %s/%s %v attempt %d errors %+v deadline %v run after %v", q, id, tk.State, tk.Attempt, tk.Errors, tk.Deadline, tk.RunAfter)
					}
				case i > 0:
					others++
				}
			}
		}
		if lastErr != nil {
			t.Logf("a Get after the failover: %v", lastErr)
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

// runSentinelFailover runs the load of loadThroughFailover on two queues
// through a go-redis FailoverClient of a primary with one replica watched
// by a Sentinel; kills the primary with SIGKILL mid-run and waits for the
// Sentinel to promote the replica (the client follows it on its own),
// gives the new primary a replica when WithReplicaAcks needs one, and
// measures.
func runSentinelFailover(t *testing.T, opts ...redis.Option) (failoverOutcome, int) {
	const name = "leasehold"
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary.Addr)
	sentinel := redistest.StartSentinel(t, name, primary, 1)
	c := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: name, SentinelAddrs: []string{sentinel.Addr}})
	t.Cleanup(func() { c.Close() })
	store, err := redis.New(c, append([]redis.Option{redis.WithPrefix(uniquePrefix(t, c))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return loadThroughFailover(t, store, []string{"sq0", "sq1"}, func() {
		primary.Stop()
		deadline := time.Now().Add(15 * time.Second)
		for redistest.SentinelMaster(t, sentinel, name) != replica.Addr {
			if time.Now().After(deadline) {
				t.Fatal("the Sentinel did not promote the replica within 15s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if store.WaitsForReplicas() {
			redistest.StartReplica(t, replica.Addr)
		}
	})
}

// Through Sentinel with WithReplicaAcks, the promotion loses nothing
// acknowledged: no claim handed out twice, no stale Ack accepted, no
// acknowledged Enqueue missing, every task finished.
func TestSentinelFailoverWithReplicaAcks(t *testing.T) {
	out, others := runSentinelFailover(t, redis.WithReplicaAcks(1, 500*time.Millisecond))
	t.Logf("sentinel, WithReplicaAcks(1, 500ms): %+v; the second queue finished %d tasks", out, others)
	if out.acks == 0 || out.enqueued == 0 || others == 0 {
		t.Fatalf("no load ran: %+v, %d on the second queue", out, others)
	}
	if out.reissued != 0 || out.staleAcked != 0 {
		t.Errorf("%d claims handed out twice, %d stale Acks accepted; want 0", out.reissued, out.staleAcked)
	}
	if out.lost != 0 || out.unfinished != 0 {
		t.Errorf("%d of %d acknowledged Enqueues lost, %d unfinished; want 0", out.lost, out.enqueued, out.unfinished)
	}
}
