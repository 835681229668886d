package sqlite_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/linearizability"
)

// linFactory makes the backend of each history: a new database file, and for
// each client of the plan a Store of its own on that file (its own writer
// and readers, as a separate process would have), all judging time by the
// harness's clock.
func linFactory(dir string, mode sqlite.PopMode) linearizability.Factory {
	var n atomic.Int64
	return func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
		path := filepath.Join(dir, fmt.Sprintf("history-%d.db", n.Add(1)))
		var mu sync.Mutex
		var stores []*sqlite.Store
		return &linearizability.Backend{
			Client: func() (core.Store, error) {
				s, err := sqlite.Open(path, sqlite.WithClock(clock), sqlite.WithCapacity(capacity),
					sqlite.WithPopMode(mode), sqlite.WithSynchronous(sqlite.SyncNormal), sqlite.WithReaders(2))
				if err != nil {
					return nil, err
				}
				mu.Lock()
				stores = append(stores, s)
				mu.Unlock()
				return s, nil
			},
			Close: func() error {
				mu.Lock()
				defer mu.Unlock()
				var err error
				for _, s := range stores {
					err = errors.Join(err, s.Close())
				}
				for _, suffix := range []string{"", "-wal", "-shm"} {
					if e := os.Remove(path + suffix); e != nil && !errors.Is(e, os.ErrNotExist) {
						err = errors.Join(err, e)
					}
				}
				return err
			},
		}, nil
	}
}

func itoa(n int64) string {
	return string(rune('0'+n/100%10)) + string(rune('0'+n/10%10)) + string(rune('0'+n%10))
}

// TestHistoriesAreLinearizable runs the linearizability harness on the
// SQLite store with each pop implementation: concurrent clients, each with
// its own connections to one file, on rapid-drawn plans; every history must
// be one the model allows.
func TestHistoriesAreLinearizable(t *testing.T) {
	for _, mode := range popModes {
		t.Run(mode.String(), func(t *testing.T) {
			rep, err := linearizability.Run(ctx, linearizability.Config{
				Name:      "sqlite-" + mode.String(),
				Factory:   linFactory(t.TempDir(), mode),
				Histories: 60,
				Duration:  8 * time.Second,
				Seed:      1,
				OutDir:    t.TempDir(),
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
