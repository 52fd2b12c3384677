// Package gateway is chatgate's HTTP server: health and readiness, and the
// routes channels mount on it (the WebSocket channel, the web chat page, the
// Telegram webhook).
package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Server is the HTTP server. Routes are added with Handle before Serve.
type Server struct {
	mux   *http.ServeMux
	srv   *http.Server
	ready atomic.Bool
	log   *slog.Logger
}

// New returns a Server with /healthz and /readyz.
func New(log *slog.Logger) *Server {
	s := &Server{mux: http.NewServeMux(), log: log}
	s.srv = &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !s.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("draining\n"))
			return
		}
		w.Write([]byte("ready\n"))
	})
	return s
}

// Handle mounts a route.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// SetReady sets what /readyz answers: 200 when ready, 503 while starting or
// draining.
func (s *Server) SetReady(ready bool) { s.ready.Store(ready) }

// Ready reports the readiness.
func (s *Server) Ready() bool { return s.ready.Load() }

// Serve serves on ln until Shutdown; it returns nil after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	err := s.srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits (until ctx ends) for
// in-flight HTTP requests. Hijacked connections (WebSockets) are closed by
// their channel, not here.
func (s *Server) Shutdown(ctx context.Context) error {
	s.ready.Store(false)
	return s.srv.Shutdown(ctx)
}
