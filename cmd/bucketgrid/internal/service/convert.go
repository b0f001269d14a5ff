package service

import (
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
	req.Descriptors = make([]policy.Descriptor, len(ds))
	for i, d := range ds {
		req.Descriptors[i] = toDescriptor(d)
	}
	return req
}

func toDescriptor(d *rlcommon.RateLimitDescriptor) policy.Descriptor {
	var out policy.Descriptor
	es := d.GetEntries()
	es = es[:min(len(es), policy.MaxEntries+1)]
	out.Entries = make([]policy.Entry, len(es))
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

// response builds Envoy's answer: one status per descriptor, shaped as
// envoyproxy/ratelimit shapes them, and the headers.
func (s *Service) response(d *policy.Decision) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_Code(d.Code),
		Statuses:    make([]*rlspb.RateLimitResponse_DescriptorStatus, len(d.Statuses)),
	}
	for i := range d.Statuses {
		st := &d.Statuses[i]
		ds := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_Code(st.Code), LimitRemaining: st.Remaining}
		if r := st.Rule; r != nil {
			ds.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{
				Name:            r.Name,
				RequestsPerUnit: r.RequestsPerUnit,
				Unit:            rlspb.RateLimitResponse_RateLimit_Unit(r.Unit),
			}
			// a quota-mode violation keeps the limit and drops the reset,
			// as envoyproxy/ratelimit answers it
			if !(st.Over && r.QuotaMode && !r.ShadowMode) {
				ds.DurationUntilReset = durationpb.New(st.ResetAfter)
			}
		}
		resp.Statuses[i] = ds
	}
	if s.settings.Headers != 0 {
		resp.ResponseHeadersToAdd = s.headers(d.Headers)
	}
	return resp
}
