package listenaddr

import (
	"net"
	"testing"
)

// fakeAddr is an address of no standard kind.
type fakeAddr string

func (a fakeAddr) Network() string { return "fake" }
func (a fakeAddr) String() string  { return string(a) }

func TestLoopback(t *testing.T) {
	for _, c := range []struct {
		addr net.Addr
		want bool
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80}, true},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 80}, true},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 80}, false},
		{&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 80}, false},
		{&net.UnixAddr{Name: "/tmp/x.sock", Net: "unix"}, true},
		{fakeAddr("127.0.0.1:9"), true},
		{fakeAddr("[::1]:9"), true},
		{fakeAddr("example.com:9"), false},
		{fakeAddr("no port"), false},
	} {
		if got := Loopback(c.addr); got != c.want {
			t.Errorf("Loopback(%v) = %v, want %v", c.addr, got, c.want)
		}
	}
}
