module github.com/bucketgrid/bucketgrid/grid/redis

go 1.26.0

require (
	github.com/bucketgrid/bucketgrid v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

// Development inside this repository: the root module comes from this
// checkout. Replace directives apply only to the main module, so a consumer
// of the published module ignores them and resolves the required versions
// from its proxy; RELEASING.md says how the required versions are bumped and
// tagged.
replace github.com/bucketgrid/bucketgrid => ../..
