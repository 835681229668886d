package postgres_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/pgtest"
)

// TestMain drops the test schemas when the tests end, and fails the run if
// a goroutine outlives them (a store's listener left running).
func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
