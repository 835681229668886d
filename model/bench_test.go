package model_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/model"
)

// BenchmarkModelStep measures the hottest operations of the model on queues
// of 10, 1,000 and 100,000 tasks. A Queue is an immutable value, so every
// iteration applies the op to the same prebuilt queue: the cost measured is
// that of one op at exactly that size, which should grow with log n, not n.
//
//	go test -run '^$' -bench BenchmarkModelStep -benchmem -count 5 ./model/
func BenchmarkModelStep(b *testing.B) {
	sizes := []int{10, 1000, 100000}
	ops := []struct {
		name string
		run  func(b *testing.B, f *benchFixture)
	}{
		{"Enqueue", func(b *testing.B, f *benchFixture) {
			args := model.EnqueueArgs{ID: "new-task", Payload: []byte("payload"), MaxAttempts: 3}
			for b.Loop() {
				if _, _, err := f.q.Enqueue(f.t0, args); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"PopAck", func(b *testing.B, f *benchFixture) {
			for b.Loop() {
				q, tasks, err := f.q.Pop(f.t0, time.Minute, 1)
				if err != nil || len(tasks) != 1 {
					b.Fatal(err, len(tasks))
				}
				if _, _, err := q.Ack(f.t0, tasks[0].Claim(), []byte("ok")); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"Extend", func(b *testing.B, f *benchFixture) {
			for b.Loop() {
				if _, _, err := f.q.Extend(f.t0, f.claim, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"ClaimExpiredNone", func(b *testing.B, f *benchFixture) {
			for b.Loop() {
				if _, rcs, err := f.q.ClaimExpired(f.t0, time.Minute, 0); err != nil || len(rcs) != 0 {
					b.Fatal(err, len(rcs))
				}
			}
		}},
		{"ClaimExpiredOne", func(b *testing.B, f *benchFixture) {
			now := f.t0.Add(2 * time.Second)
			for b.Loop() {
				if _, rcs, err := f.q.ClaimExpired(now, time.Minute, 0); err != nil || len(rcs) != 1 {
					b.Fatal(err, len(rcs))
				}
			}
		}},
		{"Get", func(b *testing.B, f *benchFixture) {
			for b.Loop() {
				if _, err := f.q.Get(f.claim.TaskID); err != nil {
					b.Fatal(err)
				}
			}
		}},
	}
	for _, op := range ops {
		b.Run(op.name, func(b *testing.B) {
			for _, n := range sizes {
				f := fixture(b, n)
				b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
					b.ReportAllocs()
					op.run(b, f)
				})
			}
		})
	}
}

// benchFixture is a queue of n tasks, built once per size: half are Ready,
// half Running. One Running task's lease lapses at t0+1s, every other one's
// at t0+1h; claim holds a Running task.
type benchFixture struct {
	q     model.Queue
	t0    time.Time
	claim model.Claim
}

var benchFixtures = map[int]*benchFixture{}

// fixture returns the queue of n tasks, building it the first time.
func fixture(b *testing.B, n int) *benchFixture {
	if f, ok := benchFixtures[n]; ok {
		return f
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	q := model.NewQueue("bench", 0)
	var err error
	for i := range n {
		q, _, err = q.Enqueue(t0, model.EnqueueArgs{ID: fmt.Sprintf("task-%07d", i), Payload: []byte("payload"), Priority: i % 3, MaxAttempts: 3})
		if err != nil {
			b.Fatal(err)
		}
	}
	var first, popped []model.Task
	q, first, err = q.Pop(t0, time.Second, 1)
	if err != nil {
		b.Fatal(err)
	}
	for running := 1; running < n/2; running += len(popped) {
		q, popped, err = q.Pop(t0, time.Hour, min(n/2-running, model.MaxBatch))
		if err != nil {
			b.Fatal(err)
		}
	}
	if c := q.Counts(); c.Running != max(n/2, 1) || c.Ready != n-c.Running {
		b.Fatalf("fixture of %d tasks: counts %+v", n, c)
	}
	f := &benchFixture{q: q, t0: t0, claim: first[0].Claim()}
	benchFixtures[n] = f
	return f
}
