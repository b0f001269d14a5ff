// Package trust owns what a grid/olric member trusts and how much it lets
// an unproven peer cost it: the certificate files and revocation list it
// re-reads while it runs (Store, Revocations), the budget of failed
// handshakes per source address on the owner channel (Throttle), the
// accounting and rate-limited logging of gossip records refused as
// unverified (Refusals), and the wire form and proof of the identity
// question members ask each other on the owner channel (Record, MAC,
// Binding). Who asks whom, when, and what a member does with the answer
// belong to grid/olric (see "Trust" in its package documentation).
package trust

import "errors"

// ErrRevoked refuses a certificate listed in the revocation list.
var ErrRevoked = errors.New("bucketgrid/olric: the certificate is revoked (RevokedFile)")

// ErrUnproven vetoes a gossip record its node has not proved.
var ErrUnproven = errors.New("bucketgrid/olric: node has not proved membership")

// Sources is how many peers (source addresses, node names, gossip
// addresses) each of this package's tables remembers; beyond, it forgets
// the oldest or least indebted. A cluster's members are far fewer.
const Sources = 4096
