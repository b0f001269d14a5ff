package policy_test

import (
	"testing"

	. "github.com/bucketgrid/bucketgrid/policy"
)

// TestCheckAllocations bounds the garbage policy makes per check of one
// descriptor, which the garbage collector of every instance pays for:
// Plan allocates its item and batch (together; the operations live in
// the item) and the bucket key, StatsKey only the key it returns.
func TestCheckAllocations(t *testing.T) {
	c := load(t, Options{}, shop)
	req := Request{Domain: "shop", Descriptors: []Descriptor{desc("client", "a")}}
	var plan Plan
	if n := testing.AllocsPerRun(100, func() {
		var err error
		if plan, err = c.Plan(&req, &Settings{}); err != nil {
			t.Fatal(err)
		}
	}); n > 2 {
		t.Errorf("Plan: %v allocations per request of one descriptor, want at most 2 (item and batch, key)", n)
	}
	if len(plan.Batches) != 1 || len(plan.Batches[0].Ops) == 0 {
		t.Fatalf("batches %+v, want one with operations", plan.Batches)
	}
	r := plan.Batches[0].Rule
	want, _ := c.StatsKey("shop", req.Descriptors[0].Entries, r)
	if n := testing.AllocsPerRun(100, func() {
		if key, _ := c.StatsKey("shop", req.Descriptors[0].Entries, r); key != want {
			t.Fatalf("stats key %q, then %q", want, key)
		}
	}); n > 1 {
		t.Errorf("StatsKey: %v allocations, want at most 1 (the key)", n)
	}
}
