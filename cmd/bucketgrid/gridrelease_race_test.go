//go:build race

package main

// floodKeys is how many distinct descriptors TestGridFloodIsReleased checks:
// fewer under the race detector, which makes each check several times
// slower, so that the test stays within a minute.
const floodKeys = 40_000
