package cas_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/retry"
)

// writeFailStore reads from memstore and fails every write.
type writeFailStore struct{ cas.Store }

func (writeFailStore) Insert(context.Context, string, []byte, time.Duration) (bool, error) {
	return false, errDown
}

// TestErrorMessages pins the text and the wrapping of the executor's
// errors: cas builds them without fmt (the Envoy filter links cas), as
// fmt.Errorf built them before — one %w unwraps to one error, two to both.
func TestErrorMessages(t *testing.T) {
	const key = "client-7"
	r := core.RedactKey(key)
	ctx := context.Background()
	_, getErr := cas.New(failStore{}).Execute(ctx, key, createReq)
	_, writeErr := cas.New(writeFailStore{memstore.New()}).Execute(ctx, key, createReq)
	deleteErr := cas.New(failStore{}).Remove(ctx, key)

	lose := func(strategy retry.Strategy, ctx context.Context) error {
		e := cas.New(&conflictStore{Store: memstore.New(), lose: 100}, cas.WithRetry(strategy))
		if _, err := e.Execute(context.Background(), key, createReq); err != nil { // Insert
			t.Fatal(err)
		}
		_, err := e.Execute(ctx, key, createReq) // Replace, lost
		return err
	}
	gaveUp := lose(retry.Immediate(3), ctx)
	// A retry that would start past the deadline ends the retries at once.
	later := retry.Func(func(retry.Metadata) retry.Decision { return retry.Decision{Action: retry.RetryAfter, Delay: time.Hour} })
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	deadline := lose(later, dctx)

	tests := []struct {
		name  string
		err   error
		want  string
		wraps []error
	}{
		{"get", getErr, "cas: store failed: get " + r + ": store down", []error{cas.ErrStore, errDown}},
		{"write", writeErr, "cas: store failed: write " + r + ": store down", []error{cas.ErrStore, errDown}},
		{"delete", deleteErr, "cas: store failed: delete " + r + ": store down", []error{cas.ErrStore, errDown}},
		{"gave up", gaveUp, "cas: gave up after lost races: key " + r + ", 3 attempts", []error{cas.ErrConflict}},
		{"deadline", deadline, "cas: gave up after lost races: key " + r + ", 1 attempts: context deadline exceeded",
			[]error{cas.ErrConflict, context.DeadlineExceeded}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil {
				t.Fatal("no error")
			}
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q\nwant      %q", got, tt.want)
			}
			var got []error
			multi, isMulti := tt.err.(interface{ Unwrap() []error })
			if isMulti {
				got = multi.Unwrap()
			} else if u := errors.Unwrap(tt.err); u != nil {
				got = []error{u}
			}
			if len(got) != len(tt.wraps) || isMulti != (len(tt.wraps) > 1) {
				t.Fatalf("%q wraps %v, want %v", tt.err, got, tt.wraps)
			}
			for i := range got {
				if got[i] != tt.wraps[i] || !errors.Is(tt.err, tt.wraps[i]) {
					t.Errorf("%q wraps %v at %d, want %v", tt.err, got[i], i, tt.wraps[i])
				}
			}
		})
	}
}
