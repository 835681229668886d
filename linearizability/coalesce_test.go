package linearizability_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/linearizability/backends"
)

// Concurrent Enqueue calls on one Redis Store go to the server together
// (adapters/redis coalesces them); the histories of producers racing on one
// store must stay linearizable. Each drawn plan gets three twins of its
// first producer, which enqueue the same IDs at the same moments (one of
// each wins, the others are conflicts), on a store all clients share
// through a proxy that delays every request. The test also makes sure the
// store did send calls together: it ran fewer scripts than operations.
func TestConcurrentEnqueuesOnOneStore(t *testing.T) {
	srv := redistest.Start(t)
	f, err := backends.RedisShared(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := srv.Client()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	gen := linearizability.Plans(linearizability.PlanOptions{Mode: linearizability.MixedTime, MaxRounds: 4, ProducerTwins: 3})
	histories, ops := 30, 0
	for i := range histories {
		p := gen.Example(i)
		h, err := linearizability.Execute(ctx, p, f)
		if err != nil {
			t.Fatalf("plan %d: %v", i, err)
		}
		if v := linearizability.Check(h, time.Minute); !v.OK() {
			t.Fatalf("plan %d: history not linearizable (%v):\n%s", i, v.Result, p)
		}
		ops += len(h.Operations)
	}
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	scripts := 0
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_fcall:calls="); ok {
			scripts, _ = strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		}
	}
	t.Logf("%d histories, %d operations, %d scripts", histories, ops, scripts)
	if scripts == 0 || scripts >= ops {
		t.Errorf("%d scripts ran for %d operations: no Enqueue calls went out together", scripts, ops)
	}
}
