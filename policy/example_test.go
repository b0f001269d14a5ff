package policy_test

import (
	"fmt"
	"time"

	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/policy"
	"github.com/bucketgrid/bucketgrid/policy/rulefile"
)

// The whole protocol against buckets held in a map through wire.Process, as
// an executor runs it: plan, execute the plan's batches, decide.
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
		plan, err := cfg.Plan(&policy.Request{Domain: "shop", Descriptors: []policy.Descriptor{
			{Entries: []policy.Entry{{Key: "client", Value: client}}},
		}}, &policy.Settings{Headers: policy.XRateLimitHeaders})
		if err != nil {
			fmt.Println(err)
			return
		}
		outcomes := make([]policy.Outcome, len(plan.Batches))
		for i, b := range plan.Batches {
			next, changed, resp := wire.Process(buckets[b.Key], wire.Request{
				Mode: wire.ModeCreateIfAbsent, Config: &b.Config, Ops: b.Ops}, now.UnixNano())
			if changed {
				buckets[b.Key] = next
			}
			outcomes[i].Results = resp.Results
		}
		d, _ := plan.Decide(outcomes, now)
		st := d.Statuses[0]
		fmt.Println(client, d.Code, st.Remaining, st.ResetAfter, d.Headers[1])
	}
	// Output:
	// alice OK 1 30s {x-ratelimit-remaining 1}
	// alice OK 0 30s {x-ratelimit-remaining 0}
	// alice OVER_LIMIT 0 30s {x-ratelimit-remaining 0}
	// partner OK 9 600ms {x-ratelimit-remaining 9}
}
