package wire

import (
	"encoding/binary"
	"errors"
	"github.com/bucketgrid/bucketgrid/core"
	"strconv"
	"time"
)

// FormatVersion is the version of the binary format written by this package.
// Every record starts with it, followed by a tag byte naming the record.
const FormatVersion = 1

// Record tags.
const (
	tagConfig   = 'C'
	tagBucket   = 'B'
	tagRequest  = 'Q'
	tagResponse = 'R'
)

// Decoding errors, wrapped in a *DecodeError.
var (
	// ErrUnknownVersion: the record was written by a format this version of
	// bucketgrid does not read.
	ErrUnknownVersion = errors.New("unknown format version")
	// ErrCorrupt: the bytes are not a well-formed record.
	ErrCorrupt = errors.New("corrupt record")
)

// DecodeError reports where and why decoding failed.
type DecodeError struct {
	Record string // "config", "bucket", "request" or "response"
	Offset int
	Err    error // wraps ErrUnknownVersion or ErrCorrupt
}

func (e *DecodeError) Error() string {
	return "bucketgrid: decode " + e.Record + " at byte " + strconv.Itoa(e.Offset) + ": " + errText(e.Err)
}

// Unwrap returns the cause.
func (e *DecodeError) Unwrap() error { return e.Err }

// encoder helpers

func putU(dst []byte, v uint64) []byte { return binary.AppendUvarint(dst, v) }
func putI(dst []byte, v int64) []byte  { return binary.AppendVarint(dst, v) }
func putStr(dst []byte, s string) []byte {
	return append(putU(dst, uint64(len(s))), s...)
}
func putBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

const (
	bandHasID      = 1 << 0
	bandHasInitial = 1 << 1
)

func appendConfigBody(dst []byte, c *core.Config) []byte {
	dst = putU(dst, uint64(len(c.Bandwidths)))
	for i := range c.Bandwidths {
		b := &c.Bandwidths[i]
		var flags byte
		if b.ID != "" {
			flags |= bandHasID
		}
		if b.HasInitialTokens {
			flags |= bandHasInitial
		}
		dst = append(dst, byte(b.Style), flags)
		dst = putI(dst, b.Capacity)
		dst = putI(dst, b.RefillTokens)
		dst = putI(dst, int64(b.RefillPeriod))
		if aligned(b.Style) {
			dst = putI(dst, b.FirstRefill)
		}
		if b.HasInitialTokens {
			dst = putI(dst, b.InitialTokens)
		}
		if b.ID != "" {
			dst = putStr(dst, b.ID)
		}
	}
	return dst
}

func appendBucketBody(dst []byte, b *core.State) []byte {
	dst = appendConfigBody(dst, &b.Config)
	dst = putI(dst, b.ConfigVersion)
	for i := range b.Bands {
		s := &b.Bands[i]
		dst = putI(dst, s.Size)
		dst = putI(dst, s.LastRefill)
		dst = putI(dst, s.RoundingError)
	}
	return dst
}

func bucketSizeHint(b *core.State) int { return 4 + len(b.Bands)*40 }

// AppendConfig appends the encoding of c to dst.
func AppendConfig(dst []byte, c *core.Config) []byte {
	return appendConfigBody(append(dst, FormatVersion, tagConfig), c)
}

// AppendState appends the encoding of b (configuration, version and state)
// to dst: the bytes executors store.
func AppendState(dst []byte, b *core.State) []byte {
	return appendBucketBody(append(dst, FormatVersion, tagBucket), b)
}

func appendOp(dst []byte, o *Op) []byte {
	dst = append(dst, byte(o.Kind))
	dst = putI(dst, o.Tokens)
	dst = putI(dst, o.MaxWait)
	dst = append(dst, byte(o.Inheritance))
	dst = putBool(dst, o.Config != nil)
	if o.Config != nil {
		dst = appendConfigBody(dst, o.Config)
	}
	return dst
}

// AppendRequest appends the encoding of r to dst.
func AppendRequest(dst []byte, r *Request) []byte {
	dst = append(dst, FormatVersion, tagRequest, byte(r.Mode))
	dst = putBool(dst, r.Verbose)
	dst = putBool(dst, r.Config != nil)
	if r.Config != nil {
		dst = appendConfigBody(dst, r.Config)
	}
	dst = putI(dst, r.ConfigVersion)
	dst = append(dst, byte(r.Inheritance), byte(r.Expiry.Kind))
	dst = putI(dst, r.Expiry.Fixed)
	dst = putI(dst, r.Expiry.Margin)
	dst = putU(dst, uint64(len(r.Ops)))
	for i := range r.Ops {
		dst = appendOp(dst, &r.Ops[i])
	}
	return dst
}

