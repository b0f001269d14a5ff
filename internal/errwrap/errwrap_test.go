package errwrap_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"testing"

	"github.com/bucketgrid/bucketgrid/internal/errwrap"
)

// Each error must be indistinguishable from fmt.Errorf's: the same text and
// the same answers from errors.Is, errors.As and errors.Unwrap.
func TestSameAsFmt(t *testing.T) {
	pathErr := &fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}
	tests := []struct {
		name      string
		got, want error
		targets   []error
	}{
		{"one", errwrap.Wrap(io.EOF, ": at 3"), fmt.Errorf("%w: at 3", io.EOF), []error{io.EOF}},
		{"one, empty detail", errwrap.Wrap(pathErr, ""), fmt.Errorf("%w", pathErr), []error{fs.ErrNotExist}},
		{"two", errwrap.Wrap2(io.EOF, " (then ", pathErr), fmt.Errorf("%w (then %w", io.EOF, pathErr),
			[]error{io.EOF, fs.ErrNotExist}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got.Error() != tt.want.Error() {
				t.Errorf("text %q, fmt.Errorf %q", tt.got, tt.want)
			}
			for _, target := range tt.targets {
				if !errors.Is(tt.got, target) {
					t.Errorf("errors.Is(%q, %v) = false", tt.got, target)
				}
			}
			if errors.Is(tt.got, io.ErrUnexpectedEOF) {
				t.Errorf("errors.Is matches an unrelated error")
			}
			var pe *fs.PathError
			if errors.As(tt.got, &pe) != errors.As(tt.want, &pe) {
				t.Errorf("errors.As differs from fmt.Errorf's")
			}
			if (errors.Unwrap(tt.got) == nil) != (errors.Unwrap(tt.want) == nil) {
				t.Errorf("errors.Unwrap differs from fmt.Errorf's")
			}
		})
	}
}

func TestText(t *testing.T) {
	if got := errwrap.Text(nil); got != fmt.Sprintf("%v", error(nil)) {
		t.Errorf("Text(nil) = %q", got)
	}
	if got := errwrap.Text(io.EOF); got != "EOF" {
		t.Errorf("Text(io.EOF) = %q", got)
	}
}
