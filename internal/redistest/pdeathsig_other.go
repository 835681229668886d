//go:build !linux

package redistest

import "os/exec"

// setParentDeathSignal does nothing outside Linux; Main and tb.Cleanup stop
// the servers there.
func setParentDeathSignal(*exec.Cmd) {}
