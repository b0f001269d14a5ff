package olric

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/grid/olric/internal/frame"
)

// emfileEnv makes the test binary a member that runs out of file
// descriptors: it starts one open loopback member on the port in the
// variable, prints "UP", lowers its RLIMIT_NOFILE to 8 above the
// descriptors it has open, prints "LIMITED", and on each line of stdin
// prints "ACCEPTERRORS n".
const emfileEnv = "BUCKETGRID_OLRIC_EMFILE"

func init() { children[emfileEnv] = emfileMain }

func emfileMain() int {
	c := DefaultLocalConfig()
	c.BindPort, _ = strconv.Atoi(os.Getenv(emfileEnv))
	c.LeaveTimeout = 300 * time.Millisecond
	c.ChannelIOTimeout = time.Second
	m, err := Start(context.Background(), c)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	fmt.Println("UP")
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	lim.Cur = uint64(len(fds) + 8)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	fmt.Println("LIMITED")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Println("ACCEPTERRORS", m.channel.acceptErrors.Load())
	}
	return 0
}

// TestFileDescriptorExhaustion runs a member out of file descriptors
// (RLIMIT_NOFILE, in its own process) with connections that say nothing,
// lets them go, and checks that the member accepts and answers again.
func TestFileDescriptorExhaustion(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	port := freeBase(t)
	k := startChild(t, emfileEnv, strconv.Itoa(port))
	k.expect(t, "LIMITED")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1))
	// 40 silent connections: the member runs out of descriptors after 8.
	var flood []net.Conn
	for range 40 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		k.send(t, "")
		if n, _ := strconv.Atoi(k.expect(t, "ACCEPTERRORS")); n > 0 {
			t.Logf("%d failed Accepts", n)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the member never failed to accept: the test proves nothing")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range flood {
		c.Close()
	}
	// The descriptors come back as the member drops the silent
	// connections (EOF, or their handshake deadline): a request gets
	// through within the deadline.
	cfg := testBucket(10)
	req := wire.Request{Mode: wire.ModeCreateIfAbsent, Config: &cfg, Ops: []wire.Op{{Kind: wire.OpTryConsume, Tokens: 3}}}
	var last error
	for time.Now().Before(deadline) {
		if last = rawCall(addr, "after-emfile", wire.AppendRequest(nil, &req)); last == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no answer after the episode: %v", last)
}

// rawCall sends one execute request on a new plain owner-channel
// connection and checks that the answer is frame.KindOK.
func rawCall(addr, key string, req []byte) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write(append(frame.Preamble[:], requestFrame(1, frame.KindExecute, 2*time.Second, key, req)...)); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	var pre [len(frame.Preamble)]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return err
	}
	body, err := frame.NewReader(r, nil, 0, 0).Next()
	if err != nil {
		return err
	}
	if _, kind, payload, _ := frame.Parse(body); kind != frame.KindOK {
		return fmt.Errorf("answer of kind %d: %s", kind, payload)
	}
	return nil
}
