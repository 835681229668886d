package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterNodeTimeout is the cluster-node-timeout of the servers of
// StartCluster3 (ms). Failover does not wait for it (the replica takes
// over at once); it only has to be long enough that a node slowed down by
// a loaded machine is not taken for dead.
const clusterNodeTimeout = 5000

// Cluster is a private Redis Cluster of three masters on free loopback
// ports, each master with one replica when started so, its slots split in
// three ranges: Masters[i] serves slots i*16384/3 up to the next range.
type Cluster struct {
	// Masters are the servers that hold the slots, in slot order;
	// Replicas[i] (when started with replicas) replicates Masters[i]. A
	// Failover swaps the two.
	Masters, Replicas []*Server

	tb  testing.TB
	ids map[*Server]string // cluster node IDs
}

// slotRanges are the slots of the three masters.
var slotRanges = [3][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}

// StartCluster3 starts a Redis Cluster of three masters (each with a
// replica when replicas is true) like Start, joins them by CLUSTER MEET,
// gives each master a third of the slots (CLUSTER ADDSLOTSRANGE) and each
// replica its master (CLUSTER REPLICATE), and returns when every node sees
// the whole cluster, its state is ok and every replica is in sync. Every
// server stops when the test ends.
func StartCluster3(tb testing.TB, replicas bool) *Cluster {
	tb.Helper()
	c := &Cluster{tb: tb, ids: map[*Server]string{}}
	for range slotRanges {
		c.Masters = append(c.Masters, c.startNode())
		if replicas {
			c.Replicas = append(c.Replicas, c.startNode())
		}
	}
	ctx := context.Background()
	first := c.Masters[0].Client()
	for i, m := range c.Masters {
		// Distinct config epochs from the start, as redis-cli --cluster
		// create gives: a replica's takeover then claims an epoch above
		// all, which every node accepts.
		if err := m.Client().Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			tb.Fatalf("redistest: CLUSTER SET-CONFIG-EPOCH on %s: %v", m.Addr, err)
		}
		if err := m.Client().Do(ctx, "CLUSTER", "ADDSLOTSRANGE", slotRanges[i][0], slotRanges[i][1]).Err(); err != nil {
			tb.Fatalf("redistest: CLUSTER ADDSLOTSRANGE on %s: %v", m.Addr, err)
		}
	}
	all := c.nodes()
	for _, s := range all[1:] {
		if err := first.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(s.port)).Err(); err != nil {
			tb.Fatalf("redistest: CLUSTER MEET %s: %v", s.Addr, err)
		}
	}
	for i, r := range c.Replicas {
		c.replicate(r, c.Masters[i])
	}
	c.awaitHealthy()
	return c
}

// startNode starts one cluster-enabled server and reads its node ID. The
// settings keep the tests short and their failovers the tests' own: a
// replica's first synchronization starts at once (not after the default
// 5 s wait for more replicas); a master pings its replicas every second,
// which moves the replication offset every node gossips (a replica whose
// offset is still 0 is not listed in CLUSTER SLOTS); and no replica fails
// over on its own.
func (c *Cluster) startNode() *Server {
	c.tb.Helper()
	s := startWith(c.tb, "--cluster-enabled", "yes", "--dir", c.tb.TempDir(), "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.Itoa(clusterNodeTimeout), "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1",
		"--cluster-replica-no-failover", "yes")
	id, err := s.Client().Do(context.Background(), "CLUSTER", "MYID").Text()
	if err != nil {
		c.tb.Fatalf("redistest: CLUSTER MYID on %s: %v (server running: %v); its output:\n%s", s.Addr, err, s.Running(), s.Output())
	}
	c.ids[s] = id
	return s
}

// replicate makes r a replica of m, once r knows m's node (CLUSTER
// REPLICATE refuses an unknown one).
func (c *Cluster) replicate(r, m *Server) {
	c.tb.Helper()
	ctx := context.Background()
	rc := r.Client()
	c.await(fmt.Sprintf("node %s knows master %s", r.Addr, m.Addr), func() (bool, string) {
		nodes, err := rc.ClusterNodes(ctx).Result()
		return err == nil && strings.Contains(nodes, c.ids[m]), nodes
	})
	if err := rc.Do(ctx, "CLUSTER", "REPLICATE", c.ids[m]).Err(); err != nil {
		c.tb.Fatalf("redistest: CLUSTER REPLICATE on %s: %v", r.Addr, err)
	}
}

// AddReplica starts a new server, joins it to the cluster as the replica
// of Masters[i] (which must have none), and returns when the cluster is
// healthy again: after a Failover, it gives the new master the replica that
// WAIT (redis.WithReplicaAcks) needs.
func (c *Cluster) AddReplica(i int) *Server {
	c.tb.Helper()
	if i < len(c.Replicas) && c.Replicas[i] != nil {
		c.tb.Fatalf("redistest: master %d has a replica", i)
	}
	r := c.startNode()
	if err := c.Masters[i].Client().ClusterMeet(context.Background(), "127.0.0.1", strconv.Itoa(r.port)).Err(); err != nil {
		c.tb.Fatalf("redistest: CLUSTER MEET %s: %v", r.Addr, err)
	}
	c.replicate(r, c.Masters[i])
	for len(c.Replicas) <= i {
		c.Replicas = append(c.Replicas, nil)
	}
	c.Replicas[i] = r
	c.awaitHealthy()
	return r
}

