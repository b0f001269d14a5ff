package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas/presence"
	"github.com/bucketgrid/bucketgrid/policy"
)

type listFlag struct{ v *[]string }

func (l listFlag) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, ",")
}

func (l listFlag) Set(s string) error {
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			*l.v = append(*l.v, f)
		}
	}
	return nil
}

// parseFlags reads the command line, and envoyproxy/ratelimit's settings
// from the environment (see ratelimitenv.go), into validated settings.
func parseFlags(fs *flag.FlagSet, args []string) (settings, error) {
	return parseFlagsEnv(fs, args, os.LookupEnv)
}

// parseFlagsEnv is parseFlags with the environment read by lookup.
func parseFlagsEnv(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) (settings, error) {
	var s settings
	s.register(fs)
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if s.Version {
		return s, nil
	}
	envErr := applyRatelimitEnv(fs, lookup)
	return s, errors.Join(envErr, s.validate())
}

// register defines the flags on fs, each filling its option of s, with
// its default.
func (s *settings) register(fs *flag.FlagSet) {
	fs.Var(listFlag{&s.ConfigPaths}, "config", "configuration `path`: a YAML file, or a directory of *.yaml files (repeatable, or comma-separated)")
	fs.StringVar(&s.XDS.Addr, "config-xds", "", "`host:port` of an xDS management server to take the configuration from (state of the world, RateLimitConfig resources, as envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW), instead of -config")
	fs.StringVar(&s.XDS.Node, "config-xds-node", "", "node `ID` sent to the xDS server; empty is the host name")
	fs.StringVar(&s.XDS.API, "config-xds-api", "ads", "xDS service to stream from: ads (the aggregated discovery service, as envoyproxy/ratelimit) or rls (RateLimitConfigDiscoveryService)")
	fs.StringVar(&s.XDS.CA, "config-xds-ca", "", "PEM `file` of the CA of the xDS server's certificate (TLS); empty connects in plaintext")
	fs.StringVar(&s.GRPCAddr, "grpc-addr", "127.0.0.1:8081", "gRPC listen `address` (the RLS API, health, reflection)")
	fs.StringVar(&s.HTTPAddr, "http-addr", "127.0.0.1:8080", "HTTP listen `address` (/json, /healthcheck, /metrics); empty disables it")
	fs.StringVar(&s.DebugAddr, "debug-addr", "", "listen `address` of /debug/pprof (Go's profiler); empty disables it. Never expose it")
	fs.StringVar(&s.text.algorithm, "algorithm", "fixed_window", "algorithm of rules that name none: fixed_window (envoyproxy/ratelimit's) or token_bucket")
	fs.BoolVar(&s.Rules.MergeDomains, "merge-domains", false, "let several files configure one domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)")
	fs.Float64Var(&s.text.nearLimitRatio, "near-limit-ratio", 0.8, "fraction of a limit above which hits count as near the limit")
	fs.BoolVar(&s.ShadowMode, "shadow-mode", false, "answer OK to everything, counting what would be refused")
	fs.BoolVar(&s.QuotaMode, "quota-mode", false, "treat every rule as quota_mode")
	fs.StringVar(&s.text.headers, "headers", "none", "response headers for Envoy to add, comma-separated: ietf (RateLimit-Policy, RateLimit), x-ratelimit (X-RateLimit-Limit, -Remaining, -Reset), draft (RateLimit-Limit, -Remaining, -Reset, envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED names), retry-after (Retry-After on refusals), or none, as envoyproxy/ratelimit without LIMIT_RESPONSE_HEADERS_ENABLED")
	fs.StringVar(&s.text.draftNames, "draft-header-names", "", "the names of the draft headers instead of RateLimit-Limit, -Remaining and -Reset: three, comma-separated (envoyproxy/ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER)")
	fs.BoolVar(&s.StopCountingWhenOverLimit, "stop-counting-when-over-limit", false, "when a descriptor of a request would go over its limit, count only the descriptors that would, not the others (envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT); costs a check of every descriptor of a request first")
	fs.DurationVar(&s.Timeout, "timeout", time.Second, "bound on answering one request")
	fs.DurationVar(&s.ReloadInterval, "reload-interval", time.Second, "how often the configuration files are checked for changes")
	fs.StringVar(&s.Backend, "backend", "grid", "where the buckets live: grid (an Olric grid of the instances), memory (this process only), or a store URI: redis://, mongodb://, couchbase://")
	fs.StringVar(&s.Grid.Bind, "grid-bind", "127.0.0.1:3320", "grid member's Olric `host:port`; the owner channel uses port+1 and gossip port+2")
	fs.Var(listFlag{&s.Grid.Peers}, "grid-peers", "gossip `addresses` (host:port+2 of -grid-bind) of instances to join, or dns:NAME for every address NAME resolves to (at this instance's gossip port), resolved anew at each join; empty, or only this instance, starts a new grid")
	fs.StringVar(&s.Grid.Env, "grid-env", "local", "grid timings: local (one host) or lan")
	fs.IntVar(&s.Grid.Replicas, "grid-replicas", 1, "copies of each bucket: 1, or 2 to lose nothing when an instance leaves")
	fs.DurationVar(&s.Grid.JoinTimeout, "grid-join-timeout", 30*time.Second, "how long to try joining -grid-peers before giving up")
	fs.BoolVar(&s.Grid.Verbose, "grid-log", false, "write the grid's own logs (Olric, memberlist) to stderr")
	fs.StringVar(&s.Grid.TLSCert, "grid-tls-cert", "", "PEM `file` of this member's certificate (owner channel mutual TLS; with -grid-tls-key and -grid-tls-ca)")
	fs.StringVar(&s.Grid.TLSKey, "grid-tls-key", "", "PEM `file` of this member's private key")
	fs.StringVar(&s.Grid.TLSCA, "grid-tls-ca", "", "PEM `file` of the CA that issues the members' certificates")
	fs.StringVar(&s.Grid.TLSRevoked, "grid-tls-revoked", "", "`file` of revoked member certificates, one serial number or SHA-256 fingerprint in hex a line; re-read while running, like the -grid-tls-* files (a listed member is refused and expelled)")
	fs.StringVar(&s.Grid.SecretFile, "grid-secret-file", "", "`file` holding, in base64 (openssl rand -base64 32), a secret of at least 32 random bytes shared by every member, instead of -grid-tls-*: the owner channel's mutual TLS without a PKI")
	fs.StringVar(&s.Grid.GossipKeyFile, "grid-gossip-key-file", "", "`file` of gossip encryption keys (16, 24 or 32 bytes, base64, one a line; the first encrypts)")
	fs.StringVar(&s.Grid.PasswordFile, "grid-password-file", "", "`file` holding the password of Olric's own port")
	fs.BoolVar(&s.Grid.Insecure, "grid-insecure", false, "let a member on a non-loopback address run without the settings above (a network only the instances reach)")
	s.text.leases = "off"
	fs.Var(leaseFlag{&s.text.leases}, "grid-leases", "which descriptors' checks this instance decides from a lease of tokens taken from their bucket's owner when busy, instead of one hop each: -grid-leases=off (the default), =exact (fixed windows, which admit no more than their limit, but may refuse early while leases hold tokens), or =all (token buckets too: one may admit up to rate × -grid-lease-lifetime more in any interval; the bare flag)")
	fs.DurationVar(&s.Grid.LeaseLifetime, "grid-lease-lifetime", 0, "how long a lease of -grid-leases lives; 0 keeps the grid's default")
	fs.StringVar(&s.TLS.Cert, "tls-cert", "", "gRPC server certificate `file` (PEM); with -tls-key enables TLS")
	fs.StringVar(&s.TLS.Key, "tls-key", "", "gRPC server key `file` (PEM)")
	fs.StringVar(&s.TLS.ClientCA, "tls-client-ca", "", "CA `file` (PEM) that client certificates must chain to (mutual TLS)")
	fs.StringVar(&s.TLS.ClientSAN, "tls-client-san", "", "a DNS `name` (or IP address) the client certificate must hold, as x509 matches a host name (with -tls-client-ca; envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN)")
	fs.IntVar(&s.MaxValued, "metrics-max-valued", 1000, "most rule labels holding client values (detailed_metric, value_to_metric, overrides) with series of their own: the most recently used; the others count under the rule path's .__other")
	fs.DurationVar(&s.DrainGrace, "drain-grace", 5*time.Second, "at shutdown, how long health checks fail (gRPC NOT_SERVING, /healthcheck 500) while requests are still answered, before the listeners close: long enough for load balancers to see it")
	fs.DurationVar(&s.ShutdownGrace, "shutdown-grace", 10*time.Second, "how long requests in flight may take at shutdown, once the listeners close")
	fs.Int64Var(&s.HeapFloor, "gc-heap-floor", defaultHeapFloor, "`bytes` of heap below which the garbage collector does not collect: it collects when the heap reaches the larger of this and GOGC's goal (2× the live heap at GOGC=100), so a small live heap is collected every few tens of MiB instead of every few; 0 leaves Go's own rule. GOGC=off turns it off; GOMEMLIMIT bounds it")
	fs.BoolVar(&s.Version, "version", false, "print the version and exit")
	fs.StringVar(&s.text.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&s.text.logFormat, "log-format", "text", "text or json")
	fs.BoolVar(&s.RLQS, "rlqs", false, "also serve Envoy's Rate Limit Quota Service (envoy.service.rate_limit_quota.v3) on -rlqs-addr, from the same rules and buckets")
	fs.StringVar(&s.RLQSAddr, "rlqs-addr", "127.0.0.1:8082", "gRPC listen `address` of the Rate Limit Quota Service (with -rlqs; health too): its own port, since a usage report is far larger than a check")
	fs.IntVar(&s.Limits.RLQSMaxRecv, "rlqs-max-recv", 4<<20, "largest usage report in `bytes`: Envoy reports all its buckets in one message every 5 s (about 40 bytes plus the id's keys and values each), so 4 MiB is 10,000 buckets (a stream's most) of ids up to 380 bytes")
	fs.DurationVar(&s.Limits.RLQSFirstReport, "rlqs-first-report", 3*time.Second, "a quota stream that has not sent a whole usage report this long after it opened is closed UNAVAILABLE, so that a silent stream gives its room back: Envoy sends its first report at once; raise it where the largest reports take longer to arrive")
	fs.Int64Var(&s.Limits.RLQSMaxBytes, "rlqs-max-inflight-bytes", 1<<30, "`bytes` all quota streams together may make the service hold: a stream takes -grpc-window plus -rlqs-max-recv for as long as it is open (a report may arrive at any time); one that finds no room is refused RESOURCE_EXHAUSTED (Envoy retries at its next report). Apart from -max-inflight-bytes, so quota streams never take the checks' room")
	fs.IntVar(&s.Limits.GRPCMaxConns, "grpc-max-conns", 1024, "gRPC connections served at once; further ones wait to be accepted")
	fs.IntVar(&s.Limits.GRPCMaxStreams, "grpc-max-streams", 100, "concurrent calls one gRPC connection may have (announced to the client)")
	fs.IntVar(&s.Limits.GRPCMaxRecv, "grpc-max-recv", 64<<10, "largest request message decided, in `bytes` (a RateLimitRequest is a few hundred; at most 64 descriptors of 4096 bytes are decided); a larger check, up to -grpc-max-read, is answered OVER_LIMIT")
	fs.IntVar(&s.Limits.GRPCMaxRead, "grpc-max-read", 256<<10, "largest request message read on the gRPC port, in `bytes`: a check over -grpc-max-recv up to it is answered OVER_LIMIT, a message beyond it is refused RESOURCE_EXHAUSTED by gRPC (an error Envoy's failure_mode_deny: false lets through), so keep it above what Envoy can send: its max_request_headers_kb times the descriptors one header feeds")
	fs.IntVar(&s.Limits.GRPCWindow, "grpc-window", 64<<10, "HTTP/2 flow-control window in `bytes` per call and per connection (at least 65535; fixed, so a client cannot grow it)")
	fs.DurationVar(&s.Limits.GRPCReadTimeout, "grpc-read-timeout", 5*time.Second, "how long a call's request message may take to arrive in full before the call is reset")
	fs.DurationVar(&s.Limits.GRPCIdleTimeout, "grpc-idle-timeout", 5*time.Minute, "a gRPC connection without calls for this long is closed")
	fs.DurationVar(&s.Limits.GRPCKeepaliveMin, "grpc-keepalive-min-time", 10*time.Second, "a client whose keepalive pings come closer together than this is disconnected")
	fs.DurationVar(&s.Limits.GRPCMaxAge, "grpc-max-connection-age", 0, "a gRPC connection this old is asked to go away (GOAWAY, with ±10% jitter), so that clients spread over new instances; 0 never (envoyproxy/ratelimit's GRPC_MAX_CONNECTION_AGE, 24h there)")
	fs.DurationVar(&s.Limits.GRPCMaxAgeGrace, "grpc-max-connection-age-grace", 0, "after -grpc-max-connection-age, how long its calls may take before the connection is closed; 0 unbounded (GRPC_MAX_CONNECTION_AGE_GRACE, 1h there)")
	fs.IntVar(&s.Limits.HTTPMaxConns, "http-max-conns", 1024, "HTTP connections served at once; further ones wait to be accepted")
	fs.Int64Var(&s.Limits.HTTPMaxBody, "http-max-body", 64<<10, "largest /json request body in `bytes` (413 beyond)")
	fs.IntVar(&s.Limits.HTTPMaxHeaderBytes, "http-max-header-bytes", 64<<10, "largest HTTP request header in `bytes` (431 beyond)")
	fs.DurationVar(&s.Limits.HTTPReadTimeout, "http-read-timeout", 10*time.Second, "how long reading an HTTP request, header and body, may take")
	fs.DurationVar(&s.Limits.HTTPIdleTimeout, "http-idle-timeout", time.Minute, "an idle keep-alive HTTP connection is closed after this long")
	fs.Int64Var(&s.Limits.MaxInflightBytes, "max-inflight-bytes", 256<<20, "`bytes` that all connections' requests in flight together may make the service hold: a gRPC call takes -grpc-window plus -grpc-max-read until its message is decoded, a /json request its body; one that finds no room is refused at once (a check OVER_LIMIT, unread; other gRPC calls RESOURCE_EXHAUSTED, and together hold at most half of it; HTTP 503)")
	fs.BoolVar(&s.Degrade.On, "degrade", false, "while the backend is out, decide from a local share of each limit (the limit divided by the instances) instead of answering Unavailable, which Envoy's failure_mode_deny turns into unlimited by default. Off by default: a grid holds a key up to its hand-over grace (over a second) when members join, longer than -degrade-timeout, so keys moving are decided from shares then")
	fs.IntVar(&s.Degrade.Instances, "degrade-instances", 0, "number of instances sharing the limits under -degrade; 0: the grid's live members (with a store URI, say how many instances run, or count them with -degrade-count, or each admits the whole limit); with -degrade-count, the least count")
	fs.BoolVar(&s.Degrade.Count, "degrade-count", false, "with a store URI and -degrade, count the instances sharing the store: each keeps a presence record in it with a TTL of -degrade-count-ttl, refreshed every quarter of it; while the store is out, the last count seen")
	fs.DurationVar(&s.Degrade.CountTTL, "degrade-count-ttl", presence.DefaultTTL, "under -degrade-count, how long a stopped instance is still counted at most (its record's TTL)")
	fs.DurationVar(&s.Degrade.Timeout, "degrade-timeout", bucketgrid.DefaultDegradeTimeout, "under -degrade, how long a check waits for the backend before it is decided locally, at most; a caller's deadline (Envoy sends its filter timeout, 20 ms by default, failing open) shortens the wait to half the time left, so that the local decision arrives in time. Below -timeout")
}

