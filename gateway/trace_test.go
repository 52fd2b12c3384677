package gateway

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/oteltest"
	"github.com/chatgate/chatgate/internal/tracelog"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// Each WebSocket turn is one trace: a root "turn" with "lock wait",
// "agent call" (time to first token), "store reply" and the channel's
// "delivery" under it, linked to the span "message" whose child "store"
// committed the user message; a log line of the turn carries its trace
// id, and the metrics observe the time to first token.
func TestTracingWebSocketTurn(t *testing.T) {
	rec := oteltest.New(t)
	logs := &oteltest.Logs{}
	log := slog.New(tracelog.Handler(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	metrics := NewMetrics()
	db, err := store.Open(context.Background(), store.DriverSQLite, filepath.Join(t.TempDir(), "g.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mgr := sessions.New(db, agent.Echo{}, sessions.Options{Logger: log, Observer: metrics, TracerProvider: rec})
	e := serveEnv(t, db, mgr, WSOptions{TracerProvider: rec}, false)
	c, _ := e.connect(map[string]any{"user": "ann"})
	for i, text := range []string{"hi", "again"} {
		c.send(map[string]any{"type": "message", "id": "c-" + text, "text": text})
		if r := c.expect("reply"); r["status"] != "ok" {
			t.Fatalf("reply = %v", r)
		}
		rec.WaitEnded(t, "turn", i+1)
		rec.WaitEnded(t, "delivery", i+1)
	}

	turns := rec.Named("turn")
	if len(turns) != 2 || turns[0].SpanContext.TraceID() == turns[1].SpanContext.TraceID() {
		t.Fatalf("want two turns in two traces, got %d: %v", len(turns), rec.Names())
	}
	messages := rec.Named("message")
	if len(messages) != 2 {
		t.Fatalf("want two message spans, got %v", rec.Names())
	}
	for i, turn := range turns {
		checkTurnTrace(t, rec, turn, "websocket", messages[i])
		if lines := logs.WithTrace(turn.SpanContext.TraceID()); len(lines) == 0 {
			t.Errorf("turn %d: no log line carries trace_id %s; logs: %v", i, turn.SpanContext.TraceID(), logs.Lines())
		}
	}
	text := scrape(t, metrics)
	for _, want := range []string{
		`chatgate_time_to_first_token_seconds_count{channel="websocket"} 2`,
		`chatgate_config_reloads_total{result="failed"} 0`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// checkTurnTrace checks the spans of turn's trace.
func checkTurnTrace(t *testing.T, rec *oteltest.Recorder, turn tracetest.SpanStub, channel string, message tracetest.SpanStub) {
	t.Helper()
	if turn.Parent.IsValid() {
		t.Errorf("turn has a parent %v: want a root span", turn.Parent)
	}
	for key, want := range map[string]string{
		"chatgate.channel": channel, "chatgate.messages": "1", "chatgate.attempt": "1", "chatgate.status": "ok",
		"chatgate.lead":         oteltest.Attr(message, "chatgate.seq"),
		"chatgate.conversation": oteltest.Attr(message, "chatgate.conversation"),
	} {
		if got := oteltest.Attr(turn, key); got != want || want == "" {
			t.Errorf("turn %s = %q, want %q", key, got, want)
		}
	}
	if oteltest.Attr(turn, "chatgate.session_key_hash") == "" {
		t.Error("turn lacks the session key hash")
	}
	spans := rec.InTrace(turn.SpanContext.TraceID())
	for _, name := range []string{"lock wait", "agent call", "store reply", "delivery"} {
		s, ok := spans[name]
		switch {
		case !ok:
			t.Errorf("the turn's trace lacks %q: %v", name, rec.Names())
		case s.Parent.SpanID() != turn.SpanContext.SpanID():
			t.Errorf("%q is not a child of the turn", name)
		}
	}
	call := spans["agent call"]
	if !oteltest.HasEvent(call, "first token") || oteltest.Attr(call, "chatgate.ttft_ms") == "" {
		t.Errorf("agent call lacks the time to first token: events %v attributes %v", call.Events, call.Attributes)
	}
	if len(turn.Links) != 1 || turn.Links[0].SpanContext.SpanID() != message.SpanContext.SpanID() {
		t.Errorf("turn links %v, want the message span %v", turn.Links, message.SpanContext.SpanID())
	}
	var store bool
	for _, s := range rec.Named("store") {
		store = store || s.Parent.SpanID() == message.SpanContext.SpanID()
	}
	if !store {
		t.Error("the message span has no child store")
	}
}

// A reply whose user has no open connection left is a delivery failure
// (it is read on resume).
func TestDeliveryFailureWhenNoConnection(t *testing.T) {
	g := newGate()
	failed := make(chan struct{}, 1)
	e := newEnv(t, g, WSOptions{OnDeliveryFailed: func() { failed <- struct{}{} }}, nil, nil)
	c, _ := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "c-1", "text": "slow question"})
	c.expect("ack")
	<-g.started
	c.c.UnderlyingConn().Close()
	waitFor(t, func() bool { return e.ws.Connections() == 0 })
	close(g.release)
	select {
	case <-failed:
	case <-time.After(10 * time.Second): // a hang guard, not a speed check
		t.Fatal("the undelivered reply was not reported")
	}
	// Delivered while connected: not a failure.
	var wrong atomic.Int32
	t.Cleanup(func() { // after the channel's shutdown, which waits for the turns' delivery
		if n := wrong.Load(); n != 0 {
			t.Errorf("%d delivered replies were reported failed", n)
		}
	})
	e2 := newEnv(t, agent.Echo{}, WSOptions{OnDeliveryFailed: func() { wrong.Add(1) }}, nil, nil)
	c2, _ := e2.connect(map[string]any{"user": "bob"})
	c2.send(map[string]any{"type": "message", "id": "c-1", "text": "hi"})
	c2.expect("reply")
}
