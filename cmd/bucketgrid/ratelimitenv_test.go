package main

import (
	"flag"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
)

// settingsGo is every setting of envoyproxy/ratelimit's
// src/settings/settings.go (commit f2fb157, 2026), by its environment
// variable, in the file's order.
var settingsGo = []string{
	"HOST", "PORT", "DEBUG_HOST", "DEBUG_PORT", "GRPC_UDS", "GRPC_HOST", "GRPC_PORT", "GRPC_MAX_CONNECTION_AGE",
	"GRPC_MAX_CONNECTION_AGE_GRACE", "GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY",
	"GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN", "LOG_LEVEL", "LOG_FORMAT", "CONFIG_TYPE",
	"FORCE_START_WITHOUT_INITIAL_CONFIG", "CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA",
	"CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
	"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "CONFIG_GRPC_XDS_SERVER_USE_TLS",
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
	"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
	"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
	"USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS", "USE_STATSD", "STATSD_HOST", "STATSD_PORT", "EXTRA_TAGS",
	"STATS_FLUSH_INTERVAL", "DISABLE_STATS", "USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH",
	"PROMETHEUS_MAPPER_YAML", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY",
	"RUNTIME_APPDIRECTORY", "RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT", "EXPIRATION_JITTER_MAX_SECONDS",
	"LOCAL_CACHE_SIZE_IN_BYTES", "NEAR_LIMIT_RATIO", "CACHE_KEY_PREFIX", "BACKEND_TYPE",
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "LIMIT_RESPONSE_HEADERS_ENABLED", "LIMIT_LIMIT_HEADER",
	"LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
	"REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_POOL_SIZE", "REDIS_AUTH", "REDIS_TLS",
	"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
	"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_CLUSTER_PIPELINE_PARALLELISM", "REDIS_PERSECOND",
	"REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_POOL_SIZE",
	"REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_SENTINEL_AUTH", "REDIS_PERSECOND_SENTINEL_AUTH",
	"REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT",
	"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "REDIS_TIMEOUT",
	"REDIS_PERSECOND_TIMEOUT", "REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
	"REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME",
	"MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS",
	"MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT",
	"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "SHADOW_MODE", "QUOTA_MODE", "RESPONSE_DYNAMIC_METADATA",
	"MERGE_DOMAIN_CONFIG", "TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE",
	"TRACING_SERVICE_INSTANCE_ID", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE",
}

