package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/model"
)

// BenchmarkReplicaAcks measures one Enqueue, Pop and Ack on a primary with
// one replica, without and with WithReplicaAcks(1, time.Second).
func BenchmarkReplicaAcks(b *testing.B) {
	primary := redistest.Start(b)
	redistest.StartReplica(b, primary.Addr)
	for _, acks := range []int{0, 1} {
		b.Run(fmt.Sprintf("acks=%d", acks), func(b *testing.B) {
			s, err := redis.Open(primary.URL(), redis.WithReplicaAcks(acks, time.Second), redis.WithPrefix(fmt.Sprintf("bench%d:%d:", acks, storeSeq.Add(1))))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: fmt.Sprint(i), MaxAttempts: 1}}); err != nil {
					b.Fatal(err)
				}
				r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
				if err != nil || len(r.Tasks) != 1 {
					b.Fatal(r, err)
				}
				t := r.Tasks[0]
				if _, err := s.Ack(ctx, core.AckParams{Claim: core.Claim{Queue: "q", TaskID: t.ID, Token: t.ClaimToken}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
