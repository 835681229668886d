// Package linearizability checks that a leasehold store, used by many
// clients at once, behaves as if each operation took effect at one instant
// between its call and its return, in an order the model (package model)
// accepts. It is how stale acknowledgements, takeovers and inspector races
// are shown not to corrupt state on histories nobody wrote by hand.
//
// # The pieces
//
//   - NewModel is a porcupine model over package model: one model.Queue per
//     partition, a partition per queue name. Step applies model.Apply with
//     the clock reading the store reported (every mutating result carries
//     Now) and accepts the step only if the model gives exactly the store's
//     answer: tasks field by field (Task.Equal), errors by kind and, for an
//     invalid transition, by op and state. It is pure, so porcupine may call
//     it from any goroutine.
//   - A Recorder wraps any core.Store (Recorder.Client) and records every
//     call and return on one monotonic timeline, and wraps the store's clock
//     (Recorder.Clock) to record every reading.
//   - Plans is a rapid generator of Plans: queues, clients and their roles
//     (producer, worker, broker, recoverer, inspector; sometimes a twin of
//     another client), their steps round by round, priorities, leases, claim
//     TTLs, the time that passes between rounds, pauses, injected transport
//     faults and stalled clock readings. The whole plan is drawn before any
//     goroutine starts.
//   - Execute runs a plan: one goroutine per client, each with its own store
//     from the adapter's Factory (its own connection where the adapter has
//     them; backends.RedisShared gives every client one Store, where
//     concurrent Enqueue calls meet, and PlanOptions.ProducerTwins adds
//     producers racing the first), rounds as barriers. Check checks the
//     history with porcupine's CheckOperationsVerbose and a timeout;
//     Unknown (out of time) is a failure like Illegal, never a pass. A
//     history with calls whose answer was lost is checked first without
//     them, then with each of them alone (a linearization in which the
//     others did not happen is one of the whole history), and only when
//     none of those is linearizable, whole.
//   - Run draws, executes and checks histories until a budget runs out and
//     saves each violation: the plan (plan.json, plan.txt), the history
//     (history.json, which `leasehold check --replay` reads) and porcupine's
//     visualization (history.html). `leasehold check` (cmd/leasehold) and the
//     test TestRandomizedHistories are built on it; package backends makes
//     the factories of the adapters.
//
// # The application's transactions
//
// With PlanOptions.Tx (the SQLite and PostgreSQL backends, whose stores are
// TxStores), producers and workers now and then open a transaction of the
// application's own on the store's database and run the adapter's
// transactional ops in it: a worker's AckTx of a claim it holds
// (PostgreSQL), then EnqueueTx or EnqueueBatchTx (SQLite), then a row of
// the application's own table; then a commit or a rollback. The history
// records the transaction as one operation (Input.Tx) from its first op to
// the end of its commit or rollback. A committed one is its ops taking
// effect one after another at one instant in that span, each answer judged
// as the model gives it; a rolled-back one takes no effect, though its
// answers must still be the model's from the queue it saw. A task a
// rolled-back transaction leaves, or a version it used up, then shows as
// an answer of a later op that the model cannot give. The application's
// row must be there once the transaction ended if and only if it
// committed. An op of the transaction that fails in transport makes the
// client roll back; a commit whose answer is lost is indeterminate.
//
// # Time
//
// In FakeTime a core.FakeClock starts at FakeEpoch and moves only between
// rounds and in clients' pauses, by whole milliseconds, and leases and claim
// TTLs are whole milliseconds: leases lapse exactly on a deadline as often
// as not, which is where off-by-one expiry bugs live, and every time in the
// history is one the plan chose. In RealTime the stores read the system
// clock, leases last a few milliseconds and time really passes: what a fake
// clock cannot show (an op that reads the time, then waits) shows there.
// MixedTime (the default) makes one plan in four real.
//
// The model never requires the clock readings of successive operations to
// increase: a store whose clients read the clock before their op reaches
// the server (Redis with an injected clock) may apply them out of reading
// order, and that is not a fault of the store. Every other use of the time
// is checked: expiry, deadlines, due times, timestamps.
//
// # Indeterminate operations
//
// An error that is none of the store contract's kinds is a transport error:
// the op may or may not have taken effect. It is recorded as returning at
// math.MaxInt64, and the client goes on under a new porcupine client ID.
// Its outcome is open, and so is the clock reading it would have used: the
// model (porcupine's power-set construction of a nondeterministic model)
// carries the state where it never happened and one state for each clock
// reading recorded after its call, until later answers rule them out. With
// PlanOptions.Faults, the runner loses about one request or reply in sixty,
// at most two in a history (in RealTime, where every op gives a distinct
// reading, one in a hundred twenty and at most one), to exercise this on
// every adapter.
//
// # Busy databases
//
// core.ErrBusy is not indeterminate: it answers that the call did not run
// (a SQLite store could not take the write lock within its busy timeout),
// and the model checks it as an op that changed nothing. With
// PlanOptions.Faults, a step is as likely to meet a busy database (Busy) as
// to lose its request: another connection holds the SQLite database's
// write lock for BusyHold, twice the harness stores' BusyTimeout, so the
// call is answered core.ErrBusy. In the runtime mode, the busy database
// faults (CallBusy) that last longest (5 to 8ms in the plan), and in one
// plan in three a busy fault on one of a worker's first calls, hold the
// lock past the timeout too (CallFault.PastTimeout). A store that answered ErrBusy
// for a call that had taken effect fails the check as soon as an answer
// shows the effect. Stores that cannot be made busy run the call as it is
// in store-level plans. In runtime plans they run it after a stall, but a
// fault past the timeout is answered core.ErrBusy above the store without
// running it, as a busy store would answer: the workers' handling of that
// answer is checked on every adapter (the property busy-resend: a
// decision answered busy is sent again).
//
// # Making races happen
//
// Rounds start all clients at once, so ops of one round overlap; a client
// that has nothing to do in a round is a stalled worker or broker, and the
// gap after a round is time for leases to lapse. A decision with no claim to
// decide claims instead (a worker pops, a broker runs ClaimExpired), so
// decisions mostly use real claims, newest first, sometimes an old or a
// forged one. Twins repeat another client's steps at the same moments, to
// race identical ops (two recoveries, two pops). In half the plans some
// readings of the store's clock stall for ClockStall: a store reads its clock
// inside its critical section, the other clients queue behind it, and a
// sync.Mutex that has kept a goroutine waiting over a millisecond hands
// itself over in arrival order, so an op that should be atomic but is a read
// then a separate write gets another client's op in between. Without the
// stalls, such a recovery in the memory adapter passed 5000 histories on each
// of five seeds; with them it was caught on all five within 1300.
//
// Some races need several clients to act on one claim at once, which
// independent draws seldom line up, so one plan in ContestOdds stages a
// contest on a queue of its own (ContestQueue, with clients of its own
// beyond PlanOptions.MaxClients): a producer enqueues two to four tasks,
// two to four workers pop them at once with leases of 1ms, a broker claims
// the lapsed ones, and then decides them one after another (mostly a
// Requeue that makes the task Ready at once) while every worker decides the
// claim it still holds and pops twice more, sometimes with an operator
// requeueing or cancelling one of the tasks. A stale worker's decision then
// races the broker's and the new claim of the same task, and poppers race
// on one queue: a decision that checks the token in one statement and
// writes by ID in another, or a Pop that reads the Ready tasks and claims
// them in separate statements, is caught on PostgreSQL in every run, at a
// median of a few seconds (the fuzz/mutants README has the figures). In one
// contest in three the workers pop two tasks each and decide with an
// AckBatch of both claims (AckPop with More): a stale worker's batch of
// claims on distinct tasks, which a store that guards the claims of a lone
// Ack but not those of a batch decided in one statement acknowledges. In
// one in three the first task holds a unique key while pending, and after
// the decisions the producer enqueues another task with that key, which a
// store that keeps the key of a failed task refuses.
//
// # The contract's edges
//
// Small plans miss three edges of the store contract, so the plans reach
// them on purpose. One plan in six enqueues 80, 270 or 300 tasks in one
// step (BulkSizes: more than a node of the memory adapter's B-trees, 63,
// and than the page of 256 the Redis adapter's Prune reads) and, in the
// same round, takes them to the state a later op walks: Promote, Pop of
// all of them in one batch, ClaimExpired, RecoverExpired, Prune or List
// over several pages. Three such fills in four are one EnqueueBatch of
// every task where the store is a core.BatchStore (Step.Batched), the
// others one Enqueue per task: hundreds of calls in a row are most of a
// history's time on a store over the network. Half the batches also name
// the plan's task IDs, which may be taken, and their own first ID again,
// in the middle and at the end (Step.Taken), so that a batch's refused
// items (ErrConflict) sit among the ones it adds. One plan in four gives the
// stores clock readings with a fraction of a microsecond (Plan.SubMicro);
// the recorder keeps the whole-microsecond reading, and the model accepts
// an answer only if every time in it is whole microseconds, as core.Store
// keeps them. In three
// plans in four the clients scribble (Plan.Scribble): once a client has
// used an answer it writes over the payloads, results, error histories and
// the Tasks, IDs and Claims slices the store returned, and over the byte
// slices it passed in, so a store that shares its own slices with a caller
// answers later calls with the scribbles.
//
// # Damaged records
//
// One plan in DamageOdds damages one stored record mid-history: a
// DamageTask step calls the backend's Damage hook (backends has one per
// adapter), which makes a task's record unreadable where it stands, in one
// atomic step of the store. The step is recorded as an operation whose
// Input has Damage set, and the model applies it as the event
// model.Queue.Damage: from that point on the checker holds the store to
// what the model says follows (the first scan that reaches the record sets
// it aside as Quarantined and goes on with the sound tasks, decisions on it
// are ErrCorrupt and change nothing, Get shows it quarantined, List passes
// over it, Remove with no version deletes it). See damage.go.
//
// # Shrinking
//
// The plan of history i of a run is Plans(...).Example(Seed+i), the plan
// rapid draws first with -rapid.seed=Seed+i, so a failing seed can be handed
// to rapid to shrink (TestRandomizedHistories does; see shrink in
// harness_test.go), each candidate run up to ten times to get its
// interleaving back. rapid deletes steps, clients and rounds and moves each
// choice to its simplest value. On a store that acks with any token, a
// failing plan of 35 steps shrinks to 3 (enqueue; pop, then a forged ack)
// in most runs, to about 7 in others; plans whose failure needs a precise
// interleaving inside a round shrink less, and rapid then reports the
// failure as flaky. Plan.Compact drops the rounds the shrinking left empty.
//
// # The runtime mode
//
// The plans above drive Store ops directly, so a bug one layer up, in
// core.Worker or core.Broker, passes them all. RunRuntime (and
// `leasehold check --runtime`) draws RuntimePlans instead: one to three
// core.Workers (concurrency, batch size, lease, heartbeat, retry policy),
// one or two core.Brokers (Run, or RunOnce passes at the plan's ticks;
// batch size, claim TTL, a policy and a skew of their own clock), a
// producer enqueueing through core.Queue and two operators through
// core.Inspector, all built with the public constructors. Each component
// gets a store of its own from the Factory, recorded under its name
// ("worker 1", "broker 0"); since a Worker calls its store from many
// goroutines, each call takes a recorder Client of the component that no
// other call is using. Generated handlers succeed, fail, fail with a
// result, fail Permanently, panic, ignore their context or outlive their
// lease; faults break a component's n-th store call (a lost request or
// reply, a stalled call or reply, a busy database), some workers'
// heartbeats and some brokers' decisions reach the store late (the
// stalled worker, the stalled broker), some workers see a store without
// batch calls, and clock readings stall as in the store-level plans. Backends whose stores implement
// FaultInjector make the faults real: backends.RedisProxy cuts and holds
// connections through internal/faultproxy under the client redis.Open
// gives (go-redis retries on), and SQLite stores hold the write lock from
// another connection.
//
// In FakeTime a controller runs the ticks: it advances the fake clock the
// components' timers are on, and before each advance waits for their
// store calls to settle (no call in flight or begun for 300µs, at most
// 3ms, so a stalled call sees time pass). Then it drains: time passes
// until no task is Scheduled, Ready or Running (3s at most), stops every
// component, and lists the queue through a recorded inspector. In RealTime
// the same happens on the system clock, at four times the scale (stalled
// heartbeats and decisions at eight), so leases lapse there too.
//
// Porcupine checks the history as in the store-level mode, and
// CheckRuntime checks RuntimeProperties on it, each a function of
// properties.go:
//
//   - no-bypass (noBypass): a worker or broker never issues an operator op,
//     and decides only through a claim its own Pop or ClaimExpired returned;
//   - handler-outcome (handlerOutcome): a nil error is an Ack with the
//     handler's result, an error or a panic a Retry or Fail as the policy
//     says, a Permanent error a Fail, and every outcome is recorded unless
//     the claim was superseded first;
//   - heartbeat-lease (heartbeatLease): every Extend carries the worker's
//     lease, and a claim whose heartbeats reach the store in time is never
//     refused;
//   - pass-decides-expired (passDecidesExpired): a broker pass claims until
//     a ClaimExpired returns less than its limit, and decides every claim;
//   - store-clock-delays (storeClockDelays): a broker requeues as its
//     policy says, after the delay measured from the Now of its
//     ClaimExpired; a worker's retry delay runs from a reading no earlier
//     than the store's last answer before its handler returned;
//   - busy-resend (busyResend): a worker sends a decision the store
//     answered core.ErrBusy (which it did not run) again through the same
//     claim, unless a core.ShutdownError (a Client's Shutdown, a worker's
//     Run) named the claim held;
//   - quiescence (quiescence): at the end every task is terminal, and each
//     Succeeded task had exactly one accepted Ack, with its claim's token.
//
// A violation is saved like a store-level one, with runtime.json (the
// invocations and clock readings) and violations.txt naming the property.
// A broker that falls back on an operator requeue when its decision is
// stale, a heartbeat that renews for its interval, a reaper that stops
// after one batch, a worker that acks a handler that failed with a result,
// a requeue or retry time from the broker's or worker's own clock: each,
// planted in a copy of core, was caught on the memory adapter in each of 5
// runs (seeds 1007, 2007, ... 5007), within the first 50 histories (1.3s
// at most), named by its property.
//
// # Cost
//
// Checking is cheap next to running (BenchmarkCheck, 2 shared CPUs): 33µs
// for a history of 8 operations, about 160-210µs for 30 to 70 and 1.4ms for
// 528 (12 clients, 32 rounds), about linear in the length, since the rounds
// are barriers and porcupine only reorders the ops of one round. A default
// plan has about 25 operations. The runner drives about 3 800 operations a
// second on the memory adapter and 3 700 on Redis, one history at a time
// with fake time (BenchmarkRunner): the clock stalls and, in RealTime, the
// lapsing leases are sleeps, so Run runs several histories at once
// (Config.Parallel).
package linearizability
