package gateway

import (
	"strings"
	"testing"
)

func TestMetricsResetNotices(t *testing.T) {
	m := NewMetrics()
	m.WatchResetNotices(func() (int64, int64, int64) { return 7, 3, 1 })
	text := scrape(t, m)
	for _, want := range []string{
		`chatgate_telegram_reset_notices_total{result="sent"} 7`,
		`chatgate_telegram_reset_notices_total{result="dropped"} 3`,
		`chatgate_telegram_reset_notices_total{result="failed"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
