package rls

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/ratelimit"
	"github.com/quotagate/quotagate/ratelimit/redisstore"
)

// allocated returns the bytes the heap handed out while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestOversizedRequestsRejectedBeforeCopy: a request with more
// descriptors or entries than allowed is INVALID_ARGUMENT (400 over HTTP)
// before the service copies it: the call allocates a few KiB, not memory
// proportional to the request (100,000 entries would be 3.2 MB of Entry).
func TestOversizedRequestsRejectedBeforeCopy(t *testing.T) {
	e, _ := newTestEngine(t, Options{})
	svc := NewService(e, false)
	wide := &commonv3.RateLimitDescriptor{Entries: make([]*commonv3.RateLimitDescriptor_Entry, 100_000)}
	for i := range wide.Entries {
		wide.Entries[i] = &commonv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"}
	}
	many := make([]*commonv3.RateLimitDescriptor, 100_000)
	for i := range many {
		many[i] = pbDesc("remote_address", "192.0.2.1")
	}
	for name, in := range map[string]*rlsv3.RateLimitRequest{
		"100,000 entries":     {Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{wide}},
		"100,000 descriptors": {Domain: "edge", Descriptors: many},
	} {
		var err error
		n := allocated(func() { _, err = svc.ShouldRateLimit(context.Background(), in) })
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
		if n > 64<<10 {
			t.Errorf("%s: rejecting it allocated %d bytes, want under 64 KiB", name, n)
		}
	}

	// POST /v1/check: its body is bounded (64 KiB); the counts are checked
	// before the descriptors are copied too.
	h := CheckHandler(e, false)
	for name, body := range map[string]string{
		"3,000 descriptors": `{"domain": "edge", "descriptors": [` + strings.Repeat(`[{"key": "a"}],`, 2999) + `[{"key": "a"}]]}`,
		"3,000 entries":     `{"domain": "edge", "descriptors": [[` + strings.Repeat(`{"key": "a"},`, 2999) + `{"key": "a"}]]}`,
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/check", strings.NewReader(body)))
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "at most") && !strings.Contains(w.Body.String(), "1 to 32 entries") {
			t.Errorf("%s: %d %s, want 400 naming the bound", name, w.Code, w.Body.String())
		}
	}
}

// TestOversizedRequestsOverGRPC: over a real connection, thousands of
// descriptors or entries are INVALID_ARGUMENT, a message over
// MaxRequestBytes is RESOURCE_EXHAUSTED before it is decoded, and the
// service answers the next request as usual.
func TestOversizedRequestsOverGRPC(t *testing.T) {
	client, _, _ := startServer(t, false)
	ctx := context.Background()
	many := make([]*commonv3.RateLimitDescriptor, 5000)
	for i := range many {
		many[i] = pbDesc("a", "b")
	}
	wide := pbDesc()
	for range 5000 {
		wide.Entries = append(wide.Entries, &commonv3.RateLimitDescriptor_Entry{Key: "a", Value: "b"})
	}
	huge := pbDesc("remote_address", strings.Repeat("x", MaxRequestBytes))
	for name, c := range map[string]struct {
		in   *rlsv3.RateLimitRequest
		want codes.Code
	}{
		"5,000 descriptors":    {&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many}, codes.InvalidArgument},
		"5,000 entries":        {&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{wide}}, codes.InvalidArgument},
		"over MaxRequestBytes": {&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{huge}}, codes.ResourceExhausted},
	} {
		if _, err := client.ShouldRateLimit(ctx, c.in); status.Code(err) != c.want {
			t.Errorf("%s: %v, want %s", name, err, c.want)
		}
	}
	resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{pbDesc("remote_address", "192.0.2.9")}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("after the hostile requests: %v, %v", resp, err)
	}
}

