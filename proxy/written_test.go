package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/proctest"
)

// postStatus posts body to path through f and returns the status.
func postStatus(t *testing.T, f *fixture, path string, body io.Reader) int {
	t.Helper()
	resp, err := http.Post(f.front.URL+path, "application/octet-stream", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestOnFailureWritten: OnFailure's written tells whether an attempt
// wrote the whole request to the upstream: true for an upstream that read
// it and hung up without an answer, also when the transport's retry on a
// fresh connection then found the upstream gone; false for one that hung
// up mid-body, and for a request WatchWrite did not select.
func TestOnFailureWritten(t *testing.T) {
	// readThenReset reads the whole request and resets the connection, as
	// an upstream whose worker crashed after reading does.
	readThenReset := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		resetConn(t, w)
	}
	setup := func(t *testing.T, h http.HandlerFunc, more ...func(*testOptions)) (*fixture, *failures, *httptest.Server) {
		up := httptest.NewServer(h)
		t.Cleanup(up.Close)
		fl := &failures{}
		opts := append([]func(*testOptions){func(o *testOptions) { o.OnFailure = fl.add }}, more...)
		return newFixture(t, up.URL, time.Minute, nil, opts...), fl, up
	}
	want := func(t *testing.T, fl *failures, w ...failure) {
		t.Helper()
		if got := fl.get(); !slices.Equal(got, w) {
			t.Errorf("OnFailure calls %v, want %v", got, w)
		}
	}

	t.Run("read, then hung up", func(t *testing.T) {
		f, fl, _ := setup(t, readThenReset)
		if status := postStatus(t, f, "/x", strings.NewReader(strings.Repeat("x", 64<<10))); status != http.StatusBadGateway {
			t.Fatalf("got %d, want 502", status)
		}
		want(t, fl, failure{http.StatusBadGateway, true})
	})

	t.Run("not selected", func(t *testing.T) {
		var asked atomic.Int32
		f, fl, _ := setup(t, readThenReset, func(o *testOptions) {
			o.WatchWrite = func(in *http.Request) bool {
				if inbound(in) {
					asked.Add(1)
				}
				return false
			}
		})
		if status := postStatus(t, f, "/x", strings.NewReader("body")); status != http.StatusBadGateway {
			t.Fatalf("got %d, want 502", status)
		}
		want(t, fl, failure{http.StatusBadGateway, false})
		if n := asked.Load(); n != 1 {
			t.Errorf("WatchWrite asked %d times about the inbound request, want 1", n)
		}
	})

	t.Run("hung up mid-body", func(t *testing.T) {
		gone := make(chan struct{})
		f, fl, _ := setup(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = r.Body.Read(make([]byte, 1))
			resetConn(t, w)
			close(gone)
		})
		// The rest of the body is sent only once the upstream is gone.
		// (The first part fills the buffers on the way, so that some of it
		// reaches the upstream.)
		body := io.MultiReader(strings.NewReader(strings.Repeat("x", 64<<10)), readerFunc(func(p []byte) (int, error) {
			select {
			case <-gone:
			case <-time.After(waitFor):
				proctest.Overrun(t, "the upstream did not read the first part within %v", waitFor)
			}
			return 0, io.EOF
		}), strings.NewReader("the rest"))
		if status := postStatus(t, f, "/x", body); status != http.StatusBadGateway {
			t.Fatalf("got %d, want 502", status)
		}
		want(t, fl, failure{http.StatusBadGateway, false})
	})

	// With "Expect: 100-continue", an upstream that fails without asking
	// for the body had the request all the same: it may act on the
	// headers alone, and a caller who could make its body count as
	// unwritten would get back what such an upstream used.
	t.Run("Expect: 100-continue, failed before asking for the body", func(t *testing.T) {
		f, fl, _ := setup(t, func(w http.ResponseWriter, r *http.Request) {
			resetConn(t, w) // without reading: no 100 Continue, no body
		})
		req, _ := http.NewRequest("POST", f.front.URL+"/x", strings.NewReader(strings.Repeat("x", 100)))
		req.Header.Set("Expect", "100-continue")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("got %d, want 502", resp.StatusCode)
		}
		want(t, fl, failure{http.StatusBadGateway, true})
	})

	t.Run("written, then the retry refused", func(t *testing.T) {
		var (
			up    *httptest.Server
			dials atomic.Int32
		)
		f, fl, up := setup(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/first" {
				return // 200, and the connection goes back to the pool
			}
			up.Listener.Close() // the transport's retry is refused
			resetConn(t, w)
		}, func(o *testOptions) {
			tr := NewTransport(TransportOptions{})
			t.Cleanup(tr.CloseIdleConnections)
			dial := tr.DialContext
			tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				return dial(ctx, network, addr)
			}
			o.Transport = tr
		})
		if status, _ := getStatus(t, f, "/first"); status != http.StatusOK {
			t.Fatalf("first request: %d", status)
		}
		// A GET is idempotent: the transport retries it on a new
		// connection after the reused one was reset.
		if status, _ := getStatus(t, f, "/x"); status != http.StatusBadGateway {
			t.Fatalf("got %d, want 502", status)
		}
		want(t, fl, failure{http.StatusBadGateway, true})
		if n := dials.Load(); n != 2 {
			t.Errorf("%d dials, want 2 (the first connection, then the retry's)", n)
		}
	})
}

// readerFunc is an io.Reader made of a function.
type readerFunc func(p []byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
