package demo_test

import (
	"bytes"
	"context"
	"image/png"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatgate/chatgate/cmd/chatgate-mcp-demo/demo"
)

func connect(t *testing.T, opts demo.Options) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := demo.New(opts).Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("%s: %+v", tool, res)
	}
	return res.Content[0].(*mcp.TextContent).Text
}

func TestNotesInAFileOutliveTheServer(t *testing.T) {
	opts := demo.Options{Notes: filepath.Join(t.TempDir(), "notes")}
	cs := connect(t, opts)
	if got := call(t, cs, "notes_list", nil); got != "no notes yet" {
		t.Errorf("notes_list: %q", got)
	}
	call(t, cs, "notes_add", map[string]any{"text": "buy milk"})
	if got := call(t, cs, "notes_add", map[string]any{"text": "call\nBob"}); got != "2 notes" {
		t.Errorf("notes_add: %q", got)
	}
	if got := call(t, connect(t, opts), "notes_list", nil); got != "1. buy milk\n2. call Bob" {
		t.Errorf("notes_list of a new server: %q", got)
	}
}

func TestNotesInMemory(t *testing.T) {
	cs := connect(t, demo.Options{})
	call(t, cs, "notes_add", map[string]any{"text": "a"})
	if got := call(t, cs, "notes_list", nil); got != "1. a" {
		t.Errorf("notes_list: %q", got)
	}
}

func TestCounterAndSlowCountInTheFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "counts")
	cs := connect(t, demo.Options{CountFile: file})
	call(t, cs, "counter", nil)
	if got := call(t, cs, "counter", nil); got != "2" {
		t.Errorf("counter: %q", got)
	}
	if got := call(t, cs, "slow", map[string]any{"seconds": 0}); !strings.HasPrefix(got, "done") {
		t.Errorf("slow: %q", got)
	}
	c, err := demo.ReadCounts(file)
	if err != nil || c != (demo.Counts{Counter: 2, SlowStarted: 1}) {
		t.Fatalf("counts %+v, %v", c, err)
	}
}

func TestSlowStopsWhenCancelled(t *testing.T) {
	cs := connect(t, demo.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"seconds": 300}}); err == nil {
		t.Fatal("a cancelled call answered")
	}
}

// With SlowOnce, a second start of slow answers at once, even on a new
// server over the same count file (the first one was killed mid-call).
func TestSlowOnceTakesItsTimeOnTheFirstStartOnly(t *testing.T) {
	file := filepath.Join(t.TempDir(), "counts")
	opts := demo.Options{CountFile: file, SlowOnce: true}
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() {
		_, err := connect(t, opts).CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"seconds": 300}})
		first <- err
	}()
	for {
		c, err := demo.ReadCounts(file)
		if err != nil {
			t.Fatal(err)
		}
		if c.SlowStarted == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond) // polling for the start, an event
	}
	if got := call(t, connect(t, opts), "slow", map[string]any{"seconds": 300}); !strings.HasPrefix(got, "done") {
		t.Errorf("second slow: %q", got)
	}
	select {
	case err := <-first:
		t.Fatalf("the first slow answered (%v) before it was cancelled", err)
	default:
	}
	cancel()
	if err := <-first; err == nil {
		t.Fatal("the cancelled first slow answered")
	}
	if c, err := demo.ReadCounts(file); err != nil || c.SlowStarted != 2 {
		t.Fatalf("counts %+v, %v", c, err)
	}
}

func TestClock(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	cs := connect(t, demo.Options{Now: func() time.Time { return at }})
	if got := call(t, cs, "clock", nil); got != "2030-01-02T03:04:05Z" {
		t.Errorf("clock: %q", got)
	}
	var names []string
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	if got := strings.Join(names, " "); got != "chart clock counter notes_add notes_list slow" {
		t.Errorf("tools %s", got)
	}
}

// chart answers a PNG and an embedded PDF: media from tools to try.
func TestChartAnswersAPictureAndAPDF(t *testing.T) {
	cs := connect(t, demo.Options{})
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "chart", Arguments: map[string]any{"values": []float64{3, 1, 2}}})
	if err != nil || res.IsError || len(res.Content) != 3 {
		t.Fatalf("chart: %+v, %v", res, err)
	}
	img, ok := res.Content[1].(*mcp.ImageContent)
	if !ok || img.MIMEType != "image/png" {
		t.Fatalf("chart's picture: %+v", res.Content[1])
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(img.Data))
	if err != nil || cfg.Width != 24 || cfg.Height != 100 {
		t.Fatalf("chart's PNG: %+v, %v", cfg, err)
	}
	pdf, ok := res.Content[2].(*mcp.EmbeddedResource)
	if !ok || pdf.Resource.MIMEType != "application/pdf" || !bytes.HasPrefix(pdf.Resource.Blob, []byte("%PDF-1.4")) ||
		!bytes.HasSuffix(pdf.Resource.Blob, []byte("%%EOF\n")) || !strings.HasSuffix(pdf.Resource.URI, "/report.pdf") {
		t.Fatalf("chart's report: %+v", res.Content[2])
	}
	if r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "chart", Arguments: map[string]any{"values": []float64{}}}); err == nil && !r.IsError {
		t.Fatal("chart of no values: not an error")
	}
}
