package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatgate/chatgate/agent"
)

// opsMetrics are the metrics an operator reads first when turns are slow
// or fail: time to first token, agent errors by class, replies that could
// not be delivered, and configuration reloads.
type opsMetrics struct {
	ttft       *prometheus.HistogramVec
	agentErrs  *prometheus.CounterVec
	deliveries *prometheus.CounterVec
	reloads    *prometheus.CounterVec
}

// Agent error classes, the values of chatgate_agent_errors_total's class.
const (
	AgentErrTimeout     = "timeout"
	AgentErrRateLimited = "rate_limited"
	AgentErrServer      = "server"
	AgentErrConnection  = "connection"
	AgentErrOther       = "other"
)

func newOpsMetrics(reg *prometheus.Registry) *opsMetrics {
	o := &opsMetrics{
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "chatgate_time_to_first_token_seconds",
			Help:    "Time from an agent call's start to its first streamed text.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}, []string{"channel"}),
		agentErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatgate_agent_errors_total",
			Help: "Failed agent calls, by channel and class (timeout, rate_limited, server, connection, other); stopped and interrupted calls are not counted.",
		}, []string{"channel", "class"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatgate_delivery_failures_total",
			Help: "Replies a channel could not send (they stay stored: resent, or read on resume), by channel.",
		}, []string{"channel"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatgate_config_reloads_total",
			Help: "Configuration reloads (SIGHUP, gateway reload, POST /admin/api/reload), by result: ok, or failed (the running configuration was kept).",
		}, []string{"result"}),
	}
	// Both results show from the start, so a rate() over them works
	// before the first reload.
	o.reloads.WithLabelValues("ok")
	o.reloads.WithLabelValues("failed")
	reg.MustRegister(o.ttft, o.agentErrs, o.deliveries, o.reloads)
	return o
}

// FirstToken implements sessions.AgentObserver.
func (m *Metrics) FirstToken(channel string, d time.Duration) {
	m.ops.ttft.WithLabelValues(channel).Observe(d.Seconds())
}

// AgentFailed implements sessions.AgentObserver.
func (m *Metrics) AgentFailed(channel string, err error) {
	m.ops.agentErrs.WithLabelValues(channel, AgentErrorClass(err)).Inc()
}

// DeliveryFailed counts a reply the channel could not send.
func (m *Metrics) DeliveryFailed(channel string) {
	m.ops.deliveries.WithLabelValues(channel).Inc()
}

// ReloadDone counts a configuration reload: ok when the new configuration
// took effect, false when it was refused and the running one stays.
func (m *Metrics) ReloadDone(ok bool) {
	result := "failed"
	if ok {
		result = "ok"
	}
	m.ops.reloads.WithLabelValues(result).Inc()
}

// AgentErrorClass sorts a failed agent call: timeout (the call's deadline,
// or a network timeout), rate_limited (429), server (5xx), connection (no
// answer: refused, reset, DNS), other (any other answer, a panic, an
// empty reply).
func AgentErrorClass(err error) string {
	var ae *agent.Error
	isAgent := errors.As(err, &ae)
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return AgentErrTimeout
	case isAgent && ae.Status == http.StatusTooManyRequests:
		return AgentErrRateLimited
	case isAgent && ae.Status >= 500:
		return AgentErrServer
	case isAgent && ae.Status == http.StatusRequestTimeout:
		return AgentErrTimeout
	case isAgent && ae.Status != 0:
		return AgentErrOther
	case errors.As(err, &ne) && ne.Timeout():
		return AgentErrTimeout
	case isAgent || ne != nil:
		// No answer from the model server.
		return AgentErrConnection
	}
	return AgentErrOther
}
