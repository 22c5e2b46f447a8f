package redisstore

import (
	"net"
	"syscall"
	"testing"
)

// TestGuardSysConnKeepsRawConn: a guarded TCP connection hands out one
// RawConn for its life (the client asks before every pipeline, and a new
// one is an allocation), and that RawConn fails once the connection is
// closed, as a new one would.
func TestGuardSysConnKeepsRawConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	g, ok := GuardConn(c, ReplyLimits{}).(syscall.Conn)
	if !ok {
		t.Fatal("a guarded TCP connection is not a syscall.Conn")
	}
	raw, err := g.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if r, err := g.SyscallConn(); err != nil || r != raw {
			t.Fatalf("SyscallConn again: %v, %v; want the first RawConn", r, err)
		}
	}); allocs != 0 {
		t.Errorf("SyscallConn allocates %v times per call, want 0", allocs)
	}
	if err := raw.Control(func(uintptr) {}); err != nil {
		t.Fatalf("Control on an open connection: %v", err)
	}
	_ = c.Close()
	if err := raw.Control(func(uintptr) {}); err == nil {
		t.Error("Control on a closed connection: no error")
	}
}
