package olric

import (
	"context"
	"errors"
	"testing"

	"github.com/bucketgrid/bucketgrid/clock"
)

func TestConfigValidation(t *testing.T) {
	c := DefaultLocalConfig()
	c.BindAddr = ""
	if _, err := Start(context.Background(), c); !errors.Is(err, ErrNoBindAddr) {
		t.Errorf("no BindAddr: %v, want ErrNoBindAddr", err)
	}
	c = DefaultLocalConfig()
	c.RoutingLease = c.HandoverGrace
	if _, err := Start(context.Background(), c); !errors.Is(err, ErrTimings) {
		t.Errorf("lease = grace: %v, want ErrTimings", err)
	}
	c = DefaultLocalConfig()
	c.Clock = clock.Monotonic()
	if _, err := Start(context.Background(), c); !errors.Is(err, ErrClock) {
		t.Errorf("monotonic clock: %v, want ErrClock", err)
	}
	if _, err := DefaultLANConfig().withDefaults(); !errors.Is(err, ErrNoBindAddr) {
		t.Errorf("LAN config without an address: %v, want ErrNoBindAddr", err)
	}
}
