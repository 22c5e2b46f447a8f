//go:build linux

package redistest

import "syscall"

// procAttr makes the kernel kill a started server when the process that
// started it dies, so a crashed test binary leaves no server behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
