// Command metrics shows leasehold's OpenTelemetry metrics as Prometheus
// scrapes them. A producer, a worker and a broker share the in-process
// store and one OpenTelemetry MeterProvider, whose reader is the Prometheus
// exporter; the program prints what a scrape of /metrics returns.
//
// The store and every component run on one fake clock, so the story is
// exact. The worker claims report-1 with a 10 s lease and then loses the
// store: its heartbeat fails. 11 s pass; the broker finds the lease lapsed
// and requeues the task. The handler, which outlived its lease, returns,
// and the worker's late Ack is refused as stale. The worker claims report-1
// again under a newer token and acknowledges it. invoice-1 fails at once
// with a permanent error. The scrape shows the lost lease and the stale Ack
// as series of their own (leasehold_leases_lost_total,
// leasehold_decisions_stale_total), apart from the handler's failure
// (leasehold_tasks_failed_total).
//
// It runs in a moment: go run . (in examples/metrics)
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

// run plays the story and prints the leasehold series of the scrape
// (histogram buckets left out).
func run(ctx context.Context, out io.Writer) error {
	scrape, err := scenario(ctx, out)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nGET /metrics (leasehold series; histogram buckets left out):")
	lines := bufio.NewScanner(bytes.NewReader(scrape))
	for lines.Scan() {
		line := lines.Text()
		name := strings.TrimPrefix(strings.TrimPrefix(line, "# HELP "), "# TYPE ")
		if strings.HasPrefix(name, "leasehold_") && !strings.Contains(line, "_bucket{") {
			fmt.Fprintln(out, line)
		}
	}
	return lines.Err()
}

// partition is a store whose heartbeats fail while cut is set, as they
// would if the worker lost its network to the store.
type partition struct {
	core.Store
	cut     atomic.Bool
	refused atomic.Int32
}

var errUnreachable = errors.New("store unreachable")

func (p *partition) Extend(ctx context.Context, e core.ExtendParams) (core.TaskResult, error) {
	if p.cut.Load() {
		p.refused.Add(1)
		return core.TaskResult{}, errUnreachable
	}
	return p.Store.Extend(ctx, e)
}

// scenario plays the story, writing what happens to log, and returns the
// body of one scrape of the metrics endpoint after it.
func scenario(ctx context.Context, log io.Writer) ([]byte, error) {
	// The application's OpenTelemetry setup: a MeterProvider whose reader
	// is the Prometheus exporter, registered on a registry that the
	// /metrics handler serves.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry),
		otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer provider.Shutdown(context.WithoutCancel(ctx))
	metrics := core.WithMeterProvider(provider)

	clock := core.NewFakeClock(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))
	mem := memory.New(memory.WithClock(clock))
	defer mem.Close()
	store := &partition{Store: mem}

	q, err := core.NewQueue(store, "reports", core.WithClock(clock), metrics)
	if err != nil {
		return nil, err
	}
	for _, id := range []string{"report-1", "invoice-1"} {
		if _, err := q.Enqueue(ctx, []byte(id), core.WithID(id)); err != nil {
			return nil, err
		}
	}

	started, release := make(chan core.Claim, 1), make(chan struct{})
	w, err := core.NewWorker(store, "reports", func(ctx context.Context, c core.Claim, t core.Task) ([]byte, error) {
		switch {
		case t.ID == "invoice-1":
			return nil, core.Permanent(errors.New("card declined"))
		case c.Attempt == 1:
			started <- c
			<-release // outlives its lease
		}
		return []byte("done"), nil
	}, core.WithClock(clock), core.WithConcurrency(1), core.WithLease(10*time.Second), metrics)
	if err != nil {
		return nil, err
	}
	b, err := core.NewBroker(store, core.WithQueues("reports"), core.WithClock(clock), metrics,
		core.WithRetryPolicy(func(core.Task, error) (time.Duration, bool) { return 0, true }))
	if err != nil {
		return nil, err
	}

	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	stopped := false
	shutdown := func() error {
		if stopped {
			return nil
		}
		stopped = true
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return errors.Join(w.Shutdown(sctx), <-ran)
	}
	defer shutdown()

	var first core.Claim
	select {
	case first = <-started:
	case <-time.After(10 * time.Second):
		return nil, errors.New("the handler did not start")
	}
	fmt.Fprintf(log, "worker: claimed %s under token %d, lease 10s\n", first.TaskID, first.Token)

	store.cut.Store(true)
	// The heartbeat loop parks on its timer (the only one: the worker's one
	// slot is taken) before the clock moves, or it would sleep from 09:00:11.
	parked := make(chan struct{})
	timeout := time.AfterFunc(10*time.Second, func() { close(parked) })
	if !clock.BlockUntil(1, parked) {
		return nil, errors.New("the heartbeat loop never waited for its beat")
	}
	timeout.Stop()
	clock.Advance(11 * time.Second) // the heartbeat is due, and the lease lapses
	if err := wait(func() bool { return store.refused.Load() >= 1 }); err != nil {
		return nil, fmt.Errorf("the heartbeat was never sent: %w", err)
	}
	fmt.Fprintln(log, "worker: heartbeat failed: store unreachable; 11s later the lease has lapsed")

	p, err := b.RunOnce(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "broker: claimed %d expired task, requeued %d\n", p.Claimed, p.Requeued)

	store.cut.Store(false)
	close(release)
	if err := wait(func() bool { s := w.Stats(); return s.Acked == 1 && s.Failed == 1 }); err != nil {
		return nil, fmt.Errorf("the tasks were not decided: %w (stats %+v)", err, w.Stats())
	}
	s := w.Stats()
	fmt.Fprintf(log, "worker: late ack refused as stale (leases lost %d, stale decisions %d); report-1 acked on its second claim; invoice-1 failed\n",
		s.LeasesLost, s.StaleDecisions)
	if err := shutdown(); err != nil {
		return nil, err
	}

	// What Prometheus would read from the /metrics endpoint; a service
	// serves it with http.Handle("/metrics", promhttp.HandlerFor(registry,
	// promhttp.HandlerOpts{})).
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		return nil, fmt.Errorf("scrape: status %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes(), nil
}

// wait polls cond until it holds, for at most 10 s.
func wait(cond func() bool) error {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}
