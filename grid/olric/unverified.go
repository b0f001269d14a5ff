package olric

// Unverified gossip (see doc.go, Trust). A member counts every gossip
// record it refuses because its node has not proved itself (trust.go), by
// reason, and logs each failed proof within the limits of
// internal/trust's Refusals, so that a holder of the gossip key cannot
// flood the log. The counts are for tests; nothing outside the package
// reads them.

// failedProof records that the proof of the node called name, gossiping
// from addr, failed with err, and logs it within the limits.
func (t *guard) failedProof(name, addr string, err error) {
	if line := t.unverified.Failed(name, addr, t.gossipBlocked(addr), err, t.m.mono()); line != "" {
		t.m.logf("%s", line)
	}
}

// count counts a gossip record of the node called name, gossiping from
// addr, refused with err: err is the failed proof's, or errUnproven when
// the proof is pending, in which case the node's last failed proof, if
// any, gives the reason.
func (t *guard) count(name, addr string, err error) {
	t.unverified.Count(name, t.gossipBlocked(addr), err)
}

// provenNow forgets the failed proof of the node called name.
func (t *guard) provenNow(name string) { t.unverified.Proven(name) }
