//go:build !race

package main

// floodKeys is how many distinct descriptors TestGridFloodIsReleased checks.
const floodKeys = 100_000
