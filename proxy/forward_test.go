package proxy

import (
	"maps"
	"mime"
	"net/http"
	"net/textproto"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestForwardedQuery: a query passes as it came unless it holds a ';'
// or a malformed percent escape; then only the parameters url.ParseQuery
// accepts pass, re-encoded, so that no parameter reaches the upstream
// that the gateway would not read as one.
func TestForwardedQuery(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""}, {"a=1", "a=1"}, {"b=2&a=1", "b=2&a=1"}, {"a=%41&b=%e2%82%ac", "a=%41&b=%e2%82%ac"},
		{"a+b=c+d&&=", "a+b=c+d&&="}, {"x", "x"}, {"%41%42", "%41%42"}, {"a=%", ""},
		{"a=1;b=2", ""}, {"a=1;b=2&c=3", "c=3"}, {";", ""}, {"c=%zz&d=1", "d=1"}, {"a=%4", ""},
		{"a=%4g&b=2", "b=2"}, {"%%41", ""}, {"z=1&y=2&x=%", "y=2&z=1"},
		{"_method=GET&x=1;_method=DELETE", "_method=GET"},
	} {
		if got := forwardedQuery(c.in); got != c.want {
			t.Errorf("forwardedQuery(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestIsEventStreamAgreesWithMime: isEventStream is
// mime.ParseMediaType's reading of text/event-stream, which the
// forwarder flushes after every write.
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
// with Header.Del deletes, for names in any
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
