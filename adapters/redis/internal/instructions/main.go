// Command instructions measures what each kind of Redis store call costs
// the server in a way the machine's load does not move: the Redis calls
// its script makes (INFO commandstats) and the instructions the server
// runs for it (valgrind's callgrind, on a private redis-server).
//
//	go run ./adapters/redis/internal/instructions -n 500
//
// It starts redis-server under callgrind (valgrind and redis-server must
// be on PATH), runs each phase's calls one at a time through a Store, and
// prints per call (per task for the batches, of 10 unless -batch says
// otherwise) the Redis calls, the
// instructions of the whole server and those of its FCALL commands. The
// figures of one tree repeat to within a fraction of a percent from run to
// run, so two trees are compared by running the command on each.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

func main() {
	n := flag.Int("n", 500, "calls (or tasks) per phase")
	only := flag.String("only", "", "the phases to measure, comma separated: enqueue, ackpop, ackpop8, pop, ack, extend, enqueuebatchB, popB, ackbatchB, B being -batch (default all)")
	keep := flag.String("keep", "", "a directory to copy callgrind's dumps to, one per phase, for callgrind_annotate")
	batch := flag.Int("batch", 10, "tasks per call in the phases enqueuebatchB, popB and ackbatchB")
	flag.Parse()
	if *batch < 1 || *batch > model.MaxBatch {
		log.Fatalf("-batch %d: want 1..%d", *batch, model.MaxBatch)
	}
	if err := run(*n, *batch, *only, *keep); err != nil {
		log.Fatal(err)
	}
}

