package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/internal/tooltest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/query"
	"github.com/chatgate/chatgate/tools"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

// mediaTurn is an admin env whose user ann had one turn, in which the
// media tool returned a picture and a PDF.
func mediaTurn(t *testing.T) (*env, sessions.Outcome) {
	t.Helper()
	_, set := tooltest.Server(t, mcpclient.ServerConfig{Approve: tools.ApproveAuto})
	e := newEnvWith(t, tooltest.Asking(tooltest.Call("c1", "t__"+mcptest.Media, map[string]any{})), envOptions{tools: mcpclient.Offer{Set: set}})
	in := sessions.Inbound{Channel: "websocket", SessionKey: sessions.WebSocketKey("ann"), UserID: "ann", ClientMsgID: "m1", Text: "draw it"}
	tk, err := e.mgr.Submit(context.Background(), in, sessions.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := tk.Wait(ctx)
	if err != nil || len(out.Reply.Media) != 2 {
		t.Fatalf("outcome %+v, %v", out, err)
	}
	return e, out
}

// The transcript and the exports list what a tool returned; the admin
// downloads it.
func TestTranscriptListsToolMediaAndAdminDownloadsIt(t *testing.T) {
	e, out := mediaTurn(t)
	code, _, body := e.do("GET", "/admin/api/conversations/"+out.ConversationID, aliceToken)
	var tr query.Export
	if err := json.Unmarshal(body, &tr); code != 200 || err != nil {
		t.Fatalf("transcript: %d %v %s", code, err, body)
	}
	var media []query.ExportMedia
	for _, m := range tr.Messages {
		for _, c := range m.Calls {
			media = append(media, c.Media...)
		}
	}
	if len(media) != 2 || media[0].Kind != "image" || media[0].Mime != "image/png" || media[1].Name != "report.pdf" || media[1].Size != int64(len(mcptest.PDF)) {
		t.Fatalf("transcript media = %+v", media)
	}
	code, h, body := e.do("GET", "/admin/api/media/"+media[1].ID, aliceToken)
	if code != 200 || !bytes.Equal(body, mcptest.PDF) || !strings.HasPrefix(h.Get("Content-Disposition"), "attachment; filename=report.pdf") ||
		h.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("download: %d %v %q", code, h, body)
	}
	if code, _, _ := e.do("GET", "/admin/api/media/"+media[1].ID, ""); code != http.StatusUnauthorized {
		t.Fatalf("download without a token: %d", code)
	}
	if code, _, _ := e.do("GET", "/admin/api/media/nope", aliceToken); code != http.StatusNotFound {
		t.Fatalf("an unknown id: %d", code)
	}
	code, _, body = e.do("GET", "/admin/api/conversations/"+out.ConversationID+"/export?format=text", aliceToken)
	if code != 200 || !strings.Contains(string(body), "media image image/png "+strconv.Itoa(len(mcptest.PNG))+" bytes (id "+media[0].ID+")") ||
		!strings.Contains(string(body), "media file application/pdf "+strconv.Itoa(len(mcptest.PDF))+" bytes report.pdf") {
		t.Fatalf("text export:\n%s", body)
	}
}
