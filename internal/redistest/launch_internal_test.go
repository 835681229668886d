package redistest

import (
	"strings"
	"testing"
)

// A server launched on a port another server holds fails to bind and
// exits; the launch must report that, not take the other server's answer
// for its own.
func TestLaunchIsNotFooledByAnotherServerOnThePort(t *testing.T) {
	other := Start(t)
	s := &Server{path: other.path, port: other.port, Addr: other.Addr, args: []string{"--dir", t.TempDir()}}
	err := s.launch()
	if err == nil {
		s.Stop()
		t.Fatalf("launch on %s, which another server holds, reported the server ready", other.Addr)
	}
	if !strings.Contains(err.Error(), "not by the server started") {
		t.Errorf("launch error %q does not say the port is answered by another process", err)
	}
	if !other.Running() {
		t.Fatalf("the other server stopped")
	}
}
