package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"syscall"
)

// ReplyLimits bounds what one reply read from Redis may declare. The
// Redis client allocates a string or an aggregate by its declared size
// before the data arrives, so without a bound one hostile or broken
// endpoint answering "$2000000000" or "*2147483646" takes gigabytes, or
// the process, with a few bytes.
//
// The limits apply to each top-level reply (with its attributes) and are
// checked on the declaration, before the client reads it. The store's
// scripts reply with a few dozen integers; the defaults leave room for
// the largest replies a client reads for itself (INFO, HELLO, CLUSTER
// SLOTS of a Cluster of thousands of nodes and fragmented slot ranges).
type ReplyLimits struct {
	// MaxReply bounds the memory one reply may declare: the lengths of its
	// strings (bulk, verbatim, blob error) in bytes plus 16 bytes per
	// element of its aggregates (arrays, sets, pushes; two per entry of a
	// map or attribute). 0 means 16 MiB.
	MaxReply int64
	// MaxLine bounds one line (a simple string, simple error, number,
	// double, big number, boolean or null, or a header), in bytes with
	// its CRLF. 0 means 64 KiB.
	MaxLine int64
	// MaxDepth bounds how deeply aggregates nest (a flat array is depth
	// 1). 0 means 32.
	MaxDepth int
}

const (
	defaultMaxReply = 16 << 20
	defaultMaxLine  = 64 << 10
	defaultMaxDepth = 32
	// elementCost is what one aggregate element costs against MaxReply:
	// the size of the interface value the client allocates for it.
	elementCost = 16
)

func (l ReplyLimits) withDefaults() ReplyLimits {
	if l.MaxReply <= 0 {
		l.MaxReply = defaultMaxReply
	}
	if l.MaxLine <= 0 {
		l.MaxLine = defaultMaxLine
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = defaultMaxDepth
	}
	return l
}

// ErrReplyBound is the cause of a read from Redis that broke a
// ReplyLimits bound or the RESP grammar. The connection it happened on
// fails every later read, so the client discards it; the command fails,
// and a store decision wraps it in ErrUnavailable.
var ErrReplyBound = errors.New("redis reply out of bounds")

// The states of a respScanner: where in the RESP stream the next byte is.
const (
	stType  uint8 = iota // the type byte that starts a value
	stLine               // the rest of a line, up to its LF
	stLen                // the length (or count) of a header, up to its CR
	stLenLF              // the LF that ends a header
	stBulk               // the data of a string and its CRLF
)

// respScanner follows a stream of RESP2/RESP3 replies byte by byte,
// across any split of the stream into reads, keeping only the counts it
// needs: the open aggregates and the declared size of the current reply.
// It checks every declaration against its limits before the bytes that
// carry it are passed on. It does not check what a string or simple line
// contains, nor that a string's data ends with CRLF: the client does.
type respScanner struct {
	lim     ReplyLimits
	state   uint8
	kind    byte  // the type byte of the line or header being read
	neg     bool  // the header's number has a minus sign
	digits  int   // digits of the header's number so far
	num     int64 // the header's number so far
	line    int64 // bytes of the current line so far
	skip    int64 // bytes of string data (and CRLF) still to come
	budget  int64 // memory declared by the current reply so far
	stack   []respFrame
	replies int64 // top-level replies completed
}

// respFrame is an aggregate still open: the elements still to come, and
// whether it is an attribute (which precedes a value rather than being
// one).
type respFrame struct {
	left int64
	attr bool
}

func newRESPScanner(l ReplyLimits) *respScanner {
	return &respScanner{lim: l.withDefaults()}
}

func (s *respScanner) fail(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrReplyBound}, args...)...)
}

// feed follows p, the next bytes of the stream. It returns an error
// wrapping ErrReplyBound at the first declaration over a limit or byte
// off the grammar; the scanner must not be fed after that.
func (s *respScanner) feed(p []byte) error {
	for len(p) > 0 {
		switch s.state {
		case stType:
			s.kind = p[0]
			p = p[1:]
			s.line = 1
			switch s.kind {
			case '+', '-', ':', ',', '(', '#', '_':
				s.state = stLine
			case '$', '=', '!', '*', '~', '>', '%', '|':
				s.state, s.neg, s.digits, s.num = stLen, false, 0, 0
			default:
				return s.fail("unexpected type byte %q", s.kind)
			}
		case stLine:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				s.line += int64(len(p))
				if s.line > s.lim.MaxLine {
					return s.fail("line over %d bytes", s.lim.MaxLine)
				}
				return nil
			}
			s.line += int64(i + 1)
			if s.line > s.lim.MaxLine {
				return s.fail("line over %d bytes", s.lim.MaxLine)
			}
			p = p[i+1:]
			s.valueDone()
		case stLen:
			b := p[0]
			p = p[1:]
			if s.line++; s.line > s.lim.MaxLine {
				return s.fail("header over %d bytes", s.lim.MaxLine)
			}
			switch {
			case b >= '0' && b <= '9':
				d := int64(b - '0')
				if s.num > (math.MaxInt64-d)/10 {
					return s.fail("%q length overflows", s.kind)
				}
				s.num = s.num*10 + d
				s.digits++
			case b == '-' && s.digits == 0 && !s.neg:
				s.neg = true
			case b == '\r' && s.digits > 0:
				s.state = stLenLF
			default:
				return s.fail("unexpected byte %q in a %q header", b, s.kind)
			}
		case stLenLF:
			if p[0] != '\n' {
				return s.fail("unexpected byte %q after a %q header", p[0], s.kind)
			}
			p = p[1:]
			if err := s.header(); err != nil {
				return err
			}
		case stBulk:
			n := min(s.skip, int64(len(p)))
			s.skip -= n
			p = p[n:]
			if s.skip == 0 {
				s.valueDone()
			}
		}
	}
	return nil
}

