package olric

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestOlricConnClose: Olric forgets its client for a member that left only
// if closing that client returned no error, and keeps the closed client
// otherwise, so that every later call to the address, a member restarted
// there included, fails with "client is closed". A client whose TLS
// connection's peer went away reports the failed close_notify from Close;
// through olricConn it reports nothing.
func TestOlricConnClose(t *testing.T) {
	ca := newTestCA(t, "close")
	ln, err := tls.Listen("tcp", "127.0.0.1:0", ca.tlsConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
			go answerPing(c)
		}
	}()
	for _, tc := range []struct {
		name string
		wrap bool
	}{{"tls.Conn", false}, {"olricConn", true}} {
		t.Run(tc.name, func(t *testing.T) {
			// A bare connection's Close fails only once the reset arrived:
			// when it did not yet, try again with more room.
			for _, room := range []time.Duration{50 * time.Millisecond, 250 * time.Millisecond, time.Second} {
				err := closeAfterReset(t, ca, ln.Addr().String(), accepted, tc.wrap, room)
				if tc.wrap && err != nil {
					t.Fatalf("Close through olricConn: %v, want nil (Olric would keep the closed client)", err)
				}
				if tc.wrap || err != nil {
					return
				}
			}
			t.Error("Close of a bare TLS connection whose peer reset reported no error: the case olricConn exists for did not arise")
		})
	}
}

// closeAfterReset connects a go-redis client to addr (wrapping its
// connections in olricConn when wrap), pings, has the server's end reset
// the connection, waits room and closes the client.
func closeAfterReset(t *testing.T, ca *testCA, addr string, accepted <-chan net.Conn, wrap bool, room time.Duration) error {
	t.Helper()
	cfg := ca.tlsConfig(t)
	cfg.ServerName = "127.0.0.1"
	rc := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, network, addr)
			if err != nil || !wrap {
				return c, err
			}
			return olricConn{c}, nil
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rc.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The peer goes away with a reset, as a process that exits does with
	// data unread.
	peer := (<-accepted).(*tls.Conn).NetConn().(*net.TCPConn)
	peer.SetLinger(0)
	peer.Close()
	time.Sleep(room)
	return rc.Close()
}

// answerPing answers the RESP commands a go-redis client sends first
// (HELLO refused, so that it speaks RESP2) and PING.
func answerPing(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "hello":
			c.Write([]byte("-ERR unknown command\r\n"))
		case "ping":
			c.Write([]byte("+PONG\r\n"))
		}
	}
}
