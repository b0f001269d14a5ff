package service

import (
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bucketgrid/bucketgrid/rlsconfig"
)

// toRequest converts Envoy's request, refusing one whose descriptor or
// entry counts exceed rlsconfig's bounds before copying anything.
func toRequest(in *rlspb.RateLimitRequest) (rlsconfig.Request, error) {
	req := rlsconfig.Request{Domain: in.GetDomain(), HitsAddend: in.GetHitsAddend()}
	ds := in.GetDescriptors()
	if len(ds) > rlsconfig.MaxDescriptors {
		return req, &requestError{rlsconfig.ErrTooManyDescriptors}
	}
	req.Descriptors = make([]rlsconfig.Descriptor, len(ds))
	for i, d := range ds {
		req.Descriptors[i] = toDescriptor(d)
		if len(d.GetEntries()) > rlsconfig.MaxEntries {
			return req, &requestError{rlsconfig.ErrTooManyEntries}
		}
	}
	return req, nil
}

func toDescriptor(d *rlcommon.RateLimitDescriptor) rlsconfig.Descriptor {
	var out rlsconfig.Descriptor
	es := d.GetEntries()
	if len(es) <= rlsconfig.MaxEntries {
		out.Entries = make([]rlsconfig.Entry, len(es))
		for j, e := range es {
			out.Entries[j] = rlsconfig.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
	}
	if l := d.GetLimit(); l != nil {
		// envoy.type.v3.RateLimitUnit numbers its units as the response's
		// enum and rlsconfig.Unit do
		out.Limit = &rlsconfig.Override{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: rlsconfig.Unit(l.GetUnit())}
	}
	if h := d.GetHitsAddend(); h != nil {
		v := h.GetValue()
		out.HitsAddend = &v
	}
	return out
}

// response builds Envoy's answer: one status per descriptor, shaped as
// envoyproxy/ratelimit shapes them, and the headers.
func (s *Service) response(items []rlsconfig.Item, statuses []rlsconfig.Status, code rlsconfig.Code) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_Code(code),
		Statuses:    make([]*rlspb.RateLimitResponse_DescriptorStatus, len(items)),
	}
	for i := range items {
		it, st := &items[i], &statuses[i]
		ds := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_Code(st.Code), LimitRemaining: st.Remaining}
		if it.Kind == rlsconfig.Limited {
			ds.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{
				Name:            it.Rule.Name,
				RequestsPerUnit: it.Rule.RequestsPerUnit,
				Unit:            rlspb.RateLimitResponse_RateLimit_Unit(it.Rule.Unit),
			}
			// a quota-mode violation keeps the limit and drops the reset,
			// as envoyproxy/ratelimit answers it
			if !(st.Over && it.Rule.QuotaMode && !it.Rule.ShadowMode) {
				ds.DurationUntilReset = durationpb.New(st.ResetAfter)
			}
		}
		resp.Statuses[i] = ds
	}
	if s.opts.Headers != 0 {
		resp.ResponseHeadersToAdd = headers(items, statuses, s.opts.Headers)
	}
	return resp
}
