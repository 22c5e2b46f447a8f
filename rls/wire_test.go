package rls

import (
	"bytes"
	"context"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rawCodec sends and receives messages as the bytes they are, so that a
// test can send what Envoy sends but Go's protobuf would refuse to encode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// rawRequest is in's wire form with each placeholder string replaced by
// its bytes (of the same length, so that the lengths stay right).
func rawRequest(t *testing.T, in *rlsv3.RateLimitRequest, placeholders map[string]string) []byte {
	t.Helper()
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for p, raw := range placeholders {
		if len(p) != len(raw) || !bytes.Contains(b, []byte(p)) {
			t.Fatalf("placeholder %q", p)
		}
		b = bytes.ReplaceAll(b, []byte(p), []byte(raw))
	}
	return b
}

// TestNonUTF8DescriptorsAreDecided: Envoy sends header values as they
// came, and a header may hold bytes that are not UTF-8 (0xff). Such a
// request used to be refused undecoded (gRPC INTERNAL: "string field
// contains invalid UTF-8"), which Envoy with failure_mode_deny: false
// admits with none of its limits applied: one byte in a header a
// descriptor reads skipped every limit of the request, the client
// address's too. It is decided now, each distinct value counted on its
// own; malformed wire data is still refused.
func TestNonUTF8DescriptorsAreDecided(t *testing.T) {
	_, conn, _ := startServer(t, false)
	call := func(raw []byte) (*rlsv3.RateLimitResponse, error) {
		var out []byte
		err := conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &raw, &out, grpc.ForceCodec(rawCodec{}))
		if err != nil {
			return nil, err
		}
		resp := &rlsv3.RateLimitResponse{}
		return resp, proto.Unmarshal(out, resp)
	}
	// A per-address limit (10 a minute) next to a per-client one keyed
	// by a header value that is not UTF-8.
	in := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
		pbDesc("remote_address", "192.0.2.60"), pbDesc("client", "PLACEHOLDER-1", "path", "/x"),
	}}
	first := rawRequest(t, in, map[string]string{"PLACEHOLDER-1": "caf\xe9\xff-------1"})
	for i := range 10 {
		resp, err := call(first)
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != uint32(9-i) {
			t.Fatalf("call %d: %v, %v, want OK with %d left for the address", i+1, resp, err, 9-i)
		}
	}
	if resp, err := call(first); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("11th call: %v, %v, want OVER_LIMIT", resp, err)
	}
	// Another invalid value has a counter of its own (20 a second).
	in.Descriptors = in.Descriptors[1:]
	other := rawRequest(t, in, map[string]string{"PLACEHOLDER-1": "caf\xe9\xff-------2"})
	if resp, err := call(other); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 19 {
		t.Fatalf("another value: %v, %v, want OK with 19 left", resp, err)
	}
	// Wire data that is not a message at all is still refused.
	for _, bad := range [][]byte{first[:len(first)-3], {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}} {
		if _, err := call(bad); status.Code(err) != codes.Internal {
			t.Errorf("malformed request % x: %v, want Internal", bad, err)
		}
	}
}

// TestDecodeRequestAgreesWithProto: on valid input, decodeRequest reads
// every field the service uses as proto.Unmarshal does, and skips the
// fields it does not use.
func TestDecodeRequestAgreesWithProto(t *testing.T) {
	d := pbDesc("client", "c", "path", "/x")
	d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_HOUR, UnitMultiplier: wrapperspb.UInt32(3)}
	d.HitsAddend = wrapperspb.UInt64(1 << 40)
	d.IsNegativeHits = true
	zero := pbDesc("k", "")
	zero.HitsAddend = wrapperspb.UInt64(0)
	zero.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{}
	in := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 1<<32 - 1, Descriptors: []*commonv3.RateLimitDescriptor{d, zero, pbDesc("a", "b")}}
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	// Fields the service does not read (a fixed64 and a string of a later
	// version) are skipped as unknown.
	b = protowire.AppendTag(b, 90, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, 1)
	b = protowire.AppendTag(b, 91, protowire.BytesType)
	b = protowire.AppendString(b, "later")
	got := &rlsv3.RateLimitRequest{}
	if err := decodeRequest(b, got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, in) {
		t.Errorf("decodeRequest:\n got %v\nwant %v", got, in)
	}
}

// TestCountFloodIsNotDecoded: a message near MaxRequestBytes made of empty
// descriptors, or of one descriptor with empty entries, is millions of
// them; decoded in full it took over 60 times its size in memory before
// the service refused it. The codec keeps one past each limit, and the
// call is still INVALID_ARGUMENT.
func TestCountFloodIsNotDecoded(t *testing.T) {
	const n = (MaxRequestBytes - 64) / 2
	descs := bytes.Repeat([]byte{0x12, 0x00}, n)            // field 2, empty
	entries := bytes.Repeat([]byte{0x0a, 0x00}, n-8)        // field 1, empty
	oneDesc := protowire.AppendBytes([]byte{0x12}, entries) // one descriptor holding them
	for name, c := range map[string]struct {
		raw               []byte
		descs, maxEntries int
	}{
		"descriptors": {descs, MaxDescriptors + 1, 0},
		"entries":     {oneDesc, 1, MaxEntries + 1},
	} {
		got := &rlsv3.RateLimitRequest{}
		if err := newRequestCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(c.raw)}, got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		most := 0
		for _, d := range got.Descriptors {
			most = max(most, len(d.Entries))
		}
		if len(got.Descriptors) != c.descs || most != c.maxEntries {
			t.Errorf("%s: decoded %d descriptors, at most %d entries; want %d and %d", name, len(got.Descriptors), most, c.descs, c.maxEntries)
		}
	}

	_, conn, _ := startServer(t, false)
	for name, raw := range map[string][]byte{"descriptors": descs, "entries": oneDesc} {
		var out []byte
		err := conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &raw, &out, grpc.ForceCodec(rawCodec{}))
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s flood: %v, want InvalidArgument", name, err)
		}
	}
}
