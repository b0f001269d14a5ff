package option

import "testing"

func TestCheck(t *testing.T) {
	names := []string{"WithA", "WithB", "WithC"}
	Check("pkg", "New", 0b011, 0b111, names) // all allowed: no panic
	defer func() {
		if r := recover(); r != "pkg: New does not take WithA, WithC" {
			t.Fatalf("panic %v", r)
		}
	}()
	Check("pkg", "New", 0b111, 0b010, names)
	t.Fatal("no panic")
}