// settingCases give a setting a value that asks for something other than
// its default (default "true"), and the settings it is read with
// (envoyproxy/ratelimit reads the certificates only with
// GRPC_SERVER_USE_TLS, for example).
var settingCases = map[string]struct {
	value string
	with  map[string]string
}{
	"HOST":                          {"127.0.0.2", nil},
	"PORT":                          {"9999", nil},
	"DEBUG_HOST":                    {"127.0.0.2", nil},
	"DEBUG_PORT":                    {"9998", nil},
	"GRPC_HOST":                     {"127.0.0.2", nil},
	"GRPC_PORT":                     {"9997", nil},
	"GRPC_MAX_CONNECTION_AGE":       {"24h", nil},
	"GRPC_MAX_CONNECTION_AGE_GRACE": {"1h", nil},
	"GRPC_SERVER_USE_TLS":           {"true", map[string]string{"GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem"}},
	"GRPC_SERVER_TLS_CERT":          {"c2.pem", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem"}},
	"GRPC_SERVER_TLS_KEY":           {"k2.pem", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem"}},
	"GRPC_CLIENT_TLS_CACERT":        {"ca.pem", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem"}},
	"GRPC_CLIENT_TLS_SAN": {"envoy.example.com", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem",
		"GRPC_SERVER_TLS_KEY": "k.pem", "GRPC_CLIENT_TLS_CACERT": "ca.pem"}},
	"LOG_LEVEL":                         {"debug", nil},
	"LOG_FORMAT":                        {"json", nil},
	"CONFIG_TYPE":                       {"GRPC_XDS_SOTW", nil},
	"CONFIG_GRPC_XDS_NODE_ID":           {"node-1", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}},
	"CONFIG_GRPC_XDS_SERVER_URL":        {"xds:18000", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}},
	"CONFIG_GRPC_XDS_SERVER_USE_TLS":    {"true", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "ca.pem"}},
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": {"ca2.pem", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "ca.pem"}},
	"XDS_CLIENT_BACKOFF_JITTER":         {"false", nil},
	"RUNTIME_ROOT":                      {"/other", nil},
	"RUNTIME_SUBDIRECTORY":              {"ratelimit", nil},
	"RUNTIME_APPDIRECTORY":              {"rules", nil},
	"RUNTIME_IGNOREDOTFILES":            {"false", nil},
	"LOCAL_CACHE_SIZE_IN_BYTES":         {"1048576", nil},
	"NEAR_LIMIT_RATIO":                  {"0.5", nil},
	"LIMIT_LIMIT_HEADER":                {"X-L", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true"}},
	"LIMIT_REMAINING_HEADER":            {"X-R", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true"}},
	"LIMIT_RESET_HEADER":                {"X-S", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true"}},
}

// parseWithEnv parses no flags but those envoyproxy/ratelimit's settings
// env stand for, on top of RUNTIME_ROOT=/r (a configuration to start with).
func parseWithEnv(env map[string]string, args ...string) (settings, error) {
	all := map[string]string{"RUNTIME_ROOT": "/r"}
	for k, v := range env {
		all[k] = v
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return parseFlagsEnv(fs, args, func(k string) (string, bool) { v, ok := all[k]; return v, ok })
}

// TestEveryRatelimitSetting walks every setting of envoyproxy/ratelimit's
// settings.go: set to a value that asks for something, each is honoured
// (the configuration is not the one without it), or refused at start with
// an error that names it and says why it does not apply, or listed as
// asking for what bucketgrid does either way, with the reason.
func TestEveryRatelimitSetting(t *testing.T) {
	known := map[string]bool{}
	for _, n := range honoured {
		known[n] = true
	}
	for n := range notApplicable {
		if known[n] {
			t.Errorf("%s is both honoured and not applicable", n)
		}
		known[n] = true
	}
	for n := range sameEitherWay {
		known[n] = true
	}
	listed := map[string]bool{}
	for _, n := range settingsGo {
		listed[n] = true
		if !known[n] {
			t.Errorf("%s: settings.go's, unknown to ratelimitenv.go", n)
		}
	}
	for n := range known {
		if !listed[n] {
			t.Errorf("%s: ratelimitenv.go's, not in settings.go", n)
		}
	}
	doc, err := os.ReadFile("../../docs/migrate-envoy-ratelimit.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range settingsGo {
		if !strings.Contains(string(doc), "`"+n+"`") {
			t.Errorf("%s: not in docs/migrate-envoy-ratelimit.md's table", n)
		}
	}
	honouredN, refusedN := 0, 0
	for _, name := range settingsGo {
		tc, ok := settingCases[name]
		if !ok {
			tc.value = "true"
		}
		base, err := parseWithEnv(tc.with)
		if err != nil {
			t.Errorf("%s: without it, %v", name, err)
			continue
		}
		env := map[string]string{name: tc.value}
		for k, v := range tc.with {
			if k != name {
				env[k] = v
			}
		}
		c, err := parseWithEnv(env)
		switch {
		case err != nil:
			msg := err.Error()
			if !strings.Contains(msg, name+"=") || !strings.Contains(msg, "does not apply: ") {
				t.Errorf("%s=%s refused without saying why: %v", name, tc.value, err)
			}
			refusedN++
		case sameEitherWay[name] != "":
			if !reflect.DeepEqual(c, base) {
				t.Errorf("%s=%s changed the configuration, though listed as the same either way", name, tc.value)
			}
		case reflect.DeepEqual(c, base):
			t.Errorf("%s=%s neither honoured nor refused", name, tc.value)
		default:
			honouredN++
		}
	}
	t.Logf("%d settings: %d honoured, %d refused, %d the same either way", len(settingsGo), honouredN, refusedN, len(sameEitherWay))
}

// TestRatelimitEnvValues: the flags the settings give, a command-line flag
// winning over a setting, and what an envoyproxy/ratelimit deployment's
// environment meets.
func TestRatelimitEnvValues(t *testing.T) {
	c, err := parseWithEnv(map[string]string{"RUNTIME_ROOT": "/srv/rt", "RUNTIME_SUBDIRECTORY": "ratelimit",
		"HOST": "127.0.0.1", "PORT": "18080", "GRPC_PORT": "18081", "LOG_LEVEL": "WARN", "USE_STATSD": "false",
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "X-Reset",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "RUNTIME_WATCH_ROOT": "false"})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ConfigPaths; len(got) != 1 || got[0] != "/srv/rt/ratelimit/config" {
		t.Errorf("config %v", got)
	}
	if c.HTTPAddr != "127.0.0.1:18080" || c.GRPCAddr != "0.0.0.0:18081" || c.LogLevel.String() != "WARN" {
		t.Errorf("addresses %s %s, log level %v", c.HTTPAddr, c.GRPCAddr, c.LogLevel)
	}
	if c.Headers != 4 || c.RetryAfter || c.HeaderNames["ratelimit-reset"] != "x-reset" ||
		c.HeaderNames["ratelimit-limit"] != "ratelimit-limit" || !c.StopCountingWhenOverLimit {
		t.Errorf("headers %v %v %v, stop %v", c.Headers, c.RetryAfter, c.HeaderNames, c.StopCountingWhenOverLimit)
	}
	c, err = parseWithEnv(map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "GRPC_PORT": "1"},
		"-headers", "ietf", "-grpc-addr", "127.0.0.1:0")
	if err != nil || c.Headers != 1 || c.GRPCAddr != "127.0.0.1:0" {
		t.Errorf("flags over settings: %v %v %v", c.Headers, c.GRPCAddr, err)
	}
	// the settings scripts/servers.sh's envoyproxy/ratelimit runs with
	_, err = parseWithEnv(map[string]string{"USE_STATSD": "false", "LOG_LEVEL": "warn", "REDIS_SOCKET_TYPE": "tcp",
		"REDIS_URL": "127.0.0.1:6379", "CACHE_KEY_PREFIX": "p_", "RUNTIME_WATCH_ROOT": "false"})
	for _, want := range []string{"REDIS_SOCKET_TYPE=", "REDIS_URL=", "CACHE_KEY_PREFIX=", "-backend grid"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a Redis deployment's environment: %v, want %q", err, want)
		}
	}
	for env, want := range map[string]string{
		"GRPC_PORT=tcp://10.0.0.1:8081": "GRPC_PORT=\"tcp://10.0.0.1:8081\": want a port number",
		"SHADOW_MODE=yes":               "SHADOW_MODE=\"yes\": want true or false",
		"LOG_LEVEL=fatal":               "LOG_LEVEL=\"fatal\"",
		"CONFIG_TYPE=GRPC_XDS_DELTA":    "CONFIG_TYPE=\"GRPC_XDS_DELTA\"",
		"GRPC_SERVER_USE_TLS=true":      "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT",
		"LIMIT_LIMIT_HEADER=a b":        "", // read only with LIMIT_RESPONSE_HEADERS_ENABLED, as there
	} {
		k, v, _ := strings.Cut(env, "=")
		_, err := parseWithEnv(map[string]string{k: v})
		if want == "" {
			if err != nil {
				t.Errorf("%s: %v", env, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", env, err, want)
		}
	}
	if _, err := parseWithEnv(map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "a b"}); err == nil ||
		!strings.Contains(err.Error(), "LIMIT_LIMIT_HEADER") {
		t.Errorf("a header name with a space: %v", err)
	}
}
