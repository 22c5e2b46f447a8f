package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// conn is a minimal RESP2 connection, enough to set servers up and query
// them. The harness uses it instead of a full client so that what it checks
// does not depend on the client under test.
type conn struct {
	nc net.Conn
	r  *bufio.Reader
}

func dial(addr string, timeout time.Duration) (*conn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &conn{nc: nc, r: bufio.NewReader(nc)}, nil
}

// dial connects to the server as it was set up: with TLS and AUTH where
// it asks for them.
func (s *Server) dial(timeout time.Duration) (*conn, error) {
	var c *conn
	if s.tls == nil {
		var err error
		if c, err = dial(s.Addr, timeout); err != nil {
			return nil, err
		}
	} else {
		nc, err := tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", s.Addr, s.tls)
		if err != nil {
			return nil, err
		}
		c = &conn{nc: nc, r: bufio.NewReader(nc)}
	}
	if s.password != "" {
		if _, err := c.do(timeout, "AUTH", s.password); err != nil {
			c.close()
			return nil, fmt.Errorf("AUTH: %w", err)
		}
	}
	return c, nil
}

func (c *conn) close() { _ = c.nc.Close() }

// do sends one command and reads its reply: string for simple and bulk
// strings, int64 for integers, nil for a null, []any for arrays. A Redis
// error reply is returned as a *ReplyError.
func (c *conn) do(timeout time.Duration, args ...string) (any, error) {
	if err := c.nc.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c.nc, b.String()); err != nil {
		return nil, err
	}
	return c.read()
}

// ReplyError is an error reply from Redis, such as "ERR unknown command".
type ReplyError struct{ Msg string }

func (e *ReplyError) Error() string { return e.Msg }

func (c *conn) read() (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return nil, fmt.Errorf("malformed reply line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return nil, &ReplyError{Msg: body}
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = c.read(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, errors.New("unknown reply type " + strconv.QuoteRune(rune(kind)))
}

// Conn is one connection to a server kept open across commands, for
// commands that must share a connection (WAIT counts the replicas that
// acknowledged the connection's own writes) or timings that should not
// include a connect.
type Conn struct{ c *conn }

// Dial opens a Conn to s, as s was set up (TLS, AUTH).
func (s *Server) Dial() (*Conn, error) {
	c, err := s.dial(time.Second)
	if err != nil {
		return nil, err
	}
	return &Conn{c: c}, nil
}

// Do sends one command and returns its reply as Server.Do does, within 5 s.
func (c *Conn) Do(args ...string) (any, error) { return c.c.do(5*time.Second, args...) }

// Close closes the connection.
func (c *Conn) Close() { c.c.close() }
