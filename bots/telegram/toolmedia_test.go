package telegram

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/bots/telegram/tgformat"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/internal/tooltest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
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
	onBothStores(t, func(t *testing.T, s setup) {
		api := telegramtest.New(t)
		// The turn's delivery mark is lost, as in a crash between the
		// text's send and its mark; the items' own marks are kept.
		first := losingTurnMarks(s)
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
		restartAndRecover(t, api, h, s)
		if again := api.WaitSent(t, 2)[1]; again.Text != sent[0].Text {
			t.Fatalf("sent again: %q", again.Text)
		}
		if n := len(api.Uploads()); n != 2 {
			t.Fatalf("uploads after the delivery done again = %d, want still 2", n)
		}
	})
}

// losingTurnMarks is s whose turns' delivery marks are lost, as in a
// crash between a reply's send and its mark (the files' own marks are
// kept).
func losingTurnMarks(s setup) setup {
	s.sess = func(m *sessions.Manager) Sessions {
		sess := SessionsOf(m)
		sess.Deliveries = lostMarks{}
		return sess
	}
	return s
}

// restartAndRecover starts the bot of s on h's database, h having
// stopped, and runs its recovery pass: the delivery done again.
func restartAndRecover(t *testing.T, api *telegramtest.Server, h *harness, s setup) *harness {
	t.Helper()
	h2 := start(t, api, h.dbDir, s)
	waitConnected(t, h2.bot)
	if _, _, err := h2.mgr.Rescuer().Recover(context.Background(), time.Hour); err != nil {
		t.Fatal(err)
	}
	return h2
}

