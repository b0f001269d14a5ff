package bucketgrid

import (
	"sync"

	"github.com/bucketgrid/bucketgrid/core"
)

// LocalGroup makes local buckets that share one clock, one listener and,
// read-only, their equal configurations: the building block of a structure
// holding many small buckets, such as package localmap's Map, whose entries
// embed a Local. Create it with NewLocalGroup; it is safe for concurrent
// use.
type LocalGroup struct {
	env  *localEnv
	mu   sync.Mutex
	cfgs []core.Config // shared configurations; guarded by mu
}

// sharedConfigs is how many distinct configurations (plans) a LocalGroup
// shares among its buckets.
const sharedConfigs = 8

// NewLocalGroup returns a group whose buckets tell time by the clock of
// WithClock and report to the listener of WithListener.
func NewLocalGroup(opts ...Option) *LocalGroup {
	o := collect(opts, Option.applyLocal)
	return &LocalGroup{env: newEnv(o.clock, o.listener)}
}

// Init makes l a bucket of the group with configuration cfg, full (or at
// each bandwidth's initial tokens) at now, a reading of the group's clock.
// l must be a zero Local no other goroutine sees yet, typically a field of
// a new entry. The configuration is validated first, as NewLocal does, and
// l is left unusable when Init returns the *core.ConfigError. Equal
// configurations of the group's first few plans are shared read-only (core
// never changes a configuration in place), and the state of a
// single-bandwidth bucket lives inside l, so a bucket costs no allocation
// beyond the one holding l.
func (g *LocalGroup) Init(l *Local, cfg core.Config, now int64) error {
	if err := l.init(&cfg, g.env); err != nil {
		return err
	}
	l.b = core.NewState(g.share(cfg), now)
	if len(l.b.Bands) == 1 {
		l.one[0] = l.b.Bands[0]
		l.b.Bands = l.one[:]
	}
	return nil
}

// share returns a configuration equal to cfg whose bandwidths are shared,
// read-only, with other buckets of the group, or a private copy when
// sharedConfigs distinct configurations are shared already.
func (g *LocalGroup) share(cfg core.Config) core.Config {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.cfgs {
		if g.cfgs[i].Equal(&cfg) {
			return g.cfgs[i]
		}
	}
	c := cfg.Clone()
	if len(g.cfgs) < sharedConfigs {
		g.cfgs = append(g.cfgs, c)
	}
	return c
}
