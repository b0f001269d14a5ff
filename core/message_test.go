package core

import "testing"

func TestStringFallbacks(t *testing.T) {
	tests := []struct{ got, want string }{
		{RefillStyle(200).String(), "RefillStyle(200)"},
		{numRefillStyles.String(), "RefillStyle(4)"},
		{TokensInheritance(255).String(), "TokensInheritance(255)"},
		{RefillIntervallyAligned.String(), "intervally-aligned"},
		{InheritAdditive.String(), "additive"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("String() = %q, want %q", tt.got, tt.want)
		}
	}
}

// TestStringNames: every valid value has a name.
func TestStringNames(t *testing.T) {
	for s := RefillGreedy; s <= numRefillStyles; s++ {
		if s.String() == "" {
			t.Errorf("style %d has no name", s)
		}
	}
	for s := InheritProportionally; s <= numInheritances; s++ {
		if s.String() == "" {
			t.Errorf("inheritance %d has no name", s)
		}
	}
}
