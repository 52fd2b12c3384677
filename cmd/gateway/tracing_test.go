package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace endpoint that keeps the names of the
// spans it receives.
type otlpReceiver struct {
	mu    sync.Mutex
	names map[string]int
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req collectortrace.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				o.names[s.Name]++
			}
		}
	}
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Write(b)
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, serve exports a turn's spans over
// OTLP/HTTP; the batch delay is an hour, so they arrive only because the
// graceful stop flushes them.
func TestServeExportsTracesOnStop(t *testing.T) {
	recv := &otlpReceiver{names: map[string]int{}}
	collector := httptest.NewServer(recv)
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000")

	dir := t.TempDir()
	addr := freeAddr(t)
	stop := serveConfig(t, fmt.Sprintf("gateway:\n  listen: %s\nstorage:\n  dsn: %s\nlog:\n  level: error\n", addr, filepath.Join(dir, "g.db")))
	waitHealthy(t, "http://"+addr)
	c, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.WriteJSON(map[string]any{"type": "hello", "user": "ann"})
	c.WriteJSON(map[string]any{"type": "message", "id": "m1", "text": "hi"})
	readReply(t, c)
	stop() // a graceful stop flushes the spans
	recv.mu.Lock()
	defer recv.mu.Unlock()
	for _, name := range []string{"message", "store", "turn", "lock wait", "agent call", "store reply", "delivery"} {
		if recv.names[name] != 1 {
			t.Errorf("collector got %d spans %q, want 1; got %v", recv.names[name], name, recv.names)
		}
	}
}

// Tracing is off without an OTLP endpoint, and a protocol the gateway
// does not speak is a start error that names the variable.
func TestTracingSelection(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1], true
				}
			}
			return "", false
		}
	}
	ctx := context.Background()
	quietLog := slog.New(slog.DiscardHandler)
	if tp, _, err := newTracing(ctx, env(), quietLog); tp != nil || err != nil {
		t.Errorf("no endpoint: provider %v, error %v; want off", tp, err)
	}
	if tp, _, err := newTracing(ctx, env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318", "OTEL_SDK_DISABLED", "true"), quietLog); tp != nil || err != nil {
		t.Errorf("OTEL_SDK_DISABLED: provider %v, error %v; want off", tp, err)
	}
	if tp, _, err := newTracing(ctx, env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces", "OTEL_TRACES_EXPORTER", "none"), quietLog); tp != nil || err != nil {
		t.Errorf("OTEL_TRACES_EXPORTER=none: provider %v, error %v; want off", tp, err)
	}
	_, _, err := newTracing(ctx, env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), quietLog)
	if err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc") {
		t.Errorf("grpc: error %v, want one naming the variable", err)
	}
	tp, stop, err := newTracing(ctx, env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"), quietLog)
	if tp == nil || err != nil {
		t.Fatalf("traces endpoint: provider %v, error %v; want on", tp, err)
	}
	if err := stop(ctx); err != nil {
		t.Errorf("stopping an idle provider: %v", err)
	}
}
