package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"path"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// envoyproxy/ratelimit takes its settings from environment variables
// (src/settings/settings.go). bucketgrid reads the same variables, so that
// a deployment's environment carries over: each one set is honoured, by
// setting the flag that does what it does, or refused at start with the
// reason it does not apply. A flag given on the command line wins over the
// variable. The repository's docs/migrate-envoy-ratelimit.md holds the table, which
// TestEveryRatelimitSetting checks.

// Reasons shared by several settings.
const (
	whyBackend = "bucketgrid keeps its buckets in the grid its instances form (-backend grid), or in a store named by -backend redis://… (mongodb://, couchbase://), never in envoyproxy/ratelimit's Redis or Memcached counters; remove it"
	whyStatsd  = "bucketgrid pushes no statsd: scrape GET /metrics on -http-addr (Prometheus) instead; remove it"
	whyProm    = "bucketgrid serves its Prometheus metrics at /metrics of -http-addr (port 8080 by default), not on a port of their own: point the scraper there and remove it"
	whyXDS     = "bucketgrid's xDS client (-config-xds) has no such setting: it reconnects with a backoff of 0.5–30 s with jitter, sends the node ID only, and takes messages of any size; remove it"
	whyTracing = "bucketgrid exports no OpenTelemetry traces; remove it"
)

// notApplicable are the settings bucketgrid has no use for: a value other
// than inert (the value that asks for nothing, such as false for a feature
// switch) is refused with why. inert "" refuses every value.
var notApplicable = map[string]struct{ inert, why string }{
	"GRPC_UDS":                                {"", "bucketgrid listens on TCP only: give -grpc-addr"},
	"FORCE_START_WITHOUT_INITIAL_CONFIG":      {"false", "bucketgrid is not ready until a configuration loads; remove it"},
	"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": {"false", "bucketgrid does not start until a configuration loads and is healthy from then on, with or without domains; remove it"},
	"RESPONSE_DYNAMIC_METADATA":               {"false", "bucketgrid answers without dynamic metadata; remove it"},
	"RUNTIME_IGNOREDOTFILES":                  {"true", "bucketgrid never reads dot files (nor files not named *.yaml or *.yml); remove it"},
	"EXPIRATION_JITTER_MAX_SECONDS":           {"", "spreads the expiry of envoyproxy/ratelimit's Redis keys; a bucketgrid bucket expires once it is full again, plus 10 s; remove it"},
	"LOCAL_CACHE_SIZE_IN_BYTES":               {"0", "bucketgrid keeps no local cache of keys over the limit: every check reaches its bucket (one hop to its owner on the grid; -grid-leases decides busy descriptors locally); remove it"},
	"CACHE_KEY_PREFIX":                        {"", "prefixes envoyproxy/ratelimit's Redis keys; bucketgrid's own keys in a redis:// backend take ?prefix= of -backend; remove it"},
	"BACKEND_TYPE":                            {"", whyBackend},

	"CONFIG_GRPC_XDS_NODE_METADATA":                 {"", whyXDS},
	"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": {"", whyXDS},
	"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS":     {"", whyXDS},
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":               {"", "bucketgrid's xDS client presents no client certificate; remove it"},
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":                {"", "bucketgrid's xDS client presents no client certificate; remove it"},
	"CONFIG_GRPC_XDS_SERVER_TLS_SAN":                {"", "bucketgrid checks the xDS server's certificate against the host of -config-xds (CONFIG_GRPC_XDS_SERVER_URL); remove it"},
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL":           {"", whyXDS},
	"XDS_CLIENT_BACKOFF_MAX_INTERVAL":               {"", whyXDS},
	"XDS_CLIENT_BACKOFF_RANDOM_FACTOR":              {"", whyXDS},
	"XDS_CLIENT_BACKOFF_JITTER":                     {"true", whyXDS},
	"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES":              {"", whyXDS},

	"USE_DOG_STATSD":            {"false", whyStatsd},
	"USE_DOG_STATSD_MOGRIFIERS": {"", whyStatsd},
	"USE_STATSD":                {"false", whyStatsd},
	"STATSD_HOST":               {"", whyStatsd},
	"STATSD_PORT":               {"", whyStatsd},
	"EXTRA_TAGS":                {"", whyStatsd},
	"STATS_FLUSH_INTERVAL":      {"", whyStatsd},
	"DISABLE_STATS":             {"false", "bucketgrid always counts; its metrics are read only when /metrics is scraped; remove it"},
	"USE_PROMETHEUS":            {"false", whyProm},
	"PROMETHEUS_ADDR":           {"", whyProm},
	"PROMETHEUS_PATH":           {"", whyProm},
	"PROMETHEUS_MAPPER_YAML":    {"", "bucketgrid's metric names are its own (README, Metrics), per rule as envoyproxy/ratelimit's stats keys; remove it"},
	"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": {"false", "bucketgrid's request duration histogram is in seconds, as Prometheus names it; remove it"},

	"TRACING_ENABLED":             {"false", whyTracing},
	"TRACING_SERVICE_NAME":        {"", whyTracing},
	"TRACING_SERVICE_NAMESPACE":   {"", whyTracing},
	"TRACING_SERVICE_INSTANCE_ID": {"", whyTracing},
	"TRACING_EXPORTER_PROTOCOL":   {"", whyTracing},
	"TRACING_SAMPLING_RATE":       {"", whyTracing},
}

