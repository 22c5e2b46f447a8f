package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// setRateLimitHeadersRef is the straightforward formatting of the two
// headers (one string per header, built by concatenation): the reference
// setRateLimitHeaders must match byte for byte.
func setRateLimitHeadersRef(h http.Header, v rateLimitView) {
	if v.policy == "" {
		return
	}
	name := `"` + v.policy + `"`
	if strings.ContainsAny(v.policy, `"\`) {
		name = strconv.Quote(strings.Map(func(r rune) rune {
			if r < 0x20 || r > 0x7e {
				return -1
			}
			return r
		}, v.policy))
	}
	if v.window == 0 {
		h.Set("Ratelimit-Policy", name+";q="+strconv.FormatInt(v.quota, 10))
		h.Set("Ratelimit", name+";r="+strconv.FormatInt(max(v.remaining, 0), 10))
		return
	}
	h.Set("Ratelimit-Policy", name+";q="+strconv.FormatInt(v.quota, 10)+";w="+strconv.FormatInt(v.window, 10))
	t := int64(0)
	if v.reset > 0 {
		t = ceilSeconds(v.reset)
	}
	h.Set("Ratelimit", name+";r="+strconv.FormatInt(max(v.remaining, 0), 10)+";t="+strconv.FormatInt(t, 10))
}

func TestRateLimitHeadersByteForByte(t *testing.T) {
	long := strings.Repeat("p", 300) // longer than the stack buffer
	views := []rateLimitView{
		{},
		{policy: "tenant", quota: 20, window: 2, remaining: 19, reset: 100 * time.Millisecond},
		{policy: "tenant", quota: 100000, window: 1, remaining: 99999, reset: time.Second + 1},
		{policy: "tenant", quota: 5, window: 60, remaining: -3, reset: 0},
		{policy: "tenant", quota: 5, window: 60, remaining: 0, reset: -time.Second},
		{policy: "inflight", quota: 1, window: 0, remaining: 0},
		{policy: "inflight", quota: 9223372036854775807, window: 0, remaining: 9223372036854775807},
		{policy: `we"ird\na` + "\x01me\u00e9", quota: 3, window: 86400, remaining: 2, reset: 86399 * time.Second},
		{policy: long, quota: 9223372036854775807, window: 9223372036, remaining: 9223372036854775807, reset: 1<<63 - 1},
	}
	for _, v := range views {
		got, want := http.Header{}, http.Header{}
		setRateLimitHeaders(got, v, new([2]string))
		setRateLimitHeadersRef(want, v)
		if len(got) != len(want) {
			t.Errorf("%+v: headers %v, want %v", v, got, want)
			continue
		}
		for k, w := range want {
			if g := got[k]; len(g) != 1 || g[0] != w[0] {
				t.Errorf("%+v: %s = %q, want %q", v, k, g, w)
			}
		}
	}
}

// The two headers share one backing array: adding a value to one (as the
// proxy does when the upstream sends its own) must leave the other intact.
func TestRateLimitHeadersAddKeepsOther(t *testing.T) {
	h := http.Header{}
	setRateLimitHeaders(h, rateLimitView{policy: "tenant", quota: 20, window: 2, remaining: 19}, new([2]string))
	h.Add("Ratelimit-Policy", "upstream")
	h.Add("Ratelimit", "upstream2")
	if got := h["Ratelimit"]; len(got) != 2 || got[0] != `"tenant";r=19;t=0` || got[1] != "upstream2" {
		t.Errorf("Ratelimit = %q", got)
	}
	if got := h["Ratelimit-Policy"]; len(got) != 2 || got[0] != `"tenant";q=20;w=2` || got[1] != "upstream" {
		t.Errorf("Ratelimit-Policy = %q", got)
	}
}

// Allocations are deterministic: the string holding both values only; the
// array behind the two slices is the request state's (the header map's own
// growth aside, which a reused map does not need).
func TestRateLimitHeadersAllocs(t *testing.T) {
	h := http.Header{}
	v := rateLimitView{policy: "tenant", quota: 100000, window: 1, remaining: 99999, reset: time.Second}
	vals := new([2]string)
	if n := testing.AllocsPerRun(100, func() { setRateLimitHeaders(h, v, vals) }); n > 1 {
		t.Errorf("%v allocations per call, want at most 1", n)
	}
}
