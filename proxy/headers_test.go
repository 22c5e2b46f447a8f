package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSetHeadersHasTheLastWord: what Options.SetHeaders sets reaches the
// upstream even when the caller lists that header in Connection, and what
// it deletes does not, whatever the caller sent.
func TestSetHeadersHasTheLastWord(t *testing.T) {
	got := make(chan http.Header, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
	}))
	defer up.Close()
	f := newFixture(t, up.URL, 0, nil, func(o *testOptions) {
		o.SetHeaders = func(out *http.Request) {
			if out.Context() == nil || out.URL.Host != strings.TrimPrefix(up.URL, "http://") {
				t.Errorf("SetHeaders got an outbound request for %v", out.URL)
			}
			out.Header.Set("X-Owned", "gateway")
			delete(out.Header, "X_owned")
		}
	})
	req, _ := http.NewRequest("GET", f.front.URL+"/", nil)
	req.Header.Set("Connection", "X-Owned")
	req.Header["X-Owned"] = []string{"caller"}
	req.Header["X_owned"] = []string{"caller"}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	h := <-got
	if v := h.Values("X-Owned"); len(v) != 1 || v[0] != "gateway" {
		t.Errorf("upstream X-Owned = %q, want [gateway]", v)
	}
	if v := h["X_owned"]; v != nil {
		t.Errorf("upstream X_owned = %q, want none", v)
	}
}
