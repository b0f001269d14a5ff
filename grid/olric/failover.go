package olric

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// deaths records members proven dead: their owner channel refused a
// connection (the host answered, nothing listens on the port: the process
// is gone). A paused member's kernel still accepts connections, and a
// partition or a host that is down gives a timeout or "unreachable",
// which prove nothing.
type deaths struct {
	mu      sync.Mutex
	proven  map[string]int64 // name → m.mono time of the refusal
	probing map[string]bool
}

// probeTimeout bounds one connection attempt of a death probe.
const probeTimeout = 250 * time.Millisecond

// skipGuards ends the hand-over guard of the partitions nr gives this
// member whose previous owner left the routing table and is proven dead:
// the guard waits for the previous owner's routing lease to run out, and a
// dead process executes nothing. For a previous owner not yet proven dead
// it starts a probe, which kicks a new read when it proves the death.
// Called by refresh before nr is published.
func (ms *membership) skipGuards(nr *routes, present map[string]struct{}, returned int64) {
	m := ms.m
	for p, until := range nr.guardUntil {
		from := nr.from[p]
		if until <= returned || from == "" || from == m.name {
			continue
		}
		if _, ok := present[from]; ok {
			continue // moved by a rebalance: its owner lives
		}
		// Only a refusal after the read that handed p over counts: an
		// older one may be of an earlier process of the same name.
		if ms.deaths.provenSince(from, until-int64(m.cfg.HandoverGrace)) {
			nr.guardUntil[p] = 0
		} else {
			ms.probeDeath(from)
		}
	}
}

// provenSince reports whether name was proven dead after mono time since.
func (d *deaths) provenSince(name string, since int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.proven[name]
	return ok && at >= since
}

// allProvenSince reports whether every member of names was proven dead
// after mono time since.
func (d *deaths) allProvenSince(names []string, since int64) bool {
	for _, name := range names {
		if !d.provenSince(name, since) {
			return false
		}
	}
	return true
}

// probeDeath dials name's owner channel once, unless a probe of it is in
// flight, and records a refusal as proof of its death.
func (ms *membership) probeDeath(name string) {
	m, d := ms.m, &ms.deaths
	d.mu.Lock()
	if d.probing[name] || m.ctx.Err() != nil {
		d.mu.Unlock()
		return
	}
	d.probing[name] = true
	m.wg.Add(1)
	d.mu.Unlock()
	go func() {
		defer m.wg.Done()
		refused := ms.refuses(name)
		d.mu.Lock()
		delete(d.probing, name)
		if refused {
			if len(d.proven) >= maxSeen {
				clear(d.proven)
			}
			d.proven[name] = m.mono()
		}
		d.mu.Unlock()
		if refused {
			m.routing.kick()
		}
	}()
}

// refuses reports whether the owner channel of the member called name
// refused a connection just now.
func (ms *membership) refuses(name string) bool {
	addr, err := channelAddr(name)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ms.m.ctx, probeTimeout)
	defer cancel()
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "tcp", addr)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}
