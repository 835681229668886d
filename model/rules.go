package model

import (
	"fmt"
	"time"
)

// The argument rules. Each is written once, here: the operations of this
// package call them, and so does every store adapter, so that an argument
// one store refuses every store refuses, with ErrInvalidArgument, before
// anything changes.

// MaxQueueNameLength is the longest queue name, in bytes.
const MaxQueueNameLength = 128

// ValidateQueueName returns ErrInvalidArgument unless name has 1 to
// MaxQueueNameLength bytes, each a letter, digit or one of "-_.:". (Braces
// are excluded so a name can stand inside a Redis Cluster hash tag.)
func ValidateQueueName(name string) error {
	if name == "" || len(name) > MaxQueueNameLength {
		return fmt.Errorf("%w: queue name %q must have 1..%d bytes", ErrInvalidArgument, name, MaxQueueNameLength)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == ':'
		if !ok {
			return fmt.Errorf("%w: queue name %q: character %q not allowed", ErrInvalidArgument, name, r)
		}
	}
	return nil
}

// ValidateID returns ErrInvalidArgument unless id has 1..MaxIDLength bytes.
// Every operation that names a task checks it first, reads included.
func ValidateID(id string) error {
	if id == "" || len(id) > MaxIDLength {
		return invalid("task ID %q must have 1..%d bytes", id, MaxIDLength)
	}
	return nil
}

// ValidatePriority returns ErrInvalidArgument unless p is within
// MinPriority..MaxPriority.
func ValidatePriority(p int) error {
	if p < MinPriority || p > MaxPriority {
		return invalid("priority %d outside %d..%d", p, MinPriority, MaxPriority)
	}
	return nil
}

// ValidateMaxAttempts returns ErrInvalidArgument unless n >= 1.
func ValidateMaxAttempts(n int) error {
	if n < 1 {
		return invalid("max attempts %d < 1", n)
	}
	return nil
}

// ValidateTimeout returns ErrInvalidArgument unless the attempt timeout
// stored with a task is within 0..MaxDuration (0: none).
func ValidateTimeout(d time.Duration) error {
	if d < 0 || d > MaxDuration {
		return invalid("attempt timeout %v outside 0..%v", d, MaxDuration)
	}
	return nil
}

// ValidateEnqueue checks the arguments of one Enqueue (or one item of an
// EnqueueBatch): its ID, priority, attempts and attempt timeout.
func ValidateEnqueue(a EnqueueArgs) error {
	if err := ValidateID(a.ID); err != nil {
		return err
	}
	if err := ValidatePriority(a.Priority); err != nil {
		return err
	}
	if err := ValidateMaxAttempts(a.MaxAttempts); err != nil {
		return err
	}
	if err := ValidateTime("run-after time", a.RunAfter); err != nil {
		return err
	}
	if err := ValidateTimeout(a.Timeout); err != nil {
		return err
	}
	return ValidateUnique(a.UniqueKey, a.UniqueFor)
}

// ValidateUnique returns ErrInvalidArgument unless the unique key has at
// most MaxUniqueKeyLength bytes and its hold period is within
// 0..MaxDuration, and 0 when there is no key.
func ValidateUnique(key string, d time.Duration) error {
	if len(key) > MaxUniqueKeyLength {
		return invalid("unique key of %d bytes, more than %d", len(key), MaxUniqueKeyLength)
	}
	if d < 0 || d > MaxDuration {
		return invalid("unique period %v outside 0..%v", d, MaxDuration)
	}
	if d != 0 && key == "" {
		return invalid("unique period %v without a unique key", d)
	}
	return nil
}

// MinTime and MaxTime bound every instant a task keeps: (2^53 - 1)
// microseconds either side of the Unix epoch (about the years 1684 and
// 2255), the instants a double holds exactly in microseconds, so every
// store keeps, compares and orders them exactly. Leases, claim TTLs and
// delays are at most MaxDuration, so an instant a store computes from its
// clock (now + a lease or a delay) stays within them for any clock of
// this century and the next.
var (
	MinTime = time.UnixMicro(-(1<<53 - 1)).UTC()
	MaxTime = time.UnixMicro(1<<53 - 1).UTC()
)

// ValidateTime returns ErrInvalidArgument unless t is the zero time (not
// set) or within MinTime..MaxTime: a RunAfter given to Enqueue or an
// EnqueueBatch item. what names the argument.
func ValidateTime(what string, t time.Time) error {
	if t.IsZero() {
		return nil
	}
	if t.Before(MinTime) || t.After(MaxTime) {
		return invalid("%s %v outside %v..%v", what, t, MinTime, MaxTime)
	}
	return nil
}

