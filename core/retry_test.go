package core_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

func TestBackoffGrowsExponentiallyUpToItsCap(t *testing.T) {
	b := core.Backoff{Min: time.Second, Max: 10 * time.Second, Jitter: -1}
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	for i, w := range want {
		if got := b.Delay(i + 1); got != w*time.Second {
			t.Errorf("Delay(%d) = %v, want %v", i+1, got, w*time.Second)
		}
	}
	if got := (core.Backoff{Min: time.Second, Factor: 3, Jitter: -1}).Delay(3); got != 9*time.Second {
		t.Errorf("factor 3, attempt 3: %v", got)
	}
	if got := (core.Backoff{Jitter: -1}).Delay(1000); got != time.Hour {
		t.Errorf("default cap: %v", got)
	}
}

func TestBackoffJitterSpreadsTheDelayWithTheInjectedRandomness(t *testing.T) {
	for _, c := range []struct {
		r    float64
		want time.Duration
	}{
		{0, 5 * time.Second},             // 1 - 0.5
		{0.5, 10 * time.Second},          // no change
		{0.75, 12500 * time.Millisecond}, // 1 + 0.25
	} {
		b := core.Backoff{Min: 10 * time.Second, Jitter: 0.5, Rand: func() float64 { return c.r }}
		if got := b.Delay(1); got != c.want {
			t.Errorf("rand %v: %v, want %v", c.r, got, c.want)
		}
	}
	// Jitter never takes the delay past Max.
	b := core.Backoff{Min: time.Minute, Max: time.Minute, Jitter: 0.5, Rand: func() float64 { return 0.99 }}
	if got := b.Delay(1); got != time.Minute {
		t.Errorf("capped jitter: %v", got)
	}
	// The default spread is ±10%.
	for _, r := range []float64{0, 0.999999} {
		got := core.Backoff{Rand: func() float64 { return r }}.Delay(1)
		if got < 900*time.Millisecond || got > 1100*time.Millisecond {
			t.Errorf("default jitter, rand %v: %v", r, got)
		}
	}
}

func TestRetryPoliciesStopAtMaxAttemptsAndOnPermanentErrors(t *testing.T) {
	boom := errors.New("boom")
	for name, p := range map[string]core.RetryPolicy{
		"default": core.DefaultRetryPolicy,
		"backoff": core.Backoff{Min: time.Second, Jitter: -1}.Policy(),
		"fixed":   core.FixedDelay(time.Second),
	} {
		if d, ok := p(core.Task{Attempt: 1, MaxAttempts: 3}, boom); !ok || d <= 0 {
			t.Errorf("%s: attempt 1 of 3: %v, %v; want a retry", name, d, ok)
		}
		if _, ok := p(core.Task{Attempt: 3, MaxAttempts: 3}, boom); ok {
			t.Errorf("%s: attempt 3 of 3 retried", name)
		}
		if _, ok := p(core.Task{Attempt: 1, MaxAttempts: 3}, fmt.Errorf("wrapped: %w", core.Permanent(boom))); ok {
			t.Errorf("%s: a permanent error retried", name)
		}
		if _, ok := p(core.Task{Attempt: 1, MaxAttempts: 3}, core.ErrLeaseExpired); !ok {
			t.Errorf("%s: a lost lease not retried", name)
		}
	}
}

func TestPermanentAndPanicErrorsUnwrap(t *testing.T) {
	boom := errors.New("boom")
	if core.Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	p := core.Permanent(boom)
	if !errors.Is(p, boom) || p.Error() != "boom" || !core.IsPermanent(p) || core.IsPermanent(boom) {
		t.Errorf("Permanent(boom) = %v", p)
	}
	pe := &core.PanicError{Value: boom}
	if !errors.Is(pe, boom) || pe.Error() != "panic: boom" {
		t.Errorf("PanicError = %v", pe)
	}
	if (&core.PanicError{Value: 42}).Unwrap() != nil {
		t.Error("a non-error panic value unwraps")
	}
}
