package main

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/gateway"
)

// serveMetrics mounts /metrics, behind metrics.token when set: on the main
// server, or alone on metrics.listen, whose server it returns (nil when
// there is none) for the shutdown.
func serveMetrics(cfg *config.Config, metrics *gateway.Metrics, srv *gateway.Server, log *slog.Logger) (*http.Server, error) {
	h := metrics.ProtectedHandler(cfg.Metrics.Token)
	if cfg.Metrics.Listen == "" {
		srv.Handle("GET /metrics", h)
		return nil, nil
	}
	ln, err := net.Listen("tcp", cfg.Metrics.Listen)
	if err != nil {
		return nil, err
	}
	ms := &http.Server{
		Handler:           gateway.MetricsOnly(h),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go ms.Serve(ln)
	log.Info("metrics listener", slog.String("url", "http://"+ln.Addr().String()+"/metrics"))
	return ms, nil
}
