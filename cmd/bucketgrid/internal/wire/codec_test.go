package wire

import (
	"errors"
	"math/rand/v2"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// randomRequest is a valid RateLimitRequest using every field.
func randomRequest(rng *rand.Rand) *rlspb.RateLimitRequest {
	word := func() string {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return string(b) + []string{"", "é", "日本"}[rng.IntN(3)]
	}
	r := &rlspb.RateLimitRequest{Domain: word(), HitsAddend: uint32(rng.IntN(3))}
	for range rng.IntN(4) {
		d := &ratelimitpb.RateLimitDescriptor{IsNegativeHits: rng.IntN(4) == 0}
		for range rng.IntN(4) {
			d.Entries = append(d.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: word(), Value: word()})
		}
		if rng.IntN(2) == 0 {
			d.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rng.Uint32(),
				Unit: typepb.RateLimitUnit(rng.IntN(7))}
			if rng.IntN(2) == 0 {
				d.Limit.UnitMultiplier = wrapperspb.UInt32(rng.Uint32())
			}
		}
		if rng.IntN(2) == 0 {
			d.HitsAddend = wrapperspb.UInt64(rng.Uint64())
		}
		r.Descriptors = append(r.Descriptors, d)
	}
	return r
}

// DecodeRequest reads what the standard decoder reads, field for field,
// whatever the request holds.
func TestDecodeRequestAsProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewCodec()
	for i := range 2000 {
		want := randomRequest(rng)
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var got rlspb.RateLimitRequest
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("request %d: decoded %v, want %v", i, &got, want)
		}
	}
}

// appendEntry appends a descriptor entry field of raw key and value bytes,
// which proto.Marshal would refuse.
func appendEntry(b []byte, key, value string) []byte {
	var e []byte
	e = protowire.AppendTag(e, 1, protowire.BytesType)
	e = protowire.AppendString(e, key)
	e = protowire.AppendTag(e, 2, protowire.BytesType)
	e = protowire.AppendString(e, value)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendBytes(b, e)
}

// RawRequest encodes a request of one descriptor of raw entries (key,
// value, key, value…): bytes a client can make Envoy send.
func RawRequest(domain string, kv ...string) []byte {
	var d []byte
	for i := 0; i+1 < len(kv); i += 2 {
		d = appendEntry(d, kv[i], kv[i+1])
	}
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, d)
}

func TestInvalidUTF8IsKept(t *testing.T) {
	for _, v := range []string{"\xff", "a\xc3(", "\xed\xa0\x80", "\xc0\xaf", "ok"} {
		b := RawRequest("d", "k", v)
		if err := proto.Unmarshal(b, new(rlspb.RateLimitRequest)); (err == nil) != (v == "ok") {
			t.Fatalf("%q: the standard decoder says %v", v, err)
		}
		var got rlspb.RateLimitRequest
		if err := NewCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if e := got.Descriptors[0].Entries[0]; got.Domain != "d" || e.Key != "k" || e.Value != v {
			t.Fatalf("%q: decoded %q %q %q", v, got.Domain, e.Key, e.Value)
		}
	}
}

// Truncated or corrupt bytes are ErrMalformed, never a panic.
func TestDecodeRequestMalformed(t *testing.T) {
	b, _ := proto.Marshal(randomRequest(rand.New(rand.NewPCG(3, 4))))
	b = append(b, RawRequest("d", "k", "v")...)
	for n := range len(b) {
		var r rlspb.RateLimitRequest
		if err := DecodeRequest(b[:n], &r); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
	for _, bad := range [][]byte{{0x12, 0x05, 0x0a}, {0x0a}, {0x80}, {0x12, 0x02, 0x0a, 0x7f}} {
		if err := DecodeRequest(bad, new(rlspb.RateLimitRequest)); !errors.Is(err, ErrMalformed) {
			t.Errorf("% x: %v, want ErrMalformed", bad, err)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	b, _ := proto.Marshal(randomRequest(rand.New(rand.NewPCG(5, 6))))
	f.Add(b)
	f.Add(RawRequest("d", "k", "\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var got rlspb.RateLimitRequest
		err := DecodeRequest(b, &got)
		var want rlspb.RateLimitRequest
		if (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, &want) == nil && (err != nil || !proto.Equal(&got, &want)) {
			t.Fatalf("the standard decoder reads %v, DecodeRequest %v (%v)", &want, &got, err)
		}
	})
}
