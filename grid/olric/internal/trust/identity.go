package trust

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// Limits and flags of the identity question and its answer.
const (
	MaxMeta         = 512 // memberlist's MetaMaxSize
	MaxAddr         = 300
	NonceLen        = 32
	ProofFlagPw     = 1 // the member has Olric's Password
	ProofFlagGossip = 2 // the member has GossipKeys
)

// Record is what a node says about itself: its Olric metadata and its
// gossip address.
type Record struct {
	Meta string
	Addr string
}

// MAC proves knowledge of Olric's password to a member that knows it,
// without revealing it, for one answer on one connection: it covers the
// connection's TLS keying material (binding, see Binding), the asker's and
// the answerer's names, the asker's nonce and the answer. A proof obtained
// on one connection is worthless on another, so a member's answer cannot
// be passed on by a node that lacks the password.
func MAC(password string, binding []byte, asker, answerer string, nonce [NonceLen]byte, r Record, flags byte) []byte {
	h := hmac.New(sha256.New, []byte(password))
	h.Write([]byte("bucketgrid/olric identity v2"))
	var b []byte
	for _, f := range []string{string(binding), asker, answerer, string(nonce[:]), r.Meta, r.Addr} {
		b = AppendField(b, []byte(f))
	}
	h.Write(append(b, flags))
	return h.Sum(nil)
}

// Binding returns the keying material exported from c's TLS session
// (RFC 8446 §7.5, RFC 5705) under this package's label, or nil for a
// connection without TLS. Both ends of one session get the same bytes; no
// other session does.
func Binding(c net.Conn) ([]byte, error) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return nil, nil
	}
	cs := tc.ConnectionState()
	return cs.ExportKeyingMaterial("EXPORTER-bucketgrid-olric-identity", nil, 32)
}

// ReadField reads a uvarint length of at most limit and that many bytes;
// a longer length is frame.ErrMalformed.
func ReadField(r *bufio.Reader, limit int) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, err
	}
	if n > uint64(limit) {
		return nil, frame.ErrMalformed
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	return b, err
}

// AppendField appends b to dst as ReadField reads it.
func AppendField(dst, b []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(b))), b...)
}