func run(n, batch int, only, keep string) error {
	want := func(p string) bool { return only == "" || slices.Contains(strings.Split(only, ","), p) }
	dir, err := os.MkdirTemp("", "leasehold-instructions-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("valgrind", "--tool=callgrind", "--compress-strings=no", "--callgrind-out-file="+filepath.Join(dir, "cg.out"),
		"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	c := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer c.Close()
	ctx := context.Background()
	for i := 0; c.Ping(ctx).Err() != nil; i++ {
		if i > 600 {
			return errors.New("redis-server under callgrind did not answer")
		}
		time.Sleep(100 * time.Millisecond)
	}
	s, err := redis.New(c)
	if err != nil {
		return err
	}
	if err := s.Preload(ctx); err != nil {
		return err
	}
	m := meter{c: c, pid: strconv.Itoa(cmd.Process.Pid), dir: dir, keep: keep}
	args := func(prefix string, i int) model.EnqueueArgs {
		return model.EnqueueArgs{ID: fmt.Sprintf("%s%09d", prefix, i), Payload: []byte("payload"), MaxAttempts: 3}
	}
	enqueue := func(queue, prefix string, i int) error {
		_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: queue, EnqueueArgs: args(prefix, i)})
		return err
	}
	// phase runs f as the phase name if it is wanted, else unmeasured.
	phase := func(name string, ops int, f func() error) error {
		if !want(name) {
			return f()
		}
		return m.measure(name, ops, f)
	}
	steps := []func() error{
		// A lone Enqueue, one at a time.
		func() error {
			return phase("enqueue", n, func() error {
				for i := range n {
					if err := enqueue("q", "t", i); err != nil {
						return err
					}
				}
				return nil
			})
		},
		// A concurrency-1 Worker's cycle: one AckBatch that acknowledges
		// the task claimed before and claims the next.
		func() error {
			r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1})
			if err != nil || len(r.Tasks) != 1 {
				return fmt.Errorf("pop: %d tasks, %v", len(r.Tasks), err)
			}
			held := r.Tasks[0]
			return phase("ackpop", n-1, func() error {
				for range n - 1 {
					res, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "q",
						Acks: []core.AckItem{{Claim: held.Claim(), Result: []byte("ok")}},
						Pop:  core.AckPop{Lease: time.Minute, N: 1}})
					if err != nil || len(res.Items) != 1 || res.Items[0].Err != nil || len(res.Claimed) != 1 {
						return fmt.Errorf("ackpop: %+v, %v", res, err)
					}
					held = res.Claimed[0]
				}
				return nil
			})
		},
	}
	// A concurrency-8 Worker's cycle: one AckBatch that acknowledges the 8
	// tasks claimed before and claims the next 8; figures per task.
	steps = append(steps, func() error {
		const k = 8
		m := n - n%k
		for i := range m + k {
			if err := enqueue("w", "w", i); err != nil {
				return err
			}
		}
		r, err := s.Pop(ctx, core.PopParams{Queue: "w", Lease: time.Minute, N: k})
		if err != nil || len(r.Tasks) != k {
			return fmt.Errorf("pop: %d tasks, %v", len(r.Tasks), err)
		}
		held := r.Tasks
		return phase("ackpop8", m, func() error {
			for range m / k {
				acks := make([]core.AckItem, len(held))
				for i, t := range held {
					acks[i] = core.AckItem{Claim: t.Claim(), Result: []byte("ok")}
				}
				res, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "w", Acks: acks, Pop: core.AckPop{Lease: time.Minute, N: k}})
				if err != nil || len(res.Claimed) != k {
					return fmt.Errorf("ackpop8: %d claimed, %v", len(res.Claimed), err)
				}
				for _, it := range res.Items {
					if it.Err != nil {
						return fmt.Errorf("ackpop8: %v", it.Err)
					}
				}
				held = res.Claimed
			}
			return nil
		})
	})
	var claims []core.Claim
	steps = append(steps,
		func() error {
			for i := range n {
				if err := enqueue("p", "u", i); err != nil {
					return err
				}
			}
			return phase("pop", n, func() error {
				for range n {
					r, err := s.Pop(ctx, core.PopParams{Queue: "p", Lease: time.Minute, N: 1})
					if err != nil || len(r.Tasks) != 1 {
						return fmt.Errorf("pop: %d tasks, %v", len(r.Tasks), err)
					}
					claims = append(claims, r.Tasks[0].Claim())
				}
				return nil
			})
		},
		func() error {
			return phase("ack", n, func() error {
				for _, cl := range claims {
					if _, err := s.Ack(ctx, core.AckParams{Claim: cl, Result: []byte("ok")}); err != nil {
						return err
					}
				}
				return nil
			})
		},
		func() error {
			if err := enqueue("e", "x", 0); err != nil {
				return err
			}
			r, err := s.Pop(ctx, core.PopParams{Queue: "e", Lease: time.Minute, N: 1})
			if err != nil || len(r.Tasks) != 1 {
				return fmt.Errorf("pop: %d tasks, %v", len(r.Tasks), err)
			}
			cl := r.Tasks[0].Claim()
			return phase("extend", n, func() error {
				for range n {
					t, err := s.Extend(ctx, core.ExtendParams{Claim: cl, Lease: time.Minute})
					if err != nil {
						return err
					}
					cl = t.Task.Claim()
				}
				return nil
			})
		})
	if n -= n % batch; n == 0 {
		n = batch
	}
	var bc []core.Claim
	steps = append(steps,
		func() error {
			return phase(fmt.Sprintf("enqueuebatch%d", batch), n, func() error {
				for i := 0; i < n; i += batch {
					var tasks []model.EnqueueArgs
					for j := range batch {
						tasks = append(tasks, args("b", i+j))
					}
					if _, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "b", Tasks: tasks}); err != nil {
						return err
					}
				}
				return nil
			})
		},
		func() error {
			return phase(fmt.Sprintf("pop%d", batch), n, func() error {
				for len(bc) < n {
					r, err := s.Pop(ctx, core.PopParams{Queue: "b", Lease: time.Minute, N: batch})
					if err != nil || len(r.Tasks) == 0 {
						return fmt.Errorf("pop: %d tasks, %v", len(r.Tasks), err)
					}
					for _, t := range r.Tasks {
						bc = append(bc, t.Claim())
					}
				}
				return nil
			})
		},
		func() error {
			return phase(fmt.Sprintf("ackbatch%d", batch), n, func() error {
				for i := 0; i < n; i += batch {
					var acks []core.AckItem
					for _, cl := range bc[i : i+batch] {
						acks = append(acks, core.AckItem{Claim: cl, Result: []byte("ok")})
					}
					if _, err := s.AckBatch(ctx, core.AckBatchParams{Queue: "b", Acks: acks}); err != nil {
						return err
					}
				}
				return nil
			})
		})
	fmt.Printf("%-16s %9s %12s %12s   %s\n", "phase", "calls/op", "instr/op", "FCALL instr", "Redis calls per op")
	for _, st := range steps {
		if err := st(); err != nil {
			return err
		}
	}
	return nil
}

