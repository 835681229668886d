package memory

import (
	"syscall"
	"time"
	"unsafe"
)

// threadCPU is the CPU time the calling thread used so far
// (CLOCK_THREAD_CPUTIME_ID), and true; a benchmark that reads it locks its
// goroutine to its thread first.
func threadCPU() (time.Duration, bool) {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3 // CLOCK_THREAD_CPUTIME_ID
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
