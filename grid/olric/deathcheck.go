package olric

import (
	"bufio"
	"bytes"
	"compress/lzw"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/trust"
)

// Deaths need proof. memberlist believes a suspect or dead message from
// anyone who holds the gossip key, about any member, and a death with an
// incarnation above the accused's takes it out of the member list at
// once: Olric moves its partitions away and back, and buckets forget
// consumption (TestForgedDeathIgnored). So the gossip transport (gossipNet)
// opens every packet it receives, and a suspect or dead message about
// another member that this member's gossip still counts alive is held, not
// passed on, until this member checked the accused itself:
//   - a death or suspicion is passed to memberlist when this member's own
//     ping of the accused (memberlist's, over gossip, at the address this
//     member knows) gets no answer within ProbeTimeout, and dropped when
//     it is answered;
//   - a leave (a dead message the accused says of itself) is passed when
//     the accused answers on its owner channel, with the proofs of the
//     identity question (mutual TLS, Password), that it is leaving, or
//     when it does not answer there and misses the ping too; it is dropped
//     when the accused answers that it is not leaving.
//
// A message about a member this member already suspects (its own probe
// failed, or a suspicion passed its check) or no longer counts alive is
// passed at once, as are messages about this member itself (memberlist
// refutes them). A real crash therefore costs the others at most one
// ProbeTimeout more than before, and only the first message that reaches
// each of them (TestCrash, TestCrashWindow). The checks of a member run one
// at a time per accused, with at most maxHeld messages held per accused.
//
// A state sync over TCP (memberlist's push-pull, periodic or a join)
// carries no death: memberlist takes a member it lists as left as the
// member's own leave, and one it lists as dead or suspect as suspected,
// without asking any delegate, and a sync cannot be held while its sender
// waits for the answer. So gossipNet opens the first message of every
// gossip stream, accepted or dialled, and sets to 0 the incarnation of
// every member a sync lists as not alive, this member excepted (so that it
// still refutes its own death, which ends a split): memberlist ignores
// such a record as older than what it knows. A real death reaches the
// others by their own probes and by the packets above.

// maxHeld bounds the messages held per accused member while it is checked.
const maxHeld = 64

// Message types of memberlist's protocol (its net.go).
const (
	msgSuspect  = 3
	msgDead     = 5
	msgCompound = 7
	msgCompress = 9
	msgHasCrc   = 12
)

// heldMsg is a suspect or dead message held until its accused is checked.
type heldMsg struct {
	msg   []byte // the message, its type byte first
	label string
	from  net.Addr
	at    time.Time
}

// heldDeaths is what is held about one accused member.
type heldDeaths struct {
	msgs  []heldMsg
	leave bool // one of them is the member's own leave
}

// accusation is the body of memberlist's suspect and dead messages.
type accusation struct {
	Incarnation uint32 `msgpack:"Incarnation"`
	Node        string `msgpack:"Node"`
	From        string `msgpack:"From"`
}

// screen holds the suspect and dead messages of packet p that need a check
// (see above) and reports whether it did so; the rest of p is then passed
// on (or dropped, if this member is shutting down). It reports false,
// leaving p to memberlist as it came, when nothing in p needs a check.
func (g *gossipNet) screen(p *memberlist.Packet) bool {
	ml := g.ml.Load()
	if ml == nil {
		return false // memberlist not found yet: nothing is checked
	}
	buf, label, err := memberlist.RemoveLabelHeaderFromPacket(p.Buf)
	if err != nil {
		return false // memberlist drops it
	}
	plain, sealed := g.open(buf, []byte(label))
	parts, ok := splitMessages(plain, 0)
	if !ok {
		return true // beyond the bounds of what members send: dropped
	}
	var alive map[string]memberlist.Node
	var pass []heldMsg
	held := false
	for _, part := range parts {
		if part[0] != msgDead && part[0] != msgSuspect {
			pass = append(pass, heldMsg{msg: part})
			continue
		}
		var a accusation
		if msgpack.Unmarshal(part[1:], &a) != nil || a.Node == g.t.m.name {
			pass = append(pass, heldMsg{msg: part})
			continue
		}
		if alive == nil {
			alive = map[string]memberlist.Node{}
			for _, n := range ml.Members() {
				alive[n.Name] = *n
			}
		}
		n, ok := alive[a.Node]
		if !ok || n.State != memberlist.StateAlive {
			pass = append(pass, heldMsg{msg: part})
			continue
		}
		held = true
		if !sealed {
			continue // no member sends a message unsealed that the key could seal: dropped
		}
		g.hold(n.Name, n.Address(), heldMsg{msg: part, label: label, from: p.From, at: p.Timestamp},
			part[0] == msgDead && a.From == a.Node)
	}
	if !held {
		return false
	}
	if sealed {
		for _, h := range pass {
			h.label, h.from, h.at = label, p.From, p.Timestamp
			if !g.deliver(h) {
				break
			}
		}
	}
	return true
}

