// Package localmap is the in-process per-client limiter: Map, a bounded,
// idle-expiring map of local buckets (bucketgrid.Local), one per client key,
// created from a plan on the key's first lookup — what a Spring Boot
// service does with a Caffeine cache of Bucket4j buckets.
//
//	m := localmap.New(func(key string) (core.Config, error) {
//		return core.NewConfig(core.Greedy(10, 10, time.Minute))
//	}, localmap.WithMaxEntries(100_000), localmap.WithIdleTimeout(10*time.Minute))
//	ok, err := m.TryConsume(ctx, clientIP, 1)
//
// Looking up an existing bucket takes no lock and does not allocate. The
// buckets are bucketgrid.Local values made by a bucketgrid.LocalGroup,
// which shares their clock, listener and configurations; package httplimit
// builds its NewLocal on a Map.
package localmap
