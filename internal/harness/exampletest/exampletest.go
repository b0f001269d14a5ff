// Package exampletest runs the Examples of backends whose output depends on
// a server: such an Example carries no checked Output, so a test calls it
// and compares what it printed.
package exampletest

import (
	"io"
	"os"
	"testing"
)

// Stdout runs f and returns what it wrote to os.Stdout.
func Stdout(t testing.TB, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	defer func() { os.Stdout = saved }()
	f()
	os.Stdout = saved
	w.Close()
	return <-out
}
