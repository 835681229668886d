package redis

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/core"
)

// DefaultPrefix is the key prefix of a Store made without WithPrefix.
const DefaultPrefix = "leasehold:"

// Store is the Redis core.Store. It is safe for concurrent use; every
// operation is one script, so one round trip and atomic on the server.
type Store struct {
	rdb      goredis.UniversalClient
	owned    bool       // Close closes rdb (Open made it)
	clock    core.Clock // nil: the server's clock (TIME inside the script)
	capacity int
	prefix   string
	closed   atomic.Bool
	reqBase  string        // random, unique to this Store
	reqSeq   atomic.Uint64 // the last request number
	// resendWindow and afterDeadline bound the client's resends (see
	// resend.go): a call's reply is kept for as long.
	resendWindow, afterDeadline time.Duration
	// noFunctions: the server cannot run the library (see run); the store
	// sends EVALSHA from then on.
	noFunctions atomic.Bool
	acks        replicaAcks   // WithReplicaAcks
	enqueues    sync.Map      // queue name -> *enqueueGroup (coalesce.go)
	keys        sync.Map      // queue name -> []string, its keys (baseKeys)
	nkeys       atomic.Int64  // queues in keys
	batched     atomic.Uint64 // Enqueue calls sent in a batch of several
	workerBatch int           // WithDefaultBatchSize
}

var _ core.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store judge time by clock instead of the Redis
// server's clock: each script receives clock.Now() as an argument. Use it in
// tests (with a core.FakeClock); in production the server's clock is the
// better judge, since every client then agrees on it. A nil clock keeps the
// server's.
func WithClock(clock core.Clock) Option {
	return func(s *Store) { s.clock = clock }
}

// WithCapacity bounds the number of pending (Scheduled, Ready and Running)
// tasks of each queue: Enqueue into a full queue returns core.ErrQueueFull.
// 0, the default, means unlimited; a negative capacity counts as 0. Every
// store sharing a queue should use the same capacity.
func WithCapacity(n int) Option {
	return func(s *Store) { s.capacity = max(n, 0) }
}

// DefaultBatchSize is the batch size of a core.Worker on a Store made
// without WithDefaultBatchSize: how many tasks one of its calls claims, and
// at most how many it acknowledges. The server runs a call's script to its
// end before any other client's command; a Worker of 64 slots whose calls
// carried up to its default of 512 tasks made the scripts run up to 6.6 ms
// and another client's PING wait 10 ms at the median; with 64 the longest
// script took 1.3–2.4 ms and the PING 1.5 ms, for about a fifth less
// throughput at 64 slots (BenchmarkWorker 19.9 → 23.6 µs a task) and the
// same at 1 and 8 (the peer benchmark's "PING" and "longest call" columns,
// bench/peers).
const DefaultBatchSize = 64

// WithDefaultBatchSize sets the batch size (1..core.MaxBatch) of a
// core.Worker on the store that does not set one with core.WithBatchSize,
// and the most a core.Broker's calls carry unless it sets one (its default
// is 100; core.BatchSizer). Larger batches cost the server less per task and make
// every other client of the server wait longer while one runs. A value
// outside 1..core.MaxBatch is clamped.
func WithDefaultBatchSize(n int) Option {
	return func(s *Store) { s.workerBatch = min(max(n, 1), core.MaxBatch) }
}

// WithPrefix sets the prefix of every key the store writes (DefaultPrefix
// when not given), so several applications can share one Redis. The prefix
// must not contain '{' or '}': the queue's hash tag follows it.
func WithPrefix(prefix string) Option {
	return func(s *Store) { s.prefix = prefix }
}

// New returns a Store on client, which may be a single-node, Sentinel
// (failover) or Cluster client. Close does not close client.
func New(client goredis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", core.ErrInvalidArgument)
	}
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	s := &Store{rdb: client, prefix: DefaultPrefix, workerBatch: DefaultBatchSize, reqBase: base64.RawURLEncoding.EncodeToString(b[:]) + "."}
	for _, o := range opts {
		o(s)
	}
	if strings.ContainsAny(s.prefix, "{}") {
		return nil, fmt.Errorf("%w: key prefix %q must not contain '{' or '}'", core.ErrInvalidArgument, s.prefix)
	}
	s.resendWindow, s.afterDeadline = replyCap, replyCap
	if l, ok := limitsOf(client); ok {
		s.resendWindow, s.afterDeadline = l.window(), l.afterDeadline()
	}
	return s, nil
}

// Open returns a Store on a new client for url: redis://[user:password@]host:port/db,
// or rediss://... for TLS (the options of go-redis's ParseURL apply). Close
// closes that client.
func Open(url string, opts ...Option) (*Store, error) {
	o, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: redis URL: %w", core.ErrInvalidArgument, err)
	}
	c := goredis.NewClient(o)
	s, err := New(c, opts...)
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	s.owned = true
	return s, nil
}

// requestID returns a new request ID for a call made with ctx: the
// seconds the server keeps the call's reply (keepFor), then the store's
// random base and a counter, unique across stores and processes.
func (s *Store) requestID(ctx context.Context) string {
	b := make([]byte, 0, 8+len(s.reqBase)+8)
	b = strconv.AppendInt(b, s.keepFor(ctx), 10)
	b = append(b, '~')
	b = append(b, s.reqBase...)
	return string(strconv.AppendUint(b, s.reqSeq.Add(1), 36))
}

