package main

import "syscall"

// procAttr puts a child in its own process group and has the kernel send it
// sig when this process dies.
func procAttr(sig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: sig}
}
