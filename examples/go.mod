module github.com/bucketgrid/bucketgrid/examples

go 1.26.0

require (
	github.com/bucketgrid/bucketgrid v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

// The replace is for development inside this repository: the examples build
// against the checkout they live in. A copy outside the repository drops it
// and requires a published version instead.
replace github.com/bucketgrid/bucketgrid => ..
