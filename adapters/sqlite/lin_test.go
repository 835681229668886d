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

// linFactory makes the backend of each history: a new database file, and
// either one Store that every client of the plan shares (its operations then
// meet in the committer's batches), or for each client a Store of its own on
// that file (its own writer and readers, as a separate process would have).
// All judge time by the harness's clock.
func linFactory(dir string, mode sqlite.PopMode, shared bool) linearizability.Factory {
	var n atomic.Int64
	return func(clock core.Clock, capacity int) (*linearizability.Backend, error) {
		path := filepath.Join(dir, fmt.Sprintf("history-%d.db", n.Add(1)))
		open := func() (*sqlite.Store, error) {
			return sqlite.Open(path, sqlite.WithClock(clock), sqlite.WithCapacity(capacity),
				sqlite.WithPopMode(mode), sqlite.WithReaders(2))
		}
		remove := func() (err error) {
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if e := os.Remove(path + suffix); e != nil && !errors.Is(e, os.ErrNotExist) {
					err = errors.Join(err, e)
				}
			}
			return err
		}
		if shared {
			s, err := open()
			if err != nil {
				return nil, err
			}
			b := linearizability.Shared(s)
			return &linearizability.Backend{Client: b.Client, Close: func() error { return errors.Join(b.Close(), remove()) }}, nil
		}
		var mu sync.Mutex
		var stores []*sqlite.Store
		return &linearizability.Backend{
			Client: func() (core.Store, error) {
				s, err := open()
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
				return errors.Join(err, remove())
			},
		}, nil
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
				rep, err := linearizability.Run(ctx, linearizability.Config{
					Name:      "sqlite-" + mode.String(),
					Factory:   linFactory(t.TempDir(), mode, shared),
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
