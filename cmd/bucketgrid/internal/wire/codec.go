// Package wire is how the rate-limit service reads Envoy's requests off
// gRPC: a codec that takes a descriptor's bytes as they come, and the
// service's registration, whose handler reads its request within a bound.
//
// Envoy copies request headers into descriptor values byte for byte, so a
// client chooses them, valid UTF-8 or not. Protocol buffers' string fields
// must hold UTF-8, and the standard codec refuses a message that breaks
// the rule before the service runs: gRPC Internal, which Envoy's
// failure_mode_deny (false by default) lets through, so any client could
// make itself unlimited with one byte. Codec decodes RateLimitRequest
// itself and keeps every string's bytes; the rules then decide such a value
// like any other.
package wire

import (
	"errors"
	"fmt"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Codec is gRPC's "proto" codec, except that it decodes a
// *rlspb.RateLimitRequest without checking that its strings are UTF-8, and
// the handler's check request (see Register) only within its size bound.
// Everything else (responses, health, reflection, the quota service) goes
// to the standard codec. Install it with grpc.ForceServerCodecV2.
type Codec struct{ std encoding.CodecV2 }

// NewCodec returns the codec.
func NewCodec() Codec { return Codec{std: encoding.GetCodecV2(protocodec.Name)} }

// Name is "proto": the content-subtype Envoy sends.
func (Codec) Name() string { return protocodec.Name }

// Marshal encodes v with the standard codec.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) { return c.std.Marshal(v) }

// Unmarshal decodes data into v: a *rlspb.RateLimitRequest by DecodeRequest,
// anything else by the standard codec.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*check); ok {
		// An error here would become gRPC Internal, written by grpc-go
		// before the handler could answer: an oversized message is left
		// undecoded and the handler refuses it.
		if m.size = data.Len(); m.size > m.max {
			return nil
		}
		return DecodeRequest(data.Materialize(), m.req)
	}
	if req, ok := v.(*rlspb.RateLimitRequest); ok {
		return DecodeRequest(data.Materialize(), req)
	}
	return c.std.Unmarshal(data, v)
}

// ErrMalformed reports bytes that are not a protocol-buffer encoding of a
// RateLimitRequest. Envoy never sends them; a client's descriptor values
// cannot cause it.
var ErrMalformed = errors.New("malformed RateLimitRequest")

// DecodeRequest decodes a RateLimitRequest (envoy.service.ratelimit.v3)
// from b into req as the standard decoder does, except that strings keep
// their bytes whatever they are. Unknown fields are skipped.
func DecodeRequest(b []byte, req *rlspb.RateLimitRequest) error {
	req.Reset()
	return fields(b, "request", func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			req.Domain = string(v)
		case num == 2 && typ == protowire.BytesType:
			d := &ratelimitpb.RateLimitDescriptor{}
			if err := decodeDescriptor(v, d); err != nil {
				return err
			}
			req.Descriptors = append(req.Descriptors, d)
		case num == 3 && typ == protowire.VarintType:
			req.HitsAddend = uint32(n)
		}
		return nil
	})
}

func decodeDescriptor(b []byte, d *ratelimitpb.RateLimitDescriptor) error {
	return fields(b, "descriptor", func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			e := &ratelimitpb.RateLimitDescriptor_Entry{}
			err := fields(v, "entry", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					e.Key = string(v)
				case num == 2 && typ == protowire.BytesType:
					e.Value = string(v)
				}
				return nil
			})
			if err != nil {
				return err
			}
			d.Entries = append(d.Entries, e)
		case num == 2 && typ == protowire.BytesType:
			if d.Limit == nil {
				d.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{}
			}
			return decodeOverride(v, d.Limit)
		case num == 3 && typ == protowire.BytesType:
			if d.HitsAddend == nil {
				d.HitsAddend = &wrapperspb.UInt64Value{}
			}
			return fields(v, "hits_addend", func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
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

func decodeOverride(b []byte, o *ratelimitpb.RateLimitDescriptor_RateLimitOverride) error {
	return fields(b, "limit", func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			o.RequestsPerUnit = uint32(n)
		case num == 2 && typ == protowire.VarintType:
			o.Unit = typepb.RateLimitUnit(int32(n))
		case num == 3 && typ == protowire.BytesType:
			if o.UnitMultiplier == nil {
				o.UnitMultiplier = &wrapperspb.UInt32Value{}
			}
			return fields(v, "unit_multiplier", func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
				if num == 1 && typ == protowire.VarintType {
					o.UnitMultiplier.Value = uint32(n)
				}
				return nil
			})
		}
		return nil
	})
}

// fields calls f for every field of the message b: a length-delimited
// field's bytes in v, a varint's value in n (other wire types are skipped
// by f's switch, as fields of no known number and type are).
func fields(b []byte, what string, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return fmt.Errorf("%w: %s: %w", ErrMalformed, what, protowire.ParseError(l))
		}
		b = b[l:]
		var (
			v []byte
			n uint64
		)
		switch typ {
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return fmt.Errorf("%w: %s field %d: %w", ErrMalformed, what, num, protowire.ParseError(l))
		}
		b = b[l:]
		if err := f(num, typ, v, n); err != nil {
			return err
		}
	}
	return nil
}
