package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/model"
)

// cmdStat is one line of INFO commandstats.
type cmdStat struct {
	calls int64
	usec  int64
}

// commandStats reads INFO commandstats: per command, its calls and usec.
func commandStats(tb testing.TB, c *goredis.Client) map[string]cmdStat {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		var st cmdStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out[name] = st
	}
	return out
}

// scriptCommands are the commands that run a script: their usec includes
// the Redis calls the script makes, which INFO also counts on their own.
var scriptCommands = map[string]bool{"evalsha": true, "eval": true, "fcall": true, "evalsha_ro": true, "eval_ro": true, "fcall_ro": true}

// serverCost is what one kind of operation costs the server, from INFO
// commandstats around a run.
type serverCost struct {
	usPerOp    float64 // µs of script commands per operation
	p50        float64 // median µs of one script command (INFO latencystats)
	callsPerOp float64 // Redis calls the scripts make per operation
}

func (c serverCost) String() string {
	return fmt.Sprintf("%.1f µs (median call %.1f µs), %.1f calls", c.usPerOp, c.p50, c.callsPerOp)
}

// medianScriptLatency reads INFO latencystats: the p50 in µs of the script
// command that ran (FCALL, or EVALSHA without Functions). A median is
// not moved by the few calls a loaded machine preempts, which weigh on the
// mean of commandstats.
func medianScriptLatency(tb testing.TB, c *goredis.Client) float64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "latencystats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "latency_percentiles_usec_")
		if !ok || !found || !scriptCommands[name] {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "p50="); ok {
				p, _ := strconv.ParseFloat(v, 64)
				return p
			}
		}
	}
	return 0
}

// measureServer resets the server's statistics, runs ops operations (run
// makes them, sequentially, through the store) and returns their cost per
// operation.
func measureServer(tb testing.TB, c *goredis.Client, ops int, run func()) serverCost {
	tb.Helper()
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		tb.Fatal(err)
	}
	run()
	var usec, calls int64
	for name, st := range commandStats(tb, c) {
		switch {
		case scriptCommands[name]:
			usec += st.usec
		case name == "config" || name == "info" || name == "script" || name == "function" || name == "ping" || name == "hello" || name == "client":
		default:
			calls += st.calls
		}
	}
	return serverCost{usPerOp: float64(usec) / float64(ops), p50: medianScriptLatency(tb, c), callsPerOp: float64(calls) / float64(ops)}
}

// serverCosts measures, on a private server, the server time of a trivial
// script, Enqueue, Pop+Ack, and per task of EnqueueBatch, Pop of 10 and
// AckBatch (batches of 10), over n operations or tasks each.
func serverCosts(tb testing.TB, n int) map[string]serverCost {
	srv := redistest.Start(tb)
	c := srv.Client()
	s, err := redis.New(c)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Preload(ctx); err != nil {
		tb.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			tb.Fatal(err)
		}
	}
	args := func(prefix string, i int) model.EnqueueArgs {
		return model.EnqueueArgs{ID: fmt.Sprintf("%s%09d", prefix, i), Payload: []byte("payload"), MaxAttempts: 3}
	}
	out := map[string]serverCost{}
	trivial := goredis.NewScript("return 1")
	must(trivial.Load(ctx, c).Err())
	out["trivial script"] = measureServer(tb, c, n, func() {
		for range n {
			must(trivial.Run(ctx, c, []string{"k"}).Err())
		}
	})
	out["Enqueue"] = measureServer(tb, c, n, func() {
		for i := range n {
			_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: args("t", i)})
			must(err)
		}
	})
	var popped []core.Claim
	out["Pop"] = measureServer(tb, c, n, func() {
		for range n {
			r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
			must(err)
			if len(r.Tasks) != 1 {
				tb.Fatalf("pop returned %d tasks", len(r.Tasks))
			}
			popped = append(popped, r.Tasks[0].Claim())
		}
	})
	out["Ack"] = measureServer(tb, c, n, func() {
		for _, cl := range popped {
			_, err := s.Ack(ctx, core.AckParams{Claim: cl, Result: []byte("ok")})
			must(err)
		}
	})
	pop, ack := out["Pop"], out["Ack"]
	out["Pop+Ack"] = serverCost{usPerOp: pop.usPerOp + ack.usPerOp, p50: pop.p50 + ack.p50, callsPerOp: pop.callsPerOp + ack.callsPerOp}
	const batch = 10
	out["EnqueueBatch/task"] = measureServer(tb, c, n, func() {
		for i := 0; i < n; i += batch {
			var tasks []model.EnqueueArgs
			for j := range batch {
				tasks = append(tasks, args("b", i+j))
			}
			_, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "b", Tasks: tasks})
			must(err)
		}
	})
	var claims []core.Claim
	out["Pop(10)/task"] = measureServer(tb, c, n, func() {
		for len(claims) < n {
			r, err := s.Pop(ctx, core.PopParams{Queue: "b", Lease: time.Minute, N: batch})
			must(err)
			for _, t := range r.Tasks {
				claims = append(claims, t.Claim())
			}
		}
	})
	out["AckBatch/task"] = measureServer(tb, c, n, func() {
		for i := 0; i < n; i += batch {
			var acks []core.AckItem
			for _, cl := range claims[i : i+batch] {
				acks = append(acks, core.AckItem{Claim: cl, Result: []byte("ok")})
			}
			_, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "b", Acks: acks})
			must(err)
		}
	})
	// A batch call serves batch tasks: its median per task.
	for _, name := range []string{"EnqueueBatch/task", "Pop(10)/task", "AckBatch/task"} {
		c := out[name]
		c.p50 /= batch
		out[name] = c
	}
	return out
}

// The server time of each operation, as INFO commandstats reports it, so a
// change to the scripts shows what it costs:
//
//	go test -run TestServerTimePerOperation -v ./adapters/redis/
func TestServerTimePerOperation(t *testing.T) {
	costs := serverCosts(t, 500)
	for _, name := range []string{"trivial script", "Enqueue", "Pop", "Ack", "Pop+Ack", "EnqueueBatch/task", "Pop(10)/task", "AckBatch/task"} {
		c := costs[name]
		t.Logf("%-18s %s per operation", name, c)
		if name != "trivial script" && (c.usPerOp <= 0 || c.p50 <= 0 || c.callsPerOp < 1) {
			t.Errorf("%s: no server time measured (%s)", name, c)
		}
	}
}
