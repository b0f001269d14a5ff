package wasmfilter

import (
	"errors"
	"strings"

	"github.com/bucketgrid/bucketgrid/core"
)

// key builds the bucket key of the current request under pol: the policy
// name and each configured part, NUL-separated. path is the :path as the
// configuration reads it. A key the store cannot hold verbatim is digested,
// so that every request has a key the store accepts.
func (p *Plugin) key(pol *policy, path string) (string, error) {
	var b strings.Builder
	b.WriteString(pol.name)
	for _, part := range pol.key {
		b.WriteByte(0)
		switch part.kind {
		case keySourceAddress:
			v, found, err := p.host.Property("source", "address")
			if err != nil && !errors.Is(err, StatusNotFound) {
				return "", err
			}
			if found {
				b.WriteString(hostOf(string(v)))
			}
		case keyPath:
			b.WriteString(path)
		case keyHeader:
			v, _, err := p.host.Header(RequestHeaders, part.name)
			if err != nil && !errors.Is(err, StatusNotFound) {
				return "", err
			}
			b.WriteString(v)
		}
	}
	// A key too long for a slot, or not valid UTF-8, becomes its digest,
	// in a namespace no literal key reaches (core.FitKey).
	key, _ := core.FitKey(b.String(), MaxKeyLen)
	return key, nil
}

// hostOf strips the port from an Envoy address: "10.0.0.1:5000" →
// "10.0.0.1", "[::1]:5000" → "::1". Other forms are returned unchanged.
func hostOf(addr string) string {
	if strings.HasPrefix(addr, "[") {
		if end := strings.IndexByte(addr, ']'); end > 0 {
			return addr[1:end]
		}
		return addr
	}
	if i := strings.LastIndexByte(addr, ':'); i >= 0 && strings.IndexByte(addr, ':') == i {
		return addr[:i]
	}
	return addr
}
