//go:build unix && !linux

package main

import "syscall"

// procAttr puts a child in its own process group. Outside Linux there is no
// parent-death signal: children are stopped only by a normal exit or Ctrl-C.
func procAttr(syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
