package backends_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/linearizability"
	"github.com/leasehold/leasehold/linearizability/backends"
	"github.com/leasehold/leasehold/model"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func enqueue(ctx context.Context, s core.Store, id string) error {
	_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: id, MaxAttempts: 1}})
	return err
}

func TestSQLiteStoreMeetsABusyDatabase(t *testing.T) {
	f, err := backends.SQLite(t.TempDir(), sqlite.PopReturning)
	if err != nil {
		t.Fatal(err)
	}
	be, err := f(core.SystemClock{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	s, err := be.Client()
	if err != nil {
		t.Fatal(err)
	}
	fi, ok := s.(linearizability.FaultInjector)
	if !ok {
		t.Fatalf("%T is not a FaultInjector", s)
	}
	if fi.InjectFault(linearizability.CallLoseRequest, 0) {
		t.Error("a SQLite store claims to lose a request")
	}
	const hold = linearizability.BusyTimeout / 3
	if !fi.InjectFault(linearizability.CallBusy, hold) {
		t.Fatal("the database could not be made busy")
	}
	start := time.Now()
	if err := enqueue(context.Background(), s, "t1"); err != nil {
		t.Fatalf("an enqueue behind a busy database: %v", err)
	}
	if waited := time.Since(start); waited < hold/2 {
		t.Errorf("the enqueue took %v; the write lock was held for %v", waited, hold)
	}

	// Held past the store's busy timeout, the database makes the call
	// fail with ErrBusy, and the call did not run.
	if !fi.InjectFault(linearizability.CallBusy, linearizability.BusyHold) {
		t.Fatal("the database could not be made busy")
	}
	if err := enqueue(context.Background(), s, "t2"); !errors.Is(err, core.ErrBusy) {
		t.Fatalf("an enqueue behind a database busy past the timeout: %v, want ErrBusy", err)
	}
	time.Sleep(linearizability.BusyHold)
	if _, err := s.Get(context.Background(), core.GetParams{Queue: "q", ID: "t2"}); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("the busy enqueue's task: %v, want ErrNotFound", err)
	}
	if err := enqueue(context.Background(), s, "t2"); err != nil {
		t.Errorf("the enqueue again, once the database is free: %v", err)
	}
}

func TestProxiedRedisStoreLosesARequestForReal(t *testing.T) {
	f, err := backends.RedisProxy(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	be, err := f(core.SystemClock{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	s, err := be.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ps, ok := s.(*backends.ProxiedStore)
	if !ok {
		t.Fatalf("%T is not a ProxiedStore", s)
	}
	ctx := context.Background()
	if err := enqueue(ctx, s, "t0"); err != nil { // a connection to cut
		t.Fatal(err)
	}
	if !ps.InjectFault(linearizability.CallLoseRequest, 0) {
		t.Fatal("the proxy did not arm a cut")
	}
	// go-redis sends the request again on a new connection: the call
	// succeeds, and the server saw it once.
	if err := enqueue(ctx, s, "t1"); err != nil {
		t.Fatalf("an enqueue whose first request was cut: %v", err)
	}
	if n := ps.Proxy.Stats().CutsBeforeRequest; n != 1 {
		t.Errorf("the proxy cut %d requests, want 1", n)
	}
	c, err := s.Counts(ctx, core.CountsParams{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Ready != 2 {
		t.Errorf("%d tasks ready, want 2", c.Ready)
	}
}