// open returns the plain text of a packet (or a stream's message) sealed
// with authenticated data ad and whether it was sealed with one of the
// gossip keys. Without keys every packet is plain; with keys, a packet no
// key opens is returned as it came (memberlist drops it unless it takes
// unsealed packets, so its deaths are screened as well).
func (g *gossipNet) open(buf, ad []byte) ([]byte, bool) {
	kr := g.t.creds.keyring
	if kr == nil {
		return buf, true
	}
	const nonceLen, tagLen = 12, 16
	if len(buf) < 1+nonceLen+tagLen || buf[0] > 1 {
		return buf, false
	}
	for _, key := range kr.GetKeys() {
		block, err := aes.NewCipher(key)
		if err != nil {
			continue
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			continue
		}
		plain, err := gcm.Open(nil, buf[1:1+nonceLen], buf[1+nonceLen:], ad)
		if err != nil {
			continue
		}
		if buf[0] == 0 { // version 0 pads (PKCS #7)
			if len(plain) == 0 || int(plain[len(plain)-1]) > len(plain) {
				return nil, true
			}
			plain = plain[:len(plain)-int(plain[len(plain)-1])]
		}
		return plain, true
	}
	return buf, false
}

// seal seals msg as memberlist does a packet (version 1, with the
// primary key).
func (g *gossipNet) seal(msg []byte, label string) ([]byte, error) {
	out := msg
	if kr := g.t.creds.keyring; kr != nil {
		var err error
		if out, err = sealWith(kr.GetPrimaryKey(), nil, msg, []byte(label)); err != nil {
			return nil, err
		}
	}
	return memberlist.AddLabelHeaderToPacket(out, label)
}

// sealWith appends to dst msg sealed with key and authenticated data ad,
// as memberlist's encryption version 1 does.
func sealWith(key, dst, msg, ad []byte) ([]byte, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, gcm.NonceSize())
	rand.Read(nonce)
	return gcm.Seal(append(append(dst, 1), nonce...), nonce, msg, ad), nil
}

// deliver passes one message to memberlist as a packet of its own; false
// once this member is shutting down.
func (g *gossipNet) deliver(h heldMsg) bool {
	buf, err := g.seal(h.msg, h.label)
	if err != nil {
		return true
	}
	select {
	case g.packets <- &memberlist.Packet{Buf: buf, From: h.from, Timestamp: h.at}:
		return true
	case <-g.done:
		return false
	}
}

// splitMessages returns the messages of a packet's plain text, as
// memberlist reads them (its ingestPacket and handleCommand): a checksum
// frame, compound and compressed messages are opened, and what memberlist
// would drop is left out. ok is false for nesting or compression beyond
// what members send.
func splitMessages(buf []byte, depth int) (parts [][]byte, ok bool) {
	if depth > 4 {
		return nil, false
	}
	if len(buf) == 0 {
		return nil, true
	}
	switch buf[0] {
	case msgHasCrc:
		if depth > 0 || len(buf) < 5 {
			return nil, true
		}
		return splitMessages(buf[5:], depth+1)
	case msgCompound:
		buf = buf[1:]
		if len(buf) < 1 || len(buf) < 1+2*int(buf[0]) {
			return nil, true
		}
		n := int(buf[0])
		lens, body := buf[1:1+2*n], buf[1+2*n:]
		for i := range n {
			l := int(binary.BigEndian.Uint16(lens[2*i:]))
			if len(body) < l {
				break
			}
			sub, ok := splitMessages(body[:l], depth+1)
			if !ok {
				return nil, false
			}
			parts, body = append(parts, sub...), body[l:]
		}
		return parts, true
	case msgCompress:
		var c struct {
			Algo uint8  `msgpack:"Algo"`
			Buf  []byte `msgpack:"Buf"`
		}
		if msgpack.Unmarshal(buf[1:], &c) != nil || c.Algo != 0 {
			return nil, true
		}
		const maxPlain = 1 << 20
		r := lzw.NewReader(bytes.NewReader(c.Buf), lzw.LSB, 8)
		defer r.Close()
		plain, err := io.ReadAll(io.LimitReader(r, maxPlain+1))
		if len(plain) > maxPlain {
			return nil, false
		}
		if err != nil {
			return nil, true
		}
		return splitMessages(plain, depth+1)
	}
	return [][]byte{buf}, true
}