func init() {
	for _, n := range []string{"REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_POOL_SIZE", "REDIS_AUTH",
		"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_PIPELINE_WINDOW",
		"REDIS_PIPELINE_LIMIT", "REDIS_CLUSTER_PIPELINE_PARALLELISM", "REDIS_PERSECOND_SOCKET_TYPE",
		"REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_AUTH",
		"REDIS_SENTINEL_AUTH", "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_PIPELINE_WINDOW",
		"REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "REDIS_TIMEOUT",
		"REDIS_PERSECOND_TIMEOUT", "REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
		"REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME",
		"MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH",
		"MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT"} {
		notApplicable[n] = struct{ inert, why string }{"", whyBackend}
	}
	for _, n := range []string{"REDIS_TLS", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "REDIS_PERSECOND",
		"REDIS_PERSECOND_TLS", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "MEMCACHE_TLS",
		"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"} {
		notApplicable[n] = struct{ inert, why string }{"false", whyBackend}
	}
}

// honoured are the settings ratelimitEnv turns into flags.
var honoured = []string{
	"HOST", "PORT", "DEBUG_HOST", "DEBUG_PORT", "GRPC_HOST", "GRPC_PORT",
	"GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE",
	"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN",
	"LOG_LEVEL", "LOG_FORMAT",
	"CONFIG_TYPE", "CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_SERVER_USE_TLS",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
	"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY",
	"NEAR_LIMIT_RATIO", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
	"LIMIT_RESPONSE_HEADERS_ENABLED", "LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER",
	"SHADOW_MODE", "QUOTA_MODE", "MERGE_DOMAIN_CONFIG",
}

// sameEitherWay are the settings whose every value asks for what bucketgrid
// does anyway, and why; a value is still checked.
var sameEitherWay = map[string]string{
	"RUNTIME_WATCH_ROOT": "it chooses what envoyproxy/ratelimit watches for changes; bucketgrid reads every file each -reload-interval, which sees a file changed in place and a swapped symlink (a Kubernetes ConfigMap) alike",
}

// envReader reads envoyproxy/ratelimit's settings, collecting the flags
// they set and the errors.
type envReader struct {
	lookup func(string) (string, bool)
	flags  map[string]string // flag name → value
	from   map[string]string // flag name → the settings that gave it
	errs   []error
}

// get returns the setting's value; an empty value is unset, as
// envoyproxy/ratelimit then takes its default.
func (e *envReader) get(name string) (string, bool) {
	v, ok := e.lookup(name)
	return v, ok && v != ""
}

// boolean returns the setting read as envoyproxy/ratelimit reads it
// (strconv.ParseBool); false when unset or not a boolean (then an error).
func (e *envReader) boolean(name string) bool {
	v, ok := e.get(name)
	if !ok {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want true or false", name, v))
	}
	return b
}

func (e *envReader) set(flag, value string, from ...string) {
	e.flags[flag], e.from[flag] = value, strings.Join(from, ", ")
}