// ValidateLease returns ErrInvalidArgument unless the lease of a Pop or an
// Extend is positive and at most MaxDuration.
func ValidateLease(lease time.Duration) error {
	if lease <= 0 || lease > MaxDuration {
		return invalid("lease %v outside (0, %v]", lease, MaxDuration)
	}
	return nil
}

// ValidateClaimTTL returns ErrInvalidArgument unless the claim TTL of a
// ClaimExpired is positive and at most MaxDuration.
func ValidateClaimTTL(ttl time.Duration) error {
	if ttl <= 0 || ttl > MaxDuration {
		return invalid("claim TTL %v outside (0, %v]", ttl, MaxDuration)
	}
	return nil
}

// ValidateDelay returns ErrInvalidArgument unless delay is within
// 0..MaxDuration: the retry delay of Retry, Requeue and RecoverExpired, which
// the store adds to its own clock reading.
func ValidateDelay(delay time.Duration) error {
	if delay < 0 || delay > MaxDuration {
		return invalid("retry delay %v outside 0..%v", delay, MaxDuration)
	}
	return nil
}

// ValidateLimit returns ErrInvalidArgument unless the limit of Promote,
// ClaimExpired, RecoverExpired or Prune is >= 0 (0: no limit).
func ValidateLimit(limit int) error {
	if limit < 0 {
		return invalid("limit %d < 0", limit)
	}
	return nil
}

// ValidatePopSize returns ErrInvalidArgument unless a Pop claims 1 to
// MaxBatch tasks.
func ValidatePopSize(n int) error {
	if n < 1 || n > MaxBatch {
		return invalid("batch %d outside 1..%d", n, MaxBatch)
	}
	return nil
}

// CheckBatchSize is the rule every store applies to a batch operation's
// number of items: 1 to MaxBatch, else ErrInvalidArgument.
func CheckBatchSize(n int) error {
	if n < 1 || n > MaxBatch {
		return invalid("batch of %d items outside 1..%d", n, MaxBatch)
	}
	return nil
}

// ValidateAckBatchItem returns ErrInvalidArgument unless the claim of item
// i of an AckBatch of queue is of that queue: such a claim refuses the
// whole batch.
func ValidateAckBatchItem(queue string, i int, c Claim) error {
	if c.Queue != queue {
		return invalid("ack batch of queue %q: item %d claims a task of queue %q", queue, i, c.Queue)
	}
	return nil
}

// ValidateAckPop checks the pop that follows the acks of an AckBatch: n is
// 0 (no pop) or a Pop's batch of 1 to MaxBatch, and with a pop the lease is
// one Pop accepts (ValidateLease). Else ErrInvalidArgument, which refuses
// the whole batch.
func ValidateAckPop(lease time.Duration, n int) error {
	if n == 0 {
		return nil
	}
	if n < 0 || n > MaxBatch {
		return invalid("ack batch: pop of %d outside 0..%d", n, MaxBatch)
	}
	return ValidateLease(lease)
}

// ValidateList checks the arguments of List: a listable state (one of the
// five, or Quarantined) and a page of 1 to MaxBatch tasks.
func ValidateList(s State, limit int) error {
	if !s.Listable() {
		return invalid("list: state %d", uint8(s))
	}
	if limit < 1 || limit > MaxBatch {
		return invalid("list: limit %d outside 1..%d", limit, MaxBatch)
	}
	return nil
}

// ValidateClaim checks a worker claim's arguments: a valid task ID and a
// token other than 0 (whether it still holds the task is the guard's
// business, not an argument's).
func ValidateClaim(c Claim) error {
	if err := ValidateID(c.TaskID); err != nil {
		return err
	}
	if c.Token == 0 {
		return invalid("claim token 0")
	}
	return nil
}

// ValidateReapClaim checks a broker claim's arguments: a valid task ID and
// a version other than 0.
func ValidateReapClaim(rc ReapClaim) error {
	if err := ValidateID(rc.TaskID); err != nil {
		return err
	}
	if rc.Version == 0 {
		return invalid("reap claim version 0")
	}
	return nil
}

// ValidatePruneStates returns ErrInvalidArgument unless states names at
// least one state and only terminal ones.
func ValidatePruneStates(states []State) error {
	if len(states) == 0 {
		return invalid("prune: no states")
	}
	for _, s := range states {
		if !s.Valid() || !legal(OpPrune, s) {
			return invalid("prune: %v is not a terminal state", s)
		}
	}
	return nil
}

// Round is the one rounding rule of times: an instant is kept to the
// microsecond, truncated (towards the past), in UTC; the zero time stays
// zero. The operations of this package round every instant they are given
// or compute (the clock reading, a RunAfter, a Prune bound, now + a lease or
// a delay), and every store does the same, so stores agree to the last
// fraction of a microsecond.
func Round(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}
