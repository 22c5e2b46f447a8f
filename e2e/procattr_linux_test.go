//go:build linux

package e2e

import "syscall"

// procAttr makes the kernel kill a gateway when the test binary dies, so a
// crashed run leaves no process behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
