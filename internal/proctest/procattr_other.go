//go:build !linux

package proctest

import "syscall"

func procAttr() *syscall.SysProcAttr { return nil }
