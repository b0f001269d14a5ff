package olric

import (
	"bufio"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core"
)

func TestConfigValidation(t *testing.T) {
	c := DefaultLocalConfig()
	c.BindAddr = ""
	if _, err := Start(context.Background(), c); !errors.Is(err, ErrNoBindAddr) {
		t.Errorf("no BindAddr: %v, want ErrNoBindAddr", err)
	}
	c = DefaultLocalConfig()
	c.RoutingLease = c.HandoverGrace
	if _, err := Start(context.Background(), c); !errors.Is(err, ErrTimings) {
		t.Errorf("lease = grace: %v, want ErrTimings", err)
	}
	c = DefaultLocalConfig()
	c.Clock = clock.Monotonic()
	if _, err := Start(context.Background(), c); !errors.Is(err, ErrClock) {
		t.Errorf("monotonic clock: %v, want ErrClock", err)
	}
	if _, err := DefaultLANConfig().withDefaults(); !errors.Is(err, ErrNoBindAddr) {
		t.Errorf("LAN config without an address: %v, want ErrNoBindAddr", err)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	f := appendFrameHeader([]byte("junk"), 300, kindExecute)
	f = appendKey(f, "k")
	f = append(f, 1, 2, 3)
	f = finishFrame(f, 4)
	br := bytesReader(f[4:])
	body, err := readFrame(bufio.NewReader(&br), nil)
	if err != nil {
		t.Fatal(err)
	}
	id, kind, payload, err := parseFrame(body)
	if err != nil || id != 300 || kind != kindExecute {
		t.Fatalf("parseFrame: %d %d %v", id, kind, err)
	}
	key, rest, err := parseKey(payload)
	if err != nil || key != "k" || string(rest) != "\x01\x02\x03" {
		t.Fatalf("parseKey: %q %v %v", key, rest, err)
	}
	if _, _, err := parseKey([]byte{5, 'a'}); err == nil {
		t.Error("a key longer than its payload parsed")
	}
	if _, _, _, err := parseFrame([]byte{0x80}); err == nil {
		t.Error("a truncated id parsed")
	}
}

type bytesReader []byte

func (b *bytesReader) Read(p []byte) (int, error) {
	if len(*b) == 0 {
		return 0, errors.New("EOF")
	}
	n := copy(p, *b)
	*b = (*b)[n:]
	return n, nil
}

// TestOwnerChannelRejectsGarbage checks that a corrupt request gets an
// error answer, that a malformed frame closes the connection, and that the
// member keeps serving afterwards.
func TestOwnerChannelRejectsGarbage(t *testing.T) {
	ms := startCluster(t, 1, nil)
	m := ms[0]
	c, err := net.Dial("tcp", m.ChannelAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	f := appendFrameHeader(nil, 7, kindExecute)
	f = appendKey(f, "k")
	f = append(f, 0xff, 0xff) // not a request
	if _, err := c.Write(finishFrame(f, 0)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	body, err := readFrame(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if id, kind, _, err := parseFrame(body); err != nil || id != 7 || kind != kindError {
		t.Fatalf("answer to a corrupt request: id %d kind %d err %v; want an error frame", id, kind, err)
	}
	// A frame claiming to be larger than allowed ends the connection.
	if _, err := c.Write([]byte{0xff, 0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	if _, err := readFrame(r, nil); err == nil {
		t.Fatal("connection still open after an oversized frame")
	}
	cfg, _ := core.NewConfig(core.Intervally(5, 5, time.Hour))
	resp, err := m.Execute(context.Background(), "after-garbage", consumeReq(&cfg, 2))
	if err != nil || !resp.Results[0].OK {
		t.Fatalf("member stopped serving: %v %v", resp, err)
	}
}
