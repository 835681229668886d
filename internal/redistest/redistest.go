// Package redistest runs private redis-server processes for tests.
//
// Start gives a test its own server on a free loopback port, stopped when the
// test ends; Restart stops and starts it again on the same port. URL gives a
// server shared by the whole test binary (or $REDIS_URL when that is set);
// a package that uses it calls Main from its TestMain so the shared server
// stops when the tests end. On Linux every server is also started with a
// parent-death signal, so none outlives the test binary.
//
// When redis-server is not on PATH the tests that need it are skipped with a
// hint on how to install it, except in CI (CI=true), where they fail.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a server may take to answer.
const startTimeout = 15 * time.Second

// Server is one redis-server process listening on 127.0.0.1.
type Server struct {
	// Addr is the server's host:port.
	Addr string

	path string
	port int
	conf string     // the configuration file a Sentinel starts from; "" for a server
	args []string   // extra server arguments
	tb   testing.TB // nil for the shared server

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	output  *syncBuffer
	clients []*redis.Client
}

// Start starts a private redis-server on a free port and registers its
// shutdown (and the closing of every Client) with tb.Cleanup. Without
// redis-server on PATH it skips the test, or fails it when CI=true.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return startWith(tb)
}

// StartCluster starts a private one-node Redis Cluster (cluster mode, all
// 16384 slots on the node) like Start, and returns when the cluster state
// is ok. Commands and scripts whose keys do not share a slot fail on it, as
// on any cluster.
func StartCluster(tb testing.TB) *Server {
	tb.Helper()
	dir := tb.TempDir()
	s := startWith(tb, "--cluster-enabled", "yes", "--dir", dir, "--cluster-config-file", "nodes.conf")
	c := s.Client()
	ctx := context.Background()
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		tb.Fatalf("redistest: CLUSTER ADDSLOTSRANGE: %v", err)
	}
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: cluster on %s not ok within %v: %v %s", s.Addr, startTimeout, err, info)
		}
		<-tick.C
	}
}

// StartReplica starts a private redis-server like Start, as a replica of
// the server at primary (host:port: a Server's Addr, or a proxy in front of
// one), and returns when its link to the primary is up and the initial
// synchronization is done.
func StartReplica(tb testing.TB, primary string) *Server {
	tb.Helper()
	host, port, err := net.SplitHostPort(primary)
	if err != nil {
		tb.Fatalf("redistest: replica of %q: %v", primary, err)
	}
	// A replica saves what its primary sends to disk: keep it out of the
	// test's directory, where the next server started would load it.
	s := startWith(tb, "--replicaof", host, port, "--dir", tb.TempDir())
	c := s.Client()
	ctx := context.Background()
	deadline := time.Now().Add(startTimeout)
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_sync_in_progress:0") {
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: replica %s of %s not in sync within %v: %v %s", s.Addr, primary, startTimeout, err, info)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Promote makes a replica a primary (REPLICAOF NO ONE), as a failover
// does: it keeps what it had received and accepts writes from then on.
func (s *Server) Promote() error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	return c.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err()
}

func startWith(tb testing.TB, args ...string) *Server {
	tb.Helper()
	path := lookPath(tb)
	s, err := start(path, 0, args...)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	s.tb = tb
	tb.Cleanup(func() {
		s.mu.Lock()
		clients := s.clients
		s.clients = nil
		s.mu.Unlock()
		for _, c := range clients {
			_ = c.Close()
		}
		s.Stop()
	})
	return s
}

// URL returns the URL of a redis-server shared by every test of the binary:
// $REDIS_URL when set, otherwise a private server started on first use.
// Tests sharing it must keep their keys apart (for example with a key prefix
// per test). Call Main from TestMain so the shared server stops at the end.
func URL(tb testing.TB) string {
	tb.Helper()
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	path := lookPath(tb)
	shared.Lock()
	defer shared.Unlock()
	if shared.server == nil {
		if shared.err != nil {
			tb.Fatalf("redistest: shared server: %v", shared.err)
		}
		s, err := start(path, 0)
		if err != nil {
			shared.err = err
			tb.Fatalf("redistest: shared server: %v", err)
		}
		shared.server = s
	}
	return shared.server.URL()
}

var shared struct {
	sync.Mutex
	server *Server
	err    error
}

// Main runs the tests of m and then stops the shared server of URL, if one
// was started. Use it as the body of TestMain: func TestMain(m *testing.M) {
// redistest.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}

