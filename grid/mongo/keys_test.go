package mongo_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	mongodrv "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/grid/mongo"
	"github.com/bucketgrid/bucketgrid/internal/harness/keyrule"
	"github.com/bucketgrid/bucketgrid/internal/harness/storetest"
)

// TestKeyRuleThroughMiddleware: a key one byte over MaxKeyLen, or not UTF-8
// (FerretDB stored it as U+FFFD and lost it: ~40 lost races per request,
// then fail-open), is answered 400 and costs the store nothing; a key at the
// limit is limited exactly; with WithFitKeys the others are too.
func TestKeyRuleThroughMiddleware(t *testing.T) {
	s := newStore(t, 1)
	for _, key := range []string{strings.Repeat("k", mongo.MaxKeyLen+1), "caf\xe9"} {
		res := keyrule.Through(s, keyrule.Raw, key, 10)
		if want := slices.Repeat([]int{400}, 10); !slices.Equal(res.Statuses, want) || res.Calls != 0 || res.Stats.FailedOpen != 0 {
			t.Errorf("key of %d bytes: statuses %v, %d store calls, stats %+v; want 400 each and no store call",
				len(key), res.Statuses, res.Calls, res.Stats)
		}
		res = keyrule.Through(s, keyrule.Raw, key, 4, bucketgrid.WithFitKeys(mongo.MaxKeyLen))
		if !slices.Equal(res.Statuses, []int{200, 200, 429, 429}) {
			t.Errorf("WithFitKeys, key of %d bytes: statuses %v, want 200 200 429 429", len(key), res.Statuses)
		}
	}
	res := keyrule.Through(s, keyrule.Raw, strings.Repeat("k", mongo.MaxKeyLen), 4)
	if !slices.Equal(res.Statuses, []int{200, 200, 429, 429}) {
		t.Errorf("key of %d bytes: statuses %v, want 200 200 429 429", mongo.MaxKeyLen, res.Statuses)
	}
}

// TestKeyRule: every method refuses a key that breaks the rule with a
// *core.KeyError that does not show the key, and the driver starts no
// command for it.
func TestKeyRule(t *testing.T) {
	var started atomic.Int64
	c, err := mongodrv.Connect(options.Client().ApplyURI(mongoURI(t)).SetMaxPoolSize(1).
		SetServerSelectionTimeout(5 * time.Second).
		SetMonitor(&event.CommandMonitor{Started: func(context.Context, *event.CommandStartedEvent) { started.Add(1) }}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	s, err := mongo.New(collection(t, c))
	if err != nil {
		t.Fatal(err)
	}
	ctx := storetest.Context(t)
	for _, key := range []string{strings.Repeat("x", mongo.MaxKeyLen+1), "caf\xe9", "\xff" + strings.Repeat("x", 20)} {
		before := started.Load()
		if err := keyrule.Refused(ctx, s, key); err != nil {
			t.Fatal(err)
		}
		if n := started.Load() - before; n != 0 {
			t.Fatalf("key of %d bytes: the driver started %d commands", len(key), n)
		}
	}
	before := started.Load()
	if _, _, _, err := s.Get(ctx, strings.Repeat("x", mongo.MaxKeyLen)); err != nil || started.Load() == before {
		t.Fatalf("a key at the limit: %v after %d commands, want a real read", err, started.Load()-before)
	}
}
