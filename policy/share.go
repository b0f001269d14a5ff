package policy

import "github.com/bucketgrid/bucketgrid/core"

// share makes it the item decided from one of n instances' shares of its
// bucket (an executor's degraded mode, which cuts every bucket with
// core.Config.Share while the backend is out): its limit divided as Share
// divides a bandwidth, ⌈requests_per_unit/n⌉ (and ⌈burst/n⌉), so that
// Decide, Quota and the limit reported describe the share. The operations
// stay the whole bucket's: it is the results of them run on the share that
// the shared item decides. A fixed window's share holds ⌈W/n⌉ of the
// window's W tokens, and counts ⌈W/n⌉ − tokens hits; its window ends at the
// unit's boundary on the deciding side's clock, which is the caller's (the
// share lives in its process). n ≤ 1, and an item that needs no bucket,
// leave it unchanged.
func (it *item) share(n int) {
	if n <= 1 || !it.NeedsBucket() {
		return
	}
	k := uint32(min(n, 1<<31))
	it.Rule.RequestsPerUnit = uint32(core.ShareOf(int64(it.Rule.RequestsPerUnit), int(k)))
	it.Rule.Burst = uint32(core.ShareOf(int64(it.Rule.Burst), int(k)))
	it.shares = k
	it.config = core.Config{} // rebuilt on the shared limit
}

// window returns the tokens of it's window bucket as it is decided: W, or
// ⌈W/n⌉ for a share of n.
func (it *item) window() int64 {
	return core.ShareOf(windowTokens(it.Rule.Unit), int(it.shares))
}
