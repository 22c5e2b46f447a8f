package rls

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Service implements envoy.service.ratelimit.v3.RateLimitService on an
// Engine.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	engine *Engine
	// headers adds draft-10 RateLimit and RateLimit-Policy headers to
	// every response with a limit.
	headers bool
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// NewService returns the gRPC service of e. With headers, each response
// that has a limit carries RateLimit-Policy and RateLimit headers (IETF
// draft-ietf-httpapi-ratelimit-headers-10) for Envoy to add to the client's
// response.
func NewService(e *Engine, headers bool) *Service { return &Service{engine: e, headers: headers} }

var protoUnits = [...]rlsv3.RateLimitResponse_RateLimit_Unit{
	Second: rlsv3.RateLimitResponse_RateLimit_SECOND, Minute: rlsv3.RateLimitResponse_RateLimit_MINUTE,
	Hour: rlsv3.RateLimitResponse_RateLimit_HOUR, Day: rlsv3.RateLimitResponse_RateLimit_DAY,
	Week: rlsv3.RateLimitResponse_RateLimit_WEEK, Month: rlsv3.RateLimitResponse_RateLimit_MONTH,
	Year: rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// overrideUnits maps envoy.type.v3.RateLimitUnit, which a descriptor's
// limit override uses, to Unit.
var overrideUnits = map[typev3.RateLimitUnit]Unit{
	typev3.RateLimitUnit_SECOND: Second, typev3.RateLimitUnit_MINUTE: Minute, typev3.RateLimitUnit_HOUR: Hour,
	typev3.RateLimitUnit_DAY: Day, typev3.RateLimitUnit_MONTH: Month, typev3.RateLimitUnit_YEAR: Year,
}

// ShouldRateLimit decides a request. A malformed request is
// INVALID_ARGUMENT; a store failure whose on_store_error is unavailable is
// UNAVAILABLE, so that Envoy's failure_mode_deny decides; a caller that
// left before the store decided (it cancelled, or its grpc-timeout passed)
// gets CANCELLED or DEADLINE_EXCEEDED, which is not a store failure. Keys
// and values may hold any bytes (see requestCodec). A descriptor with
// is_negative_hits (a refund) is answered OK and charges nothing: refunds
// are not supported.
func (s *Service) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := checkCounts(len(in.GetDescriptors()), func(i int) int { return len(in.Descriptors[i].GetEntries()) }); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	req := Request{Domain: in.GetDomain(), Hits: uint64(in.GetHitsAddend()), Descriptors: make([]Descriptor, len(in.GetDescriptors()))}
	for i, d := range in.GetDescriptors() {
		out := &req.Descriptors[i]
		out.Entries = make([]Entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			out.Entries[j] = Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		if h := d.GetHitsAddend(); h != nil {
			v := h.GetValue()
			out.Hits = &v
		}
		if d.GetIsNegativeHits() {
			zero := uint64(0)
			out.Hits = &zero
		}
		if o := d.GetLimit(); o != nil {
			out.Override = protoOverride(o)
		}
	}
	resp, err := s.engine.Decide(ctx, &req)
	switch {
	case err != nil && ctx.Err() != nil: // the caller cancelled, or its grpc-timeout passed
		return nil, status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, ErrBadRequest):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrUnavailable):
		return nil, status.Error(codes.Unavailable, err.Error())
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}
	out := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(resp.Overall), Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(resp.Statuses))}
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		ps := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_Code(st.Code), LimitRemaining: st.Remaining}
		if r := st.Rule; r != nil && !r.Unlimited {
			ps.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: protoUnits[r.Unit]}
			ps.DurationUntilReset = durationpb.New(ceilSecond(st.ResetAfter))
		}
		out.Statuses[i] = ps
	}
	if s.headers {
		if name, policy, limit := Headers(resp); name != "" {
			out.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: "RateLimit-Policy", Value: policy}, {Key: "RateLimit", Value: limit}}
		}
	}
	return out, nil
}

// protoOverride converts a descriptor's limit override; an unknown unit
// stays 0 and is rejected by Decide.
func protoOverride(o *commonv3.RateLimitDescriptor_RateLimitOverride) *Override {
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
		mult = m.GetValue()
	}
	return &Override{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: overrideUnits[o.GetUnit()], Multiplier: mult}
}

// ceilSecond rounds d up to a whole second, as envoyproxy/ratelimit
// reports duration_until_reset.
func ceilSecond(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}

// Headers returns the draft-10 rate limit headers of a response: the
// status that decided it (the over-limit one that resets last, else the one
// with the fewest units left) as
//
//	RateLimit-Policy: "<rule path>";q=<requests_per_unit>;w=<unit seconds>
//	RateLimit: "<rule path>";r=<remaining>;t=<seconds until reset>
//
// name is "" when no status has a limit.
func Headers(resp Response) (name, policy, limit string) {
	best := -1
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		if st.Rule == nil || st.Rule.Unlimited || st.ShadowOver {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := &resp.Statuses[best]
		switch {
		case st.Code == OverLimit && b.Code != OverLimit,
			st.Code == b.Code && st.Code == OverLimit && st.ResetAfter > b.ResetAfter,
			st.Code == b.Code && st.Code == OK && st.Remaining < b.Remaining:
			best = i
		}
	}
	if best < 0 {
		return "", "", ""
	}
	st := &resp.Statuses[best]
	name = sfString(st.Rule.Path)
	window := int64(st.Rule.Unit.Duration() / time.Second)
	if st.Rule.Limit.Per > 0 {
		window = int64(ceilSecond(st.Rule.Limit.Per) / time.Second)
	}
	policy = name + ";q=" + strconv.FormatUint(uint64(st.Rule.RequestsPerUnit), 10) + ";w=" + strconv.FormatInt(window, 10)
	limit = name + ";r=" + strconv.FormatUint(uint64(min(st.Remaining, math.MaxUint32)), 10) +
		";t=" + strconv.FormatInt(int64(ceilSecond(st.ResetAfter)/time.Second), 10)
	return name, policy, limit
}

// sfString renders s as a Structured Field string, dropping the characters
// one cannot hold.
func sfString(s string) string {
	return `"` + strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return -1
		}
		return r
	}, s) + `"`
}
