package gateway

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// scheduleMetrics count the fires of schedules and reminders by how they
// ended, and how late they ran.
type scheduleMetrics struct {
	fires *prometheus.CounterVec
	lag   *prometheus.HistogramVec
}

func newScheduleMetrics(reg *prometheus.Registry) *scheduleMetrics {
	s := &scheduleMetrics{
		fires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatgate_schedule_fires_total",
			Help: "Fires of schedules (kind schedule) and reminders (kind reminder) settled, by outcome: sent, quiet, skipped_late, skipped_budget, failed, dropped.",
		}, []string{"kind", "outcome"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "chatgate_schedule_fire_lag_seconds",
			Help:    "Time from a fire's due time to its claim, by kind (schedule, reminder).",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 15, 60, 300, 3600},
		}, []string{"kind"}),
	}
	reg.MustRegister(s.fires, s.lag)
	// Every outcome is exported from the start: an alert on failed sees
	// a 0 before the first failure.
	for _, kind := range []string{"schedule", "reminder"} {
		for _, outcome := range []string{ledger.FireSent, ledger.FireQuiet, ledger.FireSkippedLate, ledger.FireSkippedBudget, ledger.FireFailed, ledger.FireDropped} {
			s.fires.WithLabelValues(kind, outcome)
		}
	}
	return s
}

// FireClaimed implements sessions.Observer.
func (m *Metrics) FireClaimed(kind string, lag time.Duration) {
	m.schedules.lag.WithLabelValues(kind).Observe(max(lag, 0).Seconds())
}

// FireEnded implements sessions.Observer.
func (m *Metrics) FireEnded(kind, outcome string) {
	m.schedules.fires.WithLabelValues(kind, outcome).Inc()
}
