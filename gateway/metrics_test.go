package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions"
)

// scrape returns m's /metrics text.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics = %d", rec.Code)
	}
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}

// TurnStarted feeds two histograms per channel: messages per agent call and
// the wait before it.
func TestMetricsTurnStarted(t *testing.T) {
	m := NewMetrics()
	m.TurnStarted("telegram", 1, 0)
	m.TurnStarted("telegram", 3, 1500*time.Millisecond)
	m.TurnStarted("telegram", 60, 2*time.Second)
	m.TurnStarted("websocket", 2, 3*time.Millisecond)

	text := scrape(t, m)
	for _, want := range []string{
		"# HELP chatgate_turn_messages User messages answered by one agent call (merged bursts).",
		"# TYPE chatgate_turn_messages histogram",
		`chatgate_turn_messages_bucket{channel="telegram",le="1"} 1`,
		`chatgate_turn_messages_bucket{channel="telegram",le="2"} 1`,
		`chatgate_turn_messages_bucket{channel="telegram",le="3"} 2`,
		`chatgate_turn_messages_bucket{channel="telegram",le="50"} 2`,
		`chatgate_turn_messages_bucket{channel="telegram",le="+Inf"} 3`,
		`chatgate_turn_messages_sum{channel="telegram"} 64`,
		`chatgate_turn_messages_count{channel="telegram"} 3`,
		`chatgate_turn_messages_bucket{channel="websocket",le="1"} 0`,
		`chatgate_turn_messages_bucket{channel="websocket",le="2"} 1`,
		"# HELP chatgate_turn_wait_seconds Time from a turn's first stored message to its agent call: debounce and the turn before it.",
		"# TYPE chatgate_turn_wait_seconds histogram",
		`chatgate_turn_wait_seconds_bucket{channel="telegram",le="0.001"} 1`,
		`chatgate_turn_wait_seconds_bucket{channel="telegram",le="1.024"} 1`,
		`chatgate_turn_wait_seconds_bucket{channel="telegram",le="4.096"} 3`,
		`chatgate_turn_wait_seconds_sum{channel="telegram"} 3.5`,
		`chatgate_turn_wait_seconds_count{channel="telegram"} 3`,
		`chatgate_turn_wait_seconds_bucket{channel="websocket",le="0.001"} 0`,
		`chatgate_turn_wait_seconds_bucket{channel="websocket",le="0.004"} 1`,
		`chatgate_turn_wait_seconds_count{channel="websocket"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
}

// Tool calls are counted by server, tool and outcome, and timed; through
// the admin's turn counter too (which wraps the metrics in serve).
func TestMetricsToolCalled(t *testing.T) {
	m := NewMetrics()
	var o sessions.ToolObserver = m
	o.ToolCalled("notes", "notes_add", "done", 20*time.Millisecond)
	o.ToolCalled("notes", "notes_add", "failed", 2*time.Second)
	o.ToolCalled("notes", "notes_list", "done", time.Millisecond)
	text := scrape(t, m)
	for _, want := range []string{
		`chatgate_tool_calls_total{outcome="done",server="notes",tool="notes_add"} 1`,
		`chatgate_tool_calls_total{outcome="failed",server="notes",tool="notes_add"} 1`,
		`chatgate_tool_calls_total{outcome="done",server="notes",tool="notes_list"} 1`,
		`chatgate_tool_call_duration_seconds_count{server="notes",tool="notes_add"} 2`,
		`chatgate_tool_call_duration_seconds_bucket{server="notes",tool="notes_list",le="0.005"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
