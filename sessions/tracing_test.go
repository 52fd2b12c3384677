package sessions

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/oteltest"
	"github.com/chatgate/chatgate/sessions/store"
)

// A turn that answers a merged burst links every message it answers and
// names how many; the turn before it, which held the lock, shows in the
// second turn's "lock wait".
func TestTracingMergedBurst(t *testing.T) {
	rec := oteltest.New(t)
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	ag := newHoldFirst()
	m := New(db, ag, Options{Policies: busyPolicy(BusyPolicy{Mode: BusyCollect}), Now: newClock(t0).Now, Logger: quiet, TracerProvider: rec})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	first := submit(t, m, msg("websocket:ann", "first"))
	<-ag.started
	a := submit(t, m, msg("websocket:ann", "a"))
	b := submit(t, m, msg("websocket:ann", "b"))
	close(ag.release)
	wait(t, first)
	if out := wait(t, b); out.Reply.Status != MsgOK {
		t.Fatalf("reply = %+v", out.Reply)
	}
	if out := wait(t, a); !out.Merged {
		t.Fatalf("a was not merged: %+v", out)
	}
	rec.WaitEnded(t, "turn", 2)
	messages := rec.Named("message")
	turns := rec.Named("turn")
	if len(messages) != 3 || len(turns) != 2 {
		t.Fatalf("spans: %v", rec.Names())
	}
	second := turns[1]
	if got := oteltest.Attr(second, "chatgate.messages"); got != "2" {
		t.Errorf("second turn messages = %s, want 2", got)
	}
	if got := oteltest.Attr(second, "chatgate.lead"); got != "3" {
		t.Errorf("second turn lead = %s, want 3 (b)", got)
	}
	linked := map[string]bool{}
	for _, l := range second.Links {
		linked[l.SpanContext.SpanID().String()] = true
	}
	for _, msg := range messages[1:] {
		if !linked[msg.SpanContext.SpanID().String()] {
			t.Errorf("second turn does not link message seq %s", oteltest.Attr(msg, "chatgate.seq"))
		}
	}
	if linked[messages[0].SpanContext.SpanID().String()] || len(second.Links) != 2 {
		t.Errorf("second turn links %d spans, want only a and b", len(second.Links))
	}
}

// Without a tracer provider the manager makes no span and keeps no tracer.
func TestTracingOffByDefault(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	m := newManager(t, db, &recorder{}, newClock(t0), nil)
	if m.tr.tracer != nil {
		t.Fatal("a manager without a TracerProvider has a tracer")
	}
	if out := handle(t, m, msg("websocket:ann", "hi")); out.Trace.IsValid() {
		t.Fatalf("outcome carries a trace without tracing: %v", out.Trace)
	}
}

// BenchmarkTurnTraced is BenchmarkTurn's one-user case with tracing on:
// every span is made and recorded, and dropped (no exporter), which is
// the cost of the instrumentation itself.
func BenchmarkTurnTraced(b *testing.B) {
	db := openStore(b, store.DriverSQLite, filepath.Join(b.TempDir(), "bench.db"))
	tp := sdktrace.NewTracerProvider()
	m := New(db, agent.Echo{}, Options{Logger: quiet, TracerProvider: tp, Policies: map[string]Policy{"websocket": {MaxHistory: 20}}})
	b.Cleanup(func() { m.Shutdown(context.Background()); tp.Shutdown(context.Background()) })
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.Handle(ctx, msg("websocket:ann", "hello"), Hooks{}); err != nil {
			b.Fatal(err)
		}
	}
}
