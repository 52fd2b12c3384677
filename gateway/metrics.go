package gateway

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is the Prometheus registry behind GET /metrics. It implements
// sessions.Observer.
type Metrics struct {
	reg         *prometheus.Registry
	turns       *prometheus.CounterVec
	turnSeconds *prometheus.HistogramVec
	resets      *prometheus.CounterVec
	passes      prometheus.Counter
	recovered   *prometheus.CounterVec
	turnMsgs    *prometheus.HistogramVec
	turnWait    *prometheus.HistogramVec
	rateLimited *prometheus.CounterVec
	ops         *opsMetrics
	tools       *toolMetrics
	usage       *usageMetrics
	schedules   *scheduleMetrics
	memory      *memoryMetrics
}

// NewMetrics returns a registry with the Go runtime and process collectors
// and chatgate's own metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatgate_turns_total",
			Help: "Turns handled, by channel and outcome (ok, failed, interrupted, duplicate, error).",
		}, []string{"channel", "status"}),
		turnSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "chatgate_turn_duration_seconds",
			Help:    "Time from a message's arrival to its stored reply.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"channel"}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatgate_resets_total",
			Help: "Conversations archived, by channel and reason (manual, idle, daily).",
		}, []string{"channel", "reason"}),
		passes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chatgate_recovery_passes_total",
			Help: "Passes of the rescuer that claims turns nobody runs (interrupted, of a dead replica, undelivered).",
		}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatgate_recovered_turns_total",
			Help: "Turns the rescuer claimed, by result: ran (answered again) or expired (too old; the user was asked to resend).",
		}, []string{"result"}),
		turnMsgs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "chatgate_turn_messages",
			Help:    "User messages answered by one agent call (merged bursts).",
			Buckets: []float64{1, 2, 3, 5, 8, 13, 20, 50},
		}, []string{"channel"}),
		turnWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "chatgate_turn_wait_seconds",
			Help:    "Time from a turn's first stored message to its agent call: debounce and the turn before it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"channel"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatgate_rate_limited_total",
			Help: "Messages and frames refused by a rate limit, by channel and limit (connection, principal, user, global).",
		}, []string{"channel", "limit"}),
	}
	// Both results are exported from the start, so that an alert on
	// failed sees a 0 before the first failure.
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.turns, m.turnSeconds, m.resets, m.passes, m.recovered, m.turnMsgs, m.turnWait, m.rateLimited)
	m.ops = newOpsMetrics(m.reg)
	m.tools = newToolMetrics(m.reg)
	m.usage = newUsageMetrics(m.reg)
	m.schedules = newScheduleMetrics(m.reg)
	m.memory = newMemoryMetrics(m.reg)
	return m
}

// TurnDone implements sessions.Observer.
func (m *Metrics) TurnDone(channel, status string, d time.Duration) {
	m.turns.WithLabelValues(channel, status).Inc()
	if status != "error" && status != "duplicate" {
		m.turnSeconds.WithLabelValues(channel).Observe(d.Seconds())
	}
}

// ResetDone implements sessions.Observer.
func (m *Metrics) ResetDone(channel, reason string, n int) {
	m.resets.WithLabelValues(channel, reason).Add(float64(n))
}

// RecoveryPass implements sessions.Observer.
func (m *Metrics) RecoveryPass(ran, expired int) {
	m.passes.Inc()
	m.recovered.WithLabelValues("ran").Add(float64(ran))
	m.recovered.WithLabelValues("expired").Add(float64(expired))
}

// WatchWebSocket exports the WebSocket channel's open connections.
func (m *Metrics) WatchWebSocket(ws *WebSocket) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chatgate_websocket_connections",
		Help: "Open WebSocket connections.",
	}, func() float64 { return float64(ws.Connections()) }))
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// TurnStarted implements sessions.Observer: how many user messages one agent
// call answers, and how long the first of them waited for it.
func (m *Metrics) TurnStarted(channel string, messages int, wait time.Duration) {
	m.turnMsgs.WithLabelValues(channel).Observe(float64(messages))
	m.turnWait.WithLabelValues(channel).Observe(wait.Seconds())
}
