package main

import (
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// go-redis logs to the process's standard error on its own (a failed dial:
// "redis: ... pool.go:...: connection pool: failed to dial ..."); the
// command's output carries only its own messages. The test points fd 2 at a
// file for the run, since go-redis writes there directly.
func TestRedisClientLogsNothingOfItsOwn(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now: every dial fails

	f, err := os.Create(t.TempDir() + "/stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup3(int(f.Fd()), 2, 0); err != nil {
		t.Fatal(err)
	}
	status, _, stderr := runCmd(t, "inspect", "--redis", "redis://"+addr+"/0", "--queue", "q", "counts")
	restoreErr := syscall.Dup3(saved, 2, 0)
	syscall.Close(saved)
	if restoreErr != nil {
		t.Fatal(restoreErr)
	}
	raw, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if status == 0 {
		t.Errorf("inspect of a server that is not there: status 0")
	}
	if !strings.Contains(stderr, "leasehold inspect") {
		t.Errorf("the command's own error is missing:\n%s", stderr)
	}
	if len(raw) > 0 {
		t.Errorf("go-redis wrote to the process's standard error:\n%s", raw)
	}
}
