package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/heapfloor"
	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/xds"
	"github.com/bucketgrid/bucketgrid/policy"
)

// settings holds every option of the command: the flags fill it
// (register), envoyproxy/ratelimit's environment variables fill the flags
// not given (applyRatelimitEnv), and validate refuses every invalid
// combination and resolves the options given as text, before run starts
// anything. The wiring (openRules, newBackend, newServers) takes settings
// that validate accepted.
type settings struct {
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
	HeapFloor                 int64 // -gc-heap-floor: main keeps it (internal/heapfloor), the process's GOGC being main's to set

	text textFlags // resolved by validate into the fields above
}

// textFlags are the flags given as text that validate resolves into
// settings' typed fields.
type textFlags struct {
	algorithm      string  // -algorithm → Rules.Algorithm
	nearLimitRatio float64 // -near-limit-ratio → Rules.NearLimitRatio
	headers        string  // -headers → Headers, RetryAfter
	draftNames     string  // -draft-header-names → HeaderNames
	logLevel       string  // -log-level → LogLevel
	logFormat      string  // -log-format → LogJSON
	leases         string  // -grid-leases → Grid.Leases
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
	RLQSFirstReport    time.Duration // a quota stream without a whole report this long after it opened is closed
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

	// token leases (olric.LeaseConfig); LeaseLifetime 0 keeps the grid's
	// default lifetime
	Leases        leaseMode
	LeaseLifetime time.Duration
}

// leaseMode is which buckets -grid-leases lets an instance lease. The zero
// value is the default, leasesOff.
type leaseMode uint8

const (
	// leasesOff leases none.
	leasesOff leaseMode = iota
	// leasesExact leases only buckets a lease keeps exact: fixed windows
	// (olric.LeaseConfig.Exact).
	leasesExact
	// leasesAll leases every bucket, token buckets too
	// (olric.LeaseConfig.Enabled).
	leasesAll
)

// parseLeaseMode reads -grid-leases: exact, all (true, as the bare flag
// gives) or off (false).
func parseLeaseMode(s string) (leaseMode, bool) {
	switch s {
	case "exact":
		return leasesExact, true
	case "all", "true":
		return leasesAll, true
	case "off", "false":
		return leasesOff, true
	}
	return leasesOff, false
}

// leaseFlag is -grid-leases: its text, resolved by validate; the bare flag
// sets "true" (all), as when it was a boolean.
type leaseFlag struct{ text *string }

func (f leaseFlag) String() string {
	if f.text == nil {
		return ""
	}
	return *f.text
}

func (f leaseFlag) Set(s string) error { *f.text = s; return nil }

func (f leaseFlag) IsBoolFlag() bool { return true }

// tlsFlags configure TLS on the gRPC listener.
type tlsFlags struct {
	Cert, Key, ClientCA string
	ClientSAN           string // a name the client certificate must hold (envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN)
}

// validate refuses every invalid option and combination of options, each
// error naming its flag, and resolves the options given as text into their
// typed fields. It starts nothing, opens no file and no connection: run
// calls it before anything else.
func (s *settings) validate() error {
	return errors.Join(
		s.validateSource(),
		s.resolveRules(),
		s.validateTimes(),
		s.validateDegrade(),
		s.validateBackend(),
		s.validateGrid(),
		s.validateTLS(),
		s.validateLimits(),
		s.validateHeapFloor(),
		s.resolveLog(),
	)
}

// validateSource checks where the rules come from: -config or -config-xds.
func (s *settings) validateSource() error {
	var errs []error
	switch {
	case len(s.ConfigPaths) == 0 && s.XDS.Addr == "":
		errs = append(errs, errors.New("-config is required (or -config-xds)"))
	case len(s.ConfigPaths) > 0 && s.XDS.Addr != "":
		errs = append(errs, errors.New("-config and -config-xds are alternatives: give one"))
	}
	if _, err := xds.ParseAPI(s.XDS.API); err != nil {
		errs = append(errs, fmt.Errorf("-config-xds-api: %w", err))
	}
	return errors.Join(errs...)
}

// resolveRules checks and resolves -algorithm, -near-limit-ratio, -headers
// and -draft-header-names.
func (s *settings) resolveRules() error {
	var errs []error
	a, ok := policy.ParseAlgorithm(s.text.algorithm)
	if !ok {
		errs = append(errs, fmt.Errorf("-algorithm %q: want fixed_window or token_bucket", s.text.algorithm))
	}
	s.Rules.Algorithm = a
	if r := s.text.nearLimitRatio; r <= 0 || r > 1 {
		errs = append(errs, fmt.Errorf("-near-limit-ratio %v: want a fraction in (0, 1]", r))
	}
	s.Rules.NearLimitRatio = float32(s.text.nearLimitRatio)
	if h, retry, err := parseHeaders(s.text.headers); err != nil {
		errs = append(errs, err)
	} else {
		s.Headers, s.RetryAfter = h, retry
	}
	if n, err := parseHeaderNames(s.text.draftNames); err != nil {
		errs = append(errs, err)
	} else {
		s.HeaderNames = n
	}
	return errors.Join(errs...)
}