// header acts on a complete header: kind, then s.num (negative when
// s.neg).
func (s *respScanner) header() error {
	if s.neg {
		// RESP2's null string and null array; nothing else is negative.
		if s.num != 1 || (s.kind != '$' && s.kind != '*') {
			return s.fail("negative length in a %q header", s.kind)
		}
		s.valueDone()
		return nil
	}
	room := s.lim.MaxReply - s.budget
	switch s.kind {
	case '$', '=', '!':
		if s.num > room {
			return s.fail("%q declares %d bytes, over the reply bound %d", s.kind, s.num, s.lim.MaxReply)
		}
		s.budget += s.num
		s.skip, s.state = s.num+2, stBulk
		return nil
	}
	elems := s.num
	if s.kind == '%' || s.kind == '|' {
		if elems > room/(2*elementCost) {
			return s.fail("%q declares %d entries, over the reply bound %d", s.kind, s.num, s.lim.MaxReply)
		}
		elems *= 2
	}
	if elems > room/elementCost {
		return s.fail("%q declares %d elements, over the reply bound %d", s.kind, s.num, s.lim.MaxReply)
	}
	if len(s.stack) >= s.lim.MaxDepth {
		return s.fail("aggregates nested deeper than %d", s.lim.MaxDepth)
	}
	s.budget += elems * elementCost
	s.state = stType
	switch {
	case elems > 0:
		s.stack = append(s.stack, respFrame{left: elems, attr: s.kind == '|'})
	case s.kind != '|':
		s.valueDone() // an empty aggregate; an empty attribute is nothing
	}
	return nil
}

// valueDone records that a value ended: it counts against the open
// aggregate, closing those it completes, or completes a reply.
func (s *respScanner) valueDone() {
	s.state = stType
	for {
		if len(s.stack) == 0 {
			s.budget = 0
			s.replies++
			return
		}
		top := &s.stack[len(s.stack)-1]
		if top.left--; top.left > 0 {
			return
		}
		attr := top.attr
		s.stack = s.stack[:len(s.stack)-1]
		if attr {
			return // the value it annotates comes next
		}
	}
}

// guardConn is a connection whose reads pass through a respScanner: the
// first read that breaks a bound returns the scanner's error instead of
// its bytes, and every read after it fails the same way.
type guardConn struct {
	net.Conn
	sc  *respScanner
	err error
}

func (c *guardConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		if serr := c.sc.feed(p[:n]); serr != nil {
			c.err = serr
			return 0, serr
		}
	}
	return n, err
}

// guardSysConn is a guardConn over a connection that exposes its socket
// (plain TCP). The Redis client peeks at the socket of a pooled connection
// before reusing it, to drop one the server has closed; it does that only
// for connections that are a syscall.Conn, so the guard must stay one.
// Peeking consumes nothing, so the scanner still sees every byte.
//
// The client peeks before every pipeline, so the socket's RawConn is made
// once and kept (a TCP connection makes a new one, an allocation, on each
// call): it stands for the socket for as long as the connection lives, and
// fails once it is closed, as a new one would. The client uses a pooled
// connection from one goroutine at a time.
type guardSysConn struct {
	*guardConn
	sys syscall.Conn
	raw syscall.RawConn
}

func (c *guardSysConn) SyscallConn() (syscall.RawConn, error) {
	if c.raw != nil {
		return c.raw, nil
	}
	raw, err := c.sys.SyscallConn()
	if err == nil {
		c.raw = raw
	}
	return raw, err
}

// GuardConn returns c with every read checked against l (see
// ReplyLimits): c must carry the replies of a Redis server from their
// first byte. A read that breaks a bound fails with an error wrapping
// ErrReplyBound before the client can act on it, and so does every read
// after it. The result is a syscall.Conn when c is one.
func GuardConn(c net.Conn, l ReplyLimits) net.Conn {
	g := &guardConn{Conn: c, sc: newRESPScanner(l)}
	if sys, ok := c.(syscall.Conn); ok {
		return &guardSysConn{guardConn: g, sys: sys}
	}
	return g
}

// guardDialer wraps dial so that every connection it makes is guarded.
func guardDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error), l ReplyLimits) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return GuardConn(c, l), nil
	}
}
