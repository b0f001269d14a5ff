package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestValidateRefuses: every invalid combination of options is refused by
// validate, naming the flag, and run refuses it before it starts anything:
// it opens no listener (the gRPC address is held by the test, so a listen
// would fail with "-grpc-addr") and writes nothing (run writes no file;
// stdout and the log stay empty).
func TestValidateRefuses(t *testing.T) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"srv.yaml": serverConfig})
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-config-xds", "127.0.0.1:1"}, "-config and -config-xds are alternatives"},
		{[]string{"-config-xds-api", "sotw"}, `-config-xds-api: xDS API "sotw"`},
		{[]string{"-algorithm", "leaky"}, `-algorithm "leaky"`},
		{[]string{"-near-limit-ratio", "0"}, "-near-limit-ratio 0"},
		{[]string{"-headers", "all"}, `-headers "all"`},
		{[]string{"-draft-header-names", "a,b"}, "-draft-header-names"},
		{[]string{"-timeout", "0s"}, "-timeout and -reload-interval must be positive"},
		{[]string{"-drain-grace", "-1s"}, "-drain-grace not negative"},
		{[]string{"-degrade-timeout", "2s"}, "-degrade-timeout positive and below -timeout"},
		{[]string{"-backend", "memory", "-degrade", "-degrade-count"}, "not -backend memory"},
		{[]string{"-backend", "nowhere"}, `-backend "nowhere"`},
		{[]string{"-backend", "ftp://h:1"}, `-backend "ftp://h:1"`},
		{[]string{"-backend", "redis://"}, `-backend "redis://"`},
		{[]string{"-grid-bind", "127.0.0.1:65534"}, "-grid-bind"},
		{[]string{"-grid-env", "wan"}, `-grid-env "wan"`},
		{[]string{"-grid-peers", "dns:"}, "-grid-peers dns: needs a name"},
		{[]string{"-grid-replicas", "0"}, "-grid-replicas must be at least 1"},
		{[]string{"-grid-tls-key", "k"}, "-grid-tls-cert, -grid-tls-key and -grid-tls-ca go together"},
		{[]string{"-grid-leases=false", "-grid-lease-lifetime", "1s"}, "needs -grid-leases other than off"},
		{[]string{"-grid-leases=on"}, `-grid-leases "on"`},
		{[]string{"-tls-key", "k"}, "-tls-cert and -tls-key go together"},
		{[]string{"-tls-client-san", "a"}, "-tls-client-san needs -tls-client-ca"},
		{[]string{"-grpc-max-streams", "0"}, "-grpc-max-streams"},
		{[]string{"-grpc-max-read", "1000"}, "-grpc-max-read 1000: want at least -grpc-max-recv"},
		{[]string{"-max-inflight-bytes", "1000"}, "-max-inflight-bytes 1000"},
		{[]string{"-rlqs", "-rlqs-max-recv", "0"}, "-rlqs-max-recv 0"},
		{[]string{"-rlqs", "-rlqs-first-report", "0s"}, "-rlqs-first-report 0s"},
		{[]string{"-rlqs", "-rlqs-addr", ""}, "-rlqs needs -rlqs-addr"},
		{[]string{"-grpc-window", "100"}, "-grpc-window 100"},
		{[]string{"-grpc-max-connection-age", "-1s"}, "-grpc-max-connection-age"},
		{[]string{"-http-idle-timeout", "0s"}, "-http-idle-timeout must be positive"},
		{[]string{"-gc-heap-floor", "-1"}, "-gc-heap-floor -1"},
		{[]string{"-gc-heap-floor", "1048576"}, "-gc-heap-floor 1048576: want 0"},
		{[]string{"-log-level", "loud"}, "-log-level"},
		{[]string{"-log-format", "xml"}, `-log-format "xml"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := append([]string{"-config", dir, "-grpc-addr", held.Addr().String(), "-http-addr", "", "-drain-grace", "0"}, tc.args...)
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var s settings
			s.register(fs)
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			if err := s.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate: %v, want %q", err, tc.want)
			}
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // should it start, it stops at once
			err := run(ctx, s, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run: %v, want the refusal %q before any listener", err, tc.want)
			}
			if stdout.Len()+stderr.Len() > 0 {
				t.Errorf("run wrote %q and logged %q before refusing", stdout.String(), stderr.String())
			}
		})
	}
}

// TestValidateAccepts: the defaults, with a configuration, are valid, and
// validate resolves the options given as text.
func TestValidateAccepts(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var s settings
	s.register(fs)
	if err := fs.Parse([]string{"-config", "x", "-algorithm", "token_bucket", "-headers", "ietf,retry-after", "-log-format", "json", "-backend", "redis://h:1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.validate(); err != nil {
		t.Fatal(err)
	}
	if s.Rules.Algorithm.String() != "token_bucket" || s.Headers != 1 || !s.RetryAfter || !s.LogJSON || s.Rules.NearLimitRatio != 0.8 {
		t.Errorf("%+v", s)
	}
}

// TestRunReadsFilesBeforeListening: files the flags name that cannot be
// read (the gRPC server's certificate, the grid's secrets) stop run before
// it opens a listener (the gRPC address is held by the test, so a listen
// would fail with "-grpc-addr") or starts the backend.
func TestRunReadsFilesBeforeListening(t *testing.T) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"srv.yaml": serverConfig})
	missing := filepath.Join(t.TempDir(), "missing")
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-tls-cert", missing, "-tls-key", missing}, missing},
		{[]string{"-grid-secret-file", missing}, "-grid-secret-file"},
		{[]string{"-grid-password-file", missing}, "-grid-password-file"},
		{[]string{"-grid-gossip-key-file", missing}, "-grid-gossip-key-file"},
	} {
		args := append([]string{"-config", dir, "-grpc-addr", held.Addr().String(), "-http-addr", "", "-drain-grace", "0",
			"-grid-bind", "127.0.0.1:" + strconv.Itoa(gridPort(t))}, tc.args...)
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		s, err := parseFlagsEnv(fs, args, noEnv)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		var stdout bytes.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := run(ctx, s, &stdout, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "-grpc-addr") {
			t.Errorf("%q: run: %v, want the file refused (%q) before any listener", tc.args, err, tc.want)
		}
	}
}
