package linearizability

import (
	"testing"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
)

// sizedStore is a memory store that asks a Worker for two AckBatch calls
// out at once and for calls of at most 7 tasks, as the Redis store asks
// for 2 and 64.
type sizedStore struct{ *memory.Store }

func (sizedStore) AckFlights() int       { return 2 }
func (sizedStore) DefaultBatchSize() int { return 7 }

// The runtime harness's layers between a Worker and the store pass on what
// the store asks of a Worker (core.AckFlighter, core.BatchSizer), so that
// the Workers it checks make the calls they make over the store itself;
// over a store that asks nothing, they ask nothing either.
func TestRuntimeLayersPassOnWhatTheStoreAsksOfAWorker(t *testing.T) {
	for _, c := range []struct {
		name           string
		store          core.Store
		flights, batch int
	}{
		{"asking", sizedStore{memory.New()}, 2, 7},
		{"silent", memory.New(), 1, core.MaxBatch},
	} {
		layers := map[string]core.Store{
			"fault":     newFaultLayer(c.store, nil, nil, 0),
			"component": newComponentStore(NewRecorder(), "worker", c.store, nil),
			"route":     newRouteStore(c.store, c.store, nil, nil),
		}
		for name, l := range layers {
			f, ok := l.(core.AckFlighter)
			b, ok2 := l.(core.BatchSizer)
			if !ok || !ok2 {
				t.Fatalf("%s over the %s store: AckFlighter %v, BatchSizer %v", name, c.name, ok, ok2)
			}
			if f.AckFlights() != c.flights || b.DefaultBatchSize() != c.batch {
				t.Errorf("%s over the %s store: %d flights and batches of %d, want %d and %d",
					name, c.name, f.AckFlights(), b.DefaultBatchSize(), c.flights, c.batch)
			}
		}
	}
}