// StopShared stops the shared server of URL if it is running; a later URL
// call starts a new one.
func StopShared() {
	shared.Lock()
	s := shared.server
	shared.server, shared.err = nil, nil
	shared.Unlock()
	if s != nil {
		s.Stop()
	}
}

// URL returns the server's URL, database 0: redis://127.0.0.1:N/0.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Client returns a new client of the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	s.mu.Lock()
	s.clients = append(s.clients, c)
	s.mu.Unlock()
	return c
}

// Running reports whether the server process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Stop kills the server (as a crash would: nothing is saved) and waits for
// it to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Restart stops the server and starts a new, empty one on the same port,
// returning when it answers. Clients from Client reconnect on their
// next command.
func (s *Server) Restart() {
	if s.tb != nil {
		s.tb.Helper()
	}
	s.Stop()
	var err error
	// The port was just released; another process could take it in the
	// meantime, so try a few times before giving up.
	for range 5 {
		if err = s.launch(); err == nil {
			return
		}
	}
	if s.tb != nil {
		s.tb.Fatalf("redistest: restart on %s: %v", s.Addr, err)
	}
}

// Output returns what the server printed so far, for diagnostics.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.output == nil {
		return ""
	}
	return s.output.String()
}

// lookPath finds redis-server, skipping or failing tb when it is missing.
func lookPath(tb testing.TB) string {
	tb.Helper()
	path, err := exec.LookPath("redis-server")
	if err == nil {
		return path
	}
	const hint = "redis-server not found on PATH; install it (for example: apt-get install redis-server) or set REDIS_URL"
	if os.Getenv("CI") == "true" {
		tb.Fatalf("redistest: %s", hint)
	}
	tb.Skipf("redistest: %s", hint)
	return ""
}

// start launches a server on port, or on a free port when port is 0,
// retrying with a new port when the chosen one was taken meanwhile.
//
// A server started without --dir gets a directory of its own, so a file it
// writes (a replica's synchronized dump.rdb) never lands in the test's
// package directory, where the next server started there would load it.
func start(path string, port int, args ...string) (*Server, error) {
	if !slices.Contains(args, "--dir") {
		dir, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			return nil, err
		}
		args = append(slices.Clip(args), "--dir", dir)
	}
	var err error
	for range 5 {
		p := port
		if p == 0 {
			if p, err = freePort(); err != nil {
				return nil, err
			}
		}
		s := &Server{path: path, port: p, args: args, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(p))}
		if err = s.launch(); err == nil {
			return s, nil
		}
	}
	return nil, err
}

// launch starts the process on s.port and waits until it answers.
func (s *Server) launch() error {
	out := &syncBuffer{}
	var lead []string
	if s.conf != "" {
		lead = []string{s.conf, "--sentinel"} // the file must come first
	}
	cmd := exec.Command(s.path, append(append(lead,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no"), s.args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.path, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited, s.output = cmd, exited, out
	s.mu.Unlock()

	if err := waitReady(s.Addr, cmd.Process.Pid, exited); err != nil {
		s.Stop()
		return fmt.Errorf("redis-server on %s: %w; output:\n%s", s.Addr, err, out.String())
	}
	return nil
}

// waitReady polls the server over a plain connection (no client pool, so
// no dial back-off or log noise) until the process with pid answers, the
// process exits or the start timeout passes.
//
// The answer must come from pid itself, not only from the port: another
// test binary's server may take the port between freePort and the bind
// (or, across a Restart, between the kill and the new bind), and then this
// server fails to bind and exits, while a PING alone would be answered by
// the other one, which its own test may kill at any moment.
func waitReady(addr string, pid int, exited <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var err error
	for {
		if err = answeredBy(addr, pid); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within %v: %w", startTimeout, err)
		}
		select {
		case <-exited:
			return fmt.Errorf("exited before answering (last attempt: %v)", err)
		case <-tick.C:
		}
	}
}

// answeredBy sends one inline INFO server and expects the process_id it
// reports to be pid.
func answeredBy(addr string, pid int) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("INFO server\r\n")); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(head, "$"), "\r\n"))
	if !strings.HasPrefix(head, "$") || err != nil || n < 0 {
		return fmt.Errorf("INFO answered %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	got := infoField(string(body), "process_id")
	if got != strconv.Itoa(pid) {
		return fmt.Errorf("%s is answered by process %q, not by the server started (%d)", addr, got, pid)
	}
	return nil
}

// infoField returns the value of field in an INFO answer, or "".
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// syncBuffer is a bytes.Buffer safe for the process's writes and our reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