// nodes returns every server of the cluster that runs, masters first.
func (c *Cluster) nodes() []*Server {
	var out []*Server
	for _, s := range append(append([]*Server(nil), c.Masters...), c.Replicas...) {
		if s != nil && s.Running() {
			out = append(out, s)
		}
	}
	return out
}

// Addrs returns the addresses of the running servers, masters first: the
// seeds of a cluster client.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, s := range c.nodes() {
		out = append(out, s.Addr)
	}
	return out
}

// Client returns a new cluster client of the cluster, closed when the test
// ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	c.tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// MasterOf returns the index of the master that serves key (its slot, as
// CLUSTER KEYSLOT computes it).
func (c *Cluster) MasterOf(key string) int {
	c.tb.Helper()
	mc := redis.NewClient(&redis.Options{Addr: c.nodes()[0].Addr})
	defer mc.Close()
	slot, err := mc.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		c.tb.Fatalf("redistest: CLUSTER KEYSLOT %q: %v", key, err)
	}
	return c.MasterOfSlot(int(slot))
}

// Failover kills master i with SIGKILL, as a crash would, and makes its
// replica the master of its slots with CLUSTER FAILOVER TAKEOVER (the
// replica takes over without the agreement of the other masters, as an
// operator does when the master is gone). It returns when every running
// node sees the replica serving the slots and the cluster state is ok;
// Masters[i] is then the former replica and Replicas[i] nil. The cluster
// must have been started with replicas. A go-redis ClusterClient learns the
// new layout on its next MOVED reply or when its state is reloaded
// (ReloadState, or its periodic reload): a call to the dead address fails
// in transport until then.
func (c *Cluster) Failover(i int) {
	c.tb.Helper()
	if i < 0 || i >= len(c.Replicas) || c.Replicas[i] == nil {
		c.tb.Fatalf("redistest: master %d has no replica to fail over to", i)
	}
	old, next := c.Masters[i], c.Replicas[i]
	old.Stop()
	if err := next.Client().Do(context.Background(), "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		c.tb.Fatalf("redistest: CLUSTER FAILOVER TAKEOVER on %s: %v", next.Addr, err)
	}
	c.Masters[i], c.Replicas[i] = next, nil
	c.awaitHealthy()
	// The dead node stays in every node's table, as a failing replica of
	// the new master, until forgotten.
	for _, s := range c.nodes() {
		if err := s.Client().Do(context.Background(), "CLUSTER", "FORGET", c.ids[old]).Err(); err != nil {
			c.tb.Fatalf("redistest: CLUSTER FORGET on %s: %v", s.Addr, err)
		}
	}
}

// awaitHealthy waits until every running node sees each master serving its
// slots, the cluster state is ok and every replica's link to its master is
// up and synchronized.
func (c *Cluster) awaitHealthy() {
	c.tb.Helper()
	ctx := context.Background()
	for _, s := range c.nodes() {
		sc := redis.NewClient(&redis.Options{Addr: s.Addr})
		c.await("node "+s.Addr+" sees the cluster", func() (bool, string) {
			info, err := sc.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false, fmt.Sprint(info, err)
			}
			// CLUSTER SLOTS, not SHARDS: it is what go-redis's cluster
			// client routes by, and it leaves out a replica not yet ready.
			slots, err := sc.ClusterSlots(ctx).Result() //lint:ignore SA1019 see above
			if err != nil || len(slots) != len(slotRanges) {
				return false, fmt.Sprint(slots, err)
			}
			for _, sl := range slots {
				i := c.MasterOfSlot(int(sl.Start))
				if len(sl.Nodes) == 0 || sl.Nodes[0].Addr != c.Masters[i].Addr || int(sl.End) != slotRanges[i][1] {
					return false, fmt.Sprint(slots)
				}
				if i < len(c.Replicas) && c.Replicas[i] != nil && (len(sl.Nodes) != 2 || sl.Nodes[1].Addr != c.Replicas[i].Addr) {
					return false, fmt.Sprint(slots)
				}
			}
			return true, ""
		})
		_ = sc.Close()
	}
	// Every node, replicas too, at the same current epoch: a takeover by a
	// replica behind the others would claim an epoch already taken, which
	// no node accepts.
	c.await("the nodes agree on the epoch", func() (bool, string) {
		seen := map[string]bool{}
		for _, s := range c.nodes() {
			sc := redis.NewClient(&redis.Options{Addr: s.Addr})
			info, err := sc.ClusterInfo(ctx).Result()
			_ = sc.Close()
			if err != nil {
				return false, err.Error()
			}
			for _, line := range strings.Split(info, "\r\n") {
				if strings.HasPrefix(line, "cluster_current_epoch:") {
					seen[line] = true
				}
			}
		}
		return len(seen) == 1, fmt.Sprint(seen)
	})
	for _, r := range c.Replicas {
		if r == nil {
			continue
		}
		rc := redis.NewClient(&redis.Options{Addr: r.Addr})
		c.await("replica "+r.Addr+" in sync", func() (bool, string) {
			info, err := rc.Info(ctx, "replication").Result()
			return err == nil && strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_sync_in_progress:0"), info
		})
		_ = rc.Close()
	}
}

// MasterOfSlot returns the index of the master that serves slot.
func (c *Cluster) MasterOfSlot(slot int) int {
	for i, r := range slotRanges {
		if slot >= r[0] && slot <= r[1] {
			return i
		}
	}
	return -1
}

// await polls ok until it holds, failing the test after startTimeout with
// the last state ok described.
func (c *Cluster) await(what string, ok func() (bool, string)) {
	c.tb.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		done, state := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("redistest: %s: not within %v; last: %s", what, startTimeout, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
