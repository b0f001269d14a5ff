package policy

import "github.com/bucketgrid/bucketgrid/core"

// Share returns it as decided from one of n instances' shares of its
// bucket (an executor's degraded mode, which cuts every bucket with
// core.Config.Share while the backend is out): its limit divided as Share
// divides a bandwidth, ⌈requests_per_unit/n⌉ (and ⌈burst/n⌉), so that
// Decide, Quota and the limit reported describe the share. The operations
// stay it's own: it is the results of it.Ops run on the share that the
// returned item decides. A fixed window's share holds ⌈W/n⌉ of the window's
// W tokens, and counts ⌈W/n⌉ − tokens hits; its window ends at the unit's
// boundary on the deciding side's clock, which is the caller's (the share
// lives in its process). n ≤ 1, and an item that needs no bucket, return it
// unchanged.
func (it *Item) Share(n int) Item {
	out := *it
	if n <= 1 || !it.NeedsBucket() {
		return out
	}
	k := uint32(min(n, 1<<31))
	out.Rule.RequestsPerUnit = uint32(core.ShareOf(int64(it.Rule.RequestsPerUnit), int(k)))
	out.Rule.Burst = uint32(core.ShareOf(int64(it.Rule.Burst), int(k)))
	out.shares = k
	out.config = core.Config{} // rebuilt on out's own band, never it's
	return out
}

// window returns the tokens of it's window bucket as it is decided: W, or
// ⌈W/n⌉ for a share of n.
func (it *Item) window() int64 {
	return core.ShareOf(windowTokens(it.Rule.Unit), int(it.shares))
}
