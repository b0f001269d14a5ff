package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/grid/olric"
	"github.com/bucketgrid/bucketgrid/httplimit"
	"github.com/bucketgrid/bucketgrid/policy"
)

// Config describes a Demo: one entry of OlricPorts and HTTPAddrs per member.
type Config struct {
	// OlricPorts are the members' Olric ports; each member also takes the
	// next two ports (its owner channel and its gossip).
	OlricPorts []int
	// HTTPAddrs are the members' HTTP listen addresses; port 0 picks a
	// free port.
	HTTPAddrs []string
	// Limit is the initial limit, stored in the grid unless one is there.
	Limit Limit
	// Poll is how often each member re-reads the limit from the grid.
	// Default 500ms.
	Poll time.Duration
	// LogOutput receives Olric's logs and the demo's errors; nil discards.
	LogOutput io.Writer
	// Member adjusts each member's grid configuration (tests shorten the
	// timings).
	Member func(*olric.Config)
	// FailClosed refuses requests (503) when a limit check fails, instead
	// of serving them unlimited (httplimit's default, fail-open).
	FailClosed bool
}

// Demo is a cluster of embedded grid members in this process, each serving
// the rate-limited API and the demo page over HTTP.
type Demo struct {
	nodes  []*node
	hosts  map[string]bool // Host values of the members (checkAdmin)
	cancel context.CancelFunc
	wg     sync.WaitGroup
	log    *log.Logger
	// failClosed is the failure mode in force on every member.
	failClosed bool
}

// node is one member: what would be one process of the application.
type node struct {
	index   int // 1-based, as on the page
	url     string
	ln      net.Listener
	srv     *http.Server
	member  *olric.Member
	mgr     *bucketgrid.Manager
	buckets *planned
	limiter *httplimit.Middleware
	limits  *limitStore
	key     httplimit.KeyFunc
	keys    keyStats
	demo    *Demo

	stopOnce sync.Once
	stopErr  error
	stopped  atomic.Bool
}

// Start starts the members one after another (the first seeds the
// cluster), waits until they agree on who owns what, and serves HTTP. On
// failure it stops whatever it started.
func Start(ctx context.Context, cfg Config) (_ *Demo, err error) {
	n := len(cfg.OlricPorts)
	if n == 0 || n != len(cfg.HTTPAddrs) {
		return nil, fmt.Errorf("need as many Olric ports as HTTP addresses, at least one (have %d and %d)", n, len(cfg.HTTPAddrs))
	}
	if err := cfg.Limit.validate(); err != nil {
		return nil, err
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.LogOutput == nil {
		cfg.LogOutput = io.Discard
	}
	d := &Demo{log: log.New(cfg.LogOutput, "cluster: ", log.LstdFlags), failClosed: cfg.FailClosed}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			d.Shutdown(sctx)
		}
	}()

	for i, addr := range cfg.HTTPAddrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("member %d: %w", i+1, err)
		}
		d.nodes = append(d.nodes, &node{index: i + 1, ln: ln, url: "http://" + ln.Addr().String(), demo: d})
	}
	var addrs []net.Addr
	for _, nd := range d.nodes {
		addrs = append(addrs, nd.ln.Addr())
	}
	d.hosts = adminHosts(addrs)

	for i, nd := range d.nodes {
		mc := olric.DefaultLocalConfig()
		mc.BindPort = cfg.OlricPorts[i]
		mc.MemberlistBindPort = mc.BindPort + 2 // the owner channel takes BindPort+1
		mc.LeaveTimeout = time.Second
		mc.LogOutput = cfg.LogOutput
		if i > 0 {
			// Join through the first member's gossip port.
			mc.Peers = []string{net.JoinHostPort(mc.BindAddr, strconv.Itoa(cfg.OlricPorts[0]+2))}
		}
		if cfg.Member != nil {
			cfg.Member(&mc)
		}
		if nd.member, err = olric.Start(ctx, mc); err != nil {
			return nil, fmt.Errorf("member %d: %w", i+1, err)
		}
	}
	if err := d.settle(ctx); err != nil {
		return nil, err
	}

	for _, nd := range d.nodes {
		if err := nd.init(ctx, cfg.Limit); err != nil {
			return nil, fmt.Errorf("member %d: %w", nd.index, err)
		}
	}
	pctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	for _, nd := range d.nodes {
		nd.srv = &http.Server{Handler: nd.handler(), ReadHeaderTimeout: 5 * time.Second}
		d.wg.Add(2)
		go func() {
			defer d.wg.Done()
			if err := nd.srv.Serve(nd.ln); !errors.Is(err, http.ErrServerClosed) {
				d.log.Printf("member %d: %v", nd.index, err)
			}
		}()
		go func() {
			defer d.wg.Done()
			nd.poll(pctx, cfg.Poll)
		}()
	}
	return d, nil
}

