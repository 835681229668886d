package linearizability_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/model"
)

// TestPlansStageContests checks that about one plan in ContestOdds stages a
// contest on ContestQueue: enqueues, then poppers racing, a broker's claim
// of the lapsed leases, then the broker's decisions racing the workers'
// decisions of the same claims and their new pops; and that about one
// contest in three has its workers claim two tasks each and decide with an
// AckBatch of both, and about one in three enqueues a keyed task and, four
// rounds later, another task with the same key.
func TestPlansStageContests(t *testing.T) {
	gen := linearizability.Plans(linearizability.PlanOptions{Mode: linearizability.MixedTime})
	const plans = 600
	contests, batches, keyed := 0, 0, 0
	for seed := range plans {
		p := gen.Example(seed)
		q := -1
		for i, name := range p.Queues {
			if name == linearizability.ContestQueue {
				q = i
			}
		}
		if q < 0 {
			continue
		}
		contests++
		// kinds[r] counts the steps on the contest's queue by kind in
		// each round, and poppers the clients that pop it in one round.
		kinds := make([]map[linearizability.Kind]int, p.Rounds())
		poppers := make([]int, p.Rounds())
		for _, c := range p.Clients {
			for r, steps := range c.Rounds {
				if kinds[r] == nil {
					kinds[r] = map[linearizability.Kind]int{}
				}
				pops := false
				for _, s := range steps {
					if s.Kind == linearizability.Pause || s.Queue != q {
						continue
					}
					kinds[r][s.Kind]++
					pops = pops || s.Kind == linearizability.Pop
				}
				poppers[r] += b2i(pops)
			}
		}
		staged := false
		for r := 0; r+3 < p.Rounds(); r++ {
			decisions := kinds[r+3][linearizability.Ack] + kinds[r+3][linearizability.Fail] +
				kinds[r+3][linearizability.Retry] + kinds[r+3][linearizability.Extend] +
				kinds[r+3][linearizability.AckPop]
			staged = staged || kinds[r][linearizability.Enqueue] >= 2 && poppers[r+1] >= 2 &&
				kinds[r+2][linearizability.ClaimExpired] == 1 &&
				kinds[r+3][linearizability.Requeue]+kinds[r+3][linearizability.Finalize] >= 2 &&
				decisions >= 2 && poppers[r+3] == decisions
		}
		if !staged {
			t.Errorf("seed %d: a plan with queue %s but no contest on it:\n%s", seed, linearizability.ContestQueue, p)
		}
		// A batch contest: its workers pop two tasks each and decide with
		// an AckBatch of both claims (AckPop with More), and no worker of
		// the contest decides otherwise.
		pairs, batchers, single := 0, 0, 0
		keyRounds := map[int]int{} // round: enqueues of ContestKey
		for _, c := range p.Clients {
			for r, steps := range c.Rounds {
				for _, s := range steps {
					if s.Queue == q && s.Kind == linearizability.Enqueue && s.Key == linearizability.ContestKey {
						keyRounds[r]++
					}
					switch {
					case s.Queue != q:
					case s.Kind == linearizability.Pop && s.N == 2:
						pairs++
					case s.Kind == linearizability.AckPop && s.More:
						batchers++
					case s.Kind == linearizability.Ack || s.Kind == linearizability.Fail ||
						s.Kind == linearizability.Retry || s.Kind == linearizability.Extend:
						single++
					}
				}
			}
		}
		if len(keyRounds) > 0 {
			// A keyed contest: one enqueue of the key among the first
			// tasks, one four rounds later.
			keyed++
			first := slices.Min(slices.Collect(maps.Keys(keyRounds)))
			if len(keyRounds) != 2 || keyRounds[first] != 1 || keyRounds[first+4] != 1 {
				t.Errorf("seed %d: a keyed contest enqueues its key in rounds %v:\n%s", seed, keyRounds, p)
			}
		}
		if batchers > 0 {
			batches++
			if pairs != batchers || single != 0 {
				t.Errorf("seed %d: a batch contest with %d pops of two, %d batch decisions and %d single ones:\n%s", seed, pairs, batchers, single, p)
			}
		}
	}
	t.Logf("of %d plans, %d stage a contest, %d of them with batches, %d keyed", plans, contests, batches, keyed)
	if batches < contests/6 || batches > 2*contests/3 {
		t.Errorf("%d batch contests of %d, want about one in three", batches, contests)
	}
	if keyed < contests/6 || keyed > 2*contests/3 {
		t.Errorf("%d keyed contests of %d, want about one in three", keyed, contests)
	}
	if contests < plans/(linearizability.ContestOdds*2) || contests > 2*plans/linearizability.ContestOdds {
		t.Errorf("%d contests in %d plans, want about one in %d", contests, plans, linearizability.ContestOdds)
	}
}

// TestContestsRaceOnOneClaim runs contests on the memory adapter and checks
// that they make the races they are for: workers' decisions refused
// because a broker decided their claim first, broker decisions refused
// because the worker did, and tasks claimed again after a broker's requeue,
// in linearizable histories.
func TestContestsRaceOnOneClaim(t *testing.T) {
	gen := linearizability.Plans(linearizability.PlanOptions{Mode: linearizability.FakeTime})
	outcomes := map[string]int{}
	ran := 0
	for seed := 0; seed < 600 && ran < 40; seed++ {
		p := gen.Example(seed)
		if p.Queues[len(p.Queues)-1] != linearizability.ContestQueue {
			continue
		}
		ran++
		h, err := linearizability.Execute(context.Background(), p, backendsMemory)
		if err != nil {
			t.Fatal(err)
		}
		if v := linearizability.Check(h, 10*time.Second); !v.OK() {
			t.Fatalf("seed %d: %v", seed, v.Result)
		}
		for _, op := range h.Operations {
			if op.Input.Queue != linearizability.ContestQueue {
				continue
			}
			o := op.Output
			switch op.Input.Op {
			case model.OpAck, model.OpFail, model.OpRetry, model.OpExtend:
				outcomes["worker "+kindOr(o.Err, "ok")]++
			case model.OpRequeue, model.OpFinalize:
				outcomes["broker "+kindOr(o.Err, "ok")]++
			case model.OpPop:
				for _, task := range o.Tasks {
					if task.Attempt > 1 {
						outcomes["claimed again"]++
					}
				}
			}
		}
	}
	t.Logf("%d contests: %v", ran, outcomes)
	if ran < 20 {
		t.Fatalf("only %d contests in 600 plans", ran)
	}
	for _, want := range []string{"worker stale_claim", "worker ok", "broker ok", "claimed again"} {
		if outcomes[want] == 0 {
			t.Errorf("no contest made %q", want)
		}
	}
	if outcomes["broker stale_claim"]+outcomes["broker invalid_transition"] == 0 {
		t.Errorf("no broker decision was refused after a worker's")
	}
}

func kindOr(kind, ok string) string {
	if kind == "" {
		return ok
	}
	return kind
}