// onBothStores runs fn with mediaSetup's bot on SQLite, then on
// PostgreSQL.
func onBothStores(t *testing.T, fn func(t *testing.T, s setup)) {
	for _, pg := range []bool{false, true} {
		t.Run(map[bool]string{false: "sqlite", true: "postgres"}[pg], func(t *testing.T) {
			s := mediaSetup(t)
			if pg {
				s.dsn = pgtest.DSN(t)
			}
			fn(t, s)
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

// mediaRows returns the stored media, in call and result order.
func mediaRows(t *testing.T, h *harness) []ledger.ToolMedia {
	t.Helper()
	var rows []ledger.ToolMedia
	if err := h.db.Gorm().Order("tool_call_id, idx").Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	return rows
}

// waitPhotoCalls waits until n sendPhoto requests came.
func waitPhotoCalls(t *testing.T, api *telegramtest.Server, n int) {
	t.Helper()
	if !api.WaitCalls(func(calls []telegramtest.Call) bool {
		k := 0
		for _, c := range calls {
			if c.Method == "sendPhoto" {
				k++
			}
		}
		return k >= n
	}, 30*time.Second) {
		t.Fatalf("%d sendPhoto requests never came", n)
	}
}

// uploadCount counts the files sent by method.
func uploadCount(api *telegramtest.Server) map[string]int {
	n := map[string]int{}
	for _, u := range api.Uploads() {
		n[u.Method]++
	}
	return n
}

// TestToolMediaWhoseAnswerIsLostIsNotSentAgain: Telegram takes the photo
// and the connection breaks before its answer. The photo may have
// reached the user, so it is not sent again — not in this delivery, not
// in one done again after a restart — and the reply's text says so;
// the document goes as usual.
func TestToolMediaWhoseAnswerIsLostIsNotSentAgain(t *testing.T) {
	onBothStores(t, func(t *testing.T, s setup) {
		api := telegramtest.New(t)
		api.CutAnswers("sendPhoto", 1)
		first := losingTurnMarks(s)
		h := start(t, api, t.TempDir(), first)
		api.Push(telegramtest.DM(7, "draw it"))
		sent := api.WaitSent(t, 1)
		const note = "(a picture may not have arrived: sending it was cut off.)"
		if !strings.HasPrefix(sent[0].Text, "answer: a chart and its report") || !strings.HasSuffix(sent[0].Text, note) {
			t.Fatalf("reply = %q, want the answer and %q", sent[0].Text, note)
		}
		if n := uploadCount(api); n["sendPhoto"] != 1 || n["sendDocument"] != 1 || len(n) != 2 {
			t.Fatalf("files sent: %v, want one sendPhoto and one sendDocument", n)
		}
		rows := mediaRows(t, h)
		if len(rows) != 2 || !strings.HasPrefix(rows[0].DeliveryRef, ledger.MediaUnsureRef) || rows[1].DeliveredAt == nil ||
			strings.Contains(rows[1].DeliveryRef, ":") {
			t.Fatalf("media rows: %+v", rows)
		}
		// The turn's mark was lost: the delivery done again sends the
		// text, with the note, and no file.
		h.shutdown(0)
		restartAndRecover(t, api, h, s)
		if again := api.WaitSent(t, 2)[1]; again.Text != sent[0].Text {
			t.Fatalf("sent again: %q, want %q", again.Text, sent[0].Text)
		}
		if n := uploadCount(api); n["sendPhoto"] != 1 || n["sendDocument"] != 1 {
			t.Fatalf("files sent after the delivery done again: %v", n)
		}
	})
}

// TestToolMediaClaimLeftByACrashIsNotSentAgain: a process that died
// between a file's request and its mark leaves the file's claim; the
// delivery done again does not send it, marks it unsure and says so,
// and sends the rest.
func TestToolMediaClaimLeftByACrashIsNotSentAgain(t *testing.T) {
	s := mediaSetup(t)
	api := telegramtest.New(t)
	// The first delivery cannot reach the Bot API at all: the turn is
	// answered, its files claimed by nobody.
	first := losingTurnMarks(s)
	api.FailBare("sendPhoto", http.StatusBadGateway, maxUploadAttempt)
	h := start(t, api, t.TempDir(), first)
	api.Push(telegramtest.DM(7, "draw it"))
	waitPhotoCalls(t, api, maxUploadAttempt)
	h.shutdown(5 * time.Second)
	db, err := store.Open(context.Background(), store.DriverSQLite, filepath.Join(h.dbDir, "g.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var rows []ledger.ToolMedia
	if err := db.Gorm().Order("tool_call_id, idx").Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].SendingAt != nil || rows[0].SendAttempts != 1 || rows[0].DeliveredAt != nil {
		t.Fatalf("a photo Telegram never took: %+v, want its claim released", rows)
	}
	// The state a crash after the photo's request leaves: its claim.
	if err := db.Gorm().Exec("UPDATE tool_media SET sending_at = ? WHERE id = ?", time.Now(), rows[0].ID).Error; err != nil {
		t.Fatal(err)
	}
	db.Close()
	restartAndRecover(t, api, h, s)
	sent := api.WaitSent(t, 1)
	if !strings.HasSuffix(sent[0].Text, "(a picture may not have arrived: sending it was cut off.)") {
		t.Fatalf("reply = %q", sent[0].Text)
	}
	if n := uploadCount(api); n["sendPhoto"] != 0 || n["sendDocument"] != 1 {
		t.Fatalf("files sent: %v, want the document only", n)
	}
}

// TestToolMediaGivenUpAfterItsDeliveries: a photo the Bot API never
// takes (a 502, each request) does not hold the reply forever: after
// maxMediaClaims deliveries it is given up, and the text goes with the
// rest and a line that says so.
func TestToolMediaGivenUpAfterItsDeliveries(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := mediaSetup(t)
	s.now = clock.Now
	api := telegramtest.New(t)
	api.FailBare("sendPhoto", http.StatusBadGateway, 1000)
	deliveries := make(chan string, 1)
	s.sess = func(m *sessions.Manager) Sessions {
		sess := SessionsOf(m)
		sess.Deliveries = deliveryNotes{Manager: m, ch: deliveries}
		return sess
	}
	h := start(t, api, t.TempDir(), s)
	api.Push(telegramtest.DM(7, "draw it"))
	select {
	case <-deliveries: // the live delivery failed, and said so
	case <-time.After(30 * time.Second):
		t.Fatal("the live delivery never ended")
	}
	for i := 1; i <= maxMediaClaims; i++ {
		if n := len(api.Calls("sendMessage")); n != 0 {
			t.Fatalf("the text went after %d deliveries, before the photo was given up: %+v", i, api.Calls("sendMessage"))
		}
		clock.Advance(2 * time.Minute)
		if _, _, err := h.mgr.Rescuer().Recover(context.Background(), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	sent := api.WaitSent(t, 1)
	if !strings.HasPrefix(sent[0].Text, "answer: a chart and its report") || !strings.HasSuffix(sent[0].Text, "(a picture could not be sent.)") {
		t.Fatalf("reply = %q", sent[0].Text)
	}
	if n := len(api.Calls("sendPhoto")); n != maxMediaClaims*maxUploadAttempt {
		t.Fatalf("photo requests = %d, want %d", n, maxMediaClaims*maxUploadAttempt)
	}
	if n := uploadCount(api); n["sendDocument"] != 1 || n["sendPhoto"] != 0 {
		t.Fatalf("files sent: %v", n)
	}
	if rows := mediaRows(t, h); !strings.HasPrefix(rows[0].DeliveryRef, ledger.MediaRefusedRef) {
		t.Fatalf("the photo given up is marked %q", rows[0].DeliveryRef)
	}
}

// TestToolMediaAlbumRefusedGoesItemByItem: Telegram refuses an album
// for one picture it cannot read; the others still arrive, one by one,
// and the text names the one that could not be sent.
func TestToolMediaAlbumRefusedGoesItemByItem(t *testing.T) {
	_, set := tooltest.Server(t, mcpclient.ServerConfig{Approve: tools.ApproveAuto})
	s := setup{agent: tooltest.Asking(toolCall("c1", mcptest.Media, map[string]any{}), toolCall("c2", mcptest.Media, map[string]any{"broken": true})),
		opts: Options{Streaming: StreamOff}, policies: queued, manager: func(o *sessions.Options) { o.Tools = mcpclient.Offer{Set: set} }}
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), s)
	api.Push(telegramtest.DM(7, "draw two"))
	sent := api.WaitSent(t, 1)
	if !strings.HasSuffix(sent[0].Text, "(a picture could not be sent.)") {
		t.Fatalf("reply = %q", sent[0].Text)
	}
	var methods []string
	for _, u := range api.Uploads() {
		methods = append(methods, u.Method+":"+u.Kind)
	}
	if got := strings.Join(methods, " "); got != "sendPhoto:photo sendMediaGroup:document sendMediaGroup:document" {
		t.Fatalf("uploads = %s", got)
	}
	refused := 0
	for _, r := range mediaRows(t, h) {
		if strings.HasPrefix(r.DeliveryRef, ledger.MediaRefusedRef) {
			refused++
		}
	}
	if refused != 1 {
		t.Fatalf("%d items marked refused, want the broken picture only", refused)
	}
}

// TestToolMediaOfADeletedTopicGoesToGeneral: the files of a reply whose
// topic was deleted go to the General topic, as its text does.
func TestToolMediaOfADeletedTopicGoesToGeneral(t *testing.T) {
	s := mediaSetup(t)
	s.opts.GroupPolicy = "all"
	api := telegramtest.New(t)
	release := api.Hold("sendPhoto")
	start(t, api, t.TempDir(), s)
	api.Push(telegramtest.Topic(forum, 7, 12, "draw it"))
	waitPhotoCalls(t, api, 1)
	api.DeleteTopic(forum, 12)
	release()
	sent := api.WaitSent(t, 1)
	if sent[0].Thread != 0 || !strings.HasPrefix(sent[0].Text, "answer: a chart and its report") {
		t.Fatalf("reply = %+v, want it in General", sent[0])
	}
	ups := api.Uploads()
	if len(ups) != 2 || ups[0].Method != "sendPhoto" || ups[0].Thread != 0 || ups[1].Thread != 0 {
		t.Fatalf("uploads = %+v, want both in General", ups)
	}
}

// cutAfterTool calls the media tool in its first request, then holds
// the turn's next round until a newer message cuts it (told on cut);
// later requests answer.
type cutAfterTool struct {
	script  *tooltest.Model
	reached chan struct{}
	n       atomic.Int32
}

func (c *cutAfterTool) Name() string  { return c.script.Name() }
func (c *cutAfterTool) Model() string { return c.script.Model() }

func (c *cutAfterTool) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	if c.n.Add(1) == 2 {
		close(c.reached)
		<-ctx.Done()
		return agent.Reply{}, ctx.Err()
	}
	return c.script.Reply(ctx, req, onDelta)
}

// TestToolMediaOfACutTurnGoWithTheReplyThatAnswersIt: in busy mode
// interrupt, a turn whose tool returned files and that a newer message
// then cut leaves its files to the turn that answers both messages:
// they go with that reply, once.
func TestToolMediaOfACutTurnGoWithTheReplyThatAnswersIt(t *testing.T) {
	_, set := tooltest.Server(t, mcpclient.ServerConfig{Approve: tools.ApproveAuto})
	first := true
	ag := &cutAfterTool{reached: make(chan struct{}), script: &tooltest.Model{Script: func(req agent.Request) []agent.ToolCall {
		if first && len(req.Turn) == 0 {
			first = false
			return []agent.ToolCall{toolCall("c1", mcptest.Media, map[string]any{})}
		}
		return nil
	}}}
	s := setup{agent: ag, opts: Options{Streaming: StreamOff}, policies: busy(sessions.BusyPolicy{Mode: sessions.BusyInterrupt}),
		manager: func(o *sessions.Options) { o.Tools = mcpclient.Offer{Set: set} }}
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), s)
	api.Push(telegramtest.DM(7, "draw it"))
	<-ag.reached
	second := api.Push(telegramtest.DM(7, "and a title"))
	sent := api.WaitSent(t, 1)
	if sent[0].ReplyTo != second {
		t.Fatalf("reply = %+v, want it to answer the second message", sent[0])
	}
	if n := uploadCount(api); n["sendPhoto"] != 1 || n["sendDocument"] != 1 {
		t.Fatalf("files sent: %v, want the cut turn's photo and document with the reply", n)
	}
	for _, r := range mediaRows(t, h) {
		if r.DeliveredAt == nil {
			t.Fatalf("media row not marked delivered: %+v", r)
		}
	}
	// A client reading the conversation sees them on the reply that
	// answered both.
	tr, err := h.mgr.Conversations().Open(context.Background(), sessions.Inbound{Channel: "telegram", SessionKey: sessions.TelegramDMKey(7)}, -1, 50)
	if err != nil {
		t.Fatal(err)
	}
	var on []string
	for _, e := range tr.Entries {
		if len(e.Media) > 0 {
			on = append(on, fmt.Sprintf("%s %q %d", e.Status, e.Text, len(e.Media)))
		}
	}
	if len(on) != 1 || !strings.HasPrefix(on[0], "ok ") || !strings.HasSuffix(on[0], " 2") {
		t.Fatalf("entries with media: %v, want the final reply with both", on)
	}
}

// TestToolAudioGoesAsAudio: an audio clip a tool returned goes by
// sendAudio, with its bytes, beside the photo and the document.
func TestToolAudioGoesAsAudio(t *testing.T) {
	_, set := tooltest.Server(t, mcpclient.ServerConfig{Approve: tools.ApproveAuto})
	s := setup{agent: tooltest.Asking(toolCall("c1", mcptest.Media, map[string]any{"audio": true})), opts: Options{Streaming: StreamOff}, policies: queued,
		manager: func(o *sessions.Options) { o.Tools = mcpclient.Offer{Set: set} }}
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), s)
	msg := api.Push(telegramtest.DM(7, "play it"))
	api.WaitSent(t, 1)
	var methods []string
	for _, u := range api.Uploads() {
		methods = append(methods, u.Method+":"+u.Kind)
		if u.Method == "sendAudio" && (!bytes.Equal(u.Data, mcptest.WAV) || u.ReplyTo != msg || !strings.HasSuffix(u.FileName, ".wav")) {
			t.Fatalf("audio = %d bytes named %q, reply to %d", len(u.Data), u.FileName, u.ReplyTo)
		}
	}
	if got := strings.Join(methods, " "); got != "sendPhoto:photo sendAudio:audio sendDocument:document" {
		t.Fatalf("uploads = %s", got)
	}
	for _, r := range mediaRows(t, h) {
		if r.DeliveredAt == nil || r.DeliveryRef == "" {
			t.Fatalf("not marked delivered: %+v", r)
		}
	}
}

