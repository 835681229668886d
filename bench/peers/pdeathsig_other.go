//go:build !linux

package main

import "os/exec"

// setParentDeathSignal does nothing outside Linux; the run stops the server
// when it ends.
func setParentDeathSignal(*exec.Cmd) {}