// pass sets flag to the setting's value, when it is set.
func (e *envReader) pass(name, flag string) {
	if v, ok := e.get(name); ok {
		e.set(flag, v, name)
	}
}

// addr sets flag to the address of the host and port settings, when either
// is set, the other taking envoyproxy/ratelimit's default.
func (e *envReader) addr(hostName, portName, defHost, defPort, flag string) {
	host, hok := e.get(hostName)
	port, pok := e.get(portName)
	if !hok && !pok {
		return
	}
	if !hok {
		host = defHost
	}
	if !pok {
		port = defPort
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want a port number", portName, port))
		return
	}
	e.set(flag, net.JoinHostPort(host, port), hostName, portName)
}

// ratelimitEnv reads envoyproxy/ratelimit's settings through lookup: the
// flags they set (name → value), the settings each came from, and an error
// naming each setting that does not apply, and why.
func ratelimitEnv(lookup func(string) (string, bool)) (flags, from map[string]string, err error) {
	e := &envReader{lookup: lookup, flags: map[string]string{}, from: map[string]string{}}
	e.refuseNotApplicable()
	e.addr("HOST", "PORT", "0.0.0.0", "8080", "http-addr")
	e.addr("DEBUG_HOST", "DEBUG_PORT", "0.0.0.0", "6070", "debug-addr")
	e.addr("GRPC_HOST", "GRPC_PORT", "0.0.0.0", "8081", "grpc-addr")
	e.pass("GRPC_MAX_CONNECTION_AGE", "grpc-max-connection-age")
	e.pass("GRPC_MAX_CONNECTION_AGE_GRACE", "grpc-max-connection-age-grace")
	e.serverTLS()
	e.logging()
	configFromEnv(e)
	e.pass("NEAR_LIMIT_RATIO", "near-limit-ratio")
	if e.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") {
		e.set("stop-counting-when-over-limit", "true", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
	}
	e.headers()
	for name, flag := range map[string]string{"SHADOW_MODE": "shadow-mode", "QUOTA_MODE": "quota-mode", "MERGE_DOMAIN_CONFIG": "merge-domains"} {
		if _, ok := e.get(name); ok {
			e.set(flag, strconv.FormatBool(e.boolean(name)), name)
		}
	}
	return e.flags, e.from, errors.Join(e.errs...)
}

// refuseNotApplicable refuses each setting of notApplicable that is set to
// other than its inert value.
func (e *envReader) refuseNotApplicable() {
	names := make([]string, 0, len(notApplicable))
	for n := range notApplicable {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v, ok := e.get(n)
		if !ok {
			continue
		}
		na := notApplicable[n]
		if na.inert != "" && inert(v, na.inert) {
			continue
		}
		e.errs = append(e.errs, fmt.Errorf("%s=%q does not apply: %s", n, v, na.why))
	}
}

// serverTLS reads the gRPC server's TLS settings.
func (e *envReader) serverTLS() {
	// envoyproxy/ratelimit reads the certificates only with
	// GRPC_SERVER_USE_TLS, and the SAN only with a client CA
	if e.boolean("GRPC_SERVER_USE_TLS") {
		_, cert := e.get("GRPC_SERVER_TLS_CERT")
		_, key := e.get("GRPC_SERVER_TLS_KEY")
		if !cert || !key {
			e.errs = append(e.errs, errors.New("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"))
		}
		e.pass("GRPC_SERVER_TLS_CERT", "tls-cert")
		e.pass("GRPC_SERVER_TLS_KEY", "tls-key")
		e.pass("GRPC_CLIENT_TLS_CACERT", "tls-client-ca")
		if _, ca := e.get("GRPC_CLIENT_TLS_CACERT"); ca {
			e.pass("GRPC_CLIENT_TLS_SAN", "tls-client-san")
		}
	}
}

