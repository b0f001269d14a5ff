package policy_test

import (
	"fmt"
	"time"

	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/policy"
	"github.com/bucketgrid/bucketgrid/policy/rulefile"
)

// The whole protocol against buckets held in a map through wire.Process, as
// an executor runs it: plan, run each item's operations as one batch, decide.
func Example() {
	cfg, err := rulefile.Load([]rulefile.File{{Name: "shop.yaml", Data: []byte(`
domain: shop
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: client
    value: partner
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: token_bucket, burst: 10}
`)}}, policy.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	buckets := map[string][]byte{}
	now := time.Date(2026, 12, 1, 12, 0, 30, 0, time.UTC)
	for _, client := range []string{"alice", "alice", "alice", "partner"} {
		items, err := cfg.Plan(&policy.Request{Domain: "shop", Descriptors: []policy.Descriptor{
			{Entries: []policy.Entry{{Key: "client", Value: client}}},
		}})
		if err != nil {
			fmt.Println(err)
			return
		}
		it := &items[0]
		bc := it.BucketConfig()
		next, changed, resp := wire.Process(buckets[it.Key], wire.Request{
			Mode: wire.ModeCreateIfAbsent, Config: &bc, Ops: it.Ops()}, now.UnixNano())
		if changed {
			buckets[it.Key] = next
		}
		st, _ := it.Decide(resp.Results, now)
		fmt.Println(client, st.Code, st.Remaining, st.ResetAfter)
	}
	// Output:
	// alice OK 1 30s
	// alice OK 0 30s
	// alice OVER_LIMIT 0 30s
	// partner OK 9 600ms
}
