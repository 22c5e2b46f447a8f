package e2e

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// tcpProxy forwards TCP connections from its own 127.0.0.1 port to a target,
// and can degrade the network in between: add latency to every chunk sent
// towards the target, stop forwarding altogether (a black hole: bytes
// are held, connections stay open, nothing is answered) until healed, or
// drop the connections open through it (a lost link).
type tcpProxy struct {
	Addr   string
	target string
	ln     net.Listener

	mu      sync.Mutex
	delay   time.Duration
	holed   bool
	healed  chan struct{} // closed when a black hole ends
	conns   map[net.Conn]struct{}
	closing bool
	// Replication links (a Redis replica's connection to its primary,
	// told by the REPLCONF it sends) can be held apart from the others.
	replHeld   bool
	replHealed chan struct{} // closed when the hold of replication links ends
	repl       map[net.Conn]bool
	// Sentinel links (told by the CLIENT SETNAME sentinel-... a Sentinel
	// sends first), client side to target side, see none of the faults:
	// they stand for the Sentinels' own network, which the faults of the
	// gateways' links do not reach (as a Cluster's bus goes direct).
	sentinel map[net.Conn]net.Conn
}

// startTCPProxy proxies to target until t ends.
func startTCPProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tcp proxy: %v", err)
	}
	p := &tcpProxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}, healed: make(chan struct{}),
		replHealed: make(chan struct{}), repl: map[net.Conn]bool{}, sentinel: map[net.Conn]net.Conn{}}
	close(p.healed)
	close(p.replHealed)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// setDelay makes every chunk towards the target wait d first (0 = none).
func (p *tcpProxy) setDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// blackhole stops forwarding in both directions until heal.
func (p *tcpProxy) blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.holed {
		p.holed, p.healed = true, make(chan struct{})
	}
}

// heal ends a black hole and removes any delay.
func (p *tcpProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = 0
	if p.holed {
		p.holed = false
		close(p.healed)
	}
}

func (p *tcpProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) serve(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client) || !p.track(server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client, client, true) }()
	go func() { defer wg.Done(); p.pipe(client, server, client, false) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	delete(p.repl, client)
	delete(p.sentinel, client)
	p.mu.Unlock()
}

// holdReplication stops forwarding on replication links (both ways)
// until cutReplication: the replica lags, the primary goes on.
func (p *tcpProxy) holdReplication() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.replHeld {
		p.replHeld, p.replHealed = true, make(chan struct{})
	}
}

// cutReplication closes the replication links without forwarding what
// was held (as when the primary is gone before it arrives), and ends the
// hold. It returns how many it closed.
func (p *tcpProxy) cutReplication() int {
	p.mu.Lock()
	var cut []net.Conn
	for c := range p.repl {
		cut = append(cut, c)
	}
	p.mu.Unlock()
	for _, c := range cut {
		_ = c.Close()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.replHeld {
		p.replHeld = false
		close(p.replHealed)
	}
	return len(cut)
}

// pipe copies src to dst chunk by chunk, applying the delay (towards the
// target only) and holding chunks while the proxy is a black hole, or the
// connection (its client side: client) is a replication link held; a
// Sentinel's link passes untouched. It closes both ends when either fails.
func (p *tcpProxy) pipe(dst, src, client net.Conn, towardsTarget bool) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if towardsTarget && !p.repl[client] && strings.Contains(string(buf[:n]), "REPLCONF") {
				p.repl[client] = true
			}
			if towardsTarget && p.sentinel[client] == nil && isSentinelHello(buf[:n]) {
				p.sentinel[client] = dst
			}
			delay, healed, repl, replHealed := p.delay, p.healed, p.repl[client], p.replHealed
			if p.sentinel[client] != nil {
				delay, healed = 0, closedChan
			}
			p.mu.Unlock()
			<-healed
			if repl {
				<-replHealed // after cutReplication the write below fails: what was held is dropped
			}
			if towardsTarget && delay > 0 {
				time.Sleep(delay) // the latency being simulated
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or a closed connection
			return
		}
	}
}

// closedChan is a closed channel: a wait on it passes.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// isSentinelHello reports whether chunk, the first a client sent, names
// the connection as a Sentinel's (CLIENT SETNAME sentinel-<id>-cmd or
// -pubsub).
func isSentinelHello(chunk []byte) bool {
	s := strings.ToLower(string(chunk))
	return strings.Contains(s, "setname") && strings.Contains(s, "sentinel-")
}

// drop closes every connection open through the proxy (a lost link: the
// peers see a reset or EOF and must reconnect) but the Sentinels'; new
// ones are accepted.
func (p *tcpProxy) drop() int {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	for c, s := range p.sentinel {
		delete(conns, c)
		delete(conns, s)
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	}
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	return len(conns) / 2
}

// close stops the proxy and drops every connection.
func (p *tcpProxy) close() {
	p.mu.Lock()
	p.closing = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	if p.holed {
		p.holed = false
		close(p.healed)
	}
	if p.replHeld {
		p.replHeld = false
		close(p.replHealed)
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	for c := range conns {
		_ = c.Close()
	}
}
