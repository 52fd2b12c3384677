package telegram

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// userRows are the stored user messages of a session key, read back from
// the database.
func userRows(t *testing.T, h *harness, key string) []sessions.Message {
	t.Helper()
	ctx := context.Background()
	convs, err := h.db.ListConversations(ctx, store.ListFilter{SessionKey: key})
	if err != nil || len(convs) != 1 {
		t.Fatalf("conversations = %+v, %v", convs, err)
	}
	msgs, err := h.db.RecentMessages(ctx, convs[0].ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []sessions.Message
	for _, m := range msgs {
		if m.Role == agent.RoleUser {
			out = append(out, m)
		}
	}
	return out
}

func attachmentsOf(t *testing.T, m sessions.Message) []agent.Attachment {
	t.Helper()
	var atts []agent.Attachment
	if m.Attachments != "" {
		if err := json.Unmarshal([]byte(m.Attachments), &atts); err != nil {
			t.Fatalf("stored attachments %q: %v", m.Attachments, err)
		}
	}
	return atts
}

func lastUser(msgs []llmtest.Message) llmtest.Message {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == agent.RoleUser {
			return msgs[i]
		}
	}
	return llmtest.Message{}
}

func TestPhotoWithCaptionReachesVisionModel(t *testing.T) {
	api := telegramtest.New(t)
	llm, ag := llmtest.Agent(t, true)
	h := start(t, api, t.TempDir(), setup{agent: ag, opts: Options{Vision: true, MaxImageBytes: 1 << 20}})
	small, big := []byte("small-jpeg"), []byte(strings.Repeat("B", 4000))
	api.AddFile("p-small", small)
	api.AddFile("p-big", big)
	// The largest size is over max_image_bytes: the one below it is taken.
	api.Push(telegramtest.Photo(7, "what is this?",
		telegramtest.PhotoSize{FileID: "p-small", Width: 90, Height: 90, Size: len(small)},
		telegramtest.PhotoSize{FileID: "p-big", Width: 800, Height: 800, Size: len(big)},
		telegramtest.PhotoSize{FileID: "p-huge", Width: 2000, Height: 2000, Size: 2 << 20}))
	if got := api.WaitSent(t, 1)[0].Text; got != llmtest.Reply {
		t.Fatalf("reply = %q", got)
	}
	want := "data:image/jpeg;base64," + base64.StdEncoding.EncodeToString(big)
	in := lastUser(llm.Requests()[0])
	if in.Text() != "what is this?" || len(in.Images()) != 1 || in.Images()[0] != want {
		t.Fatalf("model got %+v", in)
	}
	rows := userRows(t, h, "telegram:dm:7")
	atts := attachmentsOf(t, rows[0])
	if rows[0].Content != "what is this?" || len(atts) != 1 || atts[0].Kind != agent.KindImage || atts[0].FileID != "p-big" ||
		atts[0].Size != int64(len(big)) || atts[0].Mime != "image/jpeg" || strings.Contains(rows[0].Attachments, base64.StdEncoding.EncodeToString(big)) {
		t.Fatalf("stored row = %+v", rows[0])
	}

	// A later turn fetches the image again for the history.
	api.Push(telegramtest.DM(7, "and the colour?"))
	api.WaitSent(t, 2)
	hist := llm.Requests()[1]
	if len(hist) != 3 || hist[0].Text() != "what is this?" || len(hist[0].Images()) != 1 || hist[0].Images()[0] != want {
		t.Fatalf("second request = %+v", hist)
	}
	if n := api.Downloads(); n != 2 {
		t.Fatalf("%d downloads, want one per turn", n)
	}
	// Once Telegram no longer serves it, the model is told so.
	api.RemoveFile("p-big")
	api.Push(telegramtest.DM(7, "still there?"))
	api.WaitSent(t, 3)
	hist = llm.Requests()[2]
	if len(hist[0].Images()) != 0 || hist[0].Text() != "what is this?\n"+agent.MissingImageText {
		t.Fatalf("third request's first message = %+v", hist[0])
	}
}

func TestPhotoWithoutVisionIsAnsweredAsText(t *testing.T) {
	api := telegramtest.New(t)
	llm, ag := llmtest.Agent(t, false)
	h := start(t, api, t.TempDir(), setup{agent: ag, opts: Options{Vision: false}})
	api.AddFile("p1", []byte("jpeg"))
	photo := func(caption string) map[string]any {
		return telegramtest.Photo(7, caption, telegramtest.PhotoSize{FileID: "p1", Width: 10, Height: 10, Size: 4})
	}
	api.Push(photo("nice view?"))
	sent := api.WaitSent(t, 2)
	if sent[0].Text != noVisionText || sent[1].Text != llmtest.Reply {
		t.Fatalf("sent = %q", texts(sent))
	}
	if in := lastUser(llm.Requests()[0]); in.Text() != "nice view?" || len(in.Images()) != 0 {
		t.Fatalf("model got %+v", in)
	}
	// Told once per chat; a photo without a caption gets the notice only.
	api.Push(photo("and this one?"))
	api.WaitSent(t, 3)
	api.Push(photo(""))
	api.WaitSent(t, 4)
	api.Push(telegramtest.DM(7, "done"))
	sent = api.WaitSent(t, 5)
	if got := texts(sent[2:]); strings.Join(got, "|") != llmtest.Reply+"|"+noVisionText+"|"+llmtest.Reply {
		t.Fatalf("sent after the first = %q", got)
	}
	if n := len(llm.Requests()); n != 3 {
		t.Fatalf("%d model calls, want 3", n)
	}
	if api.Downloads() != 0 || len(api.Calls("getFile")) != 0 {
		t.Fatal("an image was fetched for a model that does not read images")
	}
	rows := userRows(t, h, "telegram:dm:7")
	if len(rows) != 3 || len(attachmentsOf(t, rows[0])) != 1 || attachmentsOf(t, rows[0])[0].FileID != "p1" {
		t.Fatalf("stored = %+v", rows)
	}
}

