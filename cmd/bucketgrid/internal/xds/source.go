// Package xds takes the rate-limit service's rules from an xDS management
// server instead of files: the state-of-the-world protocol for
// RateLimitConfig resources (type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig),
// over the aggregated discovery service as envoyproxy/ratelimit's
// CONFIG_TYPE=GRPC_XDS_SOTW asks it (what Envoy Gateway serves), or over the
// RateLimitConfigDiscoveryService itself.
//
// Every response is the whole configuration. It is turned into the YAML
// files it stands for and loaded by rulefile.Load, as files are: one that
// loads is acknowledged (ACK) and replaces the configuration in force, one
// that does not is refused (NACK, with the reason) and the last good
// configuration stays.
package xds

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	policysvc "github.com/envoyproxy/go-control-plane/ratelimit/service/ratelimit/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/bucketgrid/bucketgrid/policy"
	"github.com/bucketgrid/bucketgrid/policy/rulefile"
)

// API is the discovery service a Source streams from.
type API string

// The discovery services a management server may offer.
const (
	// ADS is envoy.service.discovery.v3.AggregatedDiscoveryService, which
	// envoyproxy/ratelimit uses.
	ADS API = "ads"
	// RLS is envoy.service.ratelimit.v3.RateLimitConfigDiscoveryService.
	RLS API = "rls"
)

// ParseAPI returns the API named s.
func ParseAPI(s string) (API, error) {
	switch API(s) {
	case ADS, RLS:
		return API(s), nil
	}
	return "", fmt.Errorf("xDS API %q: want ads or rls", s)
}

// Source follows a management server's rate-limit configuration.
type Source struct {
	// Conn is the connection to the management server.
	Conn grpc.ClientConnInterface
	// API is the discovery service to stream from.
	API API
	// Node identifies this instance to the server (its ID selects the
	// snapshot in go-control-plane's cache).
	Node *corepb.Node
	// Options load every configuration.
	Options policy.Options
	// Loaded receives every configuration accepted, with its version.
	Loaded func(cfg *policy.Rules, version string)
	// Failed receives every configuration refused, and every stream that
	// broke; the configuration in force stays.
	Failed func(err error)
	// MinBackoff and MaxBackoff bound the wait before streaming again
	// after the stream broke: it doubles from MinBackoff up to MaxBackoff,
	// with jitter, and starts over once a response arrived. Defaults 500 ms
	// and 30 s.
	MinBackoff, MaxBackoff time.Duration

	version string // of the configuration in force
	refused string // version and reason last reported refused
}

// Bounds of the wait before a refusal (NACK) is sent: a server such as
// go-control-plane's answers a NACK with the same version at once, so
// consecutive refusals of one version wait longer and longer, and are
// reported once.
const (
	minNackWait = 250 * time.Millisecond
	maxNackWait = 5 * time.Second
)

// stream is what both discovery services' streams offer.
type stream interface {
	Send(*discoverypb.DiscoveryRequest) error
	Recv() (*discoverypb.DiscoveryResponse, error)
}

// Run streams until ctx ends, streaming again after a break.
func (s *Source) Run(ctx context.Context) {
	lo, hi := s.MinBackoff, s.MaxBackoff
	if lo <= 0 {
		lo = 500 * time.Millisecond
	}
	if hi < lo {
		hi = max(30*time.Second, lo)
	}
	wait := lo
	for {
		answered, err := s.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		s.Failed(fmt.Errorf("xDS stream: %w", err))
		if answered {
			wait = lo
		}
		d := wait/2 + rand.N(wait/2+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		wait = min(2*wait, hi)
	}
}

// follow opens one stream and answers every response on it until it
// breaks; answered says whether a response arrived.
func (s *Source) follow(ctx context.Context) (answered bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var st stream
	switch s.API {
	case RLS:
		st, err = policysvc.NewRateLimitConfigDiscoveryServiceClient(s.Conn).StreamRlsConfigs(ctx)
	default:
		st, err = discoverypb.NewAggregatedDiscoveryServiceClient(s.Conn).StreamAggregatedResources(ctx)
	}
	if err != nil {
		return false, err
	}
	// The first request names the version in force, so that a server
	// whose configuration did not change while the stream was down need
	// not send it again.
	req := &discoverypb.DiscoveryRequest{Node: s.Node, TypeUrl: TypeURL, VersionInfo: s.version}
	nackWait := minNackWait
	for {
		if err := st.Send(req); err != nil {
			return answered, err
		}
		resp, err := st.Recv()
		if err != nil {
			return answered, err
		}
		answered = true
		req = &discoverypb.DiscoveryRequest{Node: s.Node, TypeUrl: TypeURL, ResponseNonce: resp.Nonce}
		cfg, err := s.load(resp)
		if err != nil {
			req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
			if r := resp.VersionInfo + "\x00" + err.Error(); r != s.refused {
				s.refused = r
				s.Failed(fmt.Errorf("xDS configuration version %q refused; keeping version %q: %w", resp.VersionInfo, s.version, err))
				nackWait = minNackWait
			}
			select {
			case <-ctx.Done():
				return answered, ctx.Err()
			case <-time.After(nackWait):
			}
			nackWait = min(2*nackWait, maxNackWait)
		} else {
			s.version, s.refused = resp.VersionInfo, ""
			s.Loaded(cfg, resp.VersionInfo)
		}
		req.VersionInfo = s.version // an ACK names the new version, a NACK the one kept
	}
}

// errType is a response of another resource type.
var errType = errors.New("not rate-limit configurations")

func (s *Source) load(resp *discoverypb.DiscoveryResponse) (*policy.Rules, error) {
	if resp.TypeUrl != TypeURL {
		return nil, fmt.Errorf("response of type %q: %w", resp.TypeUrl, errType)
	}
	files, err := Files(resp.Resources)
	if err != nil {
		return nil, err
	}
	return rulefile.Load(files, s.Options)
}
