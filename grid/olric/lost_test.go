package olric

import (
	"errors"
	"testing"
)

// TestLostStateInvalid: a LostState that is none of the constants fails
// Start before anything starts.
func TestLostStateInvalid(t *testing.T) {
	c := DefaultLocalConfig()
	c.LostState = LostState(7)
	if _, err := c.withDefaults(); !errors.Is(err, ErrLostState) {
		t.Fatalf("withDefaults: %v, want ErrLostState", err)
	}
}
