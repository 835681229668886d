package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// poisonIDs are the damaged records of TestPoisonRecordsDoNotStallWorkers,
// one per state, by the state each was in when it was damaged.
var poisonIDs = map[core.State]string{
	core.Scheduled: "poison-scheduled",
	core.Ready:     "poison-ready",
	core.Running:   "poison-running",
	core.Succeeded: "poison-succeeded",
	core.Failed:    "poison-failed",
}

// poisonQueue fills queue with 1,000 tasks: one record per state that
// damage then makes unreadable (the Ready one first in line, the Running
// one's lease about to lapse, the Scheduled one about to be due) and 995
// sound Ready ones. It returns the IDs of the sound ones.
func poisonQueue(t *testing.T, s core.BatchStore, queue string, damage func(id string)) map[string]bool {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	pop := func(id string, lease time.Duration) core.Claim {
		t.Helper()
		_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: queue, EnqueueArgs: model.EnqueueArgs{ID: id, MaxAttempts: 3}})
		must(err)
		res, err := s.Pop(ctx, core.PopParams{Queue: queue, Lease: lease, N: 1})
		must(err)
		if len(res.Tasks) != 1 || res.Tasks[0].ID != id {
			t.Fatalf("popped %+v, want %s", res.Tasks, id)
		}
		return res.Tasks[0].Claim()
	}
	pop(poisonIDs[core.Running], 300*time.Millisecond)
	_, err := s.Ack(ctx, core.AckParams{Claim: pop(poisonIDs[core.Succeeded], time.Minute)})
	must(err)
	_, err = s.Fail(ctx, core.FailParams{Claim: pop(poisonIDs[core.Failed], time.Minute), Message: "m"})
	must(err)
	items := []model.EnqueueArgs{
		{ID: poisonIDs[core.Ready], MaxAttempts: 3, Priority: 10},
		{ID: poisonIDs[core.Scheduled], MaxAttempts: 3, RunAfter: time.Now().Add(300 * time.Millisecond)},
	}
	sound := map[string]bool{}
	for i := range 995 {
		id := fmt.Sprintf("t%04d", i)
		sound[id] = true
		items = append(items, model.EnqueueArgs{ID: id, Payload: []byte(id), MaxAttempts: 3})
	}
	res, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: queue, Tasks: items})
	must(err)
	for _, it := range res.Items {
		must(it.Err)
	}
	for _, id := range poisonIDs {
		damage(id)
	}
	return sound
}

