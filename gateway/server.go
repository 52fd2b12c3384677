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
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The server's phases, as /readyz reports them.
const (
	phaseStarting int32 = iota
	phaseServing
	phaseDraining
)

// check is one named readiness check.
type check struct {
	name string
	fn   func() error
}

// Server is the HTTP server. Routes may be added with Handle at any time,
// also while it serves (a channel that starts in the background mounts its
// route when it is ready).
type Server struct {
	mux   *http.ServeMux
	srv   *http.Server
	phase atomic.Int32
	log   *slog.Logger

	mu     sync.Mutex
	checks []check
	infos  []info
}

// info is one named line of /readyz that does not hold readiness.
type info struct {
	name string
	fn   func() string
}

// New returns a Server with /healthz and /readyz. /readyz answers 503
// "starting" until Started is called.
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
		lines := s.NotReady()
		if len(lines) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		} else {
			lines = []string{"ready"}
		}
		w.Write([]byte(strings.Join(append(lines, s.Infos()...), "\n") + "\n"))
	})
	return s
}

// Handle mounts a route.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// AddCheck registers a readiness check: while fn returns an error, /readyz
// answers 503 with the line "name: error". fn runs on every /readyz
// request, so it must be quick and bound its own I/O.
func (s *Server) AddCheck(name string, fn func() error) {
	s.mu.Lock()
	s.checks = append(s.checks, check{name, fn})
	s.mu.Unlock()
}

// AddInfo registers a line of /readyz that does not hold readiness —
// "name: text", after the status, while fn returns a text (what is
// degraded, such as a tool server that cannot start). fn must be quick.
func (s *Server) AddInfo(name string, fn func() string) {
	s.mu.Lock()
	s.infos = append(s.infos, info{name, fn})
	s.mu.Unlock()
}

// Infos lists the info lines that have a text now, "name: text".
func (s *Server) Infos() []string {
	s.mu.Lock()
	infos := append([]info(nil), s.infos...)
	s.mu.Unlock()
	var out []string
	for _, i := range infos {
		if t := i.fn(); t != "" {
			out = append(out, i.name+": "+oneLine(t))
		}
	}
	return out
}

// Started ends the starting phase: from now on /readyz answers from the
// checks.
func (s *Server) Started() { s.phase.CompareAndSwap(phaseStarting, phaseServing) }

// Drain makes /readyz answer 503 "draining" for good: the gateway is
// stopping and takes no new work.
func (s *Server) Drain() { s.phase.Store(phaseDraining) }

// NotReady lists, one line each, what keeps the gateway from being ready:
// "starting" or "draining", then every failing check as "name: error".
// It is empty when the gateway is ready.
func (s *Server) NotReady() []string {
	var out []string
	switch s.phase.Load() {
	case phaseStarting:
		out = append(out, "starting")
	case phaseDraining:
		out = append(out, "draining")
	}
	s.mu.Lock()
	checks := append([]check(nil), s.checks...)
	s.mu.Unlock()
	for _, c := range checks {
		if err := c.fn(); err != nil {
			out = append(out, c.name+": "+oneLine(err.Error()))
		}
	}
	return out
}

// oneLine keeps a check's error on its own line of the /readyz body.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Serve serves on ln until Shutdown; it returns nil after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	err := s.srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits (until ctx ends) for
// in-flight HTTP requests; requests still running then have their
// connections closed. Hijacked connections (WebSockets) are closed by
// their channel, not here.
func (s *Server) Shutdown(ctx context.Context) error {
	s.Drain()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	return err
}
