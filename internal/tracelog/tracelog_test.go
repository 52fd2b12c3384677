package tracelog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// A line logged with a span in its context names the span's trace; one
// without, and one with only a logger's attributes, do not.
func TestHandlerAddsTraceID(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewTextHandler(&buf, nil))).With("component", "x")
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled,
	})
	log.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "in a turn")
	log.InfoContext(context.Background(), "outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines = %q", lines)
	}
	if !strings.Contains(lines[0], "trace_id="+sc.TraceID().String()) || !strings.Contains(lines[0], "span_id="+sc.SpanID().String()) ||
		!strings.Contains(lines[0], "component=x") {
		t.Errorf("turn line = %q", lines[0])
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("line without a span = %q", lines[1])
	}
	if h := Handler(Handler(slog.DiscardHandler)); h.(handler).next != slog.DiscardHandler {
		t.Error("wrapping twice nests the handler")
	}
}
