package identity

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	for _, tc := range []struct {
		name   string
		remote string
		xff    []string
		want   string // "" = invalid
	}{
		{"untrusted peer, no XFF", "203.0.113.7:4000", nil, "203.0.113.7"},
		{"untrusted peer spoofing XFF", "203.0.113.7:4000", []string{"198.51.100.1"}, "203.0.113.7"},
		{"trusted peer, no XFF", "10.0.0.1:4000", nil, "10.0.0.1"},
		{"trusted peer, one hop", "10.0.0.1:4000", []string{"198.51.100.9"}, "198.51.100.9"},
		{"rightmost untrusted through a trusted chain", "10.0.0.1:4000", []string{"192.0.2.66, 198.51.100.9, 10.0.0.3, 10.0.0.2"}, "198.51.100.9"},
		{"chain across headers", "10.0.0.1:4000", []string{"192.0.2.66, 198.51.100.9", "10.0.0.3"}, "198.51.100.9"},
		{"client spoofing the leftmost entry", "10.0.0.1:4000", []string{"10.9.9.9, 198.51.100.9"}, "198.51.100.9"},
		{"every hop trusted", "10.0.0.1:4000", []string{"10.0.0.5, 10.0.0.2"}, "10.0.0.5"},
		{"malformed entry stops the walk", "10.0.0.1:4000", []string{"198.51.100.9, garbage, 10.0.0.2"}, "10.0.0.2"},
		{"malformed first entry", "10.0.0.1:4000", []string{"not an ip"}, "10.0.0.1"},
		{"empty entry stops the walk", "10.0.0.1:4000", []string{"198.51.100.9,, 10.0.0.2"}, "10.0.0.2"},
		{"empty header", "10.0.0.1:4000", []string{""}, "10.0.0.1"},
		{"entries with ports", "10.0.0.1:4000", []string{"198.51.100.9:5555, [2001:db8:ffff::1]:443"}, "198.51.100.9"},
		{"ipv6 hops", "[2001:db8:ffff::2]:443", []string{"2001:db8:1:2::77, 2001:db8:ffff::9"}, "2001:db8:1:2::77"},
		{"mapped peer is unmapped and trusted", "[::ffff:10.0.0.1]:4000", []string{"::ffff:198.51.100.9"}, "198.51.100.9"},
		{"zone dropped", "[fe80::1%eth0]:80", nil, "fe80::1"},
		{"remote without port", "203.0.113.7", nil, "203.0.113.7"},
		{"malformed remote", "pipe", []string{"198.51.100.9"}, ""},
		{"empty remote", "", nil, ""},
		{"remote with bad port", "203.0.113.7:port", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.remote
			r.Header["X-Forwarded-For"] = tc.xff
			got := ClientIP(r, trusted)
			if tc.want == "" {
				if got.IsValid() {
					t.Fatalf("ClientIP = %v, want invalid", got)
				}
				return
			}
			if got != netip.MustParseAddr(tc.want) {
				t.Fatalf("ClientIP = %v, want %s", got, tc.want)
			}
		})
	}
}

