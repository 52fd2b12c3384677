package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// llm is a chat-completions server that answers each call with the next
// of its scripted statuses; 200 streams a reply.
type llm struct {
	mu       sync.Mutex
	statuses []int
}

func (l *llm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	status := l.statuses[0]
	l.statuses = l.statuses[1:]
	l.mu.Unlock()
	if status != http.StatusOK {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"message":"scripted %d","type":"x"}}`, status)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, part := range []string{"Hel", "lo"} {
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":%q},\"finish_reason\":null}]}\n\n", part)
	}
	fmt.Fprint(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// Failed agent calls are counted by class — a 429, a 500, a server that
// does not answer — and a streamed reply's time to first token is
// observed, through the manager and the OpenAI backend.
func TestMetricsAgentErrorsAndFirstToken(t *testing.T) {
	model := httptest.NewServer(&llm{statuses: []int{http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusOK, http.StatusBadRequest}})
	defer model.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // nothing listens there any more: connection refused

	metrics := NewMetrics()
	run := func(baseURL, key string) sessions.Outcome {
		t.Helper()
		db, err := store.Open(context.Background(), store.DriverSQLite, filepath.Join(t.TempDir(), "m.db"), store.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		ag := openai.New(openai.Config{BaseURL: baseURL, APIKey: "k", Model: "m", Stream: true, MaxRetries: 0})
		mgr := sessions.New(db, ag, sessions.Options{Logger: quiet, Observer: metrics})
		defer mgr.Shutdown(context.Background())
		out, err := mgr.Handle(context.Background(), sessions.Inbound{Channel: Channel, SessionKey: key, Text: "hi"}, sessions.Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for i, want := range []string{"failed", "failed", "ok", "failed"} {
		if out := run(model.URL, fmt.Sprint("websocket:u", i)); out.Reply.Status != want {
			t.Fatalf("call %d: reply %+v, want %s", i, out.Reply, want)
		}
	}
	if out := run(gone.URL, "websocket:gone"); out.Reply.Status != "failed" {
		t.Fatalf("unreachable model: reply %+v", out.Reply)
	}

	text := scrape(t, metrics)
	for _, want := range []string{
		`chatgate_agent_errors_total{channel="websocket",class="rate_limited"} 1`,
		`chatgate_agent_errors_total{channel="websocket",class="server"} 1`,
		`chatgate_agent_errors_total{channel="websocket",class="other"} 1`,
		`chatgate_agent_errors_total{channel="websocket",class="connection"} 1`,
		`chatgate_time_to_first_token_seconds_count{channel="websocket"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(text, `class="timeout"`) {
		t.Errorf("a timeout was counted:\n%s", text)
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

// The classes of errors the backend does not produce over HTTP here.
func TestAgentErrorClass(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{context.DeadlineExceeded, AgentErrTimeout},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), AgentErrTimeout},
		{&agent.Error{Err: timeoutErr{}}, AgentErrTimeout},
		{&agent.Error{Status: http.StatusRequestTimeout, Err: errors.New("x")}, AgentErrTimeout},
		{&agent.Error{Status: 429, Err: errors.New("x")}, AgentErrRateLimited},
		{&agent.Error{Status: 503, Err: errors.New("x")}, AgentErrServer},
		{&agent.Error{Status: 401, Err: errors.New("x")}, AgentErrOther},
		{&agent.Error{Err: errors.New("connection refused")}, AgentErrConnection},
		{&net.OpError{Op: "dial", Err: errors.New("refused")}, AgentErrConnection},
		{errors.New("agent echo panicked: boom"), AgentErrOther},
	} {
		if got := AgentErrorClass(c.err); got != c.want {
			t.Errorf("AgentErrorClass(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

// Delivery failures and reloads are counted as reported.
func TestMetricsDeliveryFailuresAndReloads(t *testing.T) {
	m := NewMetrics()
	m.DeliveryFailed("telegram")
	m.DeliveryFailed("telegram")
	m.ReloadDone(true)
	m.ReloadDone(false)
	m.ReloadDone(false)
	text := scrape(t, m)
	for _, want := range []string{
		`chatgate_delivery_failures_total{channel="telegram"} 2`,
		`chatgate_config_reloads_total{result="ok"} 1`,
		`chatgate_config_reloads_total{result="failed"} 2`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
