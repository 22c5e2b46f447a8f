package proxy

import (
	"maps"
	"mime"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestCleanQueryAgreesWithReverseProxy: a query cleanQuery accepts is
// one the ReverseProxy leaves as it is, so the handler's own forwarding
// sends the same query; one it would re-encode is refused.
func TestCleanQueryAgreesWithReverseProxy(t *testing.T) {
	var got string
	rp := &httputil.ReverseProxy{
		Rewrite:      func(pr *httputil.ProxyRequest) { got = pr.Out.URL.RawQuery },
		Transport:    failingTransport{},
		ErrorHandler: func(http.ResponseWriter, *http.Request, error) {},
	}
	many := func(n int) string { return strings.TrimSuffix(strings.Repeat("a=1&", n), "&") }
	for _, c := range []struct {
		q     string
		clean bool
	}{
		{"", true}, {"a=1", true}, {"b=2&a=1", true}, {"a=%41&b=%e2%82%ac", true}, {"a+b=c+d&&=", true},
		{"x", true}, {"%41%42", true}, {many(10000), true},
		{"a=1;b=2", false}, {";", false}, {"a=%4", false}, {"a=%", false}, {"%zz", false},
		{"a=%4g", false}, {"%%41", false}, {many(10001), false},
	} {
		req, err := http.NewRequest(http.MethodGet, "http://h.invalid/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.RawQuery = c.q
		got = "\x00"
		rp.ServeHTTP(discardWriter{}, req)
		name := c.q
		if len(name) > 40 {
			name = name[:40] + "..."
		}
		if clean := cleanQuery(c.q); clean != c.clean {
			t.Errorf("cleanQuery(%q) = %v, want %v", name, clean, c.clean)
		} else if clean && got != c.q {
			t.Errorf("cleanQuery(%q) = true, but the ReverseProxy sends %q", name, got)
		}
	}
}

// TestIsEventStreamAgreesWithMime: isEventStream is
// mime.ParseMediaType's reading of text/event-stream, which the
// ReverseProxy flushes after every write.
func TestIsEventStreamAgreesWithMime(t *testing.T) {
	for _, ct := range []string{
		"", "text/event-stream", "TEXT/Event-Stream", " text/event-stream ; charset=utf-8", "text/event-stream;",
		"text/event-stream; a=1; a=2", "text/event-stream; a=1; a=1", "text/event-stream; =x", "text/event-stream;;",
		"text/event-streams", "text/event-strea", "text/event-ſtream", "text/event-stream\u00a0", "\u00a0text/event-stream",
		"text/event-stream\t", "application/json", "text/plain; x=text/event-stream", "text/event-stream/x",
	} {
		mt, _, _ := mime.ParseMediaType(ct)
		if got, want := isEventStream(ct), mt == "text/event-stream"; got != want {
			t.Errorf("isEventStream(%q) = %v, mime reads %q", ct, got, mt)
		}
	}
}

// TestHopRemovalAgreesWithDel: the one-pass removal deletes the headers
// that deleting each hop-by-hop name and each name listed in Connection
// with Header.Del (as the ReverseProxy does) deletes, for names in any
// case, with spaces, underscores, non-ASCII letters, and keys that are
// not canonical.
func TestHopRemovalAgreesWithDel(t *testing.T) {
	keys := []string{"X-Foo", "X_foo", "X-Foo-Bar", "Keep-Alive", "Te", "Upgrade", "X-Kept", "Content-Type", "x-foo", "X Foo",
		"Ｘ-Foo", "Kéep-Alive", "A", ""}
	for _, conn := range [][]string{
		nil,
		{"x-foo"},
		{" X-FOO , keep-alive"},
		{"x_foo", "X Foo"},
		{"x-fo, x-foo-, , ,"},
		{"ｘ-foo", "k\u212aeep-alive", "kéep-alive"},
		{"close", "CONTENT-TYPE,a"},
		{""},
		{"x-foo\t", "\tX-Foo-Bar"},
	} {
		want := http.Header{}
		for _, k := range keys {
			want[k] = []string{"v"}
		}
		if conn != nil {
			want["Connection"] = conn
		}
		got := maps.Clone(want)
		for _, f := range want["Connection"] {
			for sf := range strings.SplitSeq(f, ",") {
				if sf = textproto.TrimString(sf); sf != "" {
					want.Del(sf)
				}
			}
		}
		for _, k := range []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
			"Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
			want.Del(k)
		}
		removeHopHeaders(got)
		if !reflect.DeepEqual(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
			t.Errorf("Connection %q: kept %q, Del keeps %q", conn, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
	}
}

// TestCopyHeaderAgreesWithAdd: copyHeader leaves dst as Header.Add of
// each value would, and a later Add to dst does not write into src.
func TestCopyHeaderAgreesWithAdd(t *testing.T) {
	src := http.Header{"X-A": {"1", "2"}, "x-b": {"3"}, "X-C": {}, "X-D": nil, "Set-Cookie": {"a=1"}}
	src["X-A"] = append(make([]string, 0, 8), src["X-A"]...) // room an Add must not use
	dst := http.Header{"Set-Cookie": {"z=0"}, "X-Own": {"o"}}
	want := maps.Clone(dst)
	for k, vv := range src {
		for _, v := range vv {
			want.Add(k, v)
		}
	}
	copyHeader(dst, src)
	if !reflect.DeepEqual(dst, want) {
		t.Errorf("copyHeader gives %v, Add gives %v", dst, want)
	}
	dst.Add("X-A", "later")
	if got := src["X-A"][:3][2]; got == "later" {
		t.Error("an Add to dst wrote into src's values")
	}
}
