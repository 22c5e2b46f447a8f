package proxy

import (
	"net"
	"syscall"
	"unsafe"
)

// peekIdle returns the check of an idle connection c made before it is
// used again: one non-blocking peek at its socket. The connection is
// usable when nothing can be read yet; it is not when the upstream closed
// it (end of stream, reset) or sent bytes no request asked for, which the
// next exchange would otherwise take for its response. A connection whose
// socket cannot be reached is taken as usable, the exchange's retry then
// covering a closed one.
func peekIdle(c net.Conn) func() bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return func() bool { return true }
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() bool { return true }
	}
	var (
		buf    [1]byte
		usable bool
	)
	peek := func(fd uintptr) bool {
		_, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&buf[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		usable = errno == syscall.EAGAIN || errno == syscall.EWOULDBLOCK
		return true // never wait for the socket to become readable
	}
	return func() bool {
		if rc.Read(peek) != nil {
			return false
		}
		return usable
	}
}