func countSet(vals ...string) int {
	n := 0
	for _, v := range vals {
		if v != "" {
			n++
		}
	}
	return n
}

func splitHostPort(s string) (string, int, error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	return host, port, err
}

// parseHeaders reads the -headers list.
func parseHeaders(list string) (h policy.Headers, retryAfter bool, err error) {
	for _, name := range strings.Split(strings.ReplaceAll(list, " ", ""), ",") {
		switch name {
		case "none", "":
		case "ietf":
			h |= policy.IETFHeaders
		case "x-ratelimit":
			h |= policy.XRateLimitHeaders
		case "draft":
			h |= policy.DraftHeaders
		case "retry-after":
			retryAfter = true
		default:
			return 0, false, fmt.Errorf("-headers %q: want a list of ietf, x-ratelimit, draft and retry-after, or none", list)
		}
	}
	return h, retryAfter, nil
}

// parseHeaderNames reads -draft-header-names: the names sent instead of
// the draft headers', keyed by those (lower case, as policy writes them).
// Envoy refuses a response whose header names are not HTTP tokens, so such
// names are refused here.
func parseHeaderNames(list string) (map[string]string, error) {
	if list == "" {
		return nil, nil
	}
	names := strings.Split(list, ",")
	if len(names) != 3 {
		return nil, fmt.Errorf("-draft-header-names %q: want three names, comma-separated", list)
	}
	out := map[string]string{}
	for i, std := range []string{"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"} {
		n := strings.TrimSpace(names[i])
		if !httpguts.ValidHeaderFieldName(n) {
			return nil, fmt.Errorf("-draft-header-names %q: %q is not a header name", list, n)
		}
		out[std] = strings.ToLower(n)
	}
	return out, nil
}
