package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
)

// openLeaseholdRedis is leasehold on Redis at redis.Open's defaults.
func openLeaseholdRedis(_ context.Context, e *env) (target, error) {
	s, err := redis.Open(e.redisURL)
	if err != nil {
		return nil, err
	}
	return newLeasehold(s)
}

// asynqTarget is asynq v0.26 at its defaults: asynq.NewClient to enqueue,
// asynq.NewServer with Concurrency N to process.
type asynqTarget struct {
	opt    asynq.RedisClientOpt
	client *asynq.Client
}

const asynqKind = "noop"

func openAsynq(_ context.Context, e *env) (target, error) {
	o, err := goredis.ParseURL(e.redisURL)
	if err != nil {
		return nil, err
	}
	opt := asynq.RedisClientOpt{Addr: o.Addr, DB: o.DB, Username: o.Username, Password: o.Password}
	return &asynqTarget{opt: opt, client: asynq.NewClient(opt)}, nil
}

func (a *asynqTarget) enqueue(ctx context.Context) error {
	_, err := a.client.EnqueueContext(ctx, asynq.NewTask(asynqKind, payload))
	return err
}

func (a *asynqTarget) fill(ctx context.Context, n int) error {
	_, err := produce(ctx, 8, n, 1, func(ctx context.Context, _ int) error { return a.enqueue(ctx) })
	return err
}

func (a *asynqTarget) process(ctx context.Context, workers, n int, finished func()) (int, error) {
	var handled atomic.Int64
	mux := asynq.NewServeMux()
	mux.HandleFunc(asynqKind, func(context.Context, *asynq.Task) error {
		handled.Add(1)
		return nil
	})
	srv := asynq.NewServer(a.opt, asynq.Config{Concurrency: workers, LogLevel: asynq.WarnLevel})
	if err := srv.Start(mux); err != nil {
		return 0, err
	}
	defer srv.Shutdown()
	// A task is done once asynq has recorded it as processed, after its
	// handler returned: wait for the handlers first (no Redis traffic), then
	// for the processed count.
	if err := waitFor(ctx, time.Millisecond, func() bool { return handled.Load() >= int64(n) }); err != nil {
		finished()
		return int(handled.Load()), err
	}
	insp := asynq.NewInspector(a.opt)
	defer insp.Close()
	var done int
	var ierr error
	err := waitFor(ctx, time.Millisecond, func() bool {
		var info *asynq.QueueInfo
		if info, ierr = insp.GetQueueInfo("default"); ierr != nil {
			return true
		}
		done = info.ProcessedTotal - info.FailedTotal
		return done >= n
	})
	finished()
	return done, cmpOr(ierr, err)
}

func (a *asynqTarget) close() error { return a.client.Close() }

// ceilingTarget sends one trivial script (return 1) per task: what one
// EVALSHA round trip costs on this machine.
type ceilingTarget struct {
	c   *goredis.Client
	sha string
}

func openCeiling(ctx context.Context, e *env) (target, error) {
	o, err := goredis.ParseURL(e.redisURL)
	if err != nil {
		return nil, err
	}
	c := goredis.NewClient(o)
	sha, err := c.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		c.Close()
		return nil, err
	}
	return &ceilingTarget{c: c, sha: sha}, nil
}

func (c *ceilingTarget) enqueue(ctx context.Context) error {
	return c.c.EvalSha(ctx, c.sha, nil).Err()
}

func (c *ceilingTarget) fill(context.Context, int) error { return errUnsupported }

func (c *ceilingTarget) process(context.Context, int, int, func()) (int, error) {
	return 0, errUnsupported
}

func (c *ceilingTarget) close() error { return c.c.Close() }

// redisUsage is what the server did during a measurement, from INFO
// commandstats and INFO cpu. Redis counts the commands a script runs in
// commandstats too, and a script's time includes theirs.
type redisUsage struct {
	calls      float64 // every command the server ran, inside scripts too
	scripts    float64 // EVAL, EVALSHA, FCALL and their _RO forms: round trips that run a script
	scriptUsec float64 // time in those scripts, the commands they ran included
	cpuUsec    float64 // user+system CPU of the server process
}

func (u redisUsage) minus(before redisUsage, tasks int) redisUsage {
	if tasks == 0 {
		return redisUsage{}
	}
	t := float64(tasks)
	return redisUsage{
		calls:      (u.calls - before.calls) / t,
		scripts:    (u.scripts - before.scripts) / t,
		scriptUsec: (u.scriptUsec - before.scriptUsec) / t,
		cpuUsec:    (u.cpuUsec - before.cpuUsec) / t,
	}
}

// readUsage reads the server's counters; with reset it first clears
// commandstats (CONFIG RESETSTAT), so a measurement counts only itself. The
// bench's own INFO and CONFIG calls are left out.
func readUsage(ctx context.Context, c *goredis.Client, reset bool) (redisUsage, error) {
	if reset {
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			return redisUsage{}, err
		}
	}
	var u redisUsage
	stats, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		calls, usec, err := parseCmdstat(rest)
		if err != nil {
			return u, fmt.Errorf("INFO commandstats %q: %w", line, err)
		}
		u.calls += calls
		switch name {
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
			u.scripts += calls
			u.scriptUsec += usec
		}
	}
	cpu, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(cpu, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return u, fmt.Errorf("INFO cpu %q: %w", line, err)
			}
			u.cpuUsec += f * 1e6
		}
	}
	return u, nil
}

func parseCmdstat(s string) (calls, usec float64, err error) {
	var seen int
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "calls":
			calls, err = strconv.ParseFloat(v, 64)
			seen++
		case "usec":
			usec, err = strconv.ParseFloat(v, 64)
			seen++
		}
		if err != nil {
			return 0, 0, err
		}
	}
	if seen != 2 {
		return 0, 0, errors.New("no calls or usec")
	}
	return calls, usec, nil
}