// TestHugeHits: a cost at and beyond 2^32 (hits_addend is uint32 on the
// request and uint64 on a descriptor) never wraps: above a limit's
// capacity it is OVER_LIMIT and charges nothing; a limit of 2^32-1 per
// second (the largest requests_per_unit) takes a cost of 2^32-1 exactly, on
// the memory store and on Redis alike.
func TestHugeHits(t *testing.T) {
	srv := redistest.StartStandalone(t)
	redis := redisstore.Open(redisstore.Config{Addrs: []string{srv.Addr}, Timeout: 2 * time.Second})
	t.Cleanup(func() { redis.Close() })
	for name, store := range map[string]ratelimit.Store{"memory": nil, "redis": redis} {
		t.Run(name, func(t *testing.T) {
			e, _ := newTestEngine(t, Options{Store: store, Timeout: 2 * time.Second, KeyPrefix: redistest.KeyPrefix(t)})
			addr := desc("remote_address", "198.51.100.7") // 10 per minute
			for _, hits := range []uint64{math.MaxUint32, 1 << 32, 1<<32 + 1, 1 << 63, math.MaxUint64} {
				r := decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{{Entries: addr.Entries, Hits: &hits}}})
				if r.Overall != OverLimit {
					t.Errorf("hits %d of 10: %+v, want OVER_LIMIT", hits, r)
				}
			}
			r := decide(t, e, Request{Domain: "edge", Hits: math.MaxUint32, Descriptors: []Descriptor{addr}})
			if r.Overall != OverLimit {
				t.Errorf("request hits 2^32-1 of 10: %+v, want OVER_LIMIT", r)
			}
			if r := decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{addr}}); r.Overall != OK || r.Statuses[0].Remaining != 9 {
				t.Errorf("after the impossible costs: %+v, want OK with 9 left (nothing charged)", r)
			}

			most := &Override{RequestsPerUnit: math.MaxUint32, Unit: Second}
			big := Descriptor{Entries: entries("remote_address", "198.51.100.8"), Override: most}
			for _, c := range []struct {
				hits      uint64
				want      Code
				remaining uint32
			}{{1 << 32, OverLimit, math.MaxUint32}, {math.MaxUint32, OK, 0}, {1, OverLimit, 0}} {
				big.Hits = &c.hits
				r := decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{big}})
				if r.Overall != c.want || r.Statuses[0].Remaining != c.remaining {
					t.Errorf("hits %d of 2^32-1 per second: %s with %d left, want %s with %d", c.hits, r.Overall, r.Statuses[0].Remaining, c.want, c.remaining)
				}
			}
		})
	}
}

// TestOverrideWindowOverflow: a limit override whose unit × multiplier
// does not fit a time.Duration is INVALID_ARGUMENT, not a window wrapped
// around to a negative (unlimited) or arbitrary length.
func TestOverrideWindowOverflow(t *testing.T) {
	e, _ := newTestEngine(t, Options{})
	for _, o := range []Override{
		{RequestsPerUnit: 1, Unit: Minute, Multiplier: math.MaxUint32},
		{RequestsPerUnit: 1, Unit: Hour, Multiplier: 153_722_868}, // wraps to 43 minutes
		{RequestsPerUnit: 1, Unit: Year, Multiplier: 300},
	} {
		d := Descriptor{Entries: entries("remote_address", "198.51.100.9"), Override: &o}
		_, err := e.Decide(context.Background(), &Request{Domain: "edge", Descriptors: []Descriptor{d}})
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "unit_multiplier") {
			t.Errorf("override %+v: %v, want ErrBadRequest naming unit_multiplier", o, err)
		}
	}
	// The largest that fits is a limit like any other.
	o := Override{RequestsPerUnit: 1, Unit: Second, Multiplier: math.MaxUint32}
	d := Descriptor{Entries: entries("remote_address", "198.51.100.9"), Override: &o}
	if _, err := e.Decide(context.Background(), &Request{Domain: "edge", Descriptors: []Descriptor{d}}); err != nil {
		t.Errorf("override %+v: %v", o, err)
	}
}

// TestOverrideBeyondExactStillLimits: an override the store cannot apply
// exactly (requests × window over 2^53 µs) used to be answered as no limit
// at all; it limits now, at the same long-run rate with a smaller burst,
// or, for a single request per centuries, at the longest exact window.
func TestOverrideBeyondExactStillLimits(t *testing.T) {
	e, _ := newTestEngine(t, Options{})
	check := func(o Override, hits uint64, want Code) {
		t.Helper()
		d := Descriptor{Entries: entries("remote_address", fmt.Sprint("198.51.100.", o.RequestsPerUnit)), Override: &o, Hits: &hits}
		if r := decide(t, e, Request{Domain: "edge", Descriptors: []Descriptor{d}}); r.Overall != want {
			t.Errorf("override %+v, hits %d: %s, want %s", o, hits, r.Overall, want)
		}
	}
	once := Override{RequestsPerUnit: 1, Unit: Year, Multiplier: 286} // 286 years
	check(once, 1, OK)
	check(once, 1, OverLimit)
	// 1000 a year: 1000 × 3.15e13 µs is over 2^53, so 250 per 91.25 days.
	yearly := Override{RequestsPerUnit: 1000, Unit: Year}
	check(yearly, 251, OverLimit)
	check(yearly, 250, OK)
	check(yearly, 1, OverLimit)

	for _, c := range []struct {
		rate int64
		per  time.Duration
		want ratelimit.Limit
	}{
		{10, time.Hour, ratelimit.Limit{Rate: 10, Per: time.Hour}},
		{1000, 365 * 24 * time.Hour, ratelimit.Limit{Rate: 250, Per: 365 * 24 * time.Hour / 4}},
		{1, 286 * 365 * 24 * time.Hour, ratelimit.Limit{Rate: 1, Per: maxExactMicros * time.Microsecond}},
		{math.MaxUint32, math.MaxUint32 * time.Second, ratelimit.Limit{}}, // only checked to fit
	} {
		got := exactOverride(c.rate, c.per)
		if c.want != (ratelimit.Limit{}) && got != c.want {
			t.Errorf("exactOverride(%d, %v) = %+v, want %+v", c.rate, c.per, got, c.want)
		}
		if err := got.Validate(ratelimit.FixedWindow); err != nil {
			t.Errorf("exactOverride(%d, %v) = %+v: %v", c.rate, c.per, got, err)
		}
		if got.Per > c.per || got.Rate > c.rate {
			t.Errorf("exactOverride(%d, %v) = %+v: longer or larger than asked", c.rate, c.per, got)
		}
	}
}

