package main

import (
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// grpcLimits are the server options that bound what one gRPC connection
// can make the service hold. A fixed flow-control window turns off
// grpc-go's window growth (BDP estimation), which let one connection's
// unfinished messages take hundreds of MiB: with it, a call holds at most
// its window of unread bytes plus one message of at most maxRecv
// (GRPCMaxRead, RLQSMaxRecv on the quota port), and a connection
// GRPCMaxStreams calls. Connection-level window updates are sent
// as data arrives, so only the per-call windows hold memory.
func grpcLimits(l limitFlags, maxRecv int) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(l.GRPCMaxStreams)),
		grpc.MaxRecvMsgSize(maxRecv),
		grpc.InitialWindowSize(int32(l.GRPCWindow)),
		grpc.InitialConnWindowSize(int32(l.GRPCWindow)),
		grpc.MaxHeaderListSize(16 << 10),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.GRPCKeepaliveMin, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: l.GRPCIdleTimeout,
			MaxConnectionAge: l.GRPCMaxAge, MaxConnectionAgeGrace: l.GRPCMaxAgeGrace,
			Time: 2 * time.Hour, Timeout: 20 * time.Second}),
	}
}

// httpServer is the HTTP server of /json, /healthcheck and /metrics with
// the limits applied: a request must arrive whole within HTTPReadTimeout,
// an idle connection closes after HTTPIdleTimeout, and /json bodies are cut
// at HTTPMaxBody by the handler.
func httpServer(h http.Handler, l limitFlags) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: min(10*time.Second, l.HTTPReadTimeout),
		ReadTimeout: l.HTTPReadTimeout, IdleTimeout: l.HTTPIdleTimeout, MaxHeaderBytes: l.HTTPMaxHeaderBytes}
}
