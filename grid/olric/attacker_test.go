package olric

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// attackerEnv makes the test binary an attacker process: it holds
// connections against an owner channel until its stdin closes. The value
// is "addr idle announce authAnnounce authStall certFile keyFile caFile":
//
//   - idle: plain TCP connections that send nothing;
//   - announce: plain TCP connections that send the preamble and a frame
//     header announcing 1 MiB, then nothing;
//   - authAnnounce, authStall: TLS connections with a valid member
//     certificate that send the preamble and a header announcing 1 MiB,
//     or 60 KiB, then nothing.
//
// A connection the member closes is opened again a second later. It
// prints "READY" once every connection was attempted.
const attackerEnv = "BUCKETGRID_OLRIC_ATTACKER"

// attackerDialer connects connections of kind k from 127.0.0.(2+k),
// sources other than the members' 127.0.0.1, as attackers on the network
// would: the member bounds failed handshakes per source address (internal/trust.Throttle),
// so the kinds that fail (announce) are throttled without keeping the
// others from testing the connection limits.
func attackerDialer(k int) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+k))}}
}

func attackerMain() int {
	f := strings.Fields(os.Getenv(attackerEnv))
	addr := f[0]
	n := make([]int, 4)
	for i := range n {
		n[i], _ = strconv.Atoi(f[1+i])
	}
	cert, err := tls.LoadX509KeyPair(f[5], f[6])
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	pem, _ := os.ReadFile(f[7])
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	auth := &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	header := func(size uint32) []byte {
		return binary.BigEndian.AppendUint32(append([]byte(nil), frame.Preamble[:]...), size)
	}
	kinds := []struct {
		tls  bool
		send []byte
	}{{false, nil}, {false, header(1 << 20)}, {true, header(1 << 20)}, {true, header(60 << 10)}}
	stop := make(chan struct{})
	var started sync.WaitGroup
	for k, kind := range kinds {
		for range n[k] {
			started.Add(1)
			go func() {
				first := true
				for {
					c, err := attackerDialer(k).Dial("tcp", addr)
					if err == nil && kind.tls {
						tc := tls.Client(c, auth)
						tc.SetDeadline(time.Now().Add(10 * time.Second))
						if tc.Handshake() != nil {
							c.Close()
							c, err = nil, errors.New("handshake")
						} else {
							tc.SetDeadline(time.Time{})
							c = tc
						}
					}
					if err == nil {
						c.Write(kind.send)
					}
					if first {
						started.Done()
						first = false
					}
					if err == nil {
						go func() { <-stop; c.Close() }()
						io.Copy(io.Discard, c) // until the member hangs up
					}
					select {
					case <-stop:
						return
					case <-time.After(time.Second):
					}
				}
			}()
		}
	}
	started.Wait()
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin)
	close(stop)
	return 0
}
