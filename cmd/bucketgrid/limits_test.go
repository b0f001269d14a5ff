package main

import (
	"bufio"
	"bytes"
	endian "encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rssBytes returns the resident set of process pid.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// peakRSS samples the resident set of pid until stop is closed and returns
// the largest value seen.
func peakRSS(t *testing.T, pid int, stop <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		var peak int64
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
				for line := range strings.Lines(string(b)) {
					if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
						kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
						peak = max(peak, kb<<10)
					}
				}
			}
			select {
			case <-stop:
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// limitsInstance starts a process of its own (its resident set is what is
// measured) with the memory backend and the given flags.
func limitsInstance(t *testing.T, extra ...string) *proc {
	t.Helper()
	dir := writeConfig(t, t.TempDir(), map[string]string{"srv.yaml": serverConfig})
	return startProc(t, gridPort(t), nil, append([]string{"-config", dir, "-backend", "memory"}, extra...)...)
}

// unfinished opens streams calls on one gRPC connection, each announcing a
// message of size bytes and sending as much of it as the server's flow
// control lets through, but never the end. It returns once the server has
// ended every call (a reset or trailers) or closed the connection, and
// reports the bytes the server accepted and how many calls it ended.
func unfinished(t *testing.T, addr string, streams, size int, deadline time.Duration) (accepted int64, ended int) {
	t.Helper()
	return unfinishedCalls(t, addr, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", streams, size, deadline)
}

// unfinishedCalls is unfinished with calls of the method path.
func unfinishedCalls(t *testing.T, addr, path string, streams, size int, deadline time.Duration) (accepted int64, ended int) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var (
		mu      sync.Mutex
		cond    = sync.NewCond(&mu)
		connWin = int64(65535)
		initWin = int64(65535)
		win     = map[uint32]int64{}
		done    = map[uint32]bool{}
		closed  bool
		wbuf    bytes.Buffer
	)
	fw := http2.NewFramer(&wbuf, nil)
	flush := func() { // mu held
		if wbuf.Len() > 0 {
			conn.Write(wbuf.Bytes())
			wbuf.Reset()
		}
	}
	mu.Lock()
	wbuf.WriteString(http2.ClientPreface)
	fw.WriteSettings()
	flush()
	mu.Unlock()
	go func() {
		fr := http2.NewFramer(nil, bufio.NewReader(conn))
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		for {
			f, err := fr.ReadFrame()
			mu.Lock()
			if err != nil {
				closed = true
				cond.Broadcast()
				mu.Unlock()
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
						for id := range win {
							win[id] += int64(v) - initWin
						}
						initWin = int64(v)
					}
					fw.WriteSettingsAck()
					flush()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					fw.WritePing(true, f.Data)
					flush()
				}
			case *http2.WindowUpdateFrame:
				if f.StreamID == 0 {
					connWin += int64(f.Increment)
				} else {
					win[f.StreamID] += int64(f.Increment)
				}
			case *http2.RSTStreamFrame:
				done[f.StreamID] = true
			case *http2.MetaHeadersFrame:
				if f.StreamEnded() {
					done[f.StreamID] = true
				}
			case *http2.GoAwayFrame:
				closed = true
			}
			cond.Broadcast()
			mu.Unlock()
		}
	}()
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	msg := make([]byte, 5+size)
	endian.BigEndian.PutUint32(msg[1:], uint32(size))
	sent := map[uint32]int{}
	mu.Lock()
	for i := range streams {
		id := uint32(2*i + 1)
		hbuf.Reset()
		for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
			{Name: ":path", Value: path},
			{Name: ":authority", Value: addr}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"}} {
			enc.WriteField(f)
		}
		fw.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndHeaders: true})
		win[id] += initWin
	}
	flush()
	end := time.Now().Add(deadline)
	timer := time.AfterFunc(deadline, func() { mu.Lock(); cond.Broadcast(); mu.Unlock() })
	defer timer.Stop()
	for {
		progress := false
		for i := range streams {
			id := uint32(2*i + 1)
			n := min(int64(16<<10), connWin, win[id], int64(len(msg)-1-sent[id]))
			if done[id] || closed || n <= 0 {
				continue
			}
			fw.WriteData(id, false, msg[sent[id]:sent[id]+int(n)])
			sent[id] += int(n)
			connWin -= n
			win[id] -= n
			accepted += n
			progress = true
		}
		flush()
		ended = len(done)
		if closed || ended == streams {
			mu.Unlock()
			return accepted, ended
		}
		if time.Now().After(end) {
			mu.Unlock()
			t.Fatalf("after %v: %d of %d calls still open on a live connection, %d bytes accepted", deadline, streams-ended, streams, accepted)
		}
		if !progress {
			cond.Wait()
		}
	}
}

