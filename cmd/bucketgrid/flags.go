package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/bucketgrid/bucketgrid"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/bucketgrid/bucketgrid/cas/presence"
	"github.com/bucketgrid/bucketgrid/policy"
)

// config is everything the flags set.
type config struct {
	ConfigPaths []string
	XDS         xdsFlags
	GRPCAddr    string
	HTTPAddr    string
	DebugAddr   string
	Rules       policy.Options
	ShadowMode  bool
	QuotaMode   bool
	Headers     policy.Headers
	RetryAfter  bool              // Retry-After on refusals (-headers retry-after)
	HeaderNames map[string]string // -draft-header-names: policy's lower-case name → the name sent
	// StopCountingWhenOverLimit: envoyproxy/ratelimit's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (service.Options)
	StopCountingWhenOverLimit bool
	Timeout                   time.Duration
	ReloadInterval            time.Duration
	Backend                   string
	Grid                      gridFlags
	TLS                       tlsFlags
	MaxValued                 int
	ShutdownGrace             time.Duration
	DrainGrace                time.Duration
	LogLevel                  slog.Level
	LogJSON                   bool // -log-format json
	Version                   bool // print the version and exit
	RLQS                      bool // serve envoy.service.rate_limit_quota.v3 too, on RLQSAddr
	RLQSAddr                  string
	Degrade                   degradeFlags
	Limits                    limitFlags
}

// limitFlags bound what one client connection, and all of them, can make
// the service hold: see README.md, "Limits".
type limitFlags struct {
	GRPCMaxConns       int           // gRPC connections served at once; more wait to be accepted
	GRPCMaxStreams     int           // concurrent calls per gRPC connection (SETTINGS_MAX_CONCURRENT_STREAMS)
	GRPCMaxRecv        int           // bytes of one request message decided; a larger check is OVER_LIMIT
	GRPCMaxRead        int           // bytes of one request message read (gRPC's limit on the check port)
	GRPCWindow         int           // HTTP/2 flow-control window per stream and connection
	GRPCReadTimeout    time.Duration // time for a call's request message to arrive
	GRPCIdleTimeout    time.Duration // a connection without calls for this long is closed
	GRPCKeepaliveMin   time.Duration // clients' keepalive pings closer together end the connection
	GRPCMaxAge         time.Duration // a connection this old is sent a GOAWAY; 0 never
	GRPCMaxAgeGrace    time.Duration // its calls' time to finish after the GOAWAY; 0 unbounded
	HTTPMaxConns       int           // HTTP connections served at once
	HTTPMaxBody        int64         // bytes of a /json body
	HTTPMaxHeaderBytes int           // bytes of a request's header
	HTTPReadTimeout    time.Duration // time to read a request, header and body
	HTTPIdleTimeout    time.Duration // a keep-alive connection idle for this long is closed
	MaxInflightBytes   int64         // bytes all requests in flight together may hold (internal/budget)
	RLQSMaxRecv        int           // bytes of one usage report
	RLQSMaxBytes       int64         // bytes all quota streams together may hold
}

// degradeFlags configure the degraded mode (bucketgrid.WithDegrade).
type degradeFlags struct {
	On        bool
	Instances int // 0: the grid's live members (1 for a store); with Count, the least count
	Timeout   time.Duration
	Count     bool          // count the instances sharing the store (cas/presence)
	CountTTL  time.Duration // of a presence record
}

// gridFlags configure the embedded grid member (-backend grid). Secrets are
// read from files, never given on the command line, where every process on
// the host can read them.
type gridFlags struct {
	Bind        string   // Olric host:port; the owner channel uses port+1, gossip port+2
	Peers       []string // gossip addresses of members to join
	Env         string   // local or lan
	Replicas    int
	Verbose     bool // Olric's and memberlist's logs to stderr
	JoinTimeout time.Duration

	// the owner channel's mutual TLS: PEM files of this member's
	// certificate, its key and the cluster CA; or a shared secret
	TLSCert, TLSKey, TLSCA string
	TLSRevoked             string // the revocation list, re-read while running
	SecretFile             string
	GossipKeyFile          string // base64 keys, one a line; the first encrypts
	PasswordFile           string // Olric's AUTH password
	Insecure               bool   // allow a non-loopback member without security

	// token leases (olric.LeaseConfig): off unless Leases; LeaseLifetime 0
	// keeps the grid's default lifetime
	Leases        bool
	LeaseLifetime time.Duration
}

