package core

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// ErrLeaseExpired is the error a Broker hands the retry policy for a task
// whose lease lapsed before its worker decided it.
var ErrLeaseExpired = errors.New("leasehold: lease expired")

// RetryPolicy decides whether a failed attempt runs again. It receives the
// task as it will be recorded (Errors already ends with this failure, so
// t.LeaseLosses and t.HandlerFailures count it; t.Attempt is the attempt that
// failed) and the error: what the handler returned, a *PanicError, or
// ErrLeaseExpired when the lease lapsed. It returns whether to retry and how
// long to wait before the task is due again (0: at once), a wait the store
// measures on its own clock. A negative delay counts as 0 and one longer
// than model.MaxDuration as model.MaxDuration.
//
// A policy must be safe for concurrent use. It must not block for long: a
// Broker holds its claim on the task only for the claim TTL.
type RetryPolicy func(t Task, err error) (delay time.Duration, retry bool)

// Backoff is the default retry policy: retry while the task has attempts left
// (Attempt < MaxAttempts) and the error is not Permanent, after a delay that
// grows exponentially with the attempt, with random jitter.
//
// The delay after attempt n is Min * Factor^(n-1), capped at Max, then
// multiplied by a random factor in [1-Jitter, 1+Jitter) and capped at Max
// again. Zero fields take the defaults noted on them.
type Backoff struct {
	Min    time.Duration // delay after the first attempt; default 1s
	Max    time.Duration // longest delay; default 1h
	Factor float64       // growth per attempt, >= 1; default 2
	Jitter float64       // relative spread, 0..1; default 0.1 (negative: none)
	// Rand returns a number in [0, 1). Default math/rand/v2.Float64; tests
	// inject a deterministic source.
	Rand func() float64
}

// DefaultRetryPolicy is the policy of Backoff{}, every field at its
// default: retry after 1s, 2s, 4s, ... up to one hour, ±10%, until the task's
// MaxAttempts, never for a Permanent error.
func DefaultRetryPolicy(t Task, err error) (delay time.Duration, retry bool) {
	return defaultPolicy(t, err)
}

var defaultPolicy = Backoff{}.Policy()

// Policy returns b as a RetryPolicy.
func (b Backoff) Policy() RetryPolicy {
	p := b.withDefaults()
	return func(t Task, err error) (time.Duration, bool) {
		if IsPermanent(err) || t.Attempt >= t.MaxAttempts {
			return 0, false
		}
		return p.delay(t.Attempt), true
	}
}

// Delay returns the wait after the given attempt (1 for the first), with the
// defaults applied.
func (b Backoff) Delay(attempt int) time.Duration { return b.withDefaults().delay(attempt) }

func (b Backoff) withDefaults() Backoff {
	if b.Min <= 0 {
		b.Min = time.Second
	}
	if b.Max <= 0 {
		b.Max = time.Hour
	}
	b.Max = max(b.Max, b.Min)
	if b.Factor < 1 {
		b.Factor = 2
	}
	switch {
	case b.Jitter == 0:
		b.Jitter = 0.1
	case b.Jitter < 0:
		b.Jitter = 0
	case b.Jitter > 1:
		b.Jitter = 1
	}
	if b.Rand == nil {
		b.Rand = rand.Float64
	}
	return b
}

func (b Backoff) delay(attempt int) time.Duration {
	// Float arithmetic cannot overflow here; min caps it before conversion.
	d := float64(b.Min) * math.Pow(b.Factor, float64(max(attempt, 1)-1))
	d = min(d, float64(b.Max))
	if b.Jitter > 0 {
		d *= 1 + b.Jitter*(2*b.Rand()-1)
	}
	return time.Duration(max(min(d, float64(b.Max)), 0))
}

// FixedDelay returns a policy that retries while the task has attempts left
// and the error is not Permanent, always after d.
func FixedDelay(d time.Duration) RetryPolicy {
	return func(t Task, err error) (time.Duration, bool) {
		if IsPermanent(err) || t.Attempt >= t.MaxAttempts {
			return 0, false
		}
		return d, true
	}
}

// Permanent wraps err so that the Worker fails the task at once, without
// consulting the retry policy. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err, or an error it wraps, came from Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// PanicError is the error recorded for an attempt whose handler panicked.
// The Worker recovers the panic, logs the stack and treats the attempt as a
// failure like any other.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the handler goroutine's stack at the panic
}

// Error returns "panic: " and the panic value.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value if it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
