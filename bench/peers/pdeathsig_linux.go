package main

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal has the kernel kill the server when this process
// dies, so no server outlives an interrupted run.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
