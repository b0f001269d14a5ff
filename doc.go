// Package bucketgrid is Bucket4j's exact token-bucket model for Go, with
// bucket state kept in process (NewLocal) or in the grid, cache or database
// an application already runs (NewManager over an Executor).
//
// Every bucket, local or distributed, implements Bucket: context first, error
// last. The arithmetic lives in package core and is the same everywhere: a
// check is a pure function of the stored state, the request and the time.
package bucketgrid
