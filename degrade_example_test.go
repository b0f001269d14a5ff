package bucketgrid_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/core/wire"
)

// unreachable is an executor whose backend is down.
type unreachable struct{}

func (unreachable) Execute(context.Context, string, wire.Request) (wire.Response, error) {
	return wire.Response{}, errors.New("dial tcp: connection refused")
}

func (unreachable) Remove(context.Context, string) error {
	return errors.New("dial tcp: connection refused")
}

// Three instances share a limit of 30 requests a minute; while the backend
// is out, each decides from its share, 10.
func ExampleWithDegrade() {
	m := bucketgrid.NewManager(unreachable{}, bucketgrid.WithDegrade(bucketgrid.Degrade{
		Instances: func() int { return 3 },
	}))
	plan := func(context.Context) (core.Config, error) { return core.NewConfig(core.Greedy(30, 30, time.Minute)) }
	h := m.Bucket("client-42", plan)
	admitted := 0
	for range 15 {
		res, share, err := h.Execute(context.Background(), wire.Op{Kind: wire.OpTryConsume, Tokens: 1})
		if err == nil && res[0].OK && share == 3 { // decided from this instance's share of 3
			admitted++
		}
	}
	st := m.Stats()
	fmt.Println("admitted from the local share:", admitted)
	fmt.Println("decided locally:", st.Degraded, "breakers open:", st.OpenBreakers)
	// Output:
	// admitted from the local share: 10
	// decided locally: 15 breakers open: 1
}