// tlsFlags configure TLS on the gRPC listener.
type tlsFlags struct {
	Cert, Key, ClientCA string
	ClientSAN           string // a name the client certificate must hold (envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN)
}

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
// from the environment (see ratelimitenv.go).
func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	return parseFlagsEnv(fs, args, os.LookupEnv)
}

// parseFlagsEnv is parseFlags with the environment read by lookup.
func parseFlagsEnv(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) (config, error) {
	var c config
	var algorithm, headers, level, logFormat, draftNames string
	var ratio float64
	fs.Var(listFlag{&c.ConfigPaths}, "config", "configuration `path`: a YAML file, or a directory of *.yaml files (repeatable, or comma-separated)")
	fs.StringVar(&c.XDS.Addr, "config-xds", "", "`host:port` of an xDS management server to take the configuration from (state of the world, RateLimitConfig resources, as envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW), instead of -config")
	fs.StringVar(&c.XDS.Node, "config-xds-node", "", "node `ID` sent to the xDS server; empty is the host name")
	fs.StringVar(&c.XDS.API, "config-xds-api", "ads", "xDS service to stream from: ads (the aggregated discovery service, as envoyproxy/ratelimit) or rls (RateLimitConfigDiscoveryService)")
	fs.StringVar(&c.XDS.CA, "config-xds-ca", "", "PEM `file` of the CA of the xDS server's certificate (TLS); empty connects in plaintext")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", "127.0.0.1:8081", "gRPC listen `address` (the RLS API, health, reflection)")
	fs.StringVar(&c.HTTPAddr, "http-addr", "127.0.0.1:8080", "HTTP listen `address` (/json, /healthcheck, /metrics); empty disables it")
	fs.StringVar(&c.DebugAddr, "debug-addr", "", "listen `address` of /debug/pprof (Go's profiler); empty disables it. Never expose it")
	fs.StringVar(&algorithm, "algorithm", "fixed_window", "algorithm of rules that name none: fixed_window (envoyproxy/ratelimit's) or token_bucket")
	fs.BoolVar(&c.Rules.MergeDomains, "merge-domains", false, "let several files configure one domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)")
	fs.Float64Var(&ratio, "near-limit-ratio", 0.8, "fraction of a limit above which hits count as near the limit")
	fs.BoolVar(&c.ShadowMode, "shadow-mode", false, "answer OK to everything, counting what would be refused")
	fs.BoolVar(&c.QuotaMode, "quota-mode", false, "treat every rule as quota_mode")
	fs.StringVar(&headers, "headers", "none", "response headers for Envoy to add, comma-separated: ietf (RateLimit-Policy, RateLimit), x-ratelimit (X-RateLimit-Limit, -Remaining, -Reset), draft (RateLimit-Limit, -Remaining, -Reset, envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED names), retry-after (Retry-After on refusals), or none, as envoyproxy/ratelimit without LIMIT_RESPONSE_HEADERS_ENABLED")
	fs.StringVar(&draftNames, "draft-header-names", "", "the names of the draft headers instead of RateLimit-Limit, -Remaining and -Reset: three, comma-separated (envoyproxy/ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER)")
	fs.BoolVar(&c.StopCountingWhenOverLimit, "stop-counting-when-over-limit", false, "when a descriptor of a request would go over its limit, count only the descriptors that would, not the others (envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT); costs a check of every descriptor of a request first")
	fs.DurationVar(&c.Timeout, "timeout", time.Second, "bound on answering one request")
	fs.DurationVar(&c.ReloadInterval, "reload-interval", time.Second, "how often the configuration files are checked for changes")
	fs.StringVar(&c.Backend, "backend", "grid", "where the buckets live: grid (an Olric grid of the instances), memory (this process only), or a store URI: redis://, mongodb://, couchbase://")
	fs.StringVar(&c.Grid.Bind, "grid-bind", "127.0.0.1:3320", "grid member's Olric `host:port`; the owner channel uses port+1 and gossip port+2")
	fs.Var(listFlag{&c.Grid.Peers}, "grid-peers", "gossip `addresses` (host:port+2 of -grid-bind) of instances to join, or dns:NAME for every address NAME resolves to (at this instance's gossip port), resolved anew at each join; empty, or only this instance, starts a new grid")
	fs.StringVar(&c.Grid.Env, "grid-env", "local", "grid timings: local (one host) or lan")
	fs.IntVar(&c.Grid.Replicas, "grid-replicas", 1, "copies of each bucket: 1, or 2 to lose nothing when an instance leaves")
	fs.DurationVar(&c.Grid.JoinTimeout, "grid-join-timeout", 30*time.Second, "how long to try joining -grid-peers before giving up")
	fs.BoolVar(&c.Grid.Verbose, "grid-log", false, "write the grid's own logs (Olric, memberlist) to stderr")
	fs.StringVar(&c.Grid.TLSCert, "grid-tls-cert", "", "PEM `file` of this member's certificate (owner channel mutual TLS; with -grid-tls-key and -grid-tls-ca)")
	fs.StringVar(&c.Grid.TLSKey, "grid-tls-key", "", "PEM `file` of this member's private key")
	fs.StringVar(&c.Grid.TLSCA, "grid-tls-ca", "", "PEM `file` of the CA that issues the members' certificates")
	fs.StringVar(&c.Grid.TLSRevoked, "grid-tls-revoked", "", "`file` of revoked member certificates, one serial number or SHA-256 fingerprint in hex a line; re-read while running, like the -grid-tls-* files (a listed member is refused and expelled)")
	fs.StringVar(&c.Grid.SecretFile, "grid-secret-file", "", "`file` holding, in base64 (openssl rand -base64 32), a secret of at least 32 random bytes shared by every member, instead of -grid-tls-*: the owner channel's mutual TLS without a PKI")
	fs.StringVar(&c.Grid.GossipKeyFile, "grid-gossip-key-file", "", "`file` of gossip encryption keys (16, 24 or 32 bytes, base64, one a line; the first encrypts)")
	fs.StringVar(&c.Grid.PasswordFile, "grid-password-file", "", "`file` holding the password of Olric's own port")
	fs.BoolVar(&c.Grid.Insecure, "grid-insecure", false, "let a member on a non-loopback address run without the settings above (a network only the instances reach)")
	fs.BoolVar(&c.Grid.Leases, "grid-leases", false, "decide checks of a busy descriptor on this instance from a lease of tokens taken from its bucket's owner, instead of one hop each: fixed windows stay exact; a token bucket may admit up to rate × -grid-lease-lifetime more in any interval")
	fs.DurationVar(&c.Grid.LeaseLifetime, "grid-lease-lifetime", 0, "how long a lease of -grid-leases lives; 0 keeps the grid's default")
	fs.StringVar(&c.TLS.Cert, "tls-cert", "", "gRPC server certificate `file` (PEM); with -tls-key enables TLS")
	fs.StringVar(&c.TLS.Key, "tls-key", "", "gRPC server key `file` (PEM)")
	fs.StringVar(&c.TLS.ClientCA, "tls-client-ca", "", "CA `file` (PEM) that client certificates must chain to (mutual TLS)")
	fs.StringVar(&c.TLS.ClientSAN, "tls-client-san", "", "a DNS `name` (or IP address) the client certificate must hold, as x509 matches a host name (with -tls-client-ca; envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN)")
	fs.IntVar(&c.MaxValued, "metrics-max-valued", 1000, "most rule labels holding client values (detailed_metric, value_to_metric, overrides) with series of their own: the most recently used; the others count under the rule path's .__other")
	fs.DurationVar(&c.DrainGrace, "drain-grace", 5*time.Second, "at shutdown, how long health checks fail (gRPC NOT_SERVING, /healthcheck 500) while requests are still answered, before the listeners close: long enough for load balancers to see it")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 10*time.Second, "how long requests in flight may take at shutdown, once the listeners close")
	fs.BoolVar(&c.Version, "version", false, "print the version and exit")
	fs.StringVar(&level, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&logFormat, "log-format", "text", "text or json")
	fs.BoolVar(&c.RLQS, "rlqs", false, "also serve Envoy's Rate Limit Quota Service (envoy.service.rate_limit_quota.v3) on -rlqs-addr, from the same rules and buckets")
	fs.StringVar(&c.RLQSAddr, "rlqs-addr", "127.0.0.1:8082", "gRPC listen `address` of the Rate Limit Quota Service (with -rlqs; health too): its own port, since a usage report is far larger than a check")
	fs.IntVar(&c.Limits.RLQSMaxRecv, "rlqs-max-recv", 4<<20, "largest usage report in `bytes`: Envoy reports all its buckets in one message every 5 s (about 40 bytes plus the id's keys and values each), so 4 MiB is 10,000 buckets (a stream's most) of ids up to 380 bytes")
	fs.Int64Var(&c.Limits.RLQSMaxBytes, "rlqs-max-inflight-bytes", 1<<30, "`bytes` all quota streams together may make the service hold: a stream takes -grpc-window plus -rlqs-max-recv for as long as it is open (a report may arrive at any time); one that finds no room is refused RESOURCE_EXHAUSTED (Envoy retries at its next report). Apart from -max-inflight-bytes, so quota streams never take the checks' room")
	fs.IntVar(&c.Limits.GRPCMaxConns, "grpc-max-conns", 1024, "gRPC connections served at once; further ones wait to be accepted")
	fs.IntVar(&c.Limits.GRPCMaxStreams, "grpc-max-streams", 100, "concurrent calls one gRPC connection may have (announced to the client)")
	fs.IntVar(&c.Limits.GRPCMaxRecv, "grpc-max-recv", 64<<10, "largest request message decided, in `bytes` (a RateLimitRequest is a few hundred; at most 64 descriptors of 4096 bytes are decided); a larger check, up to -grpc-max-read, is answered OVER_LIMIT")
	fs.IntVar(&c.Limits.GRPCMaxRead, "grpc-max-read", 256<<10, "largest request message read on the gRPC port, in `bytes`: a check over -grpc-max-recv up to it is answered OVER_LIMIT, a message beyond it is refused RESOURCE_EXHAUSTED by gRPC (an error Envoy's failure_mode_deny: false lets through), so keep it above what Envoy can send: its max_request_headers_kb times the descriptors one header feeds")
	fs.IntVar(&c.Limits.GRPCWindow, "grpc-window", 64<<10, "HTTP/2 flow-control window in `bytes` per call and per connection (at least 65535; fixed, so a client cannot grow it)")
	fs.DurationVar(&c.Limits.GRPCReadTimeout, "grpc-read-timeout", 5*time.Second, "how long a call's request message may take to arrive in full before the call is reset")
	fs.DurationVar(&c.Limits.GRPCIdleTimeout, "grpc-idle-timeout", 5*time.Minute, "a gRPC connection without calls for this long is closed")
	fs.DurationVar(&c.Limits.GRPCKeepaliveMin, "grpc-keepalive-min-time", 10*time.Second, "a client whose keepalive pings come closer together than this is disconnected")
	fs.DurationVar(&c.Limits.GRPCMaxAge, "grpc-max-connection-age", 0, "a gRPC connection this old is asked to go away (GOAWAY, with ±10% jitter), so that clients spread over new instances; 0 never (envoyproxy/ratelimit's GRPC_MAX_CONNECTION_AGE, 24h there)")
	fs.DurationVar(&c.Limits.GRPCMaxAgeGrace, "grpc-max-connection-age-grace", 0, "after -grpc-max-connection-age, how long its calls may take before the connection is closed; 0 unbounded (GRPC_MAX_CONNECTION_AGE_GRACE, 1h there)")
	fs.IntVar(&c.Limits.HTTPMaxConns, "http-max-conns", 1024, "HTTP connections served at once; further ones wait to be accepted")
	fs.Int64Var(&c.Limits.HTTPMaxBody, "http-max-body", 64<<10, "largest /json request body in `bytes` (413 beyond)")
	fs.IntVar(&c.Limits.HTTPMaxHeaderBytes, "http-max-header-bytes", 64<<10, "largest HTTP request header in `bytes` (431 beyond)")
	fs.DurationVar(&c.Limits.HTTPReadTimeout, "http-read-timeout", 10*time.Second, "how long reading an HTTP request, header and body, may take")
	fs.DurationVar(&c.Limits.HTTPIdleTimeout, "http-idle-timeout", time.Minute, "an idle keep-alive HTTP connection is closed after this long")
	fs.Int64Var(&c.Limits.MaxInflightBytes, "max-inflight-bytes", 256<<20, "`bytes` that all connections' requests in flight together may make the service hold: a gRPC call takes -grpc-window plus -grpc-max-read until its message is decoded, a /json request its body; one that finds no room is refused at once (a check OVER_LIMIT, unread; other gRPC calls RESOURCE_EXHAUSTED, and together hold at most half of it; HTTP 503)")
	fs.BoolVar(&c.Degrade.On, "degrade", false, "while the backend is out, decide from a local share of each limit (the limit divided by the instances) instead of answering Unavailable, which Envoy's failure_mode_deny turns into unlimited by default. Off by default: a grid holds a key up to its hand-over grace (over a second) when members join, longer than -degrade-timeout, so keys moving are decided from shares then")
	fs.IntVar(&c.Degrade.Instances, "degrade-instances", 0, "number of instances sharing the limits under -degrade; 0: the grid's live members (with a store URI, say how many instances run, or count them with -degrade-count, or each admits the whole limit); with -degrade-count, the least count")
	fs.BoolVar(&c.Degrade.Count, "degrade-count", false, "with a store URI and -degrade, count the instances sharing the store: each keeps a presence record in it with a TTL of -degrade-count-ttl, refreshed every quarter of it; while the store is out, the last count seen")
	fs.DurationVar(&c.Degrade.CountTTL, "degrade-count-ttl", presence.DefaultTTL, "under -degrade-count, how long a stopped instance is still counted at most (its record's TTL)")
	fs.DurationVar(&c.Degrade.Timeout, "degrade-timeout", bucketgrid.DefaultDegradeTimeout, "under -degrade, how long a check waits for the backend before it is decided locally, at most; a caller's deadline (Envoy sends its filter timeout, 20 ms by default, failing open) shortens the wait to half the time left, so that the local decision arrives in time. Below -timeout")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.Version {
		return c, nil
	}
	var errs []error
	if err := applyRatelimitEnv(fs, lookup); err != nil {
		errs = append(errs, err)
	}
	switch {
	case len(c.ConfigPaths) == 0 && c.XDS.Addr == "":
		errs = append(errs, errors.New("-config is required (or -config-xds)"))
	case len(c.ConfigPaths) > 0 && c.XDS.Addr != "":
		errs = append(errs, errors.New("-config and -config-xds are alternatives: give one"))
	}
	a, ok := policy.ParseAlgorithm(algorithm)
	if !ok {
		errs = append(errs, fmt.Errorf("-algorithm %q: want fixed_window or token_bucket", algorithm))
	}
	c.Rules.Algorithm = a
	if ratio <= 0 || ratio > 1 {
		errs = append(errs, fmt.Errorf("-near-limit-ratio %v: want a fraction in (0, 1]", ratio))
	}
	c.Rules.NearLimitRatio = float32(ratio)
	if h, retry, err := parseHeaders(headers); err != nil {
		errs = append(errs, err)
	} else {
		c.Headers, c.RetryAfter = h, retry
	}
	if n, err := parseHeaderNames(draftNames); err != nil {
		errs = append(errs, err)
	} else {
		c.HeaderNames = n
	}
	if c.Timeout <= 0 || c.ReloadInterval <= 0 || c.ShutdownGrace < 0 || c.DrainGrace < 0 {
		errs = append(errs, errors.New("-timeout and -reload-interval must be positive, -shutdown-grace and -drain-grace not negative"))
	}
	if c.Degrade.Instances < 0 || c.Degrade.Timeout <= 0 || c.Degrade.Timeout >= c.Timeout {
		errs = append(errs, errors.New("-degrade-instances must not be negative, -degrade-timeout positive and below -timeout"))
	}
	if c.Degrade.Count {
		switch {
		case !c.Degrade.On:
			errs = append(errs, errors.New("-degrade-count needs -degrade"))
		case c.Backend == "grid" || c.Backend == "memory":
			errs = append(errs, fmt.Errorf("-degrade-count counts the instances sharing a store URI, not -backend %s (the grid counts its members)", c.Backend))
		}
		if c.Degrade.CountTTL < 2*time.Second {
			errs = append(errs, fmt.Errorf("-degrade-count-ttl %v: want at least 2s (Couchbase expires whole seconds)", c.Degrade.CountTTL))
		}
	}
	if c.Backend == "grid" {
		if _, port, err := splitHostPort(c.Grid.Bind); err != nil || port < 1 || port > 65533 {
			errs = append(errs, fmt.Errorf("-grid-bind %q: want host:port with a port below 65534", c.Grid.Bind))
		}
		if c.Grid.Env != "local" && c.Grid.Env != "lan" {
			errs = append(errs, fmt.Errorf("-grid-env %q: want local or lan", c.Grid.Env))
		}
		for _, p := range c.Grid.Peers {
			if name, ok := strings.CutPrefix(p, dnsPrefix); ok && name == "" {
				errs = append(errs, errors.New("-grid-peers dns: needs a name, as in dns:bucketgrid-grid.default.svc.cluster.local"))
			}
		}
		if c.Grid.Replicas < 1 {
			errs = append(errs, errors.New("-grid-replicas must be at least 1"))
		}
		if n := countSet(c.Grid.TLSCert, c.Grid.TLSKey, c.Grid.TLSCA); n != 0 && n != 3 {
			errs = append(errs, errors.New("-grid-tls-cert, -grid-tls-key and -grid-tls-ca go together"))
		}
		if c.Grid.LeaseLifetime < 0 || (c.Grid.LeaseLifetime > 0 && !c.Grid.Leases) {
			errs = append(errs, errors.New("-grid-lease-lifetime must not be negative, and needs -grid-leases"))
		}
		if c.Grid.TLSCert != "" && c.Grid.SecretFile != "" {
			errs = append(errs, errors.New("-grid-tls-* and -grid-secret-file are alternatives: give one"))
		}
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		errs = append(errs, errors.New("-tls-cert and -tls-key go together"))
	}
	if c.TLS.ClientCA != "" && c.TLS.Cert == "" {
		errs = append(errs, errors.New("-tls-client-ca needs -tls-cert and -tls-key"))
	}
	if c.TLS.ClientSAN != "" && c.TLS.ClientCA == "" {
		// envoyproxy/ratelimit checks the SAN only of verified client
		// certificates, so without a client CA it accepts every client
		errs = append(errs, errors.New("-tls-client-san needs -tls-client-ca: without it no client certificate is asked for"))
	}
	if l := c.Limits; l.GRPCMaxConns < 1 || l.GRPCMaxStreams < 1 || l.GRPCMaxRecv < 1 || l.HTTPMaxConns < 1 ||
		l.HTTPMaxBody < 1 || l.HTTPMaxHeaderBytes < 1 {
		errs = append(errs, errors.New("-grpc-max-conns, -grpc-max-streams, -grpc-max-recv, -http-max-conns, -http-max-body and -http-max-header-bytes must be positive"))
	}
	if l := c.Limits; l.GRPCMaxRead < l.GRPCMaxRecv {
		errs = append(errs, fmt.Errorf("-grpc-max-read %d: want at least -grpc-max-recv (%d), or checks between them fail RESOURCE_EXHAUSTED instead of OVER_LIMIT", l.GRPCMaxRead, l.GRPCMaxRecv))
	}
	if l := c.Limits; l.MaxInflightBytes < int64(l.GRPCWindow)+int64(l.GRPCMaxRead) || l.MaxInflightBytes < l.HTTPMaxBody {
		errs = append(errs, fmt.Errorf("-max-inflight-bytes %d: want at least -grpc-window plus -grpc-max-read and at least -http-max-body, or no request fits", l.MaxInflightBytes))
	}
	if l := c.Limits; c.RLQS && (l.RLQSMaxRecv < 1 || l.RLQSMaxBytes < int64(l.GRPCWindow)+int64(l.RLQSMaxRecv)) {
		errs = append(errs, fmt.Errorf("-rlqs-max-recv %d, -rlqs-max-inflight-bytes %d: want a positive size and room for at least one stream (-grpc-window plus -rlqs-max-recv)", l.RLQSMaxRecv, l.RLQSMaxBytes))
	}
	if c.RLQS && c.RLQSAddr == "" {
		errs = append(errs, errors.New("-rlqs needs -rlqs-addr"))
	}
	if l := c.Limits; l.GRPCWindow < 65535 || l.GRPCWindow > 1<<30 {
		errs = append(errs, fmt.Errorf("-grpc-window %d: want 65535 to 1073741824 bytes", l.GRPCWindow))
	}
	if l := c.Limits; l.GRPCMaxAge < 0 || l.GRPCMaxAgeGrace < 0 {
		errs = append(errs, errors.New("-grpc-max-connection-age and -grpc-max-connection-age-grace must not be negative"))
	}
	if l := c.Limits; l.GRPCReadTimeout <= 0 || l.GRPCIdleTimeout <= 0 || l.GRPCKeepaliveMin <= 0 || l.HTTPReadTimeout <= 0 || l.HTTPIdleTimeout <= 0 {
		errs = append(errs, errors.New("-grpc-read-timeout, -grpc-idle-timeout, -grpc-keepalive-min-time, -http-read-timeout and -http-idle-timeout must be positive"))
	}
	if err := c.LogLevel.UnmarshalText([]byte(level)); err != nil {
		errs = append(errs, fmt.Errorf("-log-level: %w", err))
	}
	switch logFormat {
	case "text":
	case "json":
		c.LogJSON = true
	default:
		errs = append(errs, fmt.Errorf("-log-format %q: want text or json", logFormat))
	}
	return c, errors.Join(errs...)
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
