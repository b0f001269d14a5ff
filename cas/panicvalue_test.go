package cas_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
)

type stringer struct{}

func (stringer) String() string { return "a stringer" }

type panicky struct{}

func (panicky) String() string { panic("oops") }

type code int

// TestPanicErrorMessage: PanicError prints its value as fmt's %v does for
// every value a panic carries in practice (fmt is the oracle), and says
// plainly when it does not print one.
func TestPanicErrorMessage(t *testing.T) {
	const prefix = "bucketgrid: panic: "
	for _, v := range []any{nil, "boom", errors.New("an error"), fmt.Errorf("wrapped: %w", context.Canceled),
		stringer{}, time.Second, panicky{}, true, false,
		0, -7, int8(-128), int16(300), int32(-1 << 31), int64(math.MinInt64),
		uint(7), uint8(255), uint16(65535), uint32(1 << 31), uint64(math.MaxUint64), uintptr(0xdead),
		0.1, 3.0, 1e21, 1e-7, math.Copysign(0, -1), math.Inf(-1), math.NaN(), float32(0.1), float32(16777216),
		complex(1, -2), complex(math.Inf(1), math.NaN()), complex64(complex(0.5, 0.25)),
	} {
		p := &cas.PanicError{Value: v, Stack: []byte("goroutine 1 [running]:\n")}
		if got, want := p.Error(), fmt.Sprintf(prefix+"%v\n\n%s", v, p.Stack); got != want {
			t.Errorf("PanicError{%#v}.Error() = %q, want %q (fmt)", v, got, want)
		}
	}
	for _, v := range []any{struct{ A int }{1}, []byte("b"), code(3), &struct{}{}} {
		p := &cas.PanicError{Value: v, Stack: []byte("stack")}
		if got, want := p.Error(), prefix+"(unprintable value; see PanicError.Value)\n\nstack"; got != want {
			t.Errorf("PanicError{%#v}.Error() = %q, want %q", v, got, want)
		}
	}
}
