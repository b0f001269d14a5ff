// Package storetest holds what the backend tests of this repository share:
// cas.Store decorators, and finding the test servers.
package storetest

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/cas"
)

// Counting is a cas.Store that counts the calls reaching its Store and
// forwards CheckKey, as a decorator must for the executor to see the
// store's key rule.
type Counting struct {
	cas.Store
	calls atomic.Int64
}

// Calls returns the calls that reached the store so far.
func (c *Counting) Calls() int64 { return c.calls.Load() }

// CheckKey forwards to the store's KeyChecker; nil without one.
func (c *Counting) CheckKey(key string) error {
	if kc, ok := c.Store.(cas.KeyChecker); ok {
		return kc.CheckKey(key)
	}
	return nil
}

// Get counts and forwards.
func (c *Counting) Get(ctx context.Context, k string) ([]byte, cas.Version, bool, error) {
	c.calls.Add(1)
	return c.Store.Get(ctx, k)
}

// Insert counts and forwards.
func (c *Counting) Insert(ctx context.Context, k string, d []byte, ttl time.Duration) (bool, error) {
	c.calls.Add(1)
	return c.Store.Insert(ctx, k, d, ttl)
}

// Replace counts and forwards.
func (c *Counting) Replace(ctx context.Context, k string, d []byte, v cas.Version, ttl time.Duration) (bool, error) {
	c.calls.Add(1)
	return c.Store.Replace(ctx, k, d, v, ttl)
}

// Delete counts and forwards.
func (c *Counting) Delete(ctx context.Context, k string) error {
	c.calls.Add(1)
	return c.Store.Delete(ctx, k)
}
