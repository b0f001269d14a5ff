package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRun runs the program's checks against REDIS_ADDR: the example must
// keep working as the library changes.
func TestRun(t *testing.T) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		const hint = `start one with: scripts/servers.sh start && eval "$(scripts/servers.sh env)"`
		if os.Getenv("CI") != "" {
			t.Fatal("REDIS_ADDR is not set and CI is: the example needs a Redis; " + hint)
		}
		t.Skip("REDIS_ADDR is not set; " + hint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out strings.Builder
	err := run(ctx, addr, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out.String(), "ok  ") != 5 {
		t.Errorf("want 5 checks passed")
	}
}
