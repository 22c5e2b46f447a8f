package gateway

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/config"
	"github.com/quotagate/quotagate/internal/proctest"
)

// waitFor bounds how long a test waits for something that should happen at
// once; it only bounds a hang.
const waitFor = 10 * time.Second

// useUpstream points every upstream of f's configuration at url (instead of
// the fixture's recorder) by reloading it.
func (f *fixture) useUpstream(t *testing.T, base, url string) {
	t.Helper()
	path := writeConfig(t, renderConfig(base, url, deadURL(t)))
	cfg, err := config.Load(path, testGetenv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	if err := f.gw.Reload(cfg, 0); err != nil {
		t.Fatalf("reload: %v", err)
	}
}

// uploadConfig adds to baseConfig a POST route without limits.
const uploadConfig = baseConfig + `  - {name: upload, method: POST, path: "/v1/upload", upstream: patient}
`

// bodyRead is what an upstream made of a request body.
type bodyRead struct {
	n   int64
	err error // nil: the body was complete
}

// bodyUpstream reads every request body to its end and reports how far it
// got; it answers 200 only to a complete body.
func bodyUpstream(t *testing.T) (string, <-chan bodyRead) {
	reads := make(chan bodyRead, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		reads <- bodyRead{n, err}
		if err != nil {
			return
		}
		_, _ = io.WriteString(w, "complete")
	}))
	t.Cleanup(srv.Close)
	return srv.URL, reads
}

// pieces yields s in pieces of at most n bytes, so that a body of unknown
// length reaches the upstream as several chunks.
type pieces struct {
	s string
	n int
}

func (p *pieces) Read(b []byte) (int, error) {
	if p.s == "" {
		return 0, io.EOF
	}
	k := copy(b[:min(len(b), p.n)], p.s)
	p.s = p.s[k:]
	return k, nil
}

// TestBodyLimitIsExact: with max_body_bytes 1024 a body of exactly 1024
// bytes is forwarded whole and answered by the upstream, with or without a
// Content-Length; 1025 bytes with a Content-Length are answered 413 without
// contacting the upstream; 1025 or more bytes of unknown length are
// answered 413 and the upstream never receives the complete body (its read
// fails), so it cannot act on it.
func TestBodyLimitIsExact(t *testing.T) {
	f := newFixture(t, baseConfig)
	url, reads := bodyUpstream(t)
	f.useUpstream(t, uploadConfig, url)
	const limit = 1024
	send := func(size int, chunked bool) *httptest.ResponseRecorder {
		var body io.Reader = strings.NewReader(strings.Repeat("x", size))
		if chunked {
			body = &pieces{s: strings.Repeat("x", size), n: 100}
		}
		return f.do("POST", "/v1/upload", bearer(enterpriseKey), body)
	}
	for _, chunked := range []bool{false, true} {
		w := send(limit, chunked)
		if w.Code != http.StatusOK || w.Body.String() != "complete" {
			t.Errorf("exactly max_body_bytes (chunked %v): %d %q, want 200 from the upstream", chunked, w.Code, w.Body.String())
		}
		select {
		case r := <-reads:
			if r.err != nil || r.n != limit {
				t.Errorf("exactly max_body_bytes (chunked %v): upstream read %d bytes, %v", chunked, r.n, r.err)
			}
		case <-time.After(waitFor):
			proctest.FatalOverrun(t, "the upstream did not report the body it read within %v", waitFor)
		}
	}

	problemBody(t, send(limit+1, false), http.StatusRequestEntityTooLarge, "payload_too_large")
	select {
	case r := <-reads:
		t.Errorf("a declared Content-Length over the limit reached the upstream: %+v", r)
	default:
	}

	for _, size := range []int{limit + 1, 4 * limit} {
		problemBody(t, send(size, true), http.StatusRequestEntityTooLarge, "payload_too_large")
		// The transport sends the headers of a body of unknown length before
		// the body, so the upstream always sees the request start.
		select {
		case r := <-reads:
			if r.err == nil || r.n > limit {
				t.Errorf("chunked %d bytes: upstream read %d bytes, err %v; want an incomplete body of at most %d", size, r.n, r.err, limit)
			}
		case <-time.After(waitFor):
			proctest.FatalOverrun(t, "the upstream did not report the body it read within %v", waitFor)
		}
	}
}

// TestBodyLimitRead steps requestBody through the edges of the limit.
func TestBodyLimitRead(t *testing.T) {
	cases := []struct {
		body     string
		limit    int64
		want     string
		tooLarge bool
	}{
		{"", 0, "", false},
		{"abc", 3, "abc", false},
		{"abcd", 3, "abc", true},
		{"abc", 10, "abc", false},
		{"a", 0, "", true},
	}
	for _, c := range cases {
		st := &requestState{}
		b := &requestBody{rc: io.NopCloser(&pieces{s: c.body, n: 1}), left: c.limit, st: st}
		got, err := io.ReadAll(b)
		if c.tooLarge != errors.Is(err, errBodyTooLarge) || (st.bodyFault.load() == bodyTooLarge) != c.tooLarge {
			t.Errorf("%q limit %d: err %v, fault %v", c.body, c.limit, err, st.bodyFault.load())
		}
		if !c.tooLarge && string(got) != c.want {
			t.Errorf("%q limit %d: read %q, want %q", c.body, c.limit, got, c.want)
		}
		if c.tooLarge && int64(len(got)) > c.limit {
			t.Errorf("%q limit %d: %d bytes passed the limit", c.body, c.limit, len(got))
		}
	}
}