// hold keeps h about the member called name, gossiping at addr, and starts
// its check unless one is under way.
func (g *gossipNet) hold(name, addr string, h heldMsg, leave bool) {
	g.mu.Lock()
	d := g.held[name]
	start := d == nil
	if start {
		if len(g.held) >= maxSeen {
			g.mu.Unlock()
			return
		}
		d = &heldDeaths{}
		g.held[name] = d
	}
	if len(d.msgs) < maxHeld {
		d.msgs = append(d.msgs, h)
	}
	d.leave = d.leave || leave
	g.mu.Unlock()
	if start {
		g.wg.Go(func() { g.check(name, addr) })
	}
}

// check checks the member called name and passes what is held about it to
// memberlist if the check failed, or drops it.
func (g *gossipNet) check(name, addr string) {
	g.mu.Lock()
	leave := g.held[name].leave
	g.mu.Unlock()
	err := g.reach(name, addr, leave)
	g.mu.Lock()
	d := g.held[name]
	delete(g.held, name)
	g.mu.Unlock()
	if err != nil {
		for _, h := range d.msgs {
			if !g.deliver(h) {
				return
			}
		}
		return
	}
	n := g.refusedDeaths.Add(int64(len(d.msgs)))
	// Logged at most once a RefusalLogEvery, so that a holder of the key
	// cannot flood the log.
	now, last := g.t.m.mono(), g.deathLogAt.Load()
	if (last == 0 || now-last >= int64(trust.RefusalLogEvery)) && g.deathLogAt.CompareAndSwap(last, now) {
		from := "?"
		if d.msgs[0].from != nil {
			from = d.msgs[0].from.String()
		}
		g.t.m.logf("death or suspicion of %s from %s refused: it answered this member (%d refused so far)", name, from, n)
	}
}

// reach checks the member called name, at gossip address addr: nil when it
// answered (and, for a leave, said it is not leaving), an error when it
// did not or said it is leaving.
func (g *gossipNet) reach(name, addr string, leave bool) error {
	t := g.t
	if leave {
		ctx, cancel := context.WithTimeout(t.m.ctx, t.m.cfg.ChannelIOTimeout)
		leaving, err := t.leaving(ctx, name)
		cancel()
		if err == nil {
			if leaving {
				return errors.New("leaving")
			}
			return nil
		}
	}
	a, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return err
	}
	_, err = g.ml.Load().Ping(name, a)
	return err
}

// leaving asks the member called name on its owner channel whether it is
// leaving the cluster (the identity question, with its proofs).
func (t *guard) leaving(ctx context.Context, name string) (bool, error) {
	var nonce [trust.NonceLen]byte
	rand.Read(nonce[:])
	a, err := t.askIdentity(ctx, name, nonce)
	if err != nil {
		return false, err
	}
	if t.creds.password != "" && !hmac.Equal(a.mac, trust.MAC(t.creds.password, a.binding, t.m.name, name, nonce, a.r, a.flags)) {
		return false, fmt.Errorf("%w: %s: its answer lacks the Password's proof", errUnproven, name)
	}
	return a.flags&trust.ProofFlagLeave != 0, nil
}

// Memberlist's stream framing (its net.go).
const (
	msgPushPull     = 6
	msgEncrypt      = 10
	msgLabel        = 244
	maxPushState    = 20 << 20
	syncStateAlive  = 0
	streamHeaderLen = 5 // msgEncrypt and the sealed length
)

// screenConn is a gossip stream whose first message gossipNet screens
// (see above) when memberlist first reads it.
type screenConn struct {
	net.Conn
	g *gossipNet
	r io.Reader
}

// Read implements net.Conn.
func (c *screenConn) Read(b []byte) (int, error) {
	if c.r == nil {
		c.r = c.g.screenStream(c.Conn)
	}
	return c.r.Read(b)
}

