package main

// Media from tools delivered once over Telegram, with the real binary: a
// model (llmtest) calls the media tool of an MCP test server (a PNG and
// a PDF), the fake Bot API takes the files, and the gateway is killed
// with SIGKILL after they were sent and before the turn's delivery was
// marked — while the reply's text is on its way. The restarted gateway
// delivers the turn again: the text goes again (the one window
// docs/telegram.md states), the files, each marked as it was sent, never.

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions/store"
)

func TestToolMediaSentOnceAcrossSIGKILL(t *testing.T) {
	for _, driver := range []string{store.DriverSQLite, store.DriverPostgres} {
		t.Run(driver, func(t *testing.T) {
			buildBinary(t)
			dsn := filepath.Join(t.TempDir(), "gateway.db")
			if driver == store.DriverPostgres {
				dsn = pgtest.DSN(t)
			}
			llm := &llmtest.Server{}
			llm.Script(llmtest.ToolThenAnswer("t__"+mcptest.Media, `{}`))
			llmSrv := httptest.NewServer(llm)
			t.Cleanup(llmSrv.Close)
			tools := mcptest.New()
			mcpSrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return tools.MCP }, nil))
			t.Cleanup(mcpSrv.Close)
			api := telegramtest.New(t)
			apiSrv := httptest.NewServer(api)
			t.Cleanup(apiSrv.Close)
			config := fmt.Sprintf(`
gateway:
  listen: %s
storage:
  driver: %s
  dsn: %q
agent:
  backend: openai
  openai: {base_url: %s/v1, model: m, max_retries: 0}
  tools:
    servers:
      - name: t
        url: %s
        approve: auto
channels:
  websocket:
    enabled: false
  telegram:
    token: %q
    api_url: %s
    poll_timeout: 1s
    streaming: "off"
log:
  level: info
`, freeAddr(t), driver, dsn, llmSrv.URL, mcpSrv.URL, telegramtest.Token, apiSrv.URL)
			// The reply's text is held at the Bot API: the files before it
			// were sent and marked; the turn's mark comes after it.
			release := api.Hold("sendMessage")
			dir := t.TempDir()
			p := startGateway(t, dir, config)
			msg := api.Push(telegramtest.DM(7, "draw it"))
			if !api.WaitCalls(func(calls []telegramtest.Call) bool {
				for _, c := range calls {
					if c.Method == "sendMessage" {
						return true
					}
				}
				return false
			}, 60*time.Second) {
				t.Fatalf("the reply's text never came:\n%s", p.stderr.String())
			}
			if n := len(api.Uploads()); n != 2 {
				t.Fatalf("files sent before the text: %d, want 2", n)
			}
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
			release()

			p = startGateway(t, dir, config)
			sent := waitSentWithin(t, api, 1, 60*time.Second, p)
			if !strings.HasPrefix(sent[0].Text, llmtest.Done("a chart and its report")) || sent[0].ReplyTo != msg {
				t.Fatalf("reply = %+v", sent[0])
			}
			// The text is sent last: the files would have gone before it.
			ups := api.Uploads()
			methods := map[string]int{}
			for _, u := range ups {
				methods[u.Method]++
			}
			if len(ups) != 2 || methods["sendPhoto"] != 1 || methods["sendDocument"] != 1 {
				t.Fatalf("files sent: %+v, want one sendPhoto and one sendDocument", methods)
			}
			for _, u := range ups {
				want := mcptest.PNG
				if u.Method == "sendDocument" {
					want = mcptest.PDF
				}
				if !bytes.Equal(u.Data, want) || u.ChatID != 7 || u.ReplyTo != msg {
					t.Fatalf("upload %s: %d bytes to %d, reply to %d", u.Method, len(u.Data), u.ChatID, u.ReplyTo)
				}
			}
			if n := mcptest.Of(tools.Calls(), mcptest.Media); n != 1 {
				t.Fatalf("the tool ran %d times, want once", n)
			}
		})
	}
}

// waitSentWithin waits until n messages were sent, failing with p's log.
func waitSentWithin(t *testing.T, api *telegramtest.Server, n int, within time.Duration, p *process) []telegramtest.Sent {
	t.Helper()
	deadline := time.Now().Add(within)
	for len(api.Messages()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d messages sent, want %d:\n%s", len(api.Messages()), n, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // polling for the send, an event
	}
	return api.Messages()
}
