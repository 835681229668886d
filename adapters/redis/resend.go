package redis

import (
	"context"
	"math"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// How long a call's reply is kept: as long as the client can send the call
// again after the server ran it, so that a call that took effect is never
// run a second time and answered with a refusal.
//
// go-redis sends a command again when an attempt fails with a retryable
// error (a timeout, a dropped connection), up to MaxRetries times. Between
// the server's run of one attempt and the arrival of the next, the client
// can spend, per attempt after the first: the rest of the earlier
// attempt's read (ReadTimeout), the backoff (at most MaxRetryBackoff), the
// wait for a pooled connection (PoolTimeout), dialling a new one
// (DialerRetries attempts of DialTimeout and the pauses between them), the
// new connection's handshake (a write and a read) and the command's write
// (WriteTimeout). resendWindow is the sum over the retries. A Cluster
// client follows up to MaxRedirects redirections, each with the retries of
// a node's client.
//
// A call whose context has a deadline starts no attempt after it (the
// backoff, the pool and the dial watch the context), so its window also
// ends at the deadline plus the handshake and the write of an attempt
// begun just before: the Worker's calls, which end within a lease, keep
// their replies for about a lease. keepFor takes the shorter of the two.

const (
	// replyMargin covers the time a resend spends between the client's
	// write and the server's run of it (the network, the server's queue).
	replyMargin = 2 * time.Second
	// replyFloor is the shortest time a reply is kept.
	replyFloor = time.Second
	// replyCap bounds the time a reply is kept when the client's timeouts
	// do not (a read or write timeout switched off, or a client type whose
	// options the store cannot read): a resend later than that runs the
	// call again.
	replyCap = 15 * time.Minute
	// maxDials is the most dial attempts per resend window reckons with;
	// a client that makes more keeps replies replyCap.
	maxDials = 1000
)

// retryLimits are the client options that bound its resends.
type retryLimits struct {
	retries     int // resends after the first attempt
	backoff     time.Duration
	pool        time.Duration
	dial        time.Duration
	dialRetries int
	dialPause   func(attempt int) time.Duration
	read, write time.Duration
}

// window returns the longest time from the server's run of an attempt to
// the last resend's write, or replyCap when a limit is switched off.
func (l retryLimits) window() time.Duration {
	if l.retries <= 0 {
		return 0
	}
	attempts := max(l.dialRetries, 1)
	if l.read <= 0 || l.write <= 0 || l.pool <= 0 || l.dial <= 0 || attempts > maxDials {
		return replyCap
	}
	dial := time.Duration(attempts) * l.dial
	for a := range attempts - 1 {
		dial += max(l.dialPause(a), 0)
	}
	per := l.read + max(l.backoff, 0) + l.pool + dial + l.write + l.read + l.write
	if per > replyCap/time.Duration(l.retries) {
		return replyCap
	}
	return min(time.Duration(l.retries)*per, replyCap)
}

// afterDeadline is how long after a context's deadline an attempt begun
// just before it can still write: a new connection's handshake, then the
// command.
func (l retryLimits) afterDeadline() time.Duration {
	if l.read <= 0 || l.write <= 0 {
		return replyCap
	}
	return 2*l.write + l.read
}

// constPause returns a dial pause function that waits d each time, as
// go-redis does when DialerRetryBackoff is nil.
func constPause(d time.Duration) func(int) time.Duration {
	if d <= 0 {
		d = 100 * time.Millisecond // go-redis's default
	}
	return func(int) time.Duration { return d }
}

// limitsOf reads the retry limits of a go-redis client. ok is false for a
// client type it does not know.
//
// A Client's options are complete: NewClient filled in go-redis's
// defaults. A Ring and a Cluster client keep their options as given (a
// Cluster client fills in some), and the clients of their nodes get the
// defaults of a Client (nodeLimits).
// A Ring retries MaxRetries times over node clients that do not; a Cluster
// client follows up to MaxRedirects redirections, each with the retries of
// a node's client.
func limitsOf(c goredis.UniversalClient) (l retryLimits, ok bool) {
	switch c := c.(type) {
	case *goredis.Client:
		l = limitsOfOptions(c.Options())
	case *goredis.Ring:
		o := c.Options()
		l = nodeLimits(-1, o.MinRetryBackoff, o.MaxRetryBackoff, o.PoolTimeout, o.DialTimeout,
			o.DialerRetries, o.DialerRetryTimeout, o.DialerRetryBackoff, o.ReadTimeout, o.WriteTimeout)
		l.retries = o.MaxRetries
	case *goredis.ClusterClient:
		o := c.Options()
		l = nodeLimits(o.MaxRetries, o.MinRetryBackoff, o.MaxRetryBackoff, o.PoolTimeout, o.DialTimeout,
			o.DialerRetries, o.DialerRetryTimeout, o.DialerRetryBackoff, o.ReadTimeout, o.WriteTimeout)
		l.retries = (max(o.MaxRedirects, 0)+1)*(max(l.retries, 0)+1) - 1
	default:
		return retryLimits{}, false
	}
	return l, true
}

// nodeLimits returns the retry limits of the client of a node made with
// these options and go-redis's defaults for the rest, read from go-redis
// itself: it fills them in when it makes a client, and a client made and
// closed at once has opened no connection.
func nodeLimits(retries int, minBackoff, maxBackoff, pool, dial time.Duration, dials int,
	dialGap time.Duration, dialPause func(int) time.Duration, read, write time.Duration) retryLimits {
	c := goredis.NewClient(&goredis.Options{
		Addr:       "127.0.0.1:0", // never dialled
		MaxRetries: retries, MinRetryBackoff: minBackoff, MaxRetryBackoff: maxBackoff,
		PoolTimeout: pool, DialTimeout: dial, DialerRetries: dials,
		DialerRetryTimeout: dialGap, DialerRetryBackoff: dialPause,
		ReadTimeout: read, WriteTimeout: write,
	})
	defer c.Close()
	return limitsOfOptions(c.Options())
}

// limitsOfOptions reads the retry limits of a client's complete options.
func limitsOfOptions(o *goredis.Options) retryLimits {
	l := retryLimits{
		retries: o.MaxRetries, backoff: max(o.MaxRetryBackoff, o.MinRetryBackoff), pool: o.PoolTimeout,
		dial: o.DialTimeout, dialRetries: o.DialerRetries, dialPause: o.DialerRetryBackoff,
		read: o.ReadTimeout, write: o.WriteTimeout,
	}
	if l.dialPause == nil {
		l.dialPause = constPause(o.DialerRetryTimeout)
	}
	return l
}

// keepFor returns how many whole seconds the server keeps the reply of a
// call made with ctx.
func (s *Store) keepFor(ctx context.Context) int64 {
	d := s.resendWindow
	if dl, ok := ctx.Deadline(); ok && s.afterDeadline < replyCap {
		d = min(d, time.Until(dl)+s.afterDeadline)
	}
	d = max(d+replyMargin, replyFloor)
	return int64(math.Ceil(d.Seconds()))
}
