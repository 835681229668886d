//go:build !linux

package memory

import "time"

// threadCPU reports false: no thread CPU clock is read on this system.
func threadCPU() (time.Duration, bool) { return 0, false }
