package main

import (
	"context"
	endian "encoding/binary"
	"net/http"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// rawMessage frames a request of one descriptor of the raw entries (key,
// value, key, value…) as a gRPC message: bytes a client can make Envoy
// send, which proto.Marshal refuses when they are not UTF-8.
func rawMessage(domain string, kv ...string) []byte {
	var d []byte
	for i := 0; i+1 < len(kv); i += 2 {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, kv[i])
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendString(e, kv[i+1])
		d = protowire.AppendTag(d, 1, protowire.BytesType)
		d = protowire.AppendBytes(d, e)
	}
	b := make([]byte, 5, 64)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, d)
	endian.BigEndian.PutUint32(b[1:], uint32(len(b)-5))
	return b
}

// A descriptor value is a client's bytes (Envoy copies a header into it):
// whatever they are, the service decides them like any value — one
// bucket each, OK then OVER_LIMIT — and never answers an error that
// Envoy's failure_mode_deny would let through. The metrics still serve.
func TestClientBytesAreDecided(t *testing.T) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"srv.yaml": `
domain: srv
descriptors:
  - key: k
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`})
	in := startInstance(t, "-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-backend", "memory")
	c, err := dialH2(in.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	values := []string{"\xff", "\xfe", "a\xc3(", "\xed\xa0\x80", "\xc0\xaf", "\xff\xff\xff\xff", "é", "plain"}
	for round, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		for _, v := range values {
			resp, err := c.ShouldRateLimit(ctx, rawMessage("srv", "k", v))
			if err != nil {
				t.Fatalf("value %q, round %d: %v", v, round, err)
			}
			if resp.OverallCode != want {
				t.Fatalf("value %q, round %d: %v, want %v", v, round, resp.OverallCode, want)
			}
		}
	}
	// A key that is not UTF-8 matches no rule: unlimited, as any unknown key.
	if resp, err := c.ShouldRateLimit(ctx, rawMessage("srv", "k\xff", "v")); err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
		t.Fatalf("invalid key: %v %v", resp, err)
	}
	r, err := http.Get("http://" + in.httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 200 {
		t.Fatalf("/metrics: %s", r.Status)
	}
}
