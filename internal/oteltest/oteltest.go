// Package oteltest records the spans a test makes: an SDK tracer provider
// exporting to an in-memory exporter, synchronously, and a way to wait
// until spans have ended without sleeping.
package oteltest

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Recorder is a tracer provider whose ended spans a test reads.
type Recorder struct {
	*sdktrace.TracerProvider
	Exporter *tracetest.InMemoryExporter

	mu      sync.Mutex
	ended   map[string]int
	changed chan struct{}
}

// New returns a Recorder, shut down when the test ends.
func New(t testing.TB) *Recorder {
	r := &Recorder{Exporter: tracetest.NewInMemoryExporter(), ended: map[string]int{}, changed: make(chan struct{})}
	// The syncer exports a span before the counter below sees it end.
	r.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.Exporter), sdktrace.WithSpanProcessor(counter{r}))
	t.Cleanup(func() { r.Shutdown(context.Background()) })
	return r
}

type counter struct{ r *Recorder }

func (c counter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c counter) OnEnd(s sdktrace.ReadOnlySpan) {
	c.r.mu.Lock()
	c.r.ended[s.Name()]++
	close(c.r.changed)
	c.r.changed = make(chan struct{})
	c.r.mu.Unlock()
}
func (c counter) Shutdown(context.Context) error   { return nil }
func (c counter) ForceFlush(context.Context) error { return nil }

// WaitEnded waits until n spans named name have ended (10 s at most).
func (r *Recorder) WaitEnded(t testing.TB, name string, n int) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		got, ch := r.ended[name], r.changed
		r.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("%d spans %q ended, want %d; spans: %v", got, name, n, r.Names())
		}
	}
}

// Spans returns the ended spans.
func (r *Recorder) Spans() tracetest.SpanStubs { return r.Exporter.GetSpans() }

// Names returns the ended spans' names, in the order they ended.
func (r *Recorder) Names() []string {
	var names []string
	for _, s := range r.Spans() {
		names = append(names, s.Name)
	}
	return names
}

// Named returns the ended spans named name.
func (r *Recorder) Named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range r.Spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// InTrace returns the ended spans of trace id, by name (the last of a
// name wins).
func (r *Recorder) InTrace(id trace.TraceID) map[string]tracetest.SpanStub {
	out := map[string]tracetest.SpanStub{}
	for _, s := range r.Spans() {
		if s.SpanContext.TraceID() == id {
			out[s.Name] = s
		}
	}
	return out
}

// Attr returns a span's attribute key as a string ("" when absent).
func Attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// HasEvent reports whether a span has an event named name.
func HasEvent(s tracetest.SpanStub, name string) bool {
	for _, e := range s.Events {
		if e.Name == name {
			return true
		}
	}
	return false
}

// Logs is a JSON slog destination a test reads back.
type Logs struct {
	mu  sync.Mutex
	buf []byte
}

// Write implements io.Writer.
func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	return len(p), nil
}

// Lines returns the JSON log lines written so far, decoded.
func (l *Logs) Lines() []map[string]any {
	l.mu.Lock()
	data := string(l.buf)
	l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(data, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// WithTrace returns the log lines whose trace_id is id.
func (l *Logs) WithTrace(id trace.TraceID) []map[string]any {
	var out []map[string]any
	for _, m := range l.Lines() {
		if m["trace_id"] == id.String() {
			out = append(out, m)
		}
	}
	return out
}