// Client returns the client the store uses.
func (s *Store) Client() goredis.UniversalClient { return s.rdb }

// Prefix returns the store's key prefix.
func (s *Store) Prefix() string { return s.prefix }

// AckFlights implements core.AckFlighter: a Worker keeps two AckBatch
// calls out at once, so that the server runs one call's script while the
// next travels to it and the Worker gathers the acks after that. Each call
// then carries half the batch, which costs the server more per task (at 8
// slots, batches of 4 instead of 8), and the overlap gains more than that:
// the peer benchmark's processing of 20 000 tasks, one call out against
// two, alternated three times, rose from 1.37 / 2.00 / 1.67 to 2.17 / 2.22
// / 2.35 times asynq's rate at 8 workers and from 2.44 / 2.48 / 2.28 to
// 3.35 / 4.22 / 3.38 at 64. A Worker of one slot has one call to send.
func (s *Store) AckFlights() int { return 2 }

// DefaultBatchSize implements core.BatchSizer: a core.Worker or a
// core.Broker that does not set its batch size uses at most the store's
// (DefaultBatchSize, or WithDefaultBatchSize), so that no call of it holds
// up the server's other clients for long.
func (s *Store) DefaultBatchSize() int { return s.workerBatch }

// Close marks the store closed (later operations return core.ErrClosed) and,
// for a Store from Open, closes its client. Closing twice is not an error.
func (s *Store) Close() error {
	if s.closed.Swap(true) || !s.owned {
		return nil
	}
	return s.rdb.Close()
}

// The suffixes of a queue's keys, in the order of KEYS[1..11] in lua/lib.lua.
var keySuffixes = [...]string{
	"seq", "ready", "scheduled", "running", "finished",
	"ids:scheduled", "ids:ready", "ids:running", "ids:succeeded", "ids:failed",
	"task:",
}

// queueKeys returns KEYS for a script on queue: the queue's keys, the task
// key prefix and, when id is given, the task's hash. Every key starts with
// prefix + "{" + queue + "}", so they share one cluster slot. The queue's
// keys are built once per queue and shared: the slice returned has no room
// beyond them, so a caller's append (the task's hash, a memo key) copies.
func (s *Store) queueKeys(queue string, id ...string) []string {
	keys := s.baseKeys(queue)
	if len(id) > 0 {
		keys = append(keys, s.prefix+"{"+queue+"}:task:"+id[0])
	}
	return keys
}

// maxCachedQueues bounds the queues whose keys a Store keeps built.
const maxCachedQueues = 1024

// baseKeys returns the keys of queue named by keySuffixes, built once.
func (s *Store) baseKeys(queue string) []string {
	if k, ok := s.keys.Load(queue); ok {
		keys := k.([]string)
		return keys[:len(keys):len(keys)]
	}
	base := s.prefix + "{" + queue + "}:"
	keys := make([]string, len(keySuffixes))
	for i, suffix := range keySuffixes {
		keys[i] = base + suffix
	}
	if s.nkeys.Load() < maxCachedQueues {
		if _, loaded := s.keys.LoadOrStore(queue, keys); !loaded {
			s.nkeys.Add(1)
		}
	}
	return keys
}

// pausedKeys returns KEYS for a script that reads or sets the queue's
// paused flag: the queue's keys, then the flag's key (in the queue's slot).
func (s *Store) pausedKeys(queue string) []string {
	return append(s.queueKeys(queue), s.prefix+"{"+queue+"}:paused")
}

// TaskKey returns the key of a task's hash (for operators and tests).
func (s *Store) TaskKey(queue, id string) string {
	return s.prefix + "{" + queue + "}:task:" + id
}

// QueueKeys returns the keys that hold a queue's sequence and indexes, by
// name: seq, ready, scheduled, running, finished, ids:scheduled, ids:ready,
// ids:running, ids:succeeded, ids:failed, and ids:quarantined, the IDs of
// the records set aside (for operators and tests).
func (s *Store) QueueKeys(queue string) map[string]string {
	keys := s.queueKeys(queue)
	out := make(map[string]string, len(keySuffixes))
	for i, suffix := range keySuffixes[:len(keySuffixes)-1] {
		out[suffix] = keys[i]
	}
	out["ids:quarantined"] = s.prefix + "{" + queue + "}:ids:quarantined"
	return out
}

// Preload loads the store's Redis Functions library (FUNCTION LOAD
// REPLACE; on a Cluster client, into every master), so that even the first
// call of each operation takes one round trip; when the server cannot run
// Functions (before Redis 7.0, or denied by the ACL) it loads every script
// into the script cache instead (SCRIPT LOAD). Without it, the first call
// on a server that lacks the library takes three round trips (FCALL,
// FUNCTION LOAD, FCALL).
func (s *Store) Preload(ctx context.Context) error {
	if !s.noFunctions.Load() {
		err := s.loadLibrary(ctx)
		if err == nil {
			return nil
		}
		if !functionsUnavailable(err) {
			return fmt.Errorf("leasehold/redis: load library %s: %w", libName, permission(err))
		}
		s.noFunctions.Store(true)
	}
	for _, sc := range allScripts {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("leasehold/redis: load %s: %w", sc.name, permission(err))
		}
	}
	return nil
}
