package gubernator

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"github.com/gubernator-io/gubernator/v2/cluster"
	"github.com/sirupsen/logrus"
)

const callers = 16

// freePorts returns n ports that were free a moment ago.
func freePorts(b *testing.B, n int) []int {
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// BenchmarkGubernator reports checks/s, p50, p99 and over-admission, as
// grid/olric's BenchmarkCheck does, for gubernator's exact (batched,
// owner-forwarded) token bucket.
func BenchmarkGubernator(b *testing.B) {
	logrus.SetLevel(logrus.ErrorLevel)
	// Fixed addresses: gubernator recognises itself among its peers by its
	// advertised address, so port 0 would make every instance forward.
	ports := freePorts(b, 6)
	peers := make([]guber.PeerInfo, 3)
	for i := range peers {
		peers[i] = guber.PeerInfo{
			GRPCAddress: fmt.Sprintf("127.0.0.1:%d", ports[2*i]),
			HTTPAddress: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]),
		}
	}
	if err := cluster.StartWith(peers); err != nil {
		b.Fatal(err)
	}
	defer cluster.Stop()
	clients := make([]guber.V1Client, 3)
	for i := range clients {
		c, err := guber.DialV1Server(cluster.PeerAt(i).GRPCAddress, nil)
		if err != nil {
			b.Fatal(err)
		}
		clients[i] = c
	}
	const limit = 1 << 40
	var behavior guber.Behavior
	hit := func(ctx context.Context, c guber.V1Client, key string, hits int64) (*guber.RateLimitResp, error) {
		resp, err := c.GetRateLimits(ctx, &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{{
			Name: "bench", UniqueKey: key, Hits: hits, Limit: limit,
			Duration: int64(24 * time.Hour / time.Millisecond), Algorithm: guber.Algorithm_TOKEN_BUCKET,
			Behavior: behavior,
		}}})
		if err != nil {
			return nil, err
		}
		r := resp.Responses[0]
		if r.Error != "" {
			return nil, fmt.Errorf("%s", r.Error)
		}
		return r, nil
	}
	ctx := context.Background()
	for _, beh := range []guber.Behavior{guber.Behavior_BATCHING, guber.Behavior_NO_BATCHING} {
		for _, keys := range []int{1, 10000} {
			prefix := fmt.Sprintf("%v-k%d-", beh, keys)
			admitted := make([]atomic.Int64, keys)
			b.Run(fmt.Sprintf("%v/keys=%d", beh, keys), func(b *testing.B) {
				behavior = beh
				var next atomic.Int64
				lat := make([][]time.Duration, callers)
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for c := range callers {
					wg.Go(func() {
						for {
							i := next.Add(1) - 1
							if i >= int64(b.N) {
								return
							}
							k := int(i) % keys
							t0 := time.Now()
							r, err := hit(ctx, clients[c%3], fmt.Sprint(prefix, k), 1)
							lat[c] = append(lat[c], time.Since(t0))
							if err != nil {
								b.Error(err)
								return
							}
							if r.Status == guber.Status_UNDER_LIMIT {
								admitted[k].Add(1)
							}
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				all := slices.Concat(lat...)
				slices.Sort(all)
				var over int64
				for k := range keys {
					if admitted[k].Load() == 0 {
						continue
					}
					r, err := hit(ctx, clients[0], fmt.Sprint(prefix, k), 0)
					if err != nil {
						b.Fatal(err)
					}
					over += admitted[k].Load() - (limit - r.Remaining)
				}
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checks/s")
				b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
				b.ReportMetric(float64(all[len(all)*999/1000].Microseconds()), "p99.9-µs")
				b.ReportMetric(float64(callers*elapsed.Microseconds())/float64(b.N), "mean-µs")
				b.ReportMetric(float64(over), "over-admitted")
			})
		}
	}
}
