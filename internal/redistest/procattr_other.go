//go:build !linux

package redistest

import "syscall"

// procAttr returns nil: outside Linux a server outlives a crashed test
// binary until the temp directory's owner removes it.
func procAttr() *syscall.SysProcAttr { return nil }
