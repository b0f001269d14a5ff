package service

import (
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bucketgrid/bucketgrid/policy"
)

// toRequest converts Envoy's request. It validates nothing (Plan does, once)
// and copies no more than Plan looks at: one descriptor beyond
// policy.MaxDescriptors, one entry beyond policy.MaxEntries, so an
// oversized request is refused without being copied whole.
func toRequest(in *rlspb.RateLimitRequest) policy.Request {
	req := policy.Request{Domain: in.GetDomain(), HitsAddend: in.GetHitsAddend()}
	ds := in.GetDescriptors()
	ds = ds[:min(len(ds), policy.MaxDescriptors+1)]
	if len(ds) == 1 && len(ds[0].GetEntries()) <= oneEntries {
		// the common request: its descriptor and entries in one allocation
		one := new(struct {
			d [1]policy.Descriptor
			e [oneEntries]policy.Entry
		})
		one.d[0] = toDescriptor(ds[0], one.e[:])
		req.Descriptors = one.d[:]
		return req
	}
	req.Descriptors = make([]policy.Descriptor, len(ds))
	for i, d := range ds {
		req.Descriptors[i] = toDescriptor(d, nil)
	}
	return req
}

// oneEntries is the most entries of a lone descriptor converted in one
// allocation.
const oneEntries = 4

// toDescriptor converts d, its entries into buf when they fit.
func toDescriptor(d *rlcommon.RateLimitDescriptor, buf []policy.Entry) policy.Descriptor {
	var out policy.Descriptor
	es := d.GetEntries()
	es = es[:min(len(es), policy.MaxEntries+1)]
	if len(es) <= len(buf) {
		out.Entries = buf[:len(es):len(es)]
	} else {
		out.Entries = make([]policy.Entry, len(es))
	}
	for j, e := range es {
		out.Entries[j] = policy.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	if l := d.GetLimit(); l != nil {
		// envoy.type.v3.RateLimitUnit numbers its units as the response's
		// enum and policy.Unit do
		out.Limit = &policy.Override{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: policy.Unit(l.GetUnit())}
	}
	if h := d.GetHitsAddend(); h != nil {
		v := h.GetValue()
		out.HitsAddend = &v
	}
	return out
}

// statusMessages are the messages of one descriptor's status, allocated
// together: a response is marshalled and dropped as a whole.
type statusMessages struct {
	status rlspb.RateLimitResponse_DescriptorStatus
	limit  rlspb.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// response builds Envoy's answer: one status per descriptor, shaped as
// envoyproxy/ratelimit shapes them, and the headers.
func (s *Service) response(d *policy.Decision) *rlspb.RateLimitResponse {
	var resp *rlspb.RateLimitResponse
	var msgs []statusMessages
	if len(d.Statuses) == 1 {
		// the common answer, in one allocation
		one := new(struct {
			resp     rlspb.RateLimitResponse
			statuses [1]*rlspb.RateLimitResponse_DescriptorStatus
			msgs     [1]statusMessages
		})
		resp, msgs = &one.resp, one.msgs[:]
		resp.Statuses = one.statuses[:]
	} else {
		resp = &rlspb.RateLimitResponse{Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(d.Statuses))}
		msgs = make([]statusMessages, len(d.Statuses)) // one allocation for all
	}
	resp.OverallCode = rlspb.RateLimitResponse_Code(d.Code)
	for i := range d.Statuses {
		st, m := &d.Statuses[i], &msgs[i]
		ds := &m.status
		ds.Code, ds.LimitRemaining = rlspb.RateLimitResponse_Code(st.Code), st.Remaining
		if r := st.Rule; r != nil {
			ds.CurrentLimit = &m.limit
			ds.CurrentLimit.Name = r.Name
			ds.CurrentLimit.RequestsPerUnit = r.RequestsPerUnit
			ds.CurrentLimit.Unit = rlspb.RateLimitResponse_RateLimit_Unit(r.Unit)
			// a quota-mode violation keeps the limit and drops the reset,
			// as envoyproxy/ratelimit answers it
			if !(st.Over && r.QuotaMode && !r.ShadowMode) {
				// durationpb.New's fields, in place
				secs := st.ResetAfter / time.Second
				m.reset.Seconds, m.reset.Nanos = int64(secs), int32(st.ResetAfter-secs*time.Second)
				ds.DurationUntilReset = &m.reset
			}
		}
		resp.Statuses[i] = ds
	}
	if s.settings.Headers != 0 {
		resp.ResponseHeadersToAdd = s.headers(d.Headers)
	}
	return resp
}
