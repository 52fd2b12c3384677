package gateway

import "github.com/prometheus/client_golang/prometheus"

// WatchResetNotices exports the counts of the Telegram bot's reset
// notices sent at once (channels.telegram.notify_resets): sent, dropped
// because the queue was full, failed to send.
func (m *Metrics) WatchResetNotices(stats func() (sent, dropped, failed int64)) {
	for i, result := range []string{"sent", "dropped", "failed"} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "chatgate_telegram_reset_notices_total",
			Help:        "Notices of sweep resets sent to Telegram private chats at once, by result (sent, dropped: the queue was full, failed).",
			ConstLabels: prometheus.Labels{"result": result},
		}, func() float64 {
			s, d, f := stats()
			return float64([]int64{s, d, f}[i])
		}))
	}
}
