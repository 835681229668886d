package linearizability

import (
	"pgregory.net/rapid"
)

// ContestOdds: one plan in ContestOdds stages a contest (drawContest) on a
// queue of its own, ContestQueue.
const ContestOdds = 3

// ContestQueue is the queue of a plan's contest: no other client of the
// plan uses it, so the contest's claims are on the tasks it enqueued.
const ContestQueue = "qc"

// ContestKey is the unique key of a keyed contest's first task and of the
// task its producer enqueues after the decisions (drawContest).
const ContestKey = "kc"

// drawContest stages, in one plan in ContestOdds, the races that need
// several clients to act on one claim, or on one queue, at the same
// moment, which the plan's independent draws rarely line up:
//
//   - round s: a producer enqueues two to four tasks on ContestQueue;
//   - round s+1: two to four workers pop it at once, one task each with a
//     lease of 1ms (poppers racing on one queue: a Pop that reads the
//     Ready tasks and claims them in separate steps hands one task to two
//     of them);
//   - round s+2: a broker lets the leases lapse and claims every expired
//     task of the queue;
//   - round s+3: the broker decides its claims one after another (mostly
//     Requeue without a delay, so the task is Ready at once; now and then
//     Finalize), and meanwhile every worker decides the claim it still
//     holds (Ack, Fail, Retry or Extend: a stale worker racing the broker)
//     and pops twice more, so a requeued task is claimed again while the
//     worker's decision may still be under way; in one contest in three an
//     operator requeues or cancels one of the tasks too.
//
// In one contest in three the workers pop two tasks each (as far as there
// are tasks) and decide with an AckBatch of both claims (AckPop with More,
// as a Worker's batched acknowledgements do): a stale worker's batch of
// claims on distinct tasks that the broker holds by now, or has requeued.
// A store that guards each claim of a lone Ack but not those of a batch
// decided in one statement acknowledges the broker's claims.
//
// In one contest in three the producer's first task holds a unique key
// (ContestKey) while it is pending, and in a fifth round, after the
// decisions, the producer enqueues another task with that key: refused
// while the first task is pending (Ready or Running again), added once it
// succeeded, failed (a worker's Fail, a broker's Finalize) or was
// cancelled. A store that keeps the key held after its task failed
// refuses the second.
//
// A decision that reads the claim in one step and writes in another
// (checked outside its transaction, then applied by ID) then sees its
// claim still current and writes over the new one. The contest's clients
// come after the plan's (beyond PlanOptions.MaxClients), with no fault;
// the plan gets rounds if it has fewer than the contest needs.
func drawContest(t *rapid.T, p *Plan) {
	if rapid.IntRange(0, ContestOdds-1).Draw(t, "contest") != ContestOdds/2 {
		return // rapid favours the ends of a range: the contest is a middle value
	}
	q := len(p.Queues)
	p.Queues = append(p.Queues, ContestQueue)
	start := rapid.IntRange(0, len(p.Gaps)-1).Draw(t, "contest round")
	// rapid favours the ends of a range: a keyed contest is a middle value.
	keyed := rapid.IntRange(0, 2).Draw(t, "contest key") == 1
	rounds := 4
	if keyed {
		rounds = 5
	}
	for len(p.Gaps) < start+rounds {
		p.Gaps = append(p.Gaps, 0)
		for i := range p.Clients {
			p.Clients[i].Rounds = append(p.Clients[i].Rounds, nil)
		}
	}
	add := func(role Role) int {
		p.Clients = append(p.Clients, ClientPlan{Role: role, Rounds: make([][]Step, len(p.Gaps))})
		return len(p.Clients) - 1
	}
	at := func(c, r int, steps ...Step) {
		p.Clients[c].Rounds[start+r] = append(p.Clients[c].Rounds[start+r], steps...)
	}

	tasks := rapid.IntRange(2, min(4, len(p.Tasks))).Draw(t, "contest tasks")
	producer := add(Producer) // its j-th Enqueue takes Tasks[(producer+j) % len]
	for j := range tasks {
		s := Step{Kind: Enqueue, Queue: q, Attempts: 3}
		if keyed && j == 0 {
			s.Key = ContestKey
		}
		at(producer, 0, s)
	}
	if keyed {
		at(producer, 4, Step{Kind: Enqueue, Queue: q, Attempts: 3, Key: ContestKey})
	}
	broker := add(Broker)
	workers := make([]int, rapid.IntRange(2, 4).Draw(t, "contest workers"))
	// rapid favours the ends of a range: the batch is a middle value.
	batch := rapid.IntRange(0, 2).Draw(t, "contest batch") == 1
	claims := 1
	if batch {
		claims = 2
	}
	for w := range workers {
		workers[w] = add(Worker)
		at(workers[w], 1, Step{Kind: Pop, Queue: q, N: claims, Lease: msDur(1)})
	}
	at(broker, 2, Step{Kind: Pause, Delay: msDur(1)}, Step{Kind: ClaimExpired, Queue: q, Lease: msDur(3)})
	for range tasks {
		kind := Requeue
		if rapid.IntRange(0, 3).Draw(t, "contest finalize") == 3 {
			kind = Finalize
		}
		at(broker, 3, Step{Kind: kind, Queue: q})
	}
	for _, w := range workers {
		decision := Step{Kind: AckPop, Queue: q, More: true}
		if !batch {
			kind := []Kind{Ack, Retry, Fail, Extend}[rapid.IntRange(0, 3).Draw(t, "contest decision")]
			decision = Step{Kind: kind, Queue: q, Lease: msDur(2)}
		}
		pop := Step{Kind: Pop, Queue: q, N: 1, Lease: msDur(3)}
		at(w, 3, decision, pop, pop)
	}
	if rapid.IntRange(0, 2).Draw(t, "contest operator") == 2 {
		op := add(Inspector)
		kind := []Kind{InspectRequeue, CancelTask}[rapid.IntRange(0, 1).Draw(t, "contest operator op")]
		j := rapid.IntRange(0, tasks-1).Draw(t, "contest operator task")
		at(op, 3, Step{Kind: kind, Queue: q, Task: (producer + j) % len(p.Tasks)})
	}
}