// AppendResponse appends the encoding of r to dst.
func AppendResponse(dst []byte, r *Response) []byte {
	dst = append(dst, FormatVersion, tagResponse, byte(r.Status))
	dst = putStr(dst, r.Message)
	dst = putU(dst, uint64(len(r.Results)))
	for _, x := range r.Results {
		dst = putBool(dst, x.OK)
		dst = putI(dst, x.Tokens)
		dst = putI(dst, x.Wait)
		dst = putI(dst, x.Reset)
	}
	dst = putI(dst, r.TTL)
	dst = putBool(dst, r.Diagnostics != nil)
	if d := r.Diagnostics; d != nil {
		dst = appendBucketBody(dst, &d.State)
		dst = putU(dst, uint64(len(d.Available)))
		for _, a := range d.Available {
			dst = putI(dst, a)
		}
		dst = putI(dst, int64(d.TimeToFull))
	}
	return dst
}

// decoder reads a record; the first error sticks and later reads return
// zero values, so decode functions check once at the end.
type decoder struct {
	b      []byte
	off    int
	err    error
	record string
}

func (d *decoder) fail(err error, why string) {
	if d.err == nil {
		d.err = &DecodeError{Record: d.record, Offset: d.off, Err: wrap(err, ": "+why)}
	}
}

func (d *decoder) header(tag byte) {
	if len(d.b) < 2 {
		d.fail(ErrCorrupt, "short header")
		return
	}
	if d.b[0] != FormatVersion {
		d.err = &DecodeError{Record: d.record, Err: wrap(ErrUnknownVersion, " "+strconv.Itoa(int(d.b[0]))+" (this build reads "+strconv.Itoa(FormatVersion)+")")}
		return
	}
	if d.b[1] != tag {
		d.off = 1
		d.fail(ErrCorrupt, "tag "+strconv.QuoteRune(rune(d.b[1]))+", want "+strconv.QuoteRune(rune(tag)))
		return
	}
	d.off = 2
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail(ErrCorrupt, "truncated")
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.off--
	d.fail(ErrCorrupt, "bad boolean")
	return false
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail(ErrCorrupt, "bad varint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail(ErrCorrupt, "bad varint")
		return 0
	}
	d.off += n
	return v
}

// count reads a length bounded by max and by the bytes left (each element
// takes at least minSize bytes), so corrupt input cannot force a large
// allocation.
func (d *decoder) count(max, minSize int) int {
	v := d.uvarint()
	if d.err != nil {
		return 0
	}
	if v > uint64(max) || v*uint64(minSize) > uint64(len(d.b)-d.off) {
		d.fail(ErrCorrupt, "count "+strconv.FormatUint(v, 10)+" out of range")
		return 0
	}
	return int(v)
}

func (d *decoder) str(max int) string {
	n := d.count(max, 1)
	if d.err != nil {
		return ""
	}
	s := string(d.b[d.off : d.off+n])
	d.off += n
	return s
}

func (d *decoder) end() {
	if d.err == nil && d.off != len(d.b) {
		d.fail(ErrCorrupt, strconv.Itoa(len(d.b)-d.off)+" trailing bytes")
	}
}

func (d *decoder) config() core.Config {
	var c core.Config
	d.configTo(&c, d.count(core.MaxBandwidths, 5), nil)
	return c
}

// configRef decodes a configuration into a new one, with a single
// bandwidth in the same allocation.
func (d *decoder) configRef() *core.Config {
	n := d.count(core.MaxBandwidths, 5)
	if n != 1 {
		c := new(core.Config)
		d.configTo(c, n, nil)
		return c
	}
	one := new(struct {
		c  core.Config
		bw [1]core.Bandwidth
	})
	d.configTo(&one.c, n, one.bw[:])
	return &one.c
}

// configTo decodes a configuration of n bandwidths (counted already) into
// *c (zero), the bandwidths into bws when it holds n, else into a new
// slice.
func (d *decoder) configTo(c *core.Config, n int, bws []core.Bandwidth) {
	if d.err != nil {
		return
	}
	if len(bws) != n {
		bws = make([]core.Bandwidth, n)
	}
	c.Bandwidths = bws
	for i := range c.Bandwidths {
		b := &c.Bandwidths[i]
		b.Style = core.RefillStyle(d.byte())
		flags := d.byte()
		if flags&^(bandHasID|bandHasInitial) != 0 {
			d.fail(ErrCorrupt, "unknown bandwidth flags")
		}
		b.Capacity = d.varint()
		b.RefillTokens = d.varint()
		b.RefillPeriod = time.Duration(d.varint())
		if aligned(b.Style) {
			b.FirstRefill = d.varint()
		}
		if flags&bandHasInitial != 0 {
			b.HasInitialTokens = true
			b.InitialTokens = d.varint()
		}
		if flags&bandHasID != 0 {
			b.ID = d.str(core.MaxIDLen)
			if b.ID == "" {
				d.fail(ErrCorrupt, "empty id")
			}
		}
	}
	if d.err == nil {
		if err := c.Validate(); err != nil {
			// wrap both: errors.Is finds ErrCorrupt and the validation cause
			d.err = &DecodeError{Record: d.record, Offset: d.off, Err: wrap2(ErrCorrupt, ": ", err)}
		}
	}
}

