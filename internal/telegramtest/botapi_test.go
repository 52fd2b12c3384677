package telegramtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// TestForumTopics checks the fake's topics through the real client
// library's raw requests (its types predate topics): a pushed topic
// message comes back from getUpdates with message_thread_id and
// is_topic_message and opens its topic; a send into an open topic is
// recorded with its Thread and answered with it; a closed topic answers
// 400 TOPIC_CLOSED until reopened, a deleted or unknown one (or any in a
// chat without topics) 400 "message thread not found", before anything is
// recorded; a send without a thread goes to the General topic.
func TestForumTopics(t *testing.T) {
	a, api := newClient(t)
	const chat, user = -100123, 7
	a.Push(Topic(chat, user, 42, "hi @"+BotName))
	a.Push(ForumGeneral(chat, user, "in general"))
	a.Push(PrivateTopic(user, 9, "/start"))
	res, err := api.MakeRequest("getUpdates", tgbotapi.Params{})
	if err != nil {
		t.Fatal(err)
	}
	var us []struct {
		Message struct {
			Chat struct {
				ID      int64 `json:"id"`
				IsForum bool  `json:"is_forum"`
			} `json:"chat"`
			Thread   int              `json:"message_thread_id"`
			IsTopic  bool             `json:"is_topic_message"`
			Entities []map[string]any `json:"entities"`
		} `json:"message"`
	}
	if err := json.Unmarshal(res.Result, &us); err != nil || len(us) != 3 {
		t.Fatalf("updates %s: %v", res.Result, err)
	}
	if m := us[0].Message; m.Chat.ID != chat || !m.Chat.IsForum || m.Thread != 42 || !m.IsTopic || len(m.Entities) != 1 || m.Entities[0]["type"] != "mention" {
		t.Errorf("topic message = %+v", m)
	}
	if m := us[1].Message; !m.Chat.IsForum || m.Thread != 0 || m.IsTopic {
		t.Errorf("General topic message = %+v", m)
	}
	if m := us[2].Message; m.Chat.ID != user || m.Thread != 9 || !m.IsTopic || len(m.Entities) != 1 || m.Entities[0]["type"] != "bot_command" {
		t.Errorf("private topic message = %+v", m)
	}

	send := func(method string, chat int64, thread int, text string) (*tgbotapi.APIResponse, error) {
		p := tgbotapi.Params{"chat_id": strconv.FormatInt(chat, 10), "text": text, "draft_id": "1", "action": "typing"}
		if thread != 0 {
			p["message_thread_id"] = strconv.Itoa(thread)
		}
		return api.MakeRequest(method, p)
	}
	refused := func(err error, want string) {
		t.Helper()
		var e *tgbotapi.Error
		if !errors.As(err, &e) || e.Code != 400 || e.Message != "Bad Request: "+want {
			t.Fatalf("error %v, want 400 %q", err, want)
		}
	}
	res, err = send("sendMessage", chat, 42, "in the topic")
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Thread  int  `json:"message_thread_id"`
		IsTopic bool `json:"is_topic_message"`
	}
	if err := json.Unmarshal(res.Result, &answer); err != nil || answer.Thread != 42 || !answer.IsTopic {
		t.Fatalf("answer %s: %v", res.Result, err)
	}
	if _, err := send("sendMessage", chat, 0, "in general"); err != nil {
		t.Fatalf("General topic: %v", err)
	}
	if _, err := send("sendMessage", user, 9, "in the private topic"); err != nil {
		t.Fatalf("private topic: %v", err)
	}
	for _, method := range []string{"sendMessageDraft", "sendChatAction"} {
		if _, err := send(method, user, 9, "dra"); err != nil {
			t.Fatalf("%s in the private topic: %v", method, err)
		}
	}
	want := []Sent{{ChatID: chat, Text: "in the topic", Thread: 42}, {ChatID: chat, Text: "in general"}, {ChatID: user, Text: "in the private topic", Thread: 9}}
	if m := a.Messages(); !slices.Equal(m, want) {
		t.Fatalf("messages = %+v, want %+v", m, want)
	}
	if d := a.Drafts(); len(d) != 1 || d[0] != (Draft{ChatID: user, DraftID: 1, Text: "dra", Thread: 9}) {
		t.Fatalf("drafts = %+v", d)
	}

	a.CloseTopic(chat, 42)
	for _, method := range []string{"sendMessage", "sendMessageDraft", "sendChatAction"} {
		_, err := send(method, chat, 42, "x")
		refused(err, "TOPIC_CLOSED")
	}
	a.ReopenTopic(chat, 42)
	if _, err := send("sendMessage", chat, 42, "reopened"); err != nil {
		t.Fatalf("reopened topic: %v", err)
	}
	a.DeleteTopic(chat, 42)
	a.ReopenTopic(chat, 42) // a deleted topic stays deleted
	for _, c := range []struct {
		chat   int64
		thread int
	}{{chat, 42}, {chat, 43}, {user, 10}, {-100999, 42}} {
		for _, method := range []string{"sendMessage", "sendMessageDraft", "sendChatAction"} {
			_, err := send(method, c.chat, c.thread, "x")
			refused(err, "message thread not found")
		}
	}
	if n, d, acts := len(a.Messages()), len(a.Drafts()), a.Actions(); n != 4 || d != 1 || acts != 1 {
		t.Fatalf("refused sends were taken: %d messages, %d drafts, %d actions", n, d, acts)
	}

	// An edit keeps the topic the message was sent into.
	res, err = send("sendMessage", user, 9, "Hel")
	if err != nil {
		t.Fatal(err)
	}
	var sent struct {
		ID int `json:"message_id"`
	}
	if err := json.Unmarshal(res.Result, &sent); err != nil {
		t.Fatal(err)
	}
	res, err = api.MakeRequest("editMessageText", tgbotapi.Params{"chat_id": strconv.Itoa(user), "message_id": strconv.Itoa(sent.ID), "text": "Hello"})
	if err != nil {
		t.Fatal(err)
	}
	var edited struct {
		Thread  int  `json:"message_thread_id"`
		IsTopic bool `json:"is_topic_message"`
	}
	if err := json.Unmarshal(res.Result, &edited); err != nil || edited.Thread != 9 || !edited.IsTopic {
		t.Fatalf("edit answer %s: %v", res.Result, err)
	}
	if m := a.Messages(); m[len(m)-1] != (Sent{ChatID: user, Text: "Hello", Thread: 9}) {
		t.Fatalf("edited message = %+v", m[len(m)-1])
	}
}

