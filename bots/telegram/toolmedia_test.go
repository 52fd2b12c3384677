package telegram

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/internal/tooltest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/tools"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

// mediaSetup is a bot whose model calls the MCP test server's media tool
// (a PNG and a PDF) once a turn, run at once.
func mediaSetup(t *testing.T) setup {
	t.Helper()
	_, set := tooltest.Server(t, mcpclient.ServerConfig{Approve: tools.ApproveAuto})
	return setup{agent: tooltest.Asking(toolCall("c1", mcptest.Media, map[string]any{})), opts: Options{Streaming: StreamOff}, policies: queued,
		manager: func(o *sessions.Options) { o.Tools = mcpclient.Offer{Set: set} }}
}

func TestToolMediaGoesAsPhotoAndDocumentOnce(t *testing.T) {
	for _, pg := range []bool{false, true} {
		t.Run(map[bool]string{false: "sqlite", true: "postgres"}[pg], func(t *testing.T) {
			s := mediaSetup(t)
			if pg {
				s.dsn = pgtest.DSN(t)
			}
			api := telegramtest.New(t)
			// The turn's delivery mark is lost, as in a crash between the
			// text's send and its mark; the items' own marks are kept.
			first := s
			first.sess = func(m *sessions.Manager) Sessions {
				sess := SessionsOf(m)
				sess.Deliveries = lostMarks{}
				return sess
			}
			h := start(t, api, t.TempDir(), first)
			msg := api.Push(telegramtest.DM(7, "draw it"))
			sent := api.WaitSent(t, 1)
			if !strings.HasPrefix(sent[0].Text, "answer: a chart and its report") {
				t.Fatalf("reply = %q", sent[0].Text)
			}
			// The files went before the text (the reply is sent last, and
			// its mark after it), each its own send.
			ups := api.Uploads()
			if len(ups) != 2 {
				t.Fatalf("uploads = %+v, want a photo and a document", ups)
			}
			photo, doc := ups[0], ups[1]
			if photo.Method != "sendPhoto" || photo.Kind != "photo" || !bytes.Equal(photo.Data, mcptest.PNG) || photo.ChatID != 7 || photo.ReplyTo != msg {
				t.Fatalf("photo = %+v", photo)
			}
			if doc.Method != "sendDocument" || doc.Kind != "document" || doc.FileName != "report.pdf" || !bytes.Equal(doc.Data, mcptest.PDF) || doc.ReplyTo != msg {
				t.Fatalf("document = %+v", doc)
			}
			var rows []ledger.ToolMedia
			if err := h.db.Gorm().Order("idx").Find(&rows).Error; err != nil {
				t.Fatal(err)
			}
			if len(rows) != 2 || rows[0].DeliveredAt == nil || rows[1].DeliveredAt == nil || rows[0].DeliveryRef == "" {
				t.Fatalf("media rows = %+v", rows)
			}
			// The delivery done again after a restart sends the text again
			// (the window docs/telegram.md states), never the files marked.
			h.shutdown(0)
			h2 := start(t, api, h.dbDir, s)
			waitConnected(t, h2.bot)
			if _, _, err := h2.mgr.Rescuer().Recover(context.Background(), time.Hour); err != nil {
				t.Fatal(err)
			}
			if again := api.WaitSent(t, 2)[1]; again.Text != sent[0].Text {
				t.Fatalf("sent again: %q", again.Text)
			}
			if n := len(api.Uploads()); n != 2 {
				t.Fatalf("uploads after the delivery done again = %d, want still 2", n)
			}
		})
	}
}

// lostMarks records no delivery: the mark a crash loses.
type lostMarks struct{}

func (lostMarks) Delivered(context.Context, sessions.TurnRef, string, error) error { return nil }

// Several pictures go as one album; a document never joins it.
func TestToolMediaAlbumOfPictures(t *testing.T) {
	_, set := tooltest.Server(t, mcpclient.ServerConfig{Approve: tools.ApproveAuto})
	s := setup{agent: tooltest.Asking(toolCall("c1", mcptest.Media, map[string]any{}), toolCall("c2", mcptest.Media, map[string]any{"png_bytes": 100})),
		opts: Options{Streaming: StreamOff}, policies: queued, manager: func(o *sessions.Options) { o.Tools = mcpclient.Offer{Set: set} }}
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), s)
	api.Push(telegramtest.DM(7, "draw two"))
	api.WaitSent(t, 1)
	var methods []string
	for _, u := range api.Uploads() {
		methods = append(methods, u.Method+":"+u.Kind)
	}
	if got := strings.Join(methods, " "); got != "sendMediaGroup:photo sendMediaGroup:photo sendMediaGroup:document sendMediaGroup:document" {
		t.Fatalf("uploads = %s", got)
	}
}
