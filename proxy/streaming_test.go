package proxy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

const chunkSize = 1 << 20 // 1 MiB

// TestRequestBodyStreams sends a large body in two halves and writes the
// second half only after the upstream has read the first: a proxy that
// buffered the whole body would deadlock here.
func TestRequestBodyStreams(t *testing.T) {
	firstRead := make(chan struct{})
	sums := make(chan [32]byte, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		if _, err := io.CopyN(h, r.Body, 4*chunkSize); err != nil {
			t.Errorf("upstream reading first half: %v", err)
			return
		}
		close(firstRead)
		if _, err := io.Copy(h, r.Body); err != nil {
			t.Errorf("upstream reading second half: %v", err)
		}
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		sums <- sum
		w.WriteHeader(http.StatusNoContent)
	}))
	defer up.Close()
	f := newFixture(t, up.URL, time.Minute, nil)

	payload := bytes.Repeat([]byte("0123456789abcdef"), 8*chunkSize/16) // 8 MiB
	pr, pw := io.Pipe()
	go func() {
		pw.Write(payload[:4*chunkSize])
		select {
		case <-firstRead:
			pw.Write(payload[4*chunkSize:])
			pw.Close()
		case <-time.After(waitFor):
			pw.CloseWithError(io.ErrUnexpectedEOF)
		}
	}()
	req, _ := http.NewRequest("PUT", f.front.URL+"/upload", pr)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d, want 204 (the upstream never saw the first half before the rest was sent?)", resp.StatusCode)
	}
	if got := <-sums; got != sha256.Sum256(payload) {
		t.Error("the upstream received a different body")
	}
}

// TestResponseStreams: the upstream flushes a first chunk and waits; the
// client must receive it before the upstream finishes. A large body then
// follows intact.
func TestResponseStreams(t *testing.T) {
	release := make(chan struct{})
	tail := bytes.Repeat([]byte("x"), 4*chunkSize)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		io.WriteString(w, "first line\n")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-time.After(waitFor):
			return
		}
		w.Write(tail)
	}))
	defer up.Close()
	f := newFixture(t, up.URL, time.Minute, nil)

	resp, err := http.Get(f.front.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first line\n" {
		t.Fatalf("first chunk = %q, %v", line, err)
	}
	close(release) // only now may the upstream finish
	rest, err := io.ReadAll(br)
	if err != nil || !bytes.Equal(rest, tail) {
		t.Fatalf("rest: %d bytes, %v; want %d bytes", len(rest), err, len(tail))
	}
}

// TestTimeoutStopsAtHeaders: once the response headers are in, the
// upstream timeout no longer applies, so a slow body is not cut off. The
// timer is manual: the test fires it after the headers arrived.
func TestTimeoutStopsAtHeaders(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "head\n")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-time.After(waitFor):
		}
		io.WriteString(w, "tail\n")
	}))
	defer up.Close()
	clock := &manualTimer{}
	f := newFixture(t, up.URL, time.Millisecond, clock.after)

	resp, err := http.Get(f.front.URL + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); line != "head\n" {
		t.Fatalf("first line %q", line)
	}
	if n := clock.fire(); n != 0 {
		t.Errorf("%d timers still armed after the headers arrived", n)
	}
	if n := clock.stoppedCount(); n != 1 {
		t.Errorf("%d timers stopped, want 1", n)
	}
	close(release)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "tail\n" {
		t.Errorf("rest = %q, %v; want the whole body", rest, err)
	}
	if calls := f.errs.get(); len(calls) != 0 {
		t.Errorf("WriteError called: %v", calls)
	}
}

// TestUpstreamFailsMidBody: once the headers are sent, a failure cannot
// become a 502; the response is aborted so the client sees an error rather
// than a short body that looks complete, and the front server survives.
func TestUpstreamFailsMidBody(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		io.WriteString(w, "only ten..")
		http.NewResponseController(w).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer up.Close()
	f := newFixture(t, up.URL, time.Minute, nil)
	for range 2 { // the second request shows the front server still serves
		// Depending on buffering, the client sees the abort before or
		// after the headers; either way it must see an error.
		resp, err := http.Get(f.front.URL + "/x")
		if err == nil {
			var body []byte
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				t.Errorf("got %d with a complete-looking %d-byte body; want an error", resp.StatusCode, len(body))
			}
		}
		f.waitServed(t)
	}
	if calls := f.errs.get(); len(calls) != 0 {
		t.Errorf("WriteError called after the headers were sent: %v", calls)
	}
}
