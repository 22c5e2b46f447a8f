package redistest

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Hostile is a TCP server that speaks just enough RESP to get a Redis
// client past its connection set-up and then answers with a payload of
// the test's choosing: a reply that declares gigabytes, nests without end,
// or is not RESP at all. After the payload it sends nothing more and
// keeps the connection open until the client closes it, as a broken or
// malicious endpoint in place of Redis would.
type Hostile struct {
	// Addr is "127.0.0.1:port".
	Addr string
	// Answered counts the payloads sent.
	Answered atomic.Int64

	ln      net.Listener
	payload []byte
	on      map[string]bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
}

// StartHostile starts a Hostile server on a free port that sends payload
// in answer to the commands named in on (upper case, such as "HELLO",
// "PING", "EVALSHA"), and "-ERR unknown command" to every other command
// (a client then falls back to RESP2 and no authentication). It stops
// when tb ends.
func StartHostile(tb testing.TB, payload []byte, on ...string) *Hostile {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	h := &Hostile{Addr: ln.Addr().String(), ln: ln, payload: payload, on: map[string]bool{}, conns: map[net.Conn]struct{}{}}
	for _, c := range on {
		h.on[strings.ToUpper(c)] = true
	}
	h.wg.Add(1)
	go h.accept()
	tb.Cleanup(h.stop)
	return h
}

func (h *Hostile) accept() {
	defer h.wg.Done()
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.mu.Lock()
		h.conns[c] = struct{}{}
		h.mu.Unlock()
		h.wg.Add(1)
		go h.serve(c)
	}
}

// serve answers the commands of one connection until it sends the
// payload, and then only reads (discarding) until the client leaves.
func (h *Hostile) serve(c net.Conn) {
	defer h.wg.Done()
	defer func() {
		h.mu.Lock()
		delete(h.conns, c)
		h.mu.Unlock()
		_ = c.Close()
	}()
	r := bufio.NewReader(c)
	for {
		name, ok := readCommand(r)
		if !ok {
			return
		}
		if h.on[name] {
			h.Answered.Add(1)
			if _, err := c.Write(h.payload); err != nil {
				return
			}
			var sink [4096]byte
			for {
				if _, err := r.Read(sink[:]); err != nil {
					return
				}
			}
		}
		if _, err := c.Write([]byte("-ERR unknown command '" + name + "'\r\n")); err != nil {
			return
		}
	}
}

// readCommand reads one command (an array of bulk strings, as clients
// send them) and returns its name in upper case.
func readCommand(r *bufio.Reader) (string, bool) {
	line, err := r.ReadString('\n')
	if err != nil || len(line) < 4 || line[0] != '*' {
		return "", false
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 || n > 1<<16 {
		return "", false
	}
	var name string
	for i := range n {
		hdr, err := r.ReadString('\n')
		if err != nil || len(hdr) < 4 || hdr[0] != '$' {
			return "", false
		}
		size, err := strconv.Atoi(strings.TrimSpace(hdr[1:]))
		if err != nil || size < 0 || size > 1<<20 {
			return "", false
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", false
		}
		if i == 0 {
			name = strings.ToUpper(string(buf[:size]))
		}
	}
	return name, true
}

// stop closes the listener and every connection, and waits for the
// goroutines.
func (h *Hostile) stop() {
	_ = h.ln.Close()
	h.mu.Lock()
	for c := range h.conns {
		_ = c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}
