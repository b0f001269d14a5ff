package service

import (
	"errors"
	"io"
	"net/http"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds a JSON request body.
const maxJSONBody = 1 << 20

// JSONHandler serves envoyproxy/ratelimit's JSON endpoint (POST /json): the
// body is a RateLimitRequest in protobuf's JSON mapping, the answer the
// RateLimitResponse, with status 200 when OK, 429 when over the limit, 400
// for a body or request that is wrong, 413 for a body over the bound (its
// own, or a http.MaxBytesHandler's around it), 503 when no answer could be
// had.
func (s *Service) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			http.Error(w, "request body: "+err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		if err != nil {
			http.Error(w, "request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		var req rlspb.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := s.answer(r.Context(), &req, "json")
		if err != nil {
			code := http.StatusServiceUnavailable
			if errorKind(err) == "invalid_request" {
				code = http.StatusBadRequest
			}
			http.Error(w, err.Error(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, "response: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}
