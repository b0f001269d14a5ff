package storetest

import (
	"context"
	"os"
	"testing"
	"time"
)

// Server returns the environment variable name, which locates a test server
// (what names it in messages; hint says how to get one). Unset, the test
// skips, except when CI is set: there a backend test that cannot reach its
// server fails, so that a green run means the backend really ran.
func Server(t testing.TB, name, what, hint string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set and CI is: %s; %s", name, what, hint)
		}
		t.Skipf("%s is not set; %s", name, hint)
	}
	return v
}

// Context returns a context that ends after 10 s or with the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