// screenStream returns what memberlist reads from conn: its first message
// with the deaths of a state sync taken out, then the rest as it comes.
// Whatever is not a sealed state sync, or cannot be read, is passed on as
// it came, for memberlist to judge.
func (g *gossipNet) screenStream(conn net.Conn) io.Reader {
	br := bufio.NewReader(conn)
	var head []byte
	var label []byte
	if b, err := br.Peek(2); err == nil && b[0] == msgLabel {
		if full, err := br.Peek(2 + int(b[1])); err == nil {
			head = append(head, full...)
			label = full[2:]
			br.Discard(len(full))
		}
	}
	kr := g.t.creds.keyring
	b, err := br.Peek(streamHeaderLen)
	if kr == nil || err != nil || b[0] != msgEncrypt {
		return io.MultiReader(bytes.NewReader(head), br)
	}
	n := binary.BigEndian.Uint32(b[1:])
	if n > maxPushState {
		return io.MultiReader(bytes.NewReader(head), br)
	}
	frame := make([]byte, streamHeaderLen+int(n))
	k, err := io.ReadFull(br, frame)
	if err != nil {
		return io.MultiReader(bytes.NewReader(head), bytes.NewReader(frame[:k]), br)
	}
	ad := append(append([]byte(nil), frame[:streamHeaderLen]...), label...)
	plain, sealed := g.open(frame[streamHeaderLen:], ad)
	if sealed {
		if clean, ok := g.undead(plain); ok {
			out := binary.BigEndian.AppendUint32([]byte{msgEncrypt}, uint32(len(clean)+1+12+16))
			ad := append(append([]byte(nil), out...), label...)
			if sealedOut, err := sealWith(kr.GetPrimaryKey(), out, clean, ad); err == nil {
				frame = sealedOut
			}
		}
	}
	return io.MultiReader(bytes.NewReader(head), bytes.NewReader(frame), br)
}

// undead returns the plain text of a stream's first message with the
// incarnation of every member a state sync lists as not alive, this one
// excepted, set to 0, and whether it changed anything.
func (g *gossipNet) undead(plain []byte) ([]byte, bool) {
	if len(plain) > 0 && plain[0] == msgCompress {
		parts, ok := splitMessages(plain, 0)
		if !ok || len(parts) != 1 {
			return nil, false
		}
		plain = parts[0]
	}
	if len(plain) == 0 || plain[0] != msgPushPull {
		return nil, false
	}
	out := append([]byte(nil), plain...)
	body := out[1:]
	r := bytes.NewReader(body)
	dec := msgpack.NewDecoder(r)
	var h struct {
		Nodes int `msgpack:"Nodes"`
	}
	if dec.Decode(&h) != nil {
		return nil, false
	}
	changed := false
	for range h.Nodes {
		fields, err := dec.DecodeMapLen()
		if err != nil {
			return nil, false
		}
		var name string
		state, incAt, incEnd := int64(syncStateAlive), -1, -1
		for range fields {
			key, err := dec.DecodeString()
			if err != nil {
				return nil, false
			}
			switch key {
			case "Name":
				name, err = dec.DecodeString()
			case "State":
				state, err = dec.DecodeInt64()
			case "Incarnation":
				incAt = len(body) - r.Len()
				err = dec.Skip()
				incEnd = len(body) - r.Len()
			default:
				err = dec.Skip()
			}
			if err != nil {
				return nil, false
			}
		}
		if state == syncStateAlive || name == g.t.m.name || incAt < 0 {
			continue
		}
		// The same length, so the rest stays in place: a positive
		// fixint becomes 0, a wider integer keeps its width with every
		// byte 0.
		if c := body[incAt]; c < 0x80 {
			body[incAt] = 0
		} else {
			clear(body[incAt+1 : incEnd])
		}
		changed = true
	}
	return out, changed
}

// accept wraps the streams the transport accepted.
func (g *gossipNet) accept() {
	in := g.NetTransport.StreamCh()
	for {
		var c net.Conn
		select {
		case <-g.stopped:
			return
		case c = <-in:
		}
		select {
		case g.streams <- &screenConn{Conn: c, g: g}:
		case <-g.done:
			c.Close()
		}
	}
}

// StreamCh implements memberlist.Transport: the accepted streams, screened.
func (g *gossipNet) StreamCh() <-chan net.Conn { return g.streams }
