// Package listenaddr answers questions about the addresses quotagate's
// listeners are bound to.
package listenaddr

import "net"

// Loopback reports whether addr, a listener's address, accepts only
// connections from this host: a TCP address on a loopback IP, or a Unix
// socket. An address of another kind is loopback when its host is a
// loopback IP.
func Loopback(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