// settle waits until every member sees all the others and the members
// agree on the owners of a sample of keys, spread over all of them.
func (d *Demo) settle(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if d.settled(ctx) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the members did not form one cluster: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (d *Demo) settled(ctx context.Context) bool {
	for _, nd := range d.nodes {
		ms, err := nd.member.Client().Members(ctx)
		if err != nil || len(ms) != len(d.nodes) {
			return false
		}
	}
	owners := map[string]bool{}
	for k := range 64 {
		key := "settle-" + strconv.Itoa(k)
		o := d.nodes[0].member.Owner(key)
		for _, nd := range d.nodes[1:] {
			if nd.member.Owner(key) != o {
				return false
			}
		}
		owners[o] = true
	}
	return len(owners) == len(d.nodes) && !owners[""]
}

// init builds the member's buckets and reads (or stores) the limit.
func (nd *node) init(ctx context.Context, initial Limit) error {
	var err error
	if nd.limits, err = newLimitStore(nd.member.Client()); err != nil {
		return err
	}
	l, err := nd.limits.init(ctx, initial)
	if err != nil {
		return fmt.Errorf("read the limit: %w", err)
	}
	// Buckets expire from the grid ten seconds after they would be full
	// again.
	nd.mgr = bucketgrid.NewManager(nd.member,
		bucketgrid.WithExpiration(bucketgrid.ExpireAfterRefill(10*time.Second)))
	nd.buckets = &planned{mgr: nd.mgr}
	nd.buckets.apply(l)
	nd.key = httplimit.HeaderKey("X-API-Key", httplimit.ClientIP{}.Key)
	nd.limiter = httplimit.New(nd.buckets,
		httplimit.WithKey(nd.key),
		httplimit.WithOnly("/v1/"),
		httplimit.WithHeaders(policy.IETFHeaders|policy.XRateLimitHeaders),
		// Longer than the grid's hand-over grace, so that requests held
		// while a partition changes owner wait rather than fail open.
		httplimit.WithTimeout(3*time.Second),
		httplimit.WithFailOpen(!nd.demo.failClosed),
		httplimit.WithErrorHook(func(r *http.Request, err error) {
			markFailed(r)
			nd.demo.log.Printf("member %d: %s %s: %v", nd.index, r.Method, r.URL.Path, err)
		}))
	return nil
}

// poll re-reads the limit from the grid every period and applies a newer
// one.
func (nd *node) poll(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if nd.stopped.Load() {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, period)
		l, err := nd.limits.get(rctx)
		cancel()
		switch {
		case err != nil:
			if ctx.Err() == nil {
				nd.demo.log.Printf("member %d: read the limit: %v", nd.index, err)
			}
		case nd.buckets.apply(l):
			nd.demo.log.Printf("member %d: limit v%d: capacity %d, refill %d/min",
				nd.index, l.Version, l.Capacity, l.RefillPerMinute)
		}
	}
}

// URLs returns the members' HTTP base URLs, in order.
func (d *Demo) URLs() []string {
	urls := make([]string, len(d.nodes))
	for i, nd := range d.nodes {
		urls[i] = nd.url
	}
	return urls
}

// Shutdown stops every member still running, together: each stops serving
// HTTP, then leaves the grid (waiting for its leave message,
// Config.LeaveTimeout).
func (d *Demo) Shutdown(ctx context.Context) error {
	if d.cancel != nil {
		d.cancel()
	}
	errs := make([]error, len(d.nodes))
	each := func(f func(nd *node) error) {
		var wg sync.WaitGroup
		for i, nd := range d.nodes {
			wg.Go(func() {
				if err := f(nd); err != nil {
					errs[i] = errors.Join(errs[i], fmt.Errorf("member %d: %w", nd.index, err))
				}
			})
		}
		wg.Wait()
	}
	each(func(nd *node) error { return nd.stop(ctx) })
	d.wg.Wait()
	return errors.Join(errs...)
}

// stop stops the member once: it stops serving HTTP (requests in flight
// end first), then leaves the grid gracefully, its partitions handed over
// to the others. Later calls return the first call's error.
func (nd *node) stop(ctx context.Context) error {
	nd.stopOnce.Do(func() {
		nd.stopped.Store(true)
		if nd.srv == nil {
			nd.stopErr = nd.ln.Close()
		} else if err := nd.srv.Shutdown(ctx); err != nil {
			nd.stopErr = err
		}
		if nd.member != nil {
			nd.stopErr = errors.Join(nd.stopErr, nd.member.Shutdown(ctx))
		}
	})
	return nd.stopErr
}
