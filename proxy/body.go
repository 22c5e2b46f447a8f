package proxy

import (
	"io"
	"net/http"
)

// sizedBody is an outbound request body of a known length: once it has
// passed that many bytes it reports io.EOF without reading the inbound
// body again.
//
// The transport, having sent a body of Content-Length n, reads once more
// to check that the body is not longer. An HTTP/1 server closes the
// inbound body as soon as the handler starts the response, and the
// transport's write of the request can still be on its way then (its
// goroutine is late on a loaded machine, while the upstream, which already
// had the n bytes, answered): that late read then fails with "invalid Read
// on closed Body", the transport closes the connection to the upstream,
// and the response being streamed from it breaks off mid-body. The
// request also counts as not written (see Observer.Failure). The inbound
// body cannot hold more than its Content-Length, so the extra read has
// nothing to find and sizedBody answers it itself.
//
// It also carries the inbound body's ReadAborter, when it has one, to the
// exchange (see ReadAborter).
type sizedBody struct {
	body  io.ReadCloser
	left  int64       // bytes still to pass; < 0: unknown length
	abort ReadAborter // the inbound body's, or nil
}

// A ReadAborter is a request body that can end a read waiting for the
// client: AbortRead makes a Read in progress return at once, and every
// later one fail; it does not block. When an upstream's timeout passes
// before its response headers arrived, the handler aborts the inbound
// body's read if it is one, because net/http's Transport does not give an
// exchange up before its writer returned from reading the body, so a
// client that stalls its upload would otherwise hold the exchange (and
// what the caller holds for it) past the timeout. The gateway's request
// bodies are ReadAborters.
type ReadAborter interface {
	AbortRead()
}

// sizeBody returns the outbound body for in, an inbound body of n bytes
// (< 0: unknown): nil when there is none (n is 0, as a server reports a
// request without a body), otherwise one limited to n bytes when n is
// known and carrying in's ReadAborter, or in itself when there is neither.
func sizeBody(in io.ReadCloser, n int64) io.ReadCloser {
	if in == nil || in == http.NoBody || n == 0 {
		return nil
	}
	abort, _ := in.(ReadAborter)
	if n < 0 && abort == nil {
		return in
	}
	if n < 0 {
		n = -1
	}
	return &sizedBody{body: in, left: n, abort: abort}
}

// AbortRead aborts the inbound body's read, when it can be.
func (b *sizedBody) AbortRead() {
	if b.abort != nil {
		b.abort.AbortRead()
	}
}

// Read reads at most the bytes left, and returns io.EOF with the last of
// them, or alone once none are left.
func (b *sizedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return b.body.Read(p) // unknown length
	}
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.body.Read(p)
	b.left -= int64(n)
	if b.left <= 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

// Close closes the inbound body.
func (b *sizedBody) Close() error { return b.body.Close() }
