package olric

import (
	"bytes"
	"compress/lzw"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// TestForgedDeathIgnored is a holder of the gossip key alone (no
// certificate, no password, no member's address) telling two members of a
// 3-member grid with every security setting on (ChannelSecret, GossipKeys,
// Password), sealed with the key from a fresh address, that the third
// member is dead, 50 times in 5 s with incarnations higher than any the
// members know, while all three draw tokens: in gossip packets (dead
// messages, plain and compressed), and in state syncs over TCP (push-pull) that list the member
// as left. Before, memberlist took each death as any member's: the accused
// member was taken out of the others' member list until it refuted, its
// partitions moved away and back, and checks failed and buckets lost their
// consumption (packets: out of the member list in 277-342 of 500 looks,
// 3 runs of 3; 3 checks failed and 2 buckets re-created empty in 1 run).
// Now a member acts on a death or suspicion of another member only once
// its own check of that member failed, and takes none from a state sync
// (deathcheck.go): the accused stays in both judges' member lists and
// routing tables, and every bucket holds exactly what was drawn.
func TestForgedDeathIgnored(t *testing.T) {
	for _, tc := range []struct {
		name string
		send func(t *testing.T, key []byte, judge, accused *Member, inc uint32)
	}{
		{"packet", sendForgedDeath},
		{"compressed packet", sendForgedCompressedDeath},
		{"state sync", sendForgedLeaveSync},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSecrets(t)
			secret := randomKey(t, 32)
			logs := &syncBuffer{}
			ms := startCluster(t, 3, func(c *Config) {
				c.LogOutput = logs
				c.ChannelSecret = secret
				c.GossipKeys = [][]byte{s.gossip}
				c.Password = s.password
			})
			judges, accused := ms[:2], ms[2]
			load := startLoadOn(ms, keySet("forged", 120))
			var unlisted, unrouted int
			for i := uint32(0); i < 50; i++ {
				for _, j := range judges {
					tc.send(t, s.gossip, j, accused, 1<<30+i<<8)
				}
				// memberlist acts on a death within milliseconds of
				// reading it; the 5 s only bound how long this test
				// accuses and watches.
				for range 5 {
					for _, j := range judges {
						if !listed(j, accused) {
							unlisted++
						}
						if !slices.Contains(j.routing.current().owners, accused.Name()) {
							unrouted++
						}
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			if unlisted > 0 || unrouted > 0 {
				t.Errorf("the judges took the gossip key's word that %s is dead: unlisted in %d of 500 looks, unrouted in %d", accused.Name(), unlisted, unrouted)
			}
			// A refused death is logged, at most once a minute by each
			// member: once by each judge in these 5 s.
			if lines := strings.Count(logs.String(), " refused: it answered this member"); tc.name != "state sync" && (lines == 0 || lines > len(judges)) {
				t.Errorf("%d lines log the refused deaths, want 1 to %d:\n%s", lines, len(judges), logs.String())
			}
			// Whatever the membership did meanwhile, no bucket may forget
			// what was drawn from it: wait until all three read each
			// other again.
			waitFor(t, "the judges route to the accused again", 60*time.Second, func() bool { return stable(ms) })
			load.finish(t, ms)
		})
	}
}

// sendForgedDeath sends judge, from a fresh address, a gossip packet
// saying accused is dead at incarnation inc.
func sendForgedDeath(t *testing.T, key []byte, judge, accused *Member, inc uint32) {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// From names a member, as a real death's does: the attacker has read
	// the member list.
	pkt := gossipPacket(t, key, gossipDead, accused.Name(), judge.Name(), inc)
	a, err := net.ResolveUDPAddr("udp", memberlistAddr(judge.cfg))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteTo(pkt, a); err != nil {
		t.Fatal(err)
	}
}

// sendForgedCompressedDeath is sendForgedDeath with the dead message in a
// compound message, compressed as memberlist compresses its packets (LZW,
// the buffer a msgpack raw string).
func sendForgedCompressedDeath(t *testing.T, key []byte, judge, accused *Member, inc uint32) {
	t.Helper()
	str := func(b []byte, s string) []byte { return append(append(b, 0xd9, byte(len(s))), s...) }
	msg := []byte{gossipDead, 0x83}
	msg = str(msg, "Incarnation")
	msg = binary.BigEndian.AppendUint32(append(msg, 0xce), inc)
	msg = str(str(msg, "Node"), accused.Name())
	msg = str(str(msg, "From"), judge.Name())
	compound := binary.BigEndian.AppendUint16([]byte{7, 1}, uint16(len(msg))) // 7: compoundMsg
	compound = append(compound, msg...)
	var lz bytes.Buffer
	w := lzw.NewWriter(&lz, lzw.LSB, 8)
	w.Write(compound)
	w.Close()
	plain := []byte{9, 0x82, 0xa4, 'A', 'l', 'g', 'o', 0, 0xa3, 'B', 'u', 'f', 0xda} // 9: compressMsg
	plain = binary.BigEndian.AppendUint16(plain, uint16(lz.Len()))
	plain = append(plain, lz.Bytes()...)
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, gcm.NonceSize())
	rand.Read(nonce)
	pkt := gcm.Seal(append([]byte{1}, nonce...), nonce, plain, nil)
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := net.ResolveUDPAddr("udp", memberlistAddr(judge.cfg))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteTo(pkt, a); err != nil {
		t.Fatal(err)
	}
}

// sendForgedLeaveSync opens a state sync (memberlist's push-pull, not a
// join) with judge over TCP, sealed with key, listing accused as left at
// incarnation inc, and reads the judge's answer.
func sendForgedLeaveSync(t *testing.T, key []byte, judge, accused *Member, inc uint32) {
	t.Helper()
	type header struct {
		Nodes        int  `msgpack:"Nodes"`
		UserStateLen int  `msgpack:"UserStateLen"`
		Join         bool `msgpack:"Join"`
	}
	type state struct {
		Name        string  `msgpack:"Name"`
		Addr        []byte  `msgpack:"Addr"`
		Port        uint16  `msgpack:"Port"`
		Meta        []byte  `msgpack:"Meta"`
		Incarnation uint32  `msgpack:"Incarnation"`
		State       int     `msgpack:"State"`
		Vsn         []uint8 `msgpack:"Vsn"`
	}
	host, _, _ := net.SplitHostPort(memberlistAddr(accused.cfg))
	h, err := msgpack.Marshal(header{Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	st, err := msgpack.Marshal(state{Name: accused.Name(), Addr: net.ParseIP(host).To4(),
		Port: uint16(accused.cfg.BindPort + 2), Incarnation: inc, State: 3, Vsn: []uint8{1, 5, 2, 0, 0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	plain := append(append([]byte{6}, h...), st...) // 6: pushPullMsg
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	frame := binary.BigEndian.AppendUint32([]byte{10}, uint32(1+gcm.NonceSize()+len(plain)+gcm.Overhead())) // 10: encryptMsg
	nonce := make([]byte, gcm.NonceSize())
	rand.Read(nonce)
	frame = gcm.Seal(append(append(frame, 1), nonce...), nonce, plain, frame[:5])
	c, err := net.DialTimeout("tcp", memberlistAddr(judge.cfg), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	// The judge answers with its own state, then merges this one.
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil {
		t.Fatalf("no state sync answer from %s: %v", judge.Name(), err)
	}
}