// TestUnfinishedMessagesAreBounded: one connection starts many calls whose
// messages never finish, of a size over -grpc-max-read, between it and
// -grpc-max-recv, and under both. The server holds a bounded amount for
// them (per call its flow-control window and at most one message of
// -grpc-max-read: 100 calls × 320 KiB) and ends every call: the oversized
// at once, the others at -grpc-read-timeout.
// grpc-go's defaults let its windows grow, and 100 calls of 3.8 MiB held
// 381 MiB until the connection closed.
func TestUnfinishedMessagesAreBounded(t *testing.T) {
	p := limitsInstance(t, "-grpc-read-timeout", "1s")
	const bound = 48 << 20
	for _, size := range []int{3_800_000, 250_000, 60_000} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			base := rssBytes(t, p.Pid())
			stop := make(chan struct{})
			peak := peakRSS(t, p.Pid(), stop)
			accepted, ended := unfinished(t, p.grpcAddr, 100, size, 2*time.Minute)
			close(stop)
			grown := <-peak - base
			t.Logf("%d-byte messages: %d bytes accepted, %d calls ended by the server, resident set %d MiB → +%d MiB",
				size, accepted, ended, base>>20, grown>>20)
			if grown > bound {
				t.Fatalf("the resident set grew by %d MiB, over the bound of %d MiB", grown>>20, bound>>20)
			}
		})
	}
}

// TestSlowBodiesAreBounded: 300 HTTP connections each start a /json
// request announcing a 1 MiB body; half send it as fast as the server
// reads, half send 32 KiB and then nothing. The server holds at most
// -http-max-body a connection (64 KiB), answers the first half 413 and
// closes, and cuts the stalled half off at -http-read-timeout. Before, each
// body was read whole (1 MiB) and a stalled one stayed open.
func TestSlowBodiesAreBounded(t *testing.T) {
	p := limitsInstance(t, "-http-read-timeout", "2s")
	const conns, bound = 300, 64 << 20
	base := rssBytes(t, p.Pid())
	stop := make(chan struct{})
	peak := peakRSS(t, p.Pid(), stop)
	var cut atomic.Int64
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			conn, err := net.Dial("tcp", p.httpAddr)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 1<<20)
			chunk := bytes.Repeat([]byte(" "), 16<<10)
			total := 1 << 20
			if i%2 == 1 {
				total = 32 << 10
			}
			for sent := 0; sent < total; sent += len(chunk) {
				if _, err := conn.Write(chunk); err != nil {
					break // the server stopped reading
				}
			}
			// The server must end the exchange: an answer and then EOF,
			// or a closed connection, within a generous deadline.
			conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
			buf := make([]byte, 4096)
			for {
				if _, err := conn.Read(buf); err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						t.Errorf("connection %d still open after 2 minutes", i)
						return
					}
					cut.Add(1)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	grown := <-peak - base
	t.Logf("%d connections cut off; resident set %d MiB → +%d MiB", cut.Load(), base>>20, grown>>20)
	if grown > bound {
		t.Fatalf("the resident set grew by %d MiB, over the bound of %d MiB", grown>>20, bound>>20)
	}
}
