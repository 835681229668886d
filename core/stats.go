package core

import "sync/atomic"

// WorkerStats is a snapshot of a Worker's counters, each counted since the
// worker was made.
type WorkerStats struct {
	Popped   int64 // tasks claimed by Pop
	Acked    int64 // attempts recorded with Ack
	Failed   int64 // attempts recorded with Fail (Permanent error, or no retry left)
	Retried  int64 // attempts recorded with Retry by the retry policy
	Released int64 // unfinished tasks given back at shutdown
	Panics   int64 // handler panics (each also counted as a failed or retried attempt)
	Extended int64 // heartbeats that renewed a lease
	TimedOut int64 // attempts that ran past their timeout (each also a failed or retried attempt)
	// LeasesLost counts the claims the worker found superseded, by a
	// heartbeat or a decision answered ErrStaleClaim or ErrInvalidTransition.
	LeasesLost int64
	// StaleDecisions counts the decisions (Ack, Fail, Retry) answered that
	// way; each is also a lost lease.
	StaleDecisions int64
	// StoreErrors counts the store calls that failed for another reason
	// (transport errors, a closed store, a busy store).
	StoreErrors int64
	// BusyResends counts the decisions (Ack, AckBatch, Fail, Retry) sent
	// again because the store answered ErrBusy: it did not run them. Each
	// such answer is also a store error.
	BusyResends int64
}

// BrokerStats is a snapshot of a Broker's counters, each counted since the
// broker was made.
type BrokerStats struct {
	Passes    int64 // completed passes over the broker's queues
	Promoted  int64 // Scheduled tasks made Ready
	Claimed   int64 // expired tasks claimed with ClaimExpired
	Requeued  int64 // claimed tasks the retry policy sent back to the queue
	Finalized int64 // claimed tasks the retry policy failed
	Recovered int64 // tasks decided by one-step RecoverExpired
	// StaleDropped counts the decisions (Requeue, Finalize) dropped because
	// the claim no longer held the task: a worker acked or extended it, an
	// operator acted, or another broker took the claim over.
	StaleDropped int64
	// StoreErrors counts the store calls that failed for another reason.
	StoreErrors int64
}

type counter = atomic.Int64

type workerCounters struct {
	popped, acked, failed, retried, released, panics, extended counter
	leasesLost, staleDecisions, storeErrors, timeouts          counter
	busyResends                                                counter
}

func (c *workerCounters) snapshot() WorkerStats {
	return WorkerStats{
		Popped: c.popped.Load(), Acked: c.acked.Load(), Failed: c.failed.Load(),
		Retried: c.retried.Load(), Released: c.released.Load(), Panics: c.panics.Load(),
		Extended: c.extended.Load(), LeasesLost: c.leasesLost.Load(),
		StaleDecisions: c.staleDecisions.Load(), StoreErrors: c.storeErrors.Load(),
		TimedOut: c.timeouts.Load(), BusyResends: c.busyResends.Load(),
	}
}

type brokerCounters struct {
	passes, promoted, claimed, requeued, finalized, recovered, staleDropped, storeErrors counter
}

func (c *brokerCounters) snapshot() BrokerStats {
	return BrokerStats{
		Passes: c.passes.Load(), Promoted: c.promoted.Load(), Claimed: c.claimed.Load(),
		Requeued: c.requeued.Load(), Finalized: c.finalized.Load(), Recovered: c.recovered.Load(),
		StaleDropped: c.staleDropped.Load(), StoreErrors: c.storeErrors.Load(),
	}
}
