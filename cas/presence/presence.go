// Package presence counts the instances that share a cas.Store, so that
// each knows how many share its limits when the store is out: what
// bucketgrid.Degrade divides a limit by (Degrade.Instances).
//
// Each instance keeps a presence record in the store, written with a TTL
// and refreshed well within it; the count is the number of records found
// unexpired. A stopped instance stops refreshing, and its record drops out
// one TTL after its last refresh at the latest (at once when it withdraws).
// Everything goes through the four methods of the cas.Store interface (and
// cas.Batcher, when the store offers it, to read every record in one round
// trip), so every store that passes the TCK's TTL checks can count.
//
// # Records
//
// The records live in Config.Slots slots, the keys Config.Prefix + "0",
// Prefix + "1", …: an instance claims a free slot with Insert, refreshes
// its own with Replace on the version it read, and claims another when it
// finds its slot taken (it was away past its TTL and another instance
// took the slot). A refresh reads every slot, so the count needs no key
// listing, which the store interface does not have. An instance that
// finds no free slot still counts itself: the count stops growing at
// Slots + 1.
//
// # When the store is out
//
// The count matters exactly when the store is out, which is when it
// cannot be refreshed. LiveInstances then reports the last count seen,
// whatever the outage's length: the instances sharing one store lose it
// together, so they keep counts that agree, and an instance that stops
// meanwhile leaves the others dividing by one more than needed (each
// admits a little less, never more). An instance that starts while the
// store is out has seen no count and reports Config.Floor.
//
// For one TTL after a refresh failed, or after the instance found its own
// record gone before its TTL (the store lost its data: a restart, a
// failover), a lower count is not believed: the other instances have not
// all refreshed since, and a count too low would make each admit too
// much if the store failed again. Counts that grow are believed at once.
package presence

import (
	"errors"
	"fmt"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
)

// The defaults of Config.
const (
	// DefaultPrefix starts the keys of the presence records. It shares no
	// prefix with the service's bucket keys ("rls/…").
	DefaultPrefix = "bucketgrid-instances/"
	// DefaultSlots is the most instances counted (plus the one counting).
	DefaultSlots = 64
	// DefaultTTL is how long a record outlives its instance's last
	// refresh: a stopped instance drops out of the count within it.
	DefaultTTL = 10 * time.Second
	// DefaultTimeout bounds one refresh.
	DefaultTimeout = time.Second
)

// MaxSlots bounds Config.Slots: every refresh reads every slot.
const MaxSlots = 4096

// Config configures a Counter (New). The zero value selects the defaults.
type Config struct {
	// Prefix starts the keys of the records (DefaultPrefix when ""). The
	// instances that count each other use one store and one prefix; no
	// bucket key may start with it.
	Prefix string
	// Slots is the number of records read at each refresh, the most
	// instances counted besides the one counting (DefaultSlots when 0).
	Slots int
	// TTL is the expiry of a record, counted from its last refresh
	// (DefaultTTL when 0). It must be longer than the store's expiry
	// resolution (a second on Couchbase).
	TTL time.Duration
	// Refresh is the time between refreshes in Run (TTL/4 when 0, so that
	// three refreshes in a row may fail before the record expires); at
	// most TTL/2.
	Refresh time.Duration
	// Timeout bounds each refresh, Withdraw too (DefaultTimeout when 0,
	// and at most Refresh).
	Timeout time.Duration
	// Floor is the least count LiveInstances reports, and what it reports
	// until a refresh succeeds: the number of instances the deployment
	// states, if it states one (0 or 1: none).
	Floor int
	// Clock measures how long a lower count is not believed after a
	// failure (clock.Monotonic() when nil); tests pass the fake clock their
	// store expires records on.
	Clock clock.Clock
}

// withDefaults returns c with its zero fields set, or an error naming what
// is invalid.
func (c Config) withDefaults() (Config, error) {
	if c.Clock == nil {
		c.Clock = clock.Monotonic()
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Slots == 0 {
		c.Slots = DefaultSlots
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Refresh == 0 {
		c.Refresh = c.TTL / 4
	}
	if c.Timeout == 0 {
		c.Timeout = min(DefaultTimeout, c.Refresh)
	}
	var errs []error
	if c.Slots < 1 || c.Slots > MaxSlots {
		errs = append(errs, fmt.Errorf("Config.Slots %d: want 1 to %d", c.Slots, MaxSlots))
	}
	if c.TTL < 0 {
		errs = append(errs, fmt.Errorf("Config.TTL %v: want a positive duration", c.TTL))
	}
	if c.Refresh <= 0 || c.Refresh > c.TTL/2 {
		errs = append(errs, fmt.Errorf("Config.Refresh %v: want a positive duration of at most TTL/2 (%v)", c.Refresh, c.TTL/2))
	}
	if c.Timeout <= 0 || c.Timeout > c.Refresh {
		errs = append(errs, fmt.Errorf("Config.Timeout %v: want a positive duration of at most Refresh (%v)", c.Timeout, c.Refresh))
	}
	if c.Floor < 0 {
		errs = append(errs, fmt.Errorf("Config.Floor %d: must not be negative", c.Floor))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("presence: %w", err)
	}
	return c, nil
}
