//go:build linux

package proctest

import "syscall"

// procAttr makes the kernel kill a started process when the test binary
// dies, so a crashed run leaves no gateway behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
