package proxy

import "io"

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
// request also counts as not written (see Options.OnFailure). The inbound
// body cannot hold more than its Content-Length, so the extra read has
// nothing to find and sizedBody answers it itself.
type sizedBody struct {
	body io.ReadCloser
	left int64 // bytes still to pass
}

// sizeBody returns body limited to n bytes, or body itself when n is not
// positive (unknown length, or none).
func sizeBody(body io.ReadCloser, n int64) io.ReadCloser {
	if body == nil || n <= 0 {
		return body
	}
	return &sizedBody{body: body, left: n}
}

// Read reads at most the bytes left, and returns io.EOF with the last of
// them, or alone once none are left.
func (b *sizedBody) Read(p []byte) (int, error) {
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
