package netbed

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// echo serves lines back on host h until the test ends.
func echo(t *testing.T, h *Host) string {
	t.Helper()
	ln, err := h.Listen("tcp", h.Addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line over c and waits for it to come back.
func roundTrip(c net.Conn, r *bufio.Reader, timeout time.Duration) (time.Duration, error) {
	c.SetDeadline(time.Now().Add(timeout))
	start := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "ping\n" {
		return 0, errors.New("echo answered " + line)
	}
	return time.Since(start), nil
}

// TestBed checks the bed's primitives end to end: hosts reach each other
// over the bridge, a partition drops traffic silently and heals, a proxy
// delays a round trip by twice its delay, and a process started on a
// host runs in its namespace and can be paused and killed.
func TestBed(t *testing.T) {
	if testing.Short() {
		t.Skip("creates network namespaces")
	}
	b := New(t, 3)
	h0, h1, h2 := b.Hosts[0], b.Hosts[1], b.Hosts[2]
	addr := echo(t, h0)
	ctx := context.Background()

	c, err := h1.Dial(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := roundTrip(c, r, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	// A partition: the established connection stalls (no reset, no
	// refusal), and heals with the network.
	b.Partition([]*Host{h0})
	if _, err := roundTrip(c, r, 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("across a partition: %v, want a timeout", err)
	}
	b.Heal()
	c.SetDeadline(time.Now().Add(10 * time.Second)) // TCP retransmits the stalled line
	if _, err := r.ReadString('\n'); err != nil {   // the stalled echo arrives
		t.Fatalf("after the heal: %v", err)
	}
	if _, err := roundTrip(c, r, 10*time.Second); err != nil {
		t.Fatalf("after the heal: %v", err)
	}

	// A proxy on h2 towards h0, dialling from h2: 20 ms each way.
	const delay = 20 * time.Millisecond
	p := b.Proxy(h2, h2.Addr+":0", h2, addr, delay)
	pc, err := h1.Dial(ctx, "tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	pr := bufio.NewReader(pc)
	rtt, err := roundTrip(pc, pr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rtt < 2*delay {
		t.Errorf("round trip through the proxy %v, want at least %v", rtt, 2*delay)
	}

	// A process on h1 sees h1's address only, and obeys signals.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := h1.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), hostProcessEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	proc := b.Start(cmd)
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "ADDRS ") {
		t.Fatalf("host process said %q", sc.Text())
	}
	if got := strings.Fields(sc.Text())[1:]; len(got) != 1 || got[0] != h1.Addr {
		t.Errorf("host process sees addresses %v, want only %s", got, h1.Addr)
	}
	if err := proc.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := proc.Cont(); err != nil {
		t.Fatal(err)
	}
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := proc.Wait(); err == nil {
		t.Error("killed process exited cleanly")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// hostProcessEnv makes the test binary the process TestBed starts on a
// host: it prints the host's non-loopback IPv4 addresses, then waits to be
// killed.
const hostProcessEnv = "NETBED_HOST_PROCESS"

func TestMain(m *testing.M) {
	if os.Getenv(hostProcessEnv) != "" {
		addrs, _ := net.InterfaceAddrs()
		line := "ADDRS"
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
				line += " " + ipn.IP.String()
			}
		}
		os.Stdout.WriteString(line + "\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}