// validateTimes checks -timeout, -reload-interval and the graces.
func (s *settings) validateTimes() error {
	if s.Timeout <= 0 || s.ReloadInterval <= 0 || s.ShutdownGrace < 0 || s.DrainGrace < 0 {
		return errors.New("-timeout and -reload-interval must be positive, -shutdown-grace and -drain-grace not negative")
	}
	return nil
}

// validateDegrade checks the -degrade-* flags.
func (s *settings) validateDegrade() error {
	var errs []error
	d := s.Degrade
	if d.Instances < 0 || d.Timeout <= 0 || d.Timeout >= s.Timeout {
		errs = append(errs, errors.New("-degrade-instances must not be negative, -degrade-timeout positive and below -timeout"))
	}
	if !d.Count {
		return errors.Join(errs...)
	}
	switch {
	case !d.On:
		errs = append(errs, errors.New("-degrade-count needs -degrade"))
	case s.Backend == "grid" || s.Backend == "memory":
		errs = append(errs, fmt.Errorf("-degrade-count counts the instances sharing a store URI, not -backend %s (the grid counts its members)", s.Backend))
	}
	if d.CountTTL < 2*time.Second {
		errs = append(errs, fmt.Errorf("-degrade-count-ttl %v: want at least 2s (Couchbase expires whole seconds)", d.CountTTL))
	}
	return errors.Join(errs...)
}

// validateBackend checks that -backend is grid, memory or a store URI of a
// known scheme, without connecting to it.
func (s *settings) validateBackend() error {
	if s.Backend == "grid" || s.Backend == "memory" {
		return nil
	}
	u, err := parseStoreURI(s.Backend)
	if err == nil && !knownStoreScheme(u.scheme) {
		err = fmt.Errorf("unknown scheme %q (want grid, memory, redis://…, mongodb://… or couchbase://…)", u.scheme)
	}
	if err != nil {
		return fmt.Errorf("-backend %q: %w", s.Backend, err)
	}
	return nil
}

// validateGrid checks the -grid-* flags, under -backend grid.
func (s *settings) validateGrid() error {
	if s.Backend != "grid" {
		return nil
	}
	var errs []error
	g := s.Grid
	if _, port, err := splitHostPort(g.Bind); err != nil || port < 1 || port > 65533 {
		errs = append(errs, fmt.Errorf("-grid-bind %q: want host:port with a port below 65534", g.Bind))
	}
	if g.Env != "local" && g.Env != "lan" {
		errs = append(errs, fmt.Errorf("-grid-env %q: want local or lan", g.Env))
	}
	for _, p := range g.Peers {
		if name, ok := strings.CutPrefix(p, dnsPrefix); ok && name == "" {
			errs = append(errs, errors.New("-grid-peers dns: needs a name, as in dns:bucketgrid-grid.default.svc.cluster.local"))
		}
	}
	if g.Replicas < 1 {
		errs = append(errs, errors.New("-grid-replicas must be at least 1"))
	}
	mode, ok := parseLeaseMode(s.text.leases)
	if !ok {
		errs = append(errs, fmt.Errorf("-grid-leases %q: want exact, all or off", s.text.leases))
	}
	s.Grid.Leases, g.Leases = mode, mode
	errs = append(errs, g.validateSecurity())
	return errors.Join(errs...)
}

// validateSecurity checks the grid's TLS, secret and lease flags.
func (g gridFlags) validateSecurity() error {
	var errs []error
	if n := countSet(g.TLSCert, g.TLSKey, g.TLSCA); n != 0 && n != 3 {
		errs = append(errs, errors.New("-grid-tls-cert, -grid-tls-key and -grid-tls-ca go together"))
	}
	if g.LeaseLifetime < 0 || (g.LeaseLifetime > 0 && g.Leases == leasesOff) {
		errs = append(errs, errors.New("-grid-lease-lifetime must not be negative, and needs -grid-leases other than off"))
	}
	if g.TLSCert != "" && g.SecretFile != "" {
		errs = append(errs, errors.New("-grid-tls-* and -grid-secret-file are alternatives: give one"))
	}
	return errors.Join(errs...)
}

// validateTLS checks the -tls-* flags of the gRPC listener.
func (s *settings) validateTLS() error {
	var errs []error
	t := s.TLS
	if (t.Cert == "") != (t.Key == "") {
		errs = append(errs, errors.New("-tls-cert and -tls-key go together"))
	}
	if t.ClientCA != "" && t.Cert == "" {
		errs = append(errs, errors.New("-tls-client-ca needs -tls-cert and -tls-key"))
	}
	if t.ClientSAN != "" && t.ClientCA == "" {
		// envoyproxy/ratelimit checks the SAN only of verified client
		// certificates, so without a client CA it accepts every client
		errs = append(errs, errors.New("-tls-client-san needs -tls-client-ca: without it no client certificate is asked for"))
	}
	return errors.Join(errs...)
}