// TestHugeHitsOverTheWire: costs at and beyond 2^32 through both front
// doors. gRPC: the request-wide hits_addend is a uint32, a descriptor's a
// uint64; both over the capacity are OVER_LIMIT. HTTP: hits up to 2^64-1 is
// OVER_LIMIT, beyond (or negative, or fractional) is 400.
func TestHugeHitsOverTheWire(t *testing.T) {
	client, _, base := startServer(t, false)
	ctx := context.Background()
	in := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: math.MaxUint32, Descriptors: []*commonv3.RateLimitDescriptor{pbDesc("remote_address", "192.0.2.77")}}
	if resp, err := client.ShouldRateLimit(ctx, in); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("gRPC hits_addend 2^32-1: %v, %v, want OVER_LIMIT", resp, err)
	}
	in.HitsAddend = 0
	for _, h := range []uint64{1 << 32, math.MaxUint64} {
		in.Descriptors[0].HitsAddend = wrapperspb.UInt64(h)
		if resp, err := client.ShouldRateLimit(ctx, in); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("gRPC descriptor hits_addend %d: %v, %v, want OVER_LIMIT", h, resp, err)
		}
	}
	post := func(hits string) (int, string) {
		body := `{"domain": "edge", "descriptors": [[{"key": "remote_address", "value": "192.0.2.77"}]], "hits": ` + hits + `}`
		resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, h := range []string{"4294967296", "18446744073709551615"} {
		if code, b := post(h); code != http.StatusOK || !strings.Contains(b, `"overall":"OVER_LIMIT"`) {
			t.Errorf("HTTP hits %s: %d %s, want 200 OVER_LIMIT", h, code, b)
		}
	}
	for _, h := range []string{"18446744073709551616", "-1", "1.5", "1e30"} {
		if code, b := post(h); code != http.StatusBadRequest {
			t.Errorf("HTTP hits %s: %d %s, want 400", h, code, b)
		}
	}
	// Nothing was charged by any of them.
	resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{pbDesc("remote_address", "192.0.2.77")}})
	if err != nil || resp.Statuses[0].LimitRemaining != 9 {
		t.Errorf("after the impossible costs: %v, %v, want 9 of 10 left", resp, err)
	}
}

// TestLargeHeaderValuesAreDecided: Envoy copies a header into every
// descriptor entry that reads it, so a client controls about its header
// size (up to 60 KiB under Envoy's default max_request_headers_kb) times
// the number of such entries. A request built from long headers is decided
// like any other: refused for its size, it would be an error that Envoy
// with failure_mode_deny: false answers by applying none of its limits,
// the client address's included. Here five entries read a 60 KiB path
// (300 KiB in all).
func TestLargeHeaderValuesAreDecided(t *testing.T) {
	client, _, _ := startServer(t, false)
	path := "/" + strings.Repeat("p", 60<<10)
	in := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{pbDesc("remote_address", "192.0.2.100")}}
	for i := range 5 {
		in.Descriptors = append(in.Descriptors, pbDesc("client", fmt.Sprint("c", i), "path", path))
	}
	for i := range 11 {
		resp, err := client.ShouldRateLimit(context.Background(), in)
		if err != nil {
			t.Fatalf("call %d: %v, want a decision", i+1, err)
		}
		if want := map[bool]rlsv3.RateLimitResponse_Code{true: rlsv3.RateLimitResponse_OK, false: rlsv3.RateLimitResponse_OVER_LIMIT}[i < 10]; resp.OverallCode != want {
			t.Fatalf("call %d: %v, want %s (10 a minute for the address)", i+1, resp.OverallCode, want)
		}
	}
}