// meter reads the server's statistics around a phase.
type meter struct {
	c    *goredis.Client
	pid  string
	dir  string
	keep string // where to copy each phase's dump, or ""
}

var callsRE = regexp.MustCompile(`calls=(\d+)`)

// measure zeroes the statistics and callgrind's counters, runs f, dumps
// callgrind's counters and prints the phase's figures per op.
func (m meter) measure(name string, ops int, f func() error) error {
	ctx := context.Background()
	if err := m.c.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	if err := control("-z", m.pid); err != nil {
		return err
	}
	if err := f(); err != nil {
		return err
	}
	if err := control("--dump="+name, m.pid); err != nil {
		return err
	}
	info, err := m.c.Info(ctx, "commandstats").Result()
	if err != nil {
		return err
	}
	var calls int64
	per := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		cmd, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		cmd, found := strings.CutPrefix(cmd, "cmdstat_")
		if !ok || !found || cmd == "config|resetstat" || cmd == "info" {
			continue
		}
		mt := callsRE.FindStringSubmatch(rest)
		if mt == nil {
			continue
		}
		v, _ := strconv.ParseInt(mt[1], 10, 64)
		calls += v
		per[cmd] = v
	}
	var detail []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range per {
			if !yield(k) {
				return
			}
		}
	}) {
		detail = append(detail, fmt.Sprintf("%s %.2f", k, float64(per[k])/float64(ops)))
	}
	total, fcall, err := m.lastDump(name)
	if err != nil {
		return err
	}
	fmt.Printf("%-16s %9.2f %12.0f %12.0f   %s\n", name, float64(calls)/float64(ops),
		float64(total)/float64(ops), float64(fcall)/float64(ops), strings.Join(detail, ", "))
	return nil
}

// lastDump returns the total instructions of callgrind's last dump and
// those of fcallCommand, inclusive, and copies it to m.keep as
// callgrind.<phase> when m.keep is set.
func (m meter) lastDump(phase string) (total, fcall int64, err error) {
	var files []string
	for range 100 {
		files, _ = filepath.Glob(filepath.Join(m.dir, "cg.out.*"))
		if len(files) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(files) == 0 {
		return 0, 0, errors.New("no callgrind dump")
	}
	part := func(f string) int { v, _ := strconv.Atoi(f[strings.LastIndex(f, ".")+1:]); return v }
	sort.Slice(files, func(i, j int) bool { return part(files[i]) < part(files[j]) })
	last := files[len(files)-1]
	if m.keep != "" {
		b, err := os.ReadFile(last)
		if err != nil {
			return 0, 0, err
		}
		if err := os.WriteFile(filepath.Join(m.keep, "callgrind."+phase), b, 0o644); err != nil {
			return 0, 0, err
		}
	}
	out, err := exec.Command("callgrind_annotate", "--inclusive=yes", "--threshold=100", last).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("callgrind_annotate: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		fs := strings.Fields(line)
		if len(fs) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(strings.ReplaceAll(fs[0], ",", ""), 10, 64)
		switch {
		case strings.Contains(line, "PROGRAM TOTALS"):
			total = v
		case strings.Contains(line, ":fcallCommand ["):
			fcall = v
		}
	}
	for _, f := range files {
		_ = os.Remove(f)
	}
	return total, fcall, nil
}

// control runs callgrind_control with one option on the server.
func control(opt, pid string) error {
	if out, err := exec.Command("callgrind_control", opt, pid).CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control %s: %v: %s", opt, err, out)
	}
	return nil
}
