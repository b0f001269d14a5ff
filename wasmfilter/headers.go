package wasmfilter

import (
	"strconv"
	"strings"

	"github.com/bucketgrid/bucketgrid/core"
	rules "github.com/bucketgrid/bucketgrid/policy"
)

// bandState is one bandwidth after a check, as the headers describe it.
type bandState struct {
	// r is the requests the bandwidth still allows: its tokens divided by
	// the policy's cost, rounded down.
	r int64
	// t is the seconds, rounded up, until r is at least 1 again when it is
	// 0, and otherwise until the bandwidth is full.
	t int64
}

// bandStates computes every bandwidth's state from the diagnostics of a
// verbose response (policy.Bands), at now (the host's time). It returns nil
// when the stored bucket's bandwidths are not the policy's (a bucket written
// by an older configuration of the same version).
func bandStates(pol *policy, d *core.Diagnostics, now int64) []bandState {
	if d == nil || len(d.State.Config.Bandwidths) != len(pol.bands) {
		return nil
	}
	bs := rules.Bands(d, pol.cost, now)
	if bs == nil {
		return nil
	}
	out := make([]bandState, len(bs))
	for i, b := range bs {
		ns := b.Full
		if b.Available < pol.cost {
			ns = b.Wait
		}
		out[i] = bandState{r: max(b.Available, 0) / pol.cost, t: ceilSeconds(int64(ns))}
	}
	return out
}

// band returns the state of bandwidth i of o; without per-bandwidth
// diagnostics, the minimum over bandwidths stands for each.
func (o *outcome) band(i int) bandState {
	if o.bands != nil {
		return o.bands[i]
	}
	s := bandState{r: o.remaining / o.pol.cost}
	if s.r == 0 {
		s.t = max(1, ceilSeconds(o.wait))
	} else {
		s.t = ceilSeconds(o.reset)
	}
	return s
}

// headers appends the configured rate-limit headers describing outs: every
// bandwidth of every policy that took part, in requests.
//
//	RateLimit-Policy: "per-client/burst";q=10;w=60, "per-client/hourly";q=200;w=3600
//	RateLimit: "per-client/burst";r=9;t=6, "per-client/hourly";r=199;t=3600
//
// The x-ratelimit headers describe the binding bandwidth: on an admitted
// request the fewest requests left (ties: the smallest quota); on a refusal
// the refusing policy's bandwidth with no request left that waits longest,
// the one Retry-After counts down, so x-ratelimit-reset and Retry-After
// always agree.
func (p *Plugin) headers(outs []outcome, dst [][2]string) [][2]string {
	if len(outs) == 0 {
		return dst
	}
	if p.set.headers.IETF {
		var pol, rl strings.Builder
		for i := range outs {
			o := &outs[i]
			if i > 0 {
				pol.WriteString(", ")
				rl.WriteString(", ")
			}
			pol.WriteString(o.pol.items)
			for j := range o.pol.bands {
				if j > 0 {
					rl.WriteString(", ")
				}
				s := o.band(j)
				rl.WriteString(o.pol.bands[j].item + ";r=" + strconv.FormatInt(s.r, 10) + ";t=" + strconv.FormatInt(s.t, 10))
			}
		}
		dst = append(dst, [2]string{"ratelimit-policy", pol.String()}, [2]string{"ratelimit", rl.String()})
	}
	if p.set.headers.XRateLimit {
		var (
			best     bandState
			bestInfo *bandInfo
		)
		// On a refusal, the bandwidth that waits longest decides
		// Retry-After, so it decides these too.
		from, refused := outs, !outs[len(outs)-1].ok
		if refused {
			from = outs[len(outs)-1:]
		}
		for i := range from {
			o := &from[i]
			for j := range o.pol.bands {
				s, info := o.band(j), &o.pol.bands[j]
				if bestInfo == nil || s.r < best.r || s.r == best.r && (refused && s.t > best.t || !refused && info.q < bestInfo.q) {
					best, bestInfo = s, info
				}
			}
		}
		dst = append(dst,
			[2]string{"x-ratelimit-limit", strconv.FormatInt(bestInfo.q, 10)},
			[2]string{"x-ratelimit-remaining", strconv.FormatInt(best.r, 10)},
			[2]string{"x-ratelimit-reset", strconv.FormatInt(best.t, 10)})
	}
	return dst
}
