package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
)

// TestKeyCountsAndStop: each member counts a client's requests by how
// they were answered, for the page's cluster total; the stop endpoint
// stops another member (never the page's own, so one always runs), whose
// HTTP then stops answering while the others go on limiting.
func TestKeyCountsAndStop(t *testing.T) {
	d := startDemo(t, Limit{Capacity: 4, RefillPerMinute: 1})
	urls := d.URLs()
	c := newClient(t)
	for i := range 6 {
		c.quote(urls[i%3], "bob")
	}
	var admitted, denied, failed uint64
	for _, u := range urls {
		k := c.state(u, "bob").Key
		admitted, denied, failed = admitted+k.Admitted, denied+k.Denied, failed+k.Failed
		if k.First == 0 {
			t.Errorf("%s: no first-request time", u)
		}
	}
	if admitted != 4 || denied != 2 || failed != 0 {
		t.Fatalf("bob over the cluster: %d admitted, %d denied, %d failed; want 4, 2, 0", admitted, denied, failed)
	}
	if k := c.state(urls[0], "carol").Key; k.Admitted+k.Denied+k.Failed != 0 {
		t.Fatalf("carol, who sent nothing: %+v", k)
	}

	stop := func(base string, member int) int {
		t.Helper()
		body, _ := json.Marshal(map[string]int{"member": member})
		resp, err := c.http.Post(base+"/demo/stop", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := stop(urls[0], 1); s != http.StatusConflict {
		t.Fatalf("stopping the page's own member: %d, want 409", s)
	}
	if s := stop(urls[0], 9); s != http.StatusNotFound {
		t.Fatalf("stopping no member: %d, want 404", s)
	}
	if s := stop(urls[0], 3); s != http.StatusAccepted {
		t.Fatalf("stopping member 3: %d, want 202", s)
	}
	waitFor(t, "member 3 to stop answering", func() bool {
		resp, err := c.http.Get(urls[2] + "/demo/members")
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	})
	var info struct {
		Members     []memberInfo
		FailureMode string
	}
	c.getJSON(urls[0]+"/demo/members", &info)
	if !info.Members[2].Stopped || info.Members[1].Stopped || info.FailureMode == "" {
		t.Fatalf("members after the stop: %+v", info)
	}
	if s := stop(urls[1], 1); s != http.StatusAccepted {
		t.Fatalf("stopping member 1 from member 2: %d, want 202", s)
	}
	waitFor(t, "member 1 to stop", func() bool { return d.nodes[0].stopped.Load() })
	if s := stop(urls[1], 3); s != http.StatusOK {
		t.Fatalf("stopping member 3 again: %d, want 200", s)
	}
	if s := stop(urls[1], 2); s != http.StatusConflict {
		t.Fatalf("stopping the last member, the page's own: %d, want 409", s)
	}
	// Member 2, the last one, still limits dave: 4 × 200 and 2 × 429 when
	// dave's partition was member 2's all along; when it was a stopped
	// member's (one replica: its copy left with it), the bucket starts
	// empty (olric.LostEmpty) and all 6 are refused. Never more than 4.
	got := map[int]int{}
	for range 6 {
		got[c.quote(urls[1], "dave").StatusCode]++
	}
	if got[http.StatusOK]+got[http.StatusTooManyRequests] != 6 || (got[http.StatusOK] != 4 && got[http.StatusOK] != 0) {
		t.Fatalf("dave through the last member: %v, want 4 × 200 and 2 × 429, or 6 × 429 when his bucket's partition was lost", got)
	}
}
