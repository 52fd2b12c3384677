package telegramtest

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
)

// newClient serves a new fake until the test ends and returns it with the
// real client library's bot on it.
func newClient(t *testing.T) (*Server, *tgbotapi.BotAPI) {
	t.Helper()
	a := New(t)
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	api, err := tgbotapi.NewBotAPIWithClient(Token, srv.URL+"/bot%s/%s", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return a, api
}

// TestGetUpdatesRules checks the fake against the Bot API's documented
// getUpdates rules, through the real client library: at most limit
// updates (1–100, default 100), an offset confirms every update below it,
// a negative offset keeps only the newest, and every call is recorded.
func TestGetUpdatesRules(t *testing.T) {
	a, api := newClient(t)
	for i := 0; i < 150; i++ {
		a.Push(DM(7, "m"))
	}
	ids := func(us []tgbotapi.Update) (int, int, int) {
		if len(us) == 0 {
			return 0, 0, 0
		}
		return len(us), us[0].UpdateID, us[len(us)-1].UpdateID
	}
	for _, tc := range []struct {
		name              string
		cfg               tgbotapi.UpdateConfig
		n, first, last    int
		pendingAfterwards int
	}{
		{"default limit is 100", tgbotapi.UpdateConfig{}, 100, 1, 100, 150},
		{"limit 5", tgbotapi.UpdateConfig{Limit: 5}, 5, 1, 5, 150},
		{"limit above 100 is clamped", tgbotapi.UpdateConfig{Limit: 500}, 100, 1, 100, 150},
		{"offset confirms below it", tgbotapi.UpdateConfig{Offset: 121}, 30, 121, 150, 30},
		{"confirmed updates are gone", tgbotapi.UpdateConfig{Offset: 1}, 30, 121, 150, 30},
		{"negative offset keeps the newest", tgbotapi.UpdateConfig{Offset: -3}, 3, 148, 150, 3},
	} {
		us, err := api.GetUpdates(tc.cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if n, first, last := ids(us); n != tc.n || first != tc.first || last != tc.last {
			t.Errorf("%s: got %d updates %d..%d, want %d updates %d..%d", tc.name, n, first, last, tc.n, tc.first, tc.last)
		}
		if p := a.Pending(); p != tc.pendingAfterwards {
			t.Errorf("%s: %d updates pending afterwards, want %d", tc.name, p, tc.pendingAfterwards)
		}
	}
	calls := a.Calls("getUpdates")
	if len(calls) != 6 || calls[1].Params.Get("limit") != "5" || calls[3].Params.Get("offset") != "121" {
		t.Fatalf("recorded calls = %+v", calls)
	}
	if n := len(a.Calls("getMe")); n != 1 {
		t.Fatalf("%d getMe calls recorded, want 1", n)
	}
}

// TestStreamingCalls checks the fake's drafts and edits through the real
// client library: a draft needs a non-zero draft_id; an edit changes the
// sent message's text, and is refused as the Bot API refuses it — 400
// "message is not modified" for the same text, 400 "message to edit not
// found" for an unknown message; the variants answer drafts 404 Not
// Found and every n-th edit 429 with retry_after 2.
func TestStreamingCalls(t *testing.T) {
	a, api := newClient(t)
	apiErr := func(err error) *tgbotapi.Error {
		t.Helper()
		var e *tgbotapi.Error
		if !errors.As(err, &e) {
			t.Fatalf("error %v is not the Bot API's", err)
		}
		return e
	}
	if _, err := api.MakeRequest("sendMessageDraft", tgbotapi.Params{"chat_id": "7", "draft_id": "5", "text": "Hel"}); err != nil {
		t.Fatalf("draft: %v", err)
	}
	if _, err := api.MakeRequest("sendMessageDraft", tgbotapi.Params{"chat_id": "7", "text": "Hel"}); apiErr(err).Code != 400 {
		t.Fatalf("draft without draft_id: %v", err)
	}
	sent, err := api.Send(tgbotapi.NewMessage(7, "Hel"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.Request(tgbotapi.NewEditMessageText(7, sent.MessageID, "Hello")); err != nil {
		t.Fatalf("edit: %v", err)
	}
	if m := a.Messages(); len(m) != 1 || m[0].Text != "Hello" {
		t.Fatalf("after the edit the messages are %+v", m)
	}
	if _, err := api.Request(tgbotapi.NewEditMessageText(7, sent.MessageID, "Hello")); !strings.Contains(apiErr(err).Message, "message is not modified") {
		t.Fatalf("same text: %v", err)
	}
	if _, err := api.Request(tgbotapi.NewEditMessageText(7, 12345, "x")); !strings.Contains(apiErr(err).Message, "message to edit not found") {
		t.Fatalf("unknown message: %v", err)
	}
	a.RefuseDrafts()
	if _, err := api.MakeRequest("sendMessageDraft", tgbotapi.Params{"chat_id": "7", "draft_id": "5", "text": "Hel"}); apiErr(err).Code != 404 || apiErr(err).Message != "Not Found" {
		t.Fatalf("refused draft: %v", err)
	}
	a.Throttle429Edits(1)
	if _, err := api.Request(tgbotapi.NewEditMessageText(7, sent.MessageID, "Hello!")); apiErr(err).Code != 429 || apiErr(err).RetryAfter != 2 {
		t.Fatalf("throttled edit: %v", err)
	}
	if m := a.Messages(); m[0].Text != "Hello" || a.EditsRefused() != 1 {
		t.Fatalf("a throttled edit changed the message: %+v", m)
	}
}

// TestTextLengthRules: as the Bot API, sendMessage and editMessageText
// refuse an empty text and one over 4096 UTF-16 code units, counted after
// HTML entities are parsed (tags do not count, "&amp;" is one character);
// deleteMessage takes a message away, and editing it then fails.
func TestTextLengthRules(t *testing.T) {
	a := New(t)
	srv := httptest.NewServer(a)
	defer srv.Close()
	api, err := tgbotapi.NewBotAPIWithClient(Token, srv.URL+"/bot%s/%s", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	refused := func(err error, want string) {
		t.Helper()
		var e *tgbotapi.Error
		if !errors.As(err, &e) || e.Code != 400 || !strings.Contains(e.Message, want) {
			t.Fatalf("error %v, want 400 %q", err, want)
		}
	}
	_, err = api.Send(tgbotapi.NewMessage(7, " \n"))
	refused(err, "message text is empty")
	_, err = api.Send(tgbotapi.NewMessage(7, strings.Repeat("x", 4096)+"😀"))
	refused(err, "message is too long")
	html := tgbotapi.NewMessage(7, "<b>"+strings.Repeat("&amp;", 4096)+"</b>")
	html.ParseMode = tgbotapi.ModeHTML
	sent, err := api.Send(html)
	if err != nil {
		t.Fatalf("4096 characters as HTML: %v", err)
	}
	_, err = api.Request(tgbotapi.NewEditMessageText(7, sent.MessageID, strings.Repeat("y", 4097)))
	refused(err, "MESSAGE_TOO_LONG")
	_, err = api.Request(tgbotapi.NewEditMessageText(7, sent.MessageID, ""))
	refused(err, "message text is empty")
	if _, err := api.Request(tgbotapi.NewDeleteMessage(7, sent.MessageID)); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if !a.Deleted(7, sent.MessageID) {
		t.Fatal("the message was not deleted")
	}
	_, err = api.Request(tgbotapi.NewEditMessageText(7, sent.MessageID, "z"))
	refused(err, "message to edit not found")
	_, err = api.Request(tgbotapi.NewDeleteMessage(7, sent.MessageID))
	refused(err, "message to delete not found")
}
