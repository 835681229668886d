package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// ErrReplicaAcks is returned (wrapped) when WithReplicaAcks is set and
// fewer replicas than asked acknowledged a call's writes within the
// timeout. It is not a refusal: the call took effect on the primary and
// its answer is lost, so the caller must treat it as a transport error
// (the call may or may not survive a failover). errors.Is holds with none
// of core's refusal errors.
var ErrReplicaAcks = errors.New("leasehold/redis: write not acknowledged by enough replicas")

// replicaAcks is the WithReplicaAcks setting; n == 0 turns it off.
type replicaAcks struct {
	n       int
	timeout time.Duration
}

// WithReplicaAcks makes every call that changes something wait, after its
// script and on the same connection, until n replicas have acknowledged its
// writes (Redis WAIT n timeout), so that a failover to one of them keeps
// them: a claim token handed to a worker, a decision reported as done and
// an enqueued task reported as added are then on n replicas. When fewer
// than n acknowledge within timeout the call returns an error wrapping
// ErrReplicaAcks, with no result: it took effect on the primary and may be
// lost on a failover, like a call whose connection dropped. A refused call
// (which changed nothing) waits for nothing. n <= 0 turns the option off;
// a timeout <= 0 counts as one second. Keep timeout below the client's read
// timeout (go-redis: 3 s by default), which bounds the whole round trip.
//
// It holds only while the replica a failover promotes is one that
// acknowledged (with one replica, n = 1; with several, promote the most
// up to date one, as Sentinel and Cluster failover do).
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return func(s *Store) {
		if timeout <= 0 {
			timeout = time.Second
		}
		s.acks = replicaAcks{n: max(n, 0), timeout: timeout}
	}
}

// runAcked runs sc like run and, when the store waits for replicas and sc
// writes, sends WAIT after it in one pipeline (one connection, which WAIT
// requires: it waits for that connection's writes). An answer other than
// OK, a refusal, is returned as it is; an OK whose WAIT fell short becomes
// an ErrReplicaAcks error.
func (s *Store) runAcked(ctx context.Context, sc *script, keys []string, args []any) *goredis.Cmd {
	if s.acks.n == 0 || !sc.writes {
		return s.run(ctx, sc, keys, args)
	}
	var target goredis.Cmdable = s.rdb
	if cc, ok := s.rdb.(*goredis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			cmd := goredis.NewCmd(ctx)
			cmd.SetErr(err)
			return cmd
		}
		target = node
	}
	send := func(call func(p goredis.Pipeliner) *goredis.Cmd) (*goredis.Cmd, *goredis.Cmd) {
		var cmd *goredis.Cmd
		var wait *goredis.Cmd
		_, _ = target.Pipelined(ctx, func(p goredis.Pipeliner) error {
			cmd = call(p)
			wait = p.Do(ctx, "WAIT", s.acks.n, s.acks.timeout.Milliseconds())
			return nil
		})
		return cmd, wait
	}
	fcall := func(p goredis.Pipeliner) *goredis.Cmd { return p.FCall(ctx, sc.fn, keys, args...) }
	evalsha := func(p goredis.Pipeliner) *goredis.Cmd { return sc.EvalSha(ctx, p, keys, args...) }
	eval := func(p goredis.Pipeliner) *goredis.Cmd { return sc.Eval(ctx, p, keys, args...) }

	var cmd, wait *goredis.Cmd
	if !s.noFunctions.Load() {
		cmd, wait = send(fcall)
		err := cmd.Err()
		if err != nil && isRedisError(err) && strings.Contains(err.Error(), "Function not found") {
			lerr := s.loadLibrary(ctx)
			switch {
			case lerr == nil:
				cmd, wait = send(fcall)
			case functionsUnavailable(lerr):
				s.noFunctions.Store(true)
			default:
				if isRedisError(lerr) && permissionMessage(lerr.Error()) {
					cmd.SetErr(lerr)
				}
				return cmd
			}
		} else if err != nil && functionsUnavailable(err) {
			s.noFunctions.Store(true)
		}
	}
	if s.noFunctions.Load() {
		cmd, wait = send(evalsha)
		if err := cmd.Err(); err != nil && isRedisError(err) && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			cmd, wait = send(eval)
		}
	}
	if cmd.Err() != nil {
		return cmd
	}
	if raw, _ := cmd.Slice(); len(raw) > 0 {
		if code, ok := raw[0].(int64); ok && code != codeOK {
			return cmd // refused: nothing was written
		}
	}
	switch n, err := wait.Int64(); {
	case err != nil:
		cmd.SetErr(fmt.Errorf("%w: WAIT: %w", ErrReplicaAcks, err))
	case n < int64(s.acks.n):
		cmd.SetErr(fmt.Errorf("%w: %d of %d within %v (the call took effect on the primary)", ErrReplicaAcks, n, s.acks.n, s.acks.timeout))
	}
	return cmd
}

// WaitsForReplicas reports whether the store waits for replica
// acknowledgements (WithReplicaAcks with n > 0).
func (s *Store) WaitsForReplicas() bool { return s.acks.n > 0 }
