package rls

import (
	"errors"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// requestCodec is the gRPC server's codec: gRPC's protobuf codec, except
// that a RateLimitRequest whose strings are not valid UTF-8 is decoded
// anyway (see decodeRequest). Envoy copies header values into descriptor
// values byte for byte and sends them so, although a proto3 string must be
// UTF-8; refusing such a request (gRPC INTERNAL) would let Envoy's
// failure_mode_deny: false admit it with none of its limits applied, so a
// client could skip every limit of a request by adding one byte such as
// 0xff to a header that a descriptor reads.
type requestCodec struct{ encoding.CodecV2 }

func newRequestCodec() requestCodec { return requestCodec{encoding.GetCodecV2(grpcproto.Name)} }

// Unmarshal decodes data into v as gRPC's codec does; a RateLimitRequest
// that proto.Unmarshal refuses is decoded by decodeRequest, and the
// original error is returned when that fails too (malformed wire data).
func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	in, ok := v.(*rlsv3.RateLimitRequest)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if overCounts(b) {
		// Decoded in full, a MaxRequestBytes message of empty descriptors
		// (or entries) is millions of them, over 60 times its size in
		// memory, only to be refused: decodeRequest stops one past each
		// limit, which the service refuses as INVALID_ARGUMENT all the same.
		return decodeRequest(b, in)
	}
	err := proto.Unmarshal(b, in)
	if err != nil {
		proto.Reset(in)
		if decodeRequest(b, in) == nil {
			return nil
		}
	}
	return err
}

var (
	errWire = errors.New("rls: malformed RateLimitRequest")
	// errOver ends overCounts' scan at the first count over its limit.
	errOver = errors.New("rls: over a count limit")
)

// overCounts reports whether the wire form b of a RateLimitRequest holds
// more than MaxDescriptors descriptors, or a descriptor more than
// MaxEntries entries, reading no further than the first count over. It
// copies nothing; malformed data is not over (the decoder says what is
// wrong with it).
func overCounts(b []byte) bool {
	descs := 0
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != 2 || typ != protowire.BytesType {
			return nil
		}
		if descs++; descs > MaxDescriptors {
			return errOver
		}
		entries := 0
		return fields(v, func(num protowire.Number, typ protowire.Type, _ []byte, _ uint64) error {
			if num == 1 && typ == protowire.BytesType {
				if entries++; entries > MaxEntries {
					return errOver
				}
			}
			return nil
		})
	})
	return errors.Is(err, errOver)
}

// decodeRequest decodes a RateLimitRequest's wire form into m (which must
// be empty) as proto.Unmarshal does, but keeps the bytes of a string field
// as they are when they are not valid UTF-8. It reads the fields the
// service uses: domain, hits_addend, and each descriptor's entries, limit
// override, hits_addend and is_negative_hits; other fields, and known ones
// of an unexpected wire type, are skipped as unknown. Strings are copied
// out of b. Descriptors past MaxDescriptors+1, and entries past
// MaxEntries+1 in a descriptor, are skipped: one more than allowed is
// enough for the service to refuse the request.
func decodeRequest(b []byte, m *rlsv3.RateLimitRequest) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			m.Domain = string(v)
		case num == 2 && typ == protowire.BytesType:
			if len(m.Descriptors) > MaxDescriptors {
				return nil
			}
			d := &commonv3.RateLimitDescriptor{}
			m.Descriptors = append(m.Descriptors, d)
			return decodeDescriptor(v, d)
		case num == 3 && typ == protowire.VarintType:
			m.HitsAddend = uint32(n)
		}
		return nil
	})
}

func decodeDescriptor(b []byte, d *commonv3.RateLimitDescriptor) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			if len(d.Entries) > MaxEntries {
				return nil
			}
			e := &commonv3.RateLimitDescriptor_Entry{}
			d.Entries = append(d.Entries, e)
			return fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					e.Key = string(v)
				case num == 2 && typ == protowire.BytesType:
					e.Value = string(v)
				}
				return nil
			})
		case num == 2 && typ == protowire.BytesType:
			if d.Limit == nil {
				d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{}
			}
			return decodeOverride(v, d.Limit)
		case num == 3 && typ == protowire.BytesType:
			if d.HitsAddend == nil {
				d.HitsAddend = &wrapperspb.UInt64Value{}
			}
			return fields(v, func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
				if num == 1 && typ == protowire.VarintType {
					d.HitsAddend.Value = n
				}
				return nil
			})
		case num == 4 && typ == protowire.VarintType:
			d.IsNegativeHits = n != 0
		}
		return nil
	})
}

func decodeOverride(b []byte, o *commonv3.RateLimitDescriptor_RateLimitOverride) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			o.RequestsPerUnit = uint32(n)
		case num == 2 && typ == protowire.VarintType:
			o.Unit = typev3.RateLimitUnit(int32(n))
		case num == 3 && typ == protowire.BytesType:
			if o.UnitMultiplier == nil {
				o.UnitMultiplier = &wrapperspb.UInt32Value{}
			}
			return fields(v, func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
				if num == 1 && typ == protowire.VarintType {
					o.UnitMultiplier.Value = uint32(n)
				}
				return nil
			})
		}
		return nil
	})
}

// fields calls f with each field of the message b: its number and wire
// type, and its bytes (length-delimited fields) or its value (varints). A
// malformed field is errWire; fixed-width and group fields are skipped.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return errWire
		}
		b = b[k:]
		var v []byte
		var n uint64
		switch typ {
		case protowire.BytesType:
			v, k = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			n, k = protowire.ConsumeVarint(b)
		default:
			k = protowire.ConsumeFieldValue(num, typ, b)
		}
		if k < 0 {
			return errWire
		}
		b = b[k:]
		if err := f(num, typ, v, n); err != nil {
			return err
		}
	}
	return nil
}