// TestToolMediaNotWrittenWholeIsSentAgain: the connection is lost while
// a large file is being written out — the Bot API never had it whole —
// so the request is made again, and the file arrives once with no note.
func TestToolMediaNotWrittenWholeIsSentAgain(t *testing.T) {
	_, set := tooltest.Server(t, mcpclient.ServerConfig{Approve: tools.ApproveAuto})
	const size = 11_000_000 // more than loopback's socket buffers take unread; base64 within the MCP frame limit (16 MiB)
	s := setup{agent: tooltest.Asking(toolCall("c1", mcptest.Media, map[string]any{"png_bytes": size})), opts: Options{Streaming: StreamOff}, policies: queued,
		manager: func(o *sessions.Options) {
			o.Tools = mcpclient.Offer{Set: set}
			o.Media = sessions.MediaLimits{MaxBytes: 32 << 20}
		}}
	api := telegramtest.New(t)
	api.DropRequests("sendMediaGroup", 1) // (a picture over 10 MB goes as a document, in an album with the PDF)
	h := start(t, api, t.TempDir(), s)
	api.Push(telegramtest.DM(7, "draw it big"))
	// (Eleven megabytes through the tool server, the store and the Bot
	// API, twice: slow under the race detector on a loaded machine.)
	if !api.WaitSentWithin(1, 2*time.Minute) {
		t.Fatal("no reply in two minutes")
	}
	sent := api.Messages()
	if strings.Contains(sent[0].Text, "may not have arrived") || strings.Contains(sent[0].Text, "could not be sent") {
		t.Fatalf("reply = %q, want no note: the file arrived", sent[0].Text)
	}
	var big int
	for _, u := range api.Uploads() {
		if len(u.Data) == size {
			big++
		}
	}
	if big != 1 {
		t.Fatalf("the large file arrived %d times, want once; reply %q; %d uploads", big, sent[0].Text, len(api.Uploads()))
	}
	for _, r := range mediaRows(t, h) {
		if r.DeliveredAt == nil || strings.Contains(r.DeliveryRef, ":") {
			t.Fatalf("media row %+v, want delivered with its message id", r)
		}
	}
}

