package olric

import (
	"context"
	"testing"
	"time"
)

// BenchmarkJoin measures how long Start takes for a member joining a
// running secured 2-member cluster in this process (mutual TLS, encrypted
// gossip, Olric's password): from Start until it returns, ready to serve,
// and until every member reads a routing table of three (join-stable-ms).
// Each joiner leaves again, outside the timing.
func BenchmarkJoin(b *testing.B) {
	s := newSecrets(b)
	ms := startCluster(b, 2, s.secure(b))
	var stable time.Duration
	b.ResetTimer()
	for range b.N {
		c := testConfig(b)
		s.secure(b)(&c)
		c.Peers = []string{memberlistAddr(ms[0].cfg)}
		t0 := time.Now()
		m, err := Start(context.Background(), c)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		waitStable(b, append(ms[:2:2], m))
		stable += time.Since(t0)
		shutdownAll(b, []*Member{m})
		waitStable(b, ms)
		b.StartTimer()
	}
	b.ReportMetric(float64(stable.Milliseconds())/float64(b.N), "join-stable-ms")
}
