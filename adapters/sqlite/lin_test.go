package sqlite_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/linearizability/backends"
)

// sharedFactory makes the backend of each history: one Store on a new
// database file, which every client of the plan shares, so their operations
// meet in the writer's batches. It commits with synchronous=FULL, the
// default, whose slower syncs let batches form. (backends.SQLite gives each
// client a Store of its own instead.)
func sharedFactory(dir string, mode sqlite.PopMode) linearizability.Factory {
	var n atomic.Int64
	return func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
		path := filepath.Join(dir, fmt.Sprintf("history-%d.db", n.Add(1)))
		s, err := sqlite.Open(path, sqlite.WithClock(clock), sqlite.WithCapacity(capacity), sqlite.WithPopMode(mode))
		if err != nil {
			return nil, err
		}
		shared := linearizability.Shared(s)
		return &linearizability.Backend{Client: shared.Client, Close: func() error {
			err := shared.Close()
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if e := os.Remove(path + suffix); e != nil && !errors.Is(e, os.ErrNotExist) {
					err = errors.Join(err, e)
				}
			}
			return err
		}}, nil
	}
}

// TestHistoriesAreLinearizable runs the linearizability harness on the
// SQLite store with each pop implementation, its clients sharing one store
// or each with its own on one file, on rapid-drawn concurrent plans: every
// history must be one the model allows.
func TestHistoriesAreLinearizable(t *testing.T) {
	for i, mode := range popModes {
		for j, shared := range []bool{true, false} {
			name := mode.String() + map[bool]string{true: "/one-store", false: "/store-per-client"}[shared]
			t.Run(name, func(t *testing.T) {
				factory := sharedFactory(t.TempDir(), mode)
				if !shared {
					f, err := backends.SQLite(t.TempDir(), mode)
					if err != nil {
						t.Fatal(err)
					}
					factory = f
				}
				rep, err := linearizability.Run(ctx, linearizability.Config{
					Name:      "sqlite-" + mode.String(),
					Factory:   factory,
					Histories: 25,
					Duration:  3 * time.Second,
					Seed:      uint64(1 + 1000*(2*i+j)), // each run its own plans
					Parallel:  2,
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d histories, %d operations, %d violations, run %v, check %v",
					rep.Histories, rep.Operations, rep.Violations, rep.RunTime.Round(time.Millisecond), rep.CheckTime.Round(time.Millisecond))
				if rep.Histories == 0 {
					t.Fatal("no history ran")
				}
				for _, f := range rep.Failures {
					t.Errorf("seed %d: %s history; saved to %s\n%s", f.Seed, f.Result, f.Dir, f.Plan)
				}
			})
		}
	}
}
