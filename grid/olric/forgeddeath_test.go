package olric

import (
	"net"
	"slices"
	"testing"
	"time"
)

// TestForgedDeathIgnored is a holder of the gossip key alone (no
// certificate, no password, no member's address) telling two members of a
// 3-member grid with every security setting on (ChannelSecret, GossipKeys,
// Password), in gossip packets sealed with the key and sent from a fresh
// address, that the third member is dead, 50 times in 5 s with incarnations
// higher than any the members know, while all three draw tokens. Before,
// memberlist took each death as any member's: the accused member was taken
// out of the others' member list until it refuted, its partitions moved
// away and back, and buckets forgot consumption (50 deaths sent from a
// revoked member's address: out of the routing table in 28-44 of 250
// looks, 22 buckets forgot 2-4 tokens in 1 run of 3). Now a member acts on
// a death or suspicion of another member only once its own check of that
// member failed (deathcheck.go): the accused stays in both judges' member
// lists and routing tables, and every bucket holds exactly what was drawn.
func TestForgedDeathIgnored(t *testing.T) {
	s := newSecrets(t)
	secret := randomKey(t, 32)
	ms := startCluster(t, 3, func(c *Config) {
		c.ChannelSecret = secret
		c.GossipKeys = [][]byte{s.gossip}
		c.Password = s.password
	})
	judges, accused := ms[:2], ms[2]
	attacker, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close()
	load := startLoadOn(ms, keySet("forged", 120))
	var unlisted, unrouted int
	for i := uint32(0); i < 50; i++ {
		for _, j := range judges {
			// From names a member, as a real death's does: the attacker
			// has read the member list.
			pkt := gossipPacket(t, s.gossip, gossipDead, accused.Name(), judges[0].Name(), 1<<30+i<<8)
			a, err := net.ResolveUDPAddr("udp", memberlistAddr(j.cfg))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := attacker.WriteTo(pkt, a); err != nil {
				t.Fatal(err)
			}
		}
		// memberlist acts on a death within milliseconds of reading it;
		// the 5 s only bound how long this test accuses and watches.
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
	for _, j := range judges {
		if n := j.trust.net.refusedDeaths.Load(); n == 0 {
			t.Errorf("%s refused no death: the forged ones never reached its check", j.Name())
		}
	}
	// Whatever the membership did meanwhile, no bucket may forget what was
	// drawn from it: wait until all three read each other again.
	waitFor(t, "the judges route to the accused again", 60*time.Second, func() bool { return stable(ms) })
	load.finish(t, ms)
}