// logging reads LOG_LEVEL and LOG_FORMAT.
func (e *envReader) logging() {
	if v, ok := e.get("LOG_LEVEL"); ok {
		// logrus's levels, as envoyproxy/ratelimit parses them
		switch l := strings.ToLower(v); l {
		case "trace", "debug":
			e.set("log-level", "debug", "LOG_LEVEL")
		case "info", "warn", "error":
			e.set("log-level", l, "LOG_LEVEL")
		case "warning":
			e.set("log-level", "warn", "LOG_LEVEL")
		default:
			e.errs = append(e.errs, fmt.Errorf("LOG_LEVEL=%q: want trace, debug, info, warn or error (bucketgrid's quietest level is error)", v))
		}
	}
	if v, ok := e.get("LOG_FORMAT"); ok {
		f := "text" // envoyproxy/ratelimit writes JSON for "json" only
		if v == "json" {
			f = "json"
		}
		e.set("log-format", f, "LOG_FORMAT")
	}
}

// headers reads LIMIT_RESPONSE_HEADERS_ENABLED and the draft headers' names.
func (e *envReader) headers() {
	if _, ok := e.get("LIMIT_RESPONSE_HEADERS_ENABLED"); ok {
		if e.boolean("LIMIT_RESPONSE_HEADERS_ENABLED") {
			e.set("headers", "draft", "LIMIT_RESPONSE_HEADERS_ENABLED")
			names := []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}
			set := false
			for i, n := range []string{"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"} {
				if v, ok := e.get(n); ok {
					names[i], set = v, true
					if !httpguts.ValidHeaderFieldName(v) {
						e.errs = append(e.errs, fmt.Errorf("%s=%q: not a header name (Envoy would refuse the response)", n, v))
					}
				}
			}
			if set {
				e.set("draft-header-names", strings.Join(names, ","), "LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER")
			}
		} else {
			e.set("headers", "none", "LIMIT_RESPONSE_HEADERS_ENABLED")
		}
	}
}

// configFromEnv reads where the configuration comes from: files under
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (CONFIG_TYPE FILE),
// or an xDS server (GRPC_XDS_SOTW), each read only as envoyproxy/ratelimit
// reads it.
func configFromEnv(e *envReader) {
	typ, typed := e.get("CONFIG_TYPE")
	switch {
	case !typed || typ == "FILE":
		root, r := e.get("RUNTIME_ROOT")
		sub, s := e.get("RUNTIME_SUBDIRECTORY")
		app, a := e.get("RUNTIME_APPDIRECTORY")
		if !r && !s && !a && !typed {
			return
		}
		if !r {
			root = "/srv/runtime_data/current"
		}
		if !a {
			app = "config"
		}
		e.set("config", path.Join(root, sub, app), "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY")
		e.boolean("RUNTIME_WATCH_ROOT") // sameEitherWay
	case typ == "GRPC_XDS_SOTW":
		url, ok := e.get("CONFIG_GRPC_XDS_SERVER_URL")
		if !ok {
			url = "localhost:18000"
		}
		e.set("config-xds", url, "CONFIG_GRPC_XDS_SERVER_URL")
		node, ok := e.get("CONFIG_GRPC_XDS_NODE_ID")
		if !ok {
			node = "default"
		}
		e.set("config-xds-node", node, "CONFIG_GRPC_XDS_NODE_ID")
		if e.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS") {
			if _, ok := e.get("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"); !ok {
				e.errs = append(e.errs, errors.New("CONFIG_GRPC_XDS_SERVER_USE_TLS=true needs CONFIG_GRPC_XDS_SERVER_TLS_CACERT: bucketgrid checks the xDS server against that CA, not the system's"))
			}
			e.pass("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "config-xds-ca")
		}
	default:
		e.errs = append(e.errs, fmt.Errorf("CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW", typ))
	}
}

// inert reports whether v asks for what the value off does.
func inert(v, off string) bool {
	if b, err := strconv.ParseBool(off); err == nil {
		vb, err := strconv.ParseBool(v)
		return err == nil && vb == b
	}
	return v == off
}

// applyRatelimitEnv sets on fs the flags that envoyproxy/ratelimit's
// settings in the environment (read by lookup) stand for, except those
// given on the command line, after fs.Parse.
func applyRatelimitEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	flags, from, err := ratelimitEnv(lookup)
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	errs := []error{err}
	names := make([]string, 0, len(flags))
	for n := range flags {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if explicit[n] {
			continue
		}
		if serr := fs.Set(n, flags[n]); serr != nil {
			errs = append(errs, fmt.Errorf("%s (as -%s %q): %w", from[n], n, flags[n], serr))
		}
	}
	return errors.Join(errs...)
}