func TestTextDocumentIsRead(t *testing.T) {
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), setup{opts: Options{Format: FormatPlain}}) // the echo reply compared as written
	api.AddFile("d1", []byte("buy milk\nbuy ```bread```\n"))
	api.Push(telegramtest.Document(7, "what do I need?", "d1", "notes.txt", "text/plain; charset=utf-8", 25))
	body := "file notes.txt:\n````\nbuy milk\nbuy ```bread```\n````\n\nwhat do I need?"
	if got := api.WaitSent(t, 1)[0].Text; got != "echo: "+body+" [document notes.txt] (history: 0)" {
		t.Fatalf("reply = %q", got)
	}
	rows := userRows(t, h, "telegram:dm:7")
	atts := attachmentsOf(t, rows[0])
	if rows[0].Content != body || len(atts) != 1 || atts[0].Kind != agent.KindDocument || atts[0].Name != "notes.txt" ||
		atts[0].FileID != "d1" || atts[0].Mime != "text/plain" {
		t.Fatalf("stored = %+v", rows[0])
	}
	// A file it cannot read: said so, and the caption still answered.
	api.Push(telegramtest.Document(7, "and this?", "d2", "report.pdf", "application/pdf", 5000))
	sent := api.WaitSent(t, 3)
	if sent[1].Text != "I can't read this kind of file (application/pdf) yet — please paste its text." ||
		sent[2].Text != "echo: and this? [other report.pdf] (history: 2)" {
		t.Fatalf("sent = %q", texts(sent))
	}
}

func TestVoiceNoteGetsItsReply(t *testing.T) {
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), setup{})
	api.Push(telegramtest.Voice(7, "", "v1"))
	if got := api.WaitSent(t, 1)[0].Text; got != "I can't listen to voice messages yet — please type it." {
		t.Fatalf("reply = %q", got)
	}
	api.Push(telegramtest.Voice(7, "remind me at 5", "v2"))
	sent := api.WaitSent(t, 3)
	if sent[1].Text != unsupportedTexts["voice"] || sent[2].Text != "echo: remind me at 5 [other] (history: 0)" {
		t.Fatalf("sent = %q", texts(sent))
	}
	rows := userRows(t, h, "telegram:dm:7")
	atts := attachmentsOf(t, rows[0])
	if len(rows) != 1 || rows[0].Content != "remind me at 5" || len(atts) != 1 || atts[0].Type != "voice" || atts[0].FileID != "v2" {
		t.Fatalf("stored = %+v", rows)
	}
}

func TestImageFilesAndGroups(t *testing.T) {
	api := telegramtest.New(t)
	llm, ag := llmtest.Agent(t, true)
	start(t, api, t.TempDir(), setup{agent: ag, opts: Options{Vision: true, MaxImageBytes: 2048}})
	api.AddFile("f-png", []byte("\x89PNG-bytes"))
	// An image sent as a file goes to the model as an image.
	api.Push(telegramtest.Document(7, "", "f-png", "shot.png", "image/png", 10))
	api.WaitSent(t, 1)
	if in := lastUser(llm.Requests()[0]); len(in.Parts) != 1 || len(in.Images()) != 1 || !strings.HasPrefix(in.Images()[0], "data:image/png;base64,") {
		t.Fatalf("model got %+v", in)
	}
	// Over max_image_bytes, or a type a model does not read: said so.
	api.Push(telegramtest.Document(7, "", "f-big", "big.png", "image/png", 4096))
	api.Push(telegramtest.Document(7, "", "f-heic", "x.heic", "image/heic", 10))
	sent := api.WaitSent(t, 3)
	if sent[1].Text != "That picture is too large for me to look at (over 2 KiB)." ||
		sent[2].Text != "I can't read this kind of picture (image/heic); please send it as a photo." {
		t.Fatalf("sent = %q", texts(sent))
	}
	// In a group: a photo whose caption mentions the bot is answered; a
	// sticker nobody addressed gets nothing.
	group := func(m map[string]any) map[string]any {
		m["chat"] = map[string]any{"id": -100, "type": "supergroup", "title": "G"}
		return m
	}
	sticker := group(telegramtest.DM(8, ""))
	delete(sticker, "text")
	sticker["sticker"] = map[string]any{"file_id": "s", "file_unique_id": "us", "width": 1, "height": 1, "is_animated": false}
	api.Push(sticker)
	caption := "@" + telegramtest.BotName + " what is it"
	photo := group(telegramtest.Photo(8, caption, telegramtest.PhotoSize{FileID: "f-png", Width: 5, Height: 5, Size: 10}))
	photo["caption_entities"] = []map[string]any{{"type": "mention", "offset": 0, "length": len(telegramtest.BotName) + 1}}
	api.Push(photo)
	sent = api.WaitSent(t, 4)
	if sent[3].Text != llmtest.Reply || sent[3].ChatID != -100 {
		t.Fatalf("sent = %+v", sent)
	}
	if in := lastUser(llm.Requests()[1]); in.Text() != "what is it" || len(in.Images()) != 1 {
		t.Fatalf("model got %+v", in)
	}
}
