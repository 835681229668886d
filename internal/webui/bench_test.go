package webui

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// BenchmarkListPage renders one list page (PageSize tasks) of a queue of
// 10 000 ready tasks on the memory store, from the middle of the queue:
// the store's List and Counts and the template, without the network.
// Run: go test -run '^$' -bench ListPage -benchmem ./internal/webui/
func BenchmarkListPage(b *testing.B) {
	ctx := context.Background()
	store := memory.New()
	defer store.Close()
	const n = 10_000
	for i := 0; i < n; i += core.MaxBatch {
		var items []model.EnqueueArgs
		for j := i; j < min(i+core.MaxBatch, n); j++ {
			items = append(items, model.EnqueueArgs{ID: fmt.Sprintf("task-%05d", j), Payload: []byte("payload"), MaxAttempts: 3})
		}
		if _, err := store.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "bench", Tasks: items}); err != nil {
			b.Fatal(err)
		}
	}
	srv, err := New(store)
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/queues/bench?state=ready&after=task-05000", nil)
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
	}
	// On a shared machine the wall clock counts the time others ran;
	// cpu-ns/op is what a page cost this process.
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}
