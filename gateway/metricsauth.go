package gateway

import (
	"crypto/subtle"
	"net/http"
)

// RateLimited returns the hook a channel calls for each refusal of one of
// its rate limits; it counts them in chatgate_rate_limited_total.
func (m *Metrics) RateLimited(channel string) func(limit string) {
	return func(limit string) { m.rateLimited.WithLabelValues(channel, limit).Inc() }
}

// ProtectedHandler serves the registry to a scrape that carries
// "Authorization: Bearer token" (compared in constant time), and answers
// 401 to any other. An empty token serves everyone.
func (m *Metrics) ProtectedHandler(token string) http.Handler {
	h := m.Handler()
	if token == "" {
		return h
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := bearer(r)
		if !ok || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// MetricsOnly is a handler that serves /metrics and nothing else, for a
// listener of its own (metrics.listen).
func MetricsOnly(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	return mux
}
