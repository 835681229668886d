package main

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// What other clients of the server see while a system works: a Redis
// server runs one command at a time, a script included, so a long script
// delays every other client's command.

// probeEvery is the pause between two of the probe's PINGs.
const probeEvery = time.Millisecond

// slowCall is the SLOWLOG threshold of a measurement: the calls that took
// longer are counted, and the longest is reported.
const slowCall = time.Millisecond

// probeStats is what a measurement's probe and SLOWLOG saw.
type probeStats struct {
	p50, p99 time.Duration // round trip of another client's PING
	longest  time.Duration // the longest call the server ran (0: none over slowCall)
	slow     int           // calls over slowCall
}

// probe PINGs the server on a connection of its own, one PING at a time
// with probeEvery between them, and records each round trip.
type probe struct {
	c    *goredis.Client
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	rtts []time.Duration
}

// startProbe readies SLOWLOG (threshold slowCall, emptied) and starts
// PINGing.
func startProbe(ctx context.Context, e *env) (*probe, error) {
	for _, kv := range [][2]string{{"slowlog-log-slower-than", strconv.FormatInt(slowCall.Microseconds(), 10)}, {"slowlog-max-len", "100000"}} {
		if err := e.admin.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			return nil, err
		}
	}
	if err := e.admin.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		return nil, err
	}
	opt, err := goredis.ParseURL(e.redisURL)
	if err != nil {
		return nil, err
	}
	opt.PoolSize = 1
	p := &probe{c: goredis.NewClient(opt), stop: make(chan struct{}), done: make(chan struct{})}
	if err := p.c.Ping(ctx).Err(); err != nil { // connected before the measurement
		p.c.Close()
		return nil, err
	}
	go p.run(ctx)
	return p, nil
}

func (p *probe) run(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		start := time.Now()
		if p.c.Ping(ctx).Err() != nil {
			continue
		}
		rtt := time.Since(start)
		p.mu.Lock()
		p.rtts = append(p.rtts, rtt)
		p.mu.Unlock()
	}
}

// finish stops the PINGs and reads the SLOWLOG of the measurement.
func (p *probe) finish(ctx context.Context, e *env) (*probeStats, error) {
	close(p.stop)
	<-p.done
	p.c.Close()
	var st probeStats
	rtts := slices.Clone(p.rtts)
	slices.Sort(rtts)
	if n := len(rtts); n > 0 {
		st.p50, st.p99 = rtts[n/2], rtts[min(n-1, n*99/100)]
	}
	logs, err := e.admin.SlowLogGet(ctx, -1).Result()
	if err != nil {
		return nil, err
	}
	for _, l := range logs {
		if len(l.Args) == 0 {
			continue
		}
		switch strings.ToLower(l.Args[0]) {
		case "config", "slowlog", "info": // the bench's own
			continue
		}
		st.slow++
		st.longest = max(st.longest, l.Duration)
	}
	return &st, nil
}