// The note of a file that may not have arrived names it as it is: its
// Markdown escaped where replies are Markdown, as it is where they go as
// plain text — and the HTML the note becomes shows the name unchanged.
func TestMediaNoteNamesTheFileAsItIs(t *testing.T) {
	m := sessions.Media{Kind: "file", Name: "my_report*v2*.pdf"}
	plain := (&Bot{opts: Options{Format: FormatPlain}}).mediaNote(m, sessions.MediaUnsure)
	if plain != "(my_report*v2*.pdf may not have arrived: sending it was cut off.)" {
		t.Fatalf("plain note = %q", plain)
	}
	md := (&Bot{opts: Options{Format: FormatHTML}}).mediaNote(m, sessions.MediaRefused)
	if html := tgformat.HTML(md); !strings.Contains(html, "my_report*v2*.pdf could not be sent") || strings.Contains(html, `\`) {
		t.Fatalf("note %q shows as %q", md, html)
	}
}

// An album holds at most maxAlbumItems files and maxAlbumBytes of them
// (the first file always goes, however large).
func TestAlbumSize(t *testing.T) {
	of := func(sizes ...int64) []sessions.Media {
		var out []sessions.Media
		for _, s := range sizes {
			out = append(out, sessions.Media{Size: s})
		}
		return out
	}
	for _, c := range []struct {
		items []sessions.Media
		want  int
	}{
		{of(1, 1, 1), 3},
		{of(make([]int64, 12)...), maxAlbumItems},
		{of(30<<20, 30<<20, 1), 1},
		{of(20<<20, 20<<20, 20<<20), 2},
		{of(60<<20, 1), 1},
	} {
		if got := albumSize(c.items); got != c.want {
			t.Errorf("albumSize(%d items) = %d, want %d", len(c.items), got, c.want)
		}
	}
}
