package spec

import (
	"testing"

	"github.com/leasehold/leasehold/core"
)

// modelHarness makes ModelStores: the suite run on the model itself, so every
// scenario is checked against the model's own answers.
var modelHarness = Harness{
	Name: "model",
	New: func(tb testing.TB, clock core.Clock, capacity int) core.Store {
		s := NewModelStore(clock, capacity)
		tb.Cleanup(func() { s.Close() })
		return s
	},
}

func TestRunOnTheModel(t *testing.T) { Run(t, modelHarness) }
