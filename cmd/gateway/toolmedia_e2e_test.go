package main

// Media from tools delivered once over Telegram, with the real binary: a
// model (llmtest) calls the media tool of an MCP test server (a PNG and
// a PDF), the fake Bot API takes the files, and the gateway is killed
// with SIGKILL at one of two points, then started again to deliver the
// turn again:
//   - after the files were sent and marked, while the reply's text is on
//     its way (before the turn's mark): the text goes again (the one
//     window docs/telegram.md states), the files never;
//   - after Telegram took the photo and before its answer came (before
//     the photo's mark): the photo is not sent again — its claim says it
//     may have arrived, and the text says so — the document goes once.

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
	for _, c := range []struct{ driver, kill string }{
		{store.DriverSQLite, "turn-mark"}, {store.DriverPostgres, "turn-mark"},
		{store.DriverSQLite, "photo-mark"}, {store.DriverPostgres, "photo-mark"},
	} {
		driver := c.driver
		t.Run(driver+"/"+c.kill, func(t *testing.T) {
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
			// turn-mark: the reply's text is held at the Bot API; the
			// files before it were sent and marked, and the turn's mark
			// comes after it. photo-mark: the photo is taken and its
			// answer held; its mark would come after the answer.
			held, files, note := "sendMessage", 2, ""
			release := api.Hold(held)
			if c.kill == "photo-mark" {
				release()
				held, files, note = "sendPhoto", 1, "(a picture may not have arrived: sending it was cut off.)"
				release = api.LoseAnswer(held)
			}
			dir := t.TempDir()
			p := startGateway(t, dir, config)
			msg := api.Push(telegramtest.DM(7, "draw it"))
			if !api.WaitCalls(func(calls []telegramtest.Call) bool {
				for _, c := range calls {
					if c.Method == held {
						return true
					}
				}
				return false
			}, 60*time.Second) {
				t.Fatalf("%s never came:\n%s", held, p.stderr.String())
			}
			if n := len(api.WaitUploads(t, files)); n != files {
				t.Fatalf("files sent before the kill: %d, want %d", n, files)
			}
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
			release()

			p = startGateway(t, dir, config)
			sent := waitSentWithin(t, api, 1, 60*time.Second, p)
			if !strings.HasPrefix(sent[0].Text, llmtest.Done("a chart and its report")) || sent[0].ReplyTo != msg ||
				!strings.HasSuffix(sent[0].Text, note) {
				t.Fatalf("reply = %+v, want it to end with %q", sent[0], note)
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
	if !api.WaitSentWithin(n, within) {
		t.Fatalf("%d messages sent, want %d:\n%s", len(api.Messages()), n, p.stderr.String())
	}
	return api.Messages()
}
