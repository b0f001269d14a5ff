package main

import (
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// usedUpConfig is the operator's limits: a fixed window of 60 a day
// (nothing comes back during a test) and a token bucket of 60 a minute
// (one a second).
const usedUpConfig = `
domain: share
descriptors:
  - key: window
    rate_limit: {unit: day, requests_per_unit: 60}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: token_bucket}
`

// TestRedisHangAfterWindowUsedUp is the operator's outage: three
// instances with -degrade on one Redis, a limit used up through all of
// them, then Redis hangs (SIGSTOP). Each instance last saw the limit
// spent, so the fleet admits what the refill allows and no more: nothing
// of the day's window, and of the 60/min bucket at most one a second
// since the checks began (+ one per instance for rounding). A fresh share
// per instance (20 each) would admit 60 of each.
func TestRedisHangAfterWindowUsedUp(t *testing.T) {
	rs := startRedis(t)
	dir := writeConfig(t, t.TempDir(), map[string]string{"share.yaml": usedUpConfig})
	args := []string{"-config", dir, "-backend", "redis://" + rs.addr() + "?prefix=usedup:", "-timeout", "1s",
		"-degrade", "-degrade-instances", "3", "-degrade-timeout", "500ms"} // Redis answers in time on a loaded machine
	var clients []rlspb.RateLimitServiceClient
	for range 3 {
		p := startProc(t, gridPort(t), nil, args...)
		clients = append(clients, client(t, p.grpcAddr))
	}
	values := map[string]string{"window": "w-" + randHex(4), "bucket": "b-" + randHex(4)}
	start := time.Now()
	for _, key := range []string{"window", "bucket"} {
		// round robin until each instance has been refused by Redis once
		admitted, refused := 0, [3]bool{}
		for i := 0; !(refused[0] && refused[1] && refused[2]); i++ {
			if i > 1000 {
				t.Fatalf("%s: never refused by all three instances", key)
			}
			tl := checkAll(clients[i%3], key, values[key], 1)
			if tl.failed != 0 || tl.limits[60] != 1 {
				t.Fatalf("%s, check %d with Redis up: %+v, want an answer from Redis (limit 60)", key, i, tl)
			}
			admitted += tl.ok
			refused[i%3] = refused[i%3] || tl.over == 1
		}
		if admitted < 60 {
			t.Fatalf("%s: Redis admitted %d through the fleet, want the 60 of the limit", key, admitted)
		}
	}
	rs.pause(t)
	defer rs.resume(t) // before the cleanup kills it
	for _, key := range []string{"window", "bucket"} {
		admitted := 0
		for i := range clients {
			tl := checkAll(clients[i], key, values[key], 20)
			if tl.failed != 0 || tl.limits[20] != 20 {
				t.Fatalf("%s, instance %d, Redis hung: %+v, want 20 answers from the share (limit 20)", key, i, tl)
			}
			admitted += tl.ok
		}
		allowed := 0 // the window gives nothing back today
		if key == "bucket" {
			allowed = int(time.Since(start)/time.Second) + 1 + 3
		}
		t.Logf("%s: the fleet admitted %d while Redis hung, %v after the limit began to be spent (allowed %d)",
			key, admitted, time.Since(start).Round(time.Millisecond), allowed)
		if admitted > allowed {
			t.Errorf("%s: the fleet admitted %d while Redis hung after the limit was used up, want at most %d (the refill)",
				key, admitted, allowed)
		}
	}
}