// TestAlbumIsOneUpdatePerPart checks the fake's albums through the real
// client library: one update per part, each with its own message_id and
// photo sizes, all with one media_group_id, the caption on the first
// only; a limit splits the album between getUpdates answers, and a part
// pushed later belongs to it.
func TestAlbumIsOneUpdatePerPart(t *testing.T) {
	a, api := newClient(t)
	group, ids := a.PushAlbum(AlbumPhotos(7, "which one?",
		PhotoSize{FileID: "p1", Width: 800, Height: 600, Size: 100},
		PhotoSize{FileID: "p2", Width: 800, Height: 600, Size: 200},
		PhotoSize{FileID: "p3", Width: 800, Height: 600, Size: 300})...)
	late := a.PushAlbumPart(group, Photo(7, "", PhotoSize{FileID: "p4", Width: 10, Height: 10, Size: 4}))
	first, err := api.GetUpdates(tgbotapi.UpdateConfig{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	rest, err := api.GetUpdates(tgbotapi.UpdateConfig{Offset: first[len(first)-1].UpdateID + 1})
	if err != nil {
		t.Fatal(err)
	}
	us := append(first, rest...)
	if len(first) != 2 || len(us) != 4 {
		t.Fatalf("got %d then %d updates, want 2 then 2", len(first), len(rest))
	}
	for i, u := range us {
		m := u.Message
		wantID, wantCaption := late, ""
		if i < 3 {
			wantID = ids[i]
		}
		if i == 0 {
			wantCaption = "which one?"
		}
		if m == nil || m.MediaGroupID != group || m.MessageID != wantID || m.Caption != wantCaption || len(m.Photo) == 0 {
			t.Fatalf("part %d = %+v, want message %d of album %s captioned %q", i, m, wantID, group, wantCaption)
		}
	}
	if len(us[0].Message.Photo) != 2 || us[0].Message.Photo[1].FileID != "p1" || us[1].Message.Photo[1].FileID != "p2" {
		t.Fatalf("photo sizes = %+v", us[0].Message.Photo)
	}
	if other, _ := a.PushAlbum(Photo(7, "", PhotoSize{FileID: "x"})); other == group {
		t.Fatal("two albums share a media_group_id")
	}
}

// TestPrivateChatRules: as the Bot API (with RefuseUnstarted), a send to
// a user's private chat answers 403 "bot can't initiate conversation with
// a user" until the user wrote to the bot there (a group message is not
// enough), and 403 "bot was blocked by the user" while they block it; a
// message from them afterwards opens it again. Groups take sends whoever
// is in them. Without RefuseUnstarted only a block refuses.
func TestPrivateChatRules(t *testing.T) {
	a, api := newClient(t)
	forbidden := func(chat int64, want string) {
		t.Helper()
		_, err := api.Send(tgbotapi.NewMessage(chat, "hi"))
		var e *tgbotapi.Error
		if !errors.As(err, &e) || e.Code != 403 || e.Message != "Forbidden: "+want {
			t.Fatalf("send to %d: %v, want 403 %q", chat, err, want)
		}
	}
	sends := func(chat int64) {
		t.Helper()
		if _, err := api.Send(tgbotapi.NewMessage(chat, "hi")); err != nil {
			t.Fatalf("send to %d: %v", chat, err)
		}
	}
	sends(9)
	a.Block(9)
	forbidden(9, "bot was blocked by the user")
	a.RefuseUnstarted()
	a.Push(Group(-100, 7, "hello all"))
	forbidden(7, "bot can't initiate conversation with a user")
	if _, err := api.MakeRequest("sendMessageDraft", tgbotapi.Params{"chat_id": "7", "draft_id": "5", "text": "Hel"}); err == nil {
		t.Fatal("a draft to a user who never started the bot was taken")
	}
	sends(-100)
	a.Push(DM(7, "/start"))
	sends(7)
	a.Block(7)
	forbidden(7, "bot was blocked by the user")
	a.Push(DM(7, "/start"))
	sends(7)
	a.Started(8)
	sends(8)
	if got := len(a.Messages()); got != 5 {
		t.Fatalf("%d messages taken, want 5: %+v", got, a.Messages())
	}
}

// A request whose body is cut off (the client cancelled it or died while
// it went up) is not acted on, as the Bot API never had it whole, and is
// no fault of the client's form: both a url-encoded and a multipart body.
func TestACutBodyIsNotActedOn(t *testing.T) {
	rec := &errorsOf{TB: t}
	a := New(rec)
	srv := httptest.NewUnstartedServer(a)
	closed := make(chan struct{}, 2)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	for _, tc := range []struct{ contentType, body string }{
		{"application/x-www-form-urlencoded", "chat_id=7&text=hel"},
		{"multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"chat_id\"\r\n\r\n7\r\n--b\r\nContent-Disposition: form-data; name=\"text\"\r\n\r\nhel"},
	} {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /bot%s/sendMessage HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
			Token, tc.contentType, len(tc.body)+100, tc.body)
		conn.Close()
		<-closed // the server is done with the cut request
	}
	if calls := a.Calls("sendMessage"); len(calls) != 0 || len(rec.errors()) != 0 {
		t.Fatalf("a cut request was acted on: %+v, or taken for a bad form: %q", calls, rec.errors())
	}
	// A multipart body sent whole but without its closing boundary is
	// the client's fault, and said to be.
	body := "--b\r\nContent-Disposition: form-data; name=\"chat_id\"\r\n\r\n7\r\n"
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/bot"+Token+"/sendMessage", strings.NewReader(body))
	req.Header.Set("Content-Type", "multipart/form-data; boundary=b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if errs := rec.errors(); len(errs) != 1 || !strings.Contains(errs[0], "bad form") {
		t.Fatalf("a malformed whole body: %q, want it said to be a bad form", errs)
	}
}

// errorsOf keeps the errors a test double reports instead of failing
// the test with them.
type errorsOf struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (e *errorsOf) Errorf(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

func (e *errorsOf) errors() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.errs)
}
