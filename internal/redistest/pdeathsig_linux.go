package redistest

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal has the kernel kill the server when the test binary
// dies, so no server outlives `go test` even without Main.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