// validateLimits checks the sizes and times of limitFlags, and -rlqs.
func (s *settings) validateLimits() error {
	var errs []error
	l := s.Limits
	if l.GRPCMaxConns < 1 || l.GRPCMaxStreams < 1 || l.GRPCMaxRecv < 1 || l.HTTPMaxConns < 1 ||
		l.HTTPMaxBody < 1 || l.HTTPMaxHeaderBytes < 1 {
		errs = append(errs, errors.New("-grpc-max-conns, -grpc-max-streams, -grpc-max-recv, -http-max-conns, -http-max-body and -http-max-header-bytes must be positive"))
	}
	if l.GRPCMaxRead < l.GRPCMaxRecv {
		errs = append(errs, fmt.Errorf("-grpc-max-read %d: want at least -grpc-max-recv (%d), or checks between them fail RESOURCE_EXHAUSTED instead of OVER_LIMIT", l.GRPCMaxRead, l.GRPCMaxRecv))
	}
	if l.MaxInflightBytes < int64(l.GRPCWindow)+int64(l.GRPCMaxRead) || l.MaxInflightBytes < l.HTTPMaxBody {
		errs = append(errs, fmt.Errorf("-max-inflight-bytes %d: want at least -grpc-window plus -grpc-max-read and at least -http-max-body, or no request fits", l.MaxInflightBytes))
	}
	errs = append(errs, s.validateRLQS())
	if l.GRPCWindow < 65535 || l.GRPCWindow > 1<<30 {
		errs = append(errs, fmt.Errorf("-grpc-window %d: want 65535 to 1073741824 bytes", l.GRPCWindow))
	}
	errs = append(errs, s.validateLimitTimes())
	return errors.Join(errs...)
}

// validateLimitTimes checks the connections' times of limitFlags.
func (s *settings) validateLimitTimes() error {
	var errs []error
	l := s.Limits
	if l.GRPCMaxAge < 0 || l.GRPCMaxAgeGrace < 0 {
		errs = append(errs, errors.New("-grpc-max-connection-age and -grpc-max-connection-age-grace must not be negative"))
	}
	if l.GRPCReadTimeout <= 0 || l.GRPCIdleTimeout <= 0 || l.GRPCKeepaliveMin <= 0 || l.HTTPReadTimeout <= 0 || l.HTTPIdleTimeout <= 0 {
		errs = append(errs, errors.New("-grpc-read-timeout, -grpc-idle-timeout, -grpc-keepalive-min-time, -http-read-timeout and -http-idle-timeout must be positive"))
	}
	return errors.Join(errs...)
}

// validateRLQS checks -rlqs-addr and the quota streams' sizes, under -rlqs.
func (s *settings) validateRLQS() error {
	if !s.RLQS {
		return nil
	}
	var errs []error
	if l := s.Limits; l.RLQSMaxRecv < 1 || l.RLQSMaxBytes < int64(l.GRPCWindow)+int64(l.RLQSMaxRecv) {
		errs = append(errs, fmt.Errorf("-rlqs-max-recv %d, -rlqs-max-inflight-bytes %d: want a positive size and room for at least one stream (-grpc-window plus -rlqs-max-recv)", l.RLQSMaxRecv, l.RLQSMaxBytes))
	}
	if s.Limits.RLQSFirstReport <= 0 {
		errs = append(errs, fmt.Errorf("-rlqs-first-report %v: want a positive duration", s.Limits.RLQSFirstReport))
	}
	if s.RLQSAddr == "" {
		errs = append(errs, errors.New("-rlqs needs -rlqs-addr"))
	}
	return errors.Join(errs...)
}

// resolveLog checks and resolves -log-level and -log-format.
func (s *settings) resolveLog() error {
	var errs []error
	if err := s.LogLevel.UnmarshalText([]byte(s.text.logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("-log-level: %w", err))
	}
	switch s.text.logFormat {
	case "text":
		s.LogJSON = false
	case "json":
		s.LogJSON = true
	default:
		errs = append(errs, fmt.Errorf("-log-format %q: want text or json", s.text.logFormat))
	}
	return errors.Join(errs...)
}

// defaultHeapFloor is -gc-heap-floor's default, chosen from measurement:
// see README.md, "The garbage collector's floor".
const defaultHeapFloor = 32 << 20

// validateHeapFloor checks -gc-heap-floor: 0 (off), or at least Go's own
// minimum heap, below which a floor would change nothing.
func (s *settings) validateHeapFloor() error {
	if s.HeapFloor != 0 && s.HeapFloor < heapfloor.MinHeap {
		return fmt.Errorf("-gc-heap-floor %d: want 0 (Go's own rule) or at least %d bytes (Go's minimum heap: a lower floor changes nothing)", s.HeapFloor, heapfloor.MinHeap)
	}
	return nil
}
