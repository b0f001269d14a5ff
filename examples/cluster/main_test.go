package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that a demo shut down leaves no goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
