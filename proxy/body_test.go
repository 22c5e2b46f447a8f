package proxy

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// lateBody is an inbound request body whose reads past its length (the
// transport's check that nothing follows) wait until gate closes, as the
// transport's write does when its goroutine runs late.
type lateBody struct {
	io.ReadCloser
	left int64
	gate <-chan struct{}
}

func (b *lateBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		select {
		case <-b.gate:
		case <-time.After(waitFor):
		}
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// TestRequestBodyReadAfterResponseStarts: the front server closes the
// inbound body when the response starts, and the transport may only then
// make its last read of a request body of known length (to check that
// nothing follows). The stream from the upstream must go on to its end,
// and the request counts as written.
func TestRequestBodyReadAfterResponseStarts(t *testing.T) {
	firstSeen := make(chan struct{}) // the client has the first event
	writeOK := make(chan struct{})   // the transport wrote the whole request
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, err := io.ReadAll(r.Body); err != nil || string(b) != `{"max_tokens":300}` {
			t.Errorf("upstream got body %q, %v", b, err)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-writeOK:
			io.WriteString(w, "data: two\n\n")
		case <-r.Context().Done(): // the proxy closed the connection
		case <-time.After(waitFor):
		}
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	transport := NewTransport(TransportOptions{})
	t.Cleanup(transport.CloseIdleConnections)
	h, err := newHandler(Upstream{Name: "test", URL: u}, Options{Transport: transport}, stdAfterFunc)
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &lateBody{ReadCloser: r.Body, left: r.ContentLength, gate: firstSeen}
		trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
			wrote <- info.Err
			if info.Err == nil {
				close(writeOK)
			}
		}}
		h.ServeHTTP(w, r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
	}))
	t.Cleanup(front.Close)

	resp, err := http.Post(front.URL+"/v1/chat", "application/json", strings.NewReader(`{"max_tokens":300}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var first strings.Builder
	for first.Len() == 0 || !strings.HasSuffix(first.String(), "\n\n") {
		line, err := br.ReadString('\n')
		first.WriteString(line)
		if err != nil {
			t.Fatalf("first event: %q, %v", first.String(), err)
		}
	}
	close(firstSeen)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "data: two\n\n" {
		t.Errorf("after the first event: %q, %v; want the second event and the end", rest, err)
	}
	select {
	case err := <-wrote:
		if err != nil {
			t.Errorf("writing the request: %v, want it written whole", err)
		}
	case <-time.After(waitFor):
		t.Fatal("the transport never finished writing the request")
	}
}

// TestSizedBody: a body of known length passes exactly that many bytes,
// the last with io.EOF, and never reads the inbound body past them; a
// shorter inbound body still ends short, so that the transport reports
// the mismatch.
func TestSizedBody(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int64
		want     string
		reads    int // reads of the inbound body
	}{
		{"exact", "abcdef", 6, "abcdef", 3},
		{"longer inbound", "abcdefgh", 6, "abcdef", 3},
		{"shorter inbound", "abcd", 6, "abcd", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &countingReader{r: strings.NewReader(tc.in)}
			b := sizeBody(io.NopCloser(in), tc.n)
			var got []byte
			buf := make([]byte, 2)
			for {
				n, err := b.Read(buf)
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if string(got) != tc.want || in.reads != tc.reads {
				t.Errorf("got %q in %d inbound reads, want %q in %d", got, in.reads, tc.want, tc.reads)
			}
			reads := in.reads
			if n, err := b.Read(buf); n != 0 || err != io.EOF {
				t.Errorf("read after the end: %d, %v; want 0, EOF", n, err)
			}
			if int64(len(got)) == tc.n && in.reads != reads {
				t.Error("the read after the end read the inbound body")
			}
		})
	}
	for _, in := range []io.ReadCloser{nil, http.NoBody, io.NopCloser(strings.NewReader("x"))} {
		if b := sizeBody(in, 0); b != nil {
			t.Errorf("length 0, inbound %T: %T, want no body", in, b)
		}
	}
	unknown := io.NopCloser(strings.NewReader("x"))
	if b := sizeBody(unknown, -1); b != unknown {
		t.Errorf("unknown length, no aborter: %T, want the body itself", b)
	}
}

// countingReader counts the reads of r.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// stallingBody passes its first bytes, then blocks as a client that stalls
// its upload would, until AbortRead.
type stallingBody struct {
	first   string
	aborted chan struct{}
	once    sync.Once
}

func (b *stallingBody) Read(p []byte) (int, error) {
	if b.first != "" {
		n := copy(p, b.first)
		b.first = b.first[n:]
		return n, nil
	}
	<-b.aborted
	return 0, errors.New("aborted")
}

func (b *stallingBody) AbortRead()   { b.once.Do(func() { close(b.aborted) }) }
func (b *stallingBody) Close() error { return nil }

// TestTimeoutAbortsStalledBody: when the upstream's timeout passes while
// the transport waits for the inbound body (a client that sent 5 of 100
// bytes and stalls), the handler aborts the body's read (ReadAborter) and
// answers at once; without that, net/http's Transport would wait for the
// body forever. A body that is not a ReadAborter is not touched.
func TestTimeoutAbortsStalledBody(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(upstream.Close)
	u, _ := url.Parse(upstream.URL)
	clock := &manualTimer{}
	transport := NewTransport(TransportOptions{})
	t.Cleanup(transport.CloseIdleConnections)
	var status atomic.Int32
	h, err := newHandler(Upstream{Name: "test", URL: u, Timeout: time.Hour}, Options{Transport: transport,
		Observer: &hooks{WriteError: func(w http.ResponseWriter, _ *http.Request, s int, _, _ string) {
			status.Store(int32(s))
			w.WriteHeader(s)
		}}}, clock.after)
	if err != nil {
		t.Fatal(err)
	}
	body := &stallingBody{first: "hello", aborted: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := httptest.NewRequest(http.MethodPost, "/upload", body)
		r.ContentLength = 100
		h.ServeHTTP(httptest.NewRecorder(), r)
	}()
	// Fire the timer once the exchange has one (the round trip started).
	deadline := time.Now().Add(waitFor)
	for clock.fire() == 0 {
		if time.Now().After(deadline) {
			proctest.FatalOverrun(t, "the exchange started no timer within %v", waitFor)
		}
		time.Sleep(time.Millisecond) // until the handler's goroutine got there
	}
	select {
	case <-done:
	case <-time.After(waitFor):
		proctest.FatalOverrun(t, "the handler did not return within %v of the timeout", waitFor)
	}
	select {
	case <-body.aborted:
	default:
		t.Error("the stalled body was not aborted")
	}
	if s := status.Load(); s != http.StatusGatewayTimeout {
		t.Errorf("status %d, want 504", s)
	}
}