func TestAnonymousTenant(t *testing.T) {
	a := mustNew(t, testConfig())
	for _, tc := range []struct{ remote, tenant string }{
		{"203.0.113.7:1", "ip:203.0.113.7"},
		{"[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:5555", "ip:2001:db8:1:2::/64"},
		{"[2001:db8:1:2::1]:80", "ip:2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:80", "ip:2001:db8:1:3::/64"},
		{"[::ffff:203.0.113.7]:1", "ip:203.0.113.7"},
		{"garbage", "ip:unknown"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.remote
		c, err := a.Authenticate(r)
		if err != nil {
			t.Fatalf("%s: %v", tc.remote, err)
		}
		if c.Kind != KindAnonymous || c.Tenant != tc.tenant || c.Tier != "anonymous" {
			t.Fatalf("%s: caller %+v, want tenant %s", tc.remote, c, tc.tenant)
		}
		if c.ID != callerID(KindAnonymous, tc.tenant) {
			t.Fatalf("%s: ID %s", tc.remote, c.ID)
		}
	}
}

// TestAnonymousIPv6Prefix: with a prefix length set, every address of one
// IPv6 prefix of that length is one caller (a /48 holder does not get
// 65,536 callers), IPv4 callers are unaffected, and a length outside 32 to
// 128 is refused.
func TestAnonymousIPv6Prefix(t *testing.T) {
	for _, tc := range []struct {
		bits           int
		remote, tenant string
	}{
		{48, "[2001:db8:1:2::1]:80", "ip:2001:db8:1::/48"},
		{48, "[2001:db8:1:ffff:1:2:3:4]:80", "ip:2001:db8:1::/48"},
		{48, "[2001:db8:2::1]:80", "ip:2001:db8:2::/48"},
		{48, "203.0.113.7:1", "ip:203.0.113.7"},
		{48, "[::ffff:203.0.113.7]:1", "ip:203.0.113.7"},
		{56, "[2001:db8:1:2ff::1]:80", "ip:2001:db8:1:200::/56"},
		{128, "[2001:db8:1:2::1]:80", "ip:2001:db8:1:2::1/128"},
		{32, "[2001:db8:1:2::1]:80", "ip:2001:db8::/32"},
	} {
		c := testConfig()
		c.AnonymousIPv6Prefix = tc.bits
		a := mustNew(t, c)
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.remote
		caller, err := a.Authenticate(r)
		if err != nil {
			t.Fatalf("/%d %s: %v", tc.bits, tc.remote, err)
		}
		if caller.Kind != KindAnonymous || caller.Tenant != tc.tenant || caller.Subject != tc.tenant {
			t.Errorf("/%d %s: caller %+v, want tenant and subject %s", tc.bits, tc.remote, caller, tc.tenant)
		}
	}
	for _, bits := range []int{-1, 1, 31, 129} {
		c := testConfig()
		c.AnonymousIPv6Prefix = bits
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), "ipv6 prefix") {
			t.Errorf("prefix %d: New = %v, want an error naming the ipv6 prefix", bits, err)
		}
	}
}

// TestParseHopMatchesStdlib checks that choosing the form from the text
// gives what trying ParseAddr and then ParseAddrPort gives.
func TestParseHopMatchesStdlib(t *testing.T) {
	reference := func(s string) netip.Addr {
		a, err := netip.ParseAddr(s)
		if err != nil {
			ap, err := netip.ParseAddrPort(s)
			if err != nil {
				return netip.Addr{}
			}
			a = ap.Addr()
		}
		return a.Unmap().WithZone("")
	}
	for _, s := range []string{
		"", ":", "::", ":80", "1.2.3.4", "1.2.3.4:80", "1.2.3.4:", "1.2.3.4:x", "[1.2.3.4]:80",
		"::1", "[::1]:80", "[::1]", "::1:80", "[::1]:80:1", "fe80::1%eth0", "[fe80::1%eth0]:80",
		"::ffff:1.2.3.4", "[::ffff:1.2.3.4]:9", "2001:db8::1", "[2001:db8::1]:443", "pipe", "a:b",
		"1.2.3.4:65536", "[2001:db8::1%a:b]:1", "fe80::1%a:b",
	} {
		if got, want := parseHop(s), reference(s); got != want {
			t.Errorf("parseHop(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestClientIPAllocs: resolving the client of an ordinary request (a
// RemoteAddr with a port, a trusted proxy's X-Forwarded-For) allocates
// nothing.
func TestClientIPAllocs(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.1:4000"
	r.Header.Set("X-Forwarded-For", "198.51.100.9, 10.0.0.2")
	if n := testing.AllocsPerRun(100, func() { ClientIP(r, trusted) }); n != 0 {
		t.Fatalf("ClientIP allocates %v times per call, want 0", n)
	}
}

// TestPeerTrusted: the peer is read as ClientIP reads it (with or without
// a port, unmapped, without its zone); an unparsable one is not trusted.
func TestPeerTrusted(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for addr, want := range map[string]bool{
		"10.1.2.3:4711":        true,
		"10.1.2.3":             true,
		"[::ffff:10.1.2.3]:80": true,
		"[fd00::1%eth0]:80":    true,
		"fd00::1":              true,
		"192.0.2.1:4711":       false,
		"[2001:db8::1]:80":     false,
		"":                     false,
		"10.1.2.3:x":           false,
		"not an address:4711":  false,
	} {
		if got := PeerTrusted(addr, trusted); got != want {
			t.Errorf("PeerTrusted(%q) = %v, want %v", addr, got, want)
		}
	}
	if PeerTrusted("10.1.2.3:4711", nil) {
		t.Error("PeerTrusted with no trusted proxies = true")
	}
}
