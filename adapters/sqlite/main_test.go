package sqlite_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine outlives the tests: a store that is
// not closed leaves its connection goroutines behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
