// Package core is the library a consumer imports: the Store contract that
// adapters implement, and the queue, worker, broker and inspector built on it.
// Every rule it enforces is the model's (package model).
//
// # Periodic tasks
//
// A Scheduler (or a Client given WithPeriodic) enqueues the occurrences of
// schedules: Cron expressions and Every intervals. An occurrence's task ID is
// model.OccurrenceID of the schedule's name and the occurrence time, so any
// number of Schedulers keeping one schedule enqueue each occurrence once
// (the others meet ErrConflict), with no leader; Periodic.CatchUp says what
// happens to occurrences missed while no Scheduler ran.
//
// # Attempt timeouts
//
// An attempt may be bounded two ways: a Worker's WithTimeout bounds every
// attempt of its queue, and Queue.Enqueue's WithAttemptTimeout stores a
// timeout with one task (0..MaxDuration; Get, List, `leasehold inspect` and
// the web inspector show it as Task.Timeout, and every transition keeps it,
// through retries and operator requeues). The task's own timeout wins over
// the Worker's, shorter or longer. The handler's context then has the
// deadline (measured from the attempt's start on the Worker's Clock); when
// it passes, the context is cancelled with a cause for which
// errors.Is(cause, ErrAttemptTimeout) holds, and the attempt is a failed
// one for the retry policy whatever the handler returns after it
// (WorkerStats.TimedOut counts them). Heartbeats go on until the handler
// returns, so a timeout may be longer than the lease.
//
// # Telemetry
//
// Queue, Worker and Broker record metrics and traces through the
// OpenTelemetry API (go.opentelemetry.io/otel/metric and /trace), given a
// MeterProvider (WithMeterProvider) and a TracerProvider
// (WithTracerProvider). Without them they record nothing: the default
// providers are no-ops, not the global ones, so that nothing is measured
// behind an application's back. To use the globals an application set with
// otel.SetMeterProvider and otel.SetTracerProvider, pass them:
//
//	core.WithMeterProvider(otel.GetMeterProvider())
//	core.WithTracerProvider(otel.GetTracerProvider())
//
// The meter and the tracer are named InstrumentationName. Every metric
// carries the queue (AttrQueue). The counters mirror WorkerStats and
// BrokerStats, summed over the components that share a provider:
//
//	metric                       unit        recorded by  counts
//	leasehold.tasks.enqueued     {task}      Queue        tasks added by Enqueue
//	leasehold.tasks.claimed      {task}      Worker       tasks claimed by Pop (WorkerStats.Popped)
//	leasehold.tasks.acked        {task}      Worker       attempts recorded with Ack
//	leasehold.tasks.failed       {task}      Worker       attempts recorded with Fail
//	leasehold.tasks.retried      {task}      Worker       attempts recorded with Retry by the retry policy
//	leasehold.tasks.released     {task}      Worker       unfinished tasks given back at shutdown
//	leasehold.leases.lost        {lease}     Worker       claims found superseded (WorkerStats.LeasesLost)
//	leasehold.decisions.stale    {decision}  both         decisions refused as stale and dropped
//	leasehold.tasks.promoted     {task}      Broker       Scheduled tasks made Ready
//	leasehold.expired.claimed    {task}      Broker       expired tasks claimed by the reaper
//	leasehold.expired.requeued   {task}      Broker       claimed tasks requeued by the retry policy
//	leasehold.expired.failed     {task}      Broker       claimed tasks failed (Finalize)
//	leasehold.expired.recovered  {task}      Broker       tasks decided by RecoverExpired, by the state they left in
//	leasehold.store.errors       {error}     both         store calls that failed for another reason
//
// leasehold.decisions.stale carries the component that made the decision
// (AttrComponent: worker or broker) and the decision (AttrDecision: ack,
// fail, retry, requeue, finalize); leasehold.store.errors the component. A
// lost lease and a stale decision are counted there and only there, never as
// a failed task: a handler's failures are leasehold.tasks.failed and
// leasehold.tasks.retried.
//
// Two histograms, in seconds:
//
//	leasehold.handler.duration  the time a handler ran, on the Worker's clock, by
//	                            AttrHandlerResult (success, error, panic)
//	leasehold.queue.latency     from the time a task could run to its claim, on the
//	                            store's clock: the later of its EnqueuedAt, its
//	                            RunAfter and its last error's time (when a worker or
//	                            a broker returned it to the queue) to its ClaimedAt
//
// Spans. A Worker makes one span per attempt (kind consumer, named "process "
// and the queue), from its claim to the decision recorded for it, carrying
// the queue, the task ID (AttrTaskID), the claim token (AttrClaimToken), the
// attempt (AttrAttempt) and the outcome (AttrOutcome: acked, retried,
// failed, lease_lost, given_back or store_error). The handler's context
// carries the span, so the handler's own spans are its children; a handler
// error is recorded on it and sets its status. Queue.Enqueue makes a span
// (kind producer, "enqueue " and the queue). A Broker makes a span per
// reaper decision (named "reap " and the queue) with the task ID, the reap
// claim's version (AttrVersion), the attempt and the outcome (requeued,
// finalized, stale_dropped or store_error); a pass that finds nothing to
// decide makes none, so an idle broker adds no spans.
package core
