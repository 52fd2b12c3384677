package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/llmtest"
)

// Ready means ready: /readyz holds while a stdio tool server is still
// starting (it takes a second to answer, as npm's servers take most of
// one), and the first message sent the moment it turns 200 is offered
// that server's tools. A server that cannot start holds readiness no
// longer than its first try and is named in /readyz. The gateway's own
// memory tools are offered beside them.
func TestFirstMessageAfterReadyIsOfferedTheTools(t *testing.T) {
	buildBinary(t) // skips in -short
	demo := filepath.Join(t.TempDir(), "chatgate-mcp-demo")
	if out, err := exec.Command("go", "build", "-o", demo, "../chatgate-mcp-demo").CombinedOutput(); err != nil {
		t.Fatalf("go build chatgate-mcp-demo: %v\n%s", err, out)
	}
	llm := &llmtest.Server{}
	llm.Script(func(llmtest.Request) llmtest.Answer { return llmtest.Answer{Text: "pong"} })
	srv := httptest.NewServer(llm)
	defer srv.Close()
	dir, addr := t.TempDir(), freeAddr(t)
	startGateway(t, dir, fmt.Sprintf(`
gateway:
  listen: %s
agent:
  backend: openai
  openai: {base_url: %s/v1, model: m, max_retries: 0}
  tools:
    servers:
      - {name: demo, command: %q, args: ["-start-delay", "1s"], approve: auto}
      - {name: broken, command: %q, timeout: 2s}
session:
  memory: {enabled: true}
log:
  level: error
`, addr, srv.URL, demo, filepath.Join(dir, "no-such-server")))
	waitHealthy(t, "http://"+addr)
	sawStarting := false
	var body string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) { // polling a starting process
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		sawStarting = sawStarting || strings.Contains(body, "tools: starting: demo")
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never turned 200: %q", body)
		}
	}
	cl, _ := dialClient(t, addr, map[string]any{"user": "ann"})
	cl.c.WriteJSON(map[string]any{"type": "message", "id": "m1", "text": "ping"})
	cl.next(t, "reply")
	got := llm.Received()
	if len(got) == 0 || !slices.Contains(got[0].Tools, "demo__notes_add") || !slices.Contains(got[0].Tools, "memory__remember") {
		t.Fatalf("the first message was offered %v; want the demo's tools and the gateway's memory tools", got[0].Tools)
	}
	if !sawStarting {
		t.Fatal("/readyz never said the demo server was starting")
	}
	if !strings.HasPrefix(body, "ready\n") || !strings.Contains(body, "tools: broken down (") {
		t.Fatalf("/readyz once ready = %q; want ready, and the broken server named", body)
	}
}