// drainPoisoned runs workers and a broker over the queue through the public
// API until every sound task has succeeded, and checks that no poison
// record ran and that the three the scans met were set aside.
func drainPoisoned(t *testing.T, s core.Store, queue string, sound map[string]bool) {
	t.Helper()
	var mu sync.Mutex
	ran := map[string]int{}
	handler := func(_ context.Context, _ core.Claim, task core.Task) ([]byte, error) {
		mu.Lock()
		ran[task.ID]++
		mu.Unlock()
		return nil, nil
	}
	w, err := core.NewWorker(s, queue, handler, core.WithConcurrency(8), core.WithLease(10*time.Second),
		core.WithPollInterval(5*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	b, err := core.NewBroker(s, core.WithQueues(queue), core.WithInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Run(ctx) })
	wg.Go(func() { _ = b.Run(ctx) })
	deadline := time.Now().Add(60 * time.Second)
	var c core.Counts
	for time.Now().Before(deadline) {
		if c, err = s.Counts(context.Background(), core.CountsParams{Queue: queue}); err != nil {
			t.Fatal(err)
		}
		if c.Pending() == 0 && c.Quarantined == 3 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	shut, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	_ = w.Shutdown(shut)
	want := core.Counts{Succeeded: len(sound) + 1, Failed: 1, Quarantined: 3}
	if c != want {
		t.Fatalf("counts %+v, want %+v", c, want)
	}
	mu.Lock()
	defer mu.Unlock()
	for id := range sound {
		if ran[id] == 0 {
			t.Errorf("sound task %s never ran", id)
		}
	}
	for _, id := range poisonIDs {
		if ran[id] != 0 {
			t.Errorf("poison record %s ran %d times", id, ran[id])
		}
	}
}

// removePoison removes the five poison records as an operator does: two
// through the Inspector, three through `leasehold inspect ... remove`,
// after `inspect list quarantined` showed the ones set aside with their
// reasons.
func removePoison(t *testing.T, s core.Store, queue string, cli []string) {
	t.Helper()
	ctx := context.Background()
	ins, err := core.NewInspector(s, queue)
	if err != nil {
		t.Fatal(err)
	}
	list, err := ins.List(ctx, core.Quarantined, "", 10)
	if err != nil || len(list.Tasks) != 3 {
		t.Fatalf("Inspector.List(quarantined): %+v, %v", list.Tasks, err)
	}
	for _, task := range list.Tasks {
		if task.Quarantine == "" || task.State != core.Quarantined {
			t.Errorf("quarantined record without its reason: %+v", task)
		}
	}
	status, stdout, stderr := runCmd(t, append(cli, "list", "quarantined")...)
	if status != 0 {
		t.Fatalf("inspect list quarantined: %d %s", status, stderr)
	}
	for _, st := range []core.State{core.Scheduled, core.Ready, core.Running} {
		if !strings.Contains(stdout, poisonIDs[st]) {
			t.Errorf("inspect list quarantined lacks %s:\n%s", poisonIDs[st], stdout)
		}
	}
	if !strings.Contains(stdout, list.Tasks[0].Quarantine) {
		t.Errorf("inspect list quarantined lacks the reason %q:\n%s", list.Tasks[0].Quarantine, stdout)
	}
	status, stdout, _ = runCmd(t, append(cli, "get", poisonIDs[core.Ready])...)
	if status != 0 || !strings.Contains(stdout, "quarantined") || !strings.Contains(stdout, "reason") {
		t.Errorf("inspect get of a quarantined record: %d\n%s", status, stdout)
	}
	for _, id := range []string{poisonIDs[core.Ready], poisonIDs[core.Succeeded]} {
		gone, err := ins.Remove(ctx, id, 0)
		if err != nil || gone.ID != id || gone.State != core.Quarantined {
			t.Errorf("Inspector.Remove(%s): %+v, %v", id, gone, err)
		}
	}
	for _, id := range []string{poisonIDs[core.Running], poisonIDs[core.Scheduled], poisonIDs[core.Failed]} {
		if status, stdout, stderr := runCmd(t, append(cli, "remove", id)...); status != 0 || !strings.Contains(stdout, id) {
			t.Errorf("inspect remove %s: %d\n%s%s", id, status, stdout, stderr)
		}
	}
	status, stdout, _ = runCmd(t, append(cli, "counts")...)
	if status != 0 || !strings.Contains(stdout, "quarantined") {
		t.Errorf("inspect counts: %d\n%s", status, stdout)
	}
	c, err := ins.Counts(ctx)
	if want := (core.Counts{Succeeded: 995}); err != nil || c != want {
		t.Errorf("counts after the operator removed the poison: %+v, %v; want %+v", c, err, want)
	}
}

// TestPoisonRecordsDoNotStallWorkersSQLite: one unreadable record per state
// in a queue of 1,000 on SQLite (an error history that is not JSON); the
// workers drain every sound task and the operator removes the poison.
func TestPoisonRecordsDoNotStallWorkersSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "poison.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sound := poisonQueue(t, s, "jobs", func(id string) {
		if _, err := db.Exec(`UPDATE tasks SET errors = '{not json' WHERE queue = 'jobs' AND id = ?1`, id); err != nil {
			t.Fatal(err)
		}
	})
	drainPoisoned(t, s, "jobs", sound)
	removePoison(t, s, "jobs", []string{"inspect", "--sqlite", path, "--queue", "jobs"})
}