func (d *decoder) bucket() core.State {
	var b core.State
	var bands []core.BandState
	if n := d.count(core.MaxBandwidths, 5); n == 1 {
		// a single bandwidth and its state in one allocation
		one := new(struct {
			bw [1]core.Bandwidth
			bs [1]core.BandState
		})
		d.configTo(&b.Config, n, one.bw[:])
		bands = one.bs[:]
	} else {
		d.configTo(&b.Config, n, nil)
	}
	b.ConfigVersion = d.varint()
	if d.err != nil {
		return core.State{}
	}
	if b.ConfigVersion < 0 {
		d.fail(ErrCorrupt, "negative configuration version")
	}
	if len(bands) != len(b.Config.Bandwidths) {
		bands = make([]core.BandState, len(b.Config.Bandwidths))
	}
	b.Bands = bands
	for i := range b.Bands {
		s := &b.Bands[i]
		s.Size = d.varint()
		s.LastRefill = d.varint()
		s.RoundingError = d.varint()
		if d.err == nil && (s.RoundingError < 0 || s.RoundingError >= int64(b.Config.Bandwidths[i].RefillPeriod)) {
			d.fail(ErrCorrupt, "rounding error out of range")
		}
	}
	return b
}

// DecodeConfig decodes a record written by AppendConfig. Invalid
// configurations are reported as corrupt.
func DecodeConfig(p []byte) (core.Config, error) {
	d := decoder{b: p, record: "config"}
	d.header(tagConfig)
	c := d.config()
	d.end()
	if d.err != nil {
		return core.Config{}, d.err
	}
	return c, nil
}

// DecodeState decodes a record written by AppendState.
func DecodeState(p []byte) (core.State, error) {
	d := decoder{b: p, record: "bucket"}
	d.header(tagBucket)
	b := d.bucket()
	d.end()
	if d.err != nil {
		return core.State{}, d.err
	}
	return b, nil
}

// DecodeRequest decodes a record written by AppendRequest. It checks the
// form, not the meaning: Process validates the request.
func DecodeRequest(p []byte) (Request, error) {
	d := decoder{b: p, record: "request"}
	d.header(tagRequest)
	var r Request
	r.Mode = Mode(d.byte())
	r.Verbose = d.bool()
	if d.bool() {
		r.Config = d.configRef()
	}
	r.ConfigVersion = d.varint()
	r.Inheritance = core.TokensInheritance(d.byte())
	r.Expiry.Kind = ExpiryKind(d.byte())
	r.Expiry.Fixed = d.varint()
	r.Expiry.Margin = d.varint()
	n := d.count(MaxOps, 5)
	if d.err == nil {
		r.Ops = make([]Op, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		o := &r.Ops[i]
		o.Kind = OpKind(d.byte())
		o.Tokens = d.varint()
		o.MaxWait = d.varint()
		o.Inheritance = core.TokensInheritance(d.byte())
		if d.bool() {
			o.Config = d.configRef()
		}
	}
	d.end()
	if d.err != nil {
		return Request{}, d.err
	}
	return r, nil
}

// DecodeResponse decodes a record written by AppendResponse.
func DecodeResponse(p []byte) (Response, error) {
	d := decoder{b: p, record: "response"}
	d.header(tagResponse)
	var r Response
	r.Status = Status(d.byte())
	if d.err == nil && r.Status >= numStatuses {
		d.fail(ErrCorrupt, "unknown status")
	}
	r.Message = d.str(1 << 16)
	n := d.count(MaxOps, 4)
	if d.err == nil && n > 0 {
		r.Results = make([]Result, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		x := &r.Results[i]
		x.OK = d.bool()
		x.Tokens = d.varint()
		x.Wait = d.varint()
		x.Reset = d.varint()
	}
	r.TTL = d.varint()
	if d.bool() {
		diag := core.Diagnostics{State: d.bucket()}
		m := d.count(core.MaxBandwidths, 1)
		if d.err == nil {
			diag.Available = make([]int64, m)
		}
		for i := 0; i < m && d.err == nil; i++ {
			diag.Available[i] = d.varint()
		}
		diag.TimeToFull = time.Duration(d.varint())
		r.Diagnostics = &diag
	}
	d.end()
	if d.err != nil {
		return Response{}, d.err
	}
	return r, nil
}
