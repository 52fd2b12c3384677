package gateway

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// toolMetrics count the tool calls turns run.
type toolMetrics struct {
	calls   *prometheus.CounterVec
	seconds *prometheus.HistogramVec
}

func newToolMetrics(reg *prometheus.Registry) *toolMetrics {
	t := &toolMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatgate_tool_calls_total",
			Help: "Tool calls run, by server, tool and outcome (done, failed, cancelled, interrupted).",
		}, []string{"server", "tool", "outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "chatgate_tool_call_duration_seconds",
			Help:    "Time a tool call ran, from its start to its result, by server and tool.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 9),
		}, []string{"server", "tool"}),
	}
	reg.MustRegister(t.calls, t.seconds)
	return t
}

// ToolCalled implements sessions.ToolObserver.
func (m *Metrics) ToolCalled(server, tool, outcome string, d time.Duration) {
	m.tools.calls.WithLabelValues(server, tool, outcome).Inc()
	m.tools.seconds.WithLabelValues(server, tool).Observe(d.Seconds())
}
