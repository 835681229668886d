package core_test

import (
	"context"
	"errors"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/leasehold/leasehold/core"
)

func TestEveryComponentRefusesANilProviderAndTakesAnyOther(t *testing.T) {
	s := newStore(t, core.NewFakeClock(t0))
	handler := func(ctx context.Context, c core.Claim, task core.Task) ([]byte, error) { return nil, nil }
	for _, c := range []struct {
		name string
		opt  core.Option
		ok   bool
	}{
		{"nil meter provider", core.WithMeterProvider(nil), false},
		{"nil tracer provider", core.WithTracerProvider(nil), false},
		{"no-op meter provider", core.WithMeterProvider(metricnoop.NewMeterProvider()), true},
		{"no-op tracer provider", core.WithTracerProvider(tracenoop.NewTracerProvider()), true},
	} {
		_, qerr := core.NewQueue(s, queue, c.opt)
		_, werr := core.NewWorker(s, queue, handler, c.opt)
		_, berr := core.NewBroker(s, core.WithQueues(queue), c.opt)
		for what, err := range map[string]error{"NewQueue": qerr, "NewWorker": werr, "NewBroker": berr} {
			if c.ok && err != nil {
				t.Errorf("%s with a %s: %v", what, c.name, err)
			}
			if !c.ok && !errors.Is(err, core.ErrInvalidArgument) {
				t.Errorf("%s with a %s: %v, want ErrInvalidArgument", what, c.name, err)
			}
		}
	}
}
