package telegramtest

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
)

// TestInlineKeyboardsAndCallbackQueries checks the fake's buttons through
// the real client library: a sent keyboard is kept and its callback_data
// checked (1–64 bytes); a tap is a callback_query update with the bot's
// message; each query is answered once (a second answer is refused);
// a keyboard of more than 100 buttons or 10 KB is refused;
// editMessageReplyMarkup and editMessageText change or remove the
// keyboard, and an edit that changes nothing is "not modified".
func TestInlineKeyboardsAndCallbackQueries(t *testing.T) {
	a, api := newClient(t)
	apiErr := func(err error) *tgbotapi.Error {
		t.Helper()
		var e *tgbotapi.Error
		if !errors.As(err, &e) {
			t.Fatalf("error %v is not the Bot API's", err)
		}
		return e
	}
	kb := tgbotapi.NewInlineKeyboardMarkup(tgbotapi.NewInlineKeyboardRow(
		tgbotapi.NewInlineKeyboardButtonData("Allow", "tool:1:allow"), tgbotapi.NewInlineKeyboardButtonData("Deny", "tool:1:deny")))
	msg := tgbotapi.NewMessage(-100, "run it?")
	msg.ReplyMarkup = kb
	sent, err := api.Send(msg)
	if err != nil {
		t.Fatal(err)
	}
	if sent.ReplyMarkup == nil || len(sent.ReplyMarkup.InlineKeyboard[0]) != 2 {
		t.Fatalf("the answer lacks the keyboard: %+v", sent.ReplyMarkup)
	}
	if got := a.Keyboard(-100, sent.MessageID); len(got) != 1 || got[0][1] != (Button{Text: "Deny", CallbackData: "tool:1:deny"}) {
		t.Fatalf("keyboard = %+v", got)
	}
	long := tgbotapi.NewMessage(-100, "x")
	long.ReplyMarkup = tgbotapi.NewInlineKeyboardMarkup(tgbotapi.NewInlineKeyboardRow(
		tgbotapi.NewInlineKeyboardButtonData("x", strings.Repeat("d", 65))))
	if _, err := api.Send(long); apiErr(err).Message != "Bad Request: BUTTON_DATA_INVALID" {
		t.Fatalf("65 bytes of callback_data: %v", err)
	}
	// At most 100 buttons, and about 10 KB of markup.
	for _, c := range []struct {
		buttons int
		label   string
		ok      bool
	}{{100, "x", true}, {101, "x", false}, {60, strings.Repeat("y", 120), true}, {60, strings.Repeat("y", 200), false}} {
		var rows [][]tgbotapi.InlineKeyboardButton
		for i := range c.buttons {
			rows = append(rows, tgbotapi.NewInlineKeyboardRow(tgbotapi.NewInlineKeyboardButtonData(c.label, "d"+strconv.Itoa(i))))
		}
		big := tgbotapi.NewMessage(-100, "x")
		big.ReplyMarkup = tgbotapi.NewInlineKeyboardMarkup(rows...)
		_, err := api.Send(big)
		if c.ok && err != nil || !c.ok && (err == nil || apiErr(err).Message != "Bad Request: reply markup is too long") {
			t.Fatalf("%d buttons labelled %d bytes: %v", c.buttons, len(c.label), err)
		}
	}

	// A tap reaches the bot as an update; its answer is taken once.
	qid := a.Tap(t, 42, -100, sent.MessageID, "tool:1:allow")
	us, err := api.GetUpdates(tgbotapi.UpdateConfig{AllowedUpdates: []string{"message", "callback_query"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 1 || us[0].CallbackQuery == nil {
		t.Fatalf("updates = %+v", us)
	}
	q := us[0].CallbackQuery
	if q.ID != qid || q.From.ID != 42 || q.Data != "tool:1:allow" || q.Message.MessageID != sent.MessageID || q.Message.Chat.ID != -100 ||
		q.Message.Chat.Type != "supergroup" || q.Message.ReplyMarkup == nil {
		t.Fatalf("callback query = %+v (message %+v)", q, q.Message)
	}
	if _, err := api.Request(tgbotapi.NewCallback(qid, "Allowed")); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Request(tgbotapi.NewCallback(qid, "again")); !strings.Contains(apiErr(err).Message, "query ID is invalid") {
		t.Fatalf("a second answer: %v", err)
	}
	if _, err := api.Request(tgbotapi.NewCallback("nope", "")); apiErr(err).Code != 400 {
		t.Fatalf("an unknown query: %v", err)
	}
	if ans := a.WaitAnswered(t, qid); ans.Text != "Allowed" {
		t.Fatalf("answer = %+v", ans)
	}
	if n := len(a.Answers()); n != 3 {
		t.Fatalf("%d answers recorded, want 3 (two refused)", n)
	}

	// Updates of a kind not asked for are not delivered.
	a.Tap(t, 42, -100, sent.MessageID, "tool:1:deny")
	if us, _ := api.GetUpdates(tgbotapi.UpdateConfig{Offset: us[0].UpdateID + 1, AllowedUpdates: []string{"message"}}); len(us) != 0 {
		t.Fatalf("a callback query reached a bot that asked for messages only: %+v", us)
	}

	// The keyboard changes, then goes.
	one := tgbotapi.NewInlineKeyboardMarkup(tgbotapi.NewInlineKeyboardRow(tgbotapi.NewInlineKeyboardButtonData("Deny", "tool:1:deny")))
	if _, err := api.Request(tgbotapi.NewEditMessageReplyMarkup(-100, sent.MessageID, one)); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Request(tgbotapi.NewEditMessageReplyMarkup(-100, sent.MessageID, one)); !strings.Contains(apiErr(err).Message, "message is not modified") {
		t.Fatalf("the same markup: %v", err)
	}
	// The same text with a new keyboard is a change.
	if _, err := api.Request(tgbotapi.NewEditMessageTextAndMarkup(-100, sent.MessageID, "run it?", kb)); err != nil {
		t.Fatalf("the same text, another keyboard: %v", err)
	}
	if got := a.Keyboard(-100, sent.MessageID); len(got) != 1 || len(got[0]) != 2 {
		t.Fatalf("keyboard = %+v", got)
	}
	// Text edited without reply_markup: the keyboard goes with it.
	if _, err := api.Request(tgbotapi.NewEditMessageText(-100, sent.MessageID, "allowed")); err != nil {
		t.Fatal(err)
	}
	if got := a.Keyboard(-100, sent.MessageID); got != nil || a.Text(-100, sent.MessageID) != "allowed" {
		t.Fatalf("after the edit: keyboard %+v, text %q", got, a.Text(-100, sent.MessageID))
	}
	empty := tgbotapi.NewInlineKeyboardMarkup()
	empty.InlineKeyboard = [][]tgbotapi.InlineKeyboardButton{}
	if _, err := api.Request(tgbotapi.NewEditMessageReplyMarkup(-100, sent.MessageID, empty)); !strings.Contains(apiErr(err).Message, "message is not modified") {
		t.Fatalf("removing a keyboard that is gone: %v", err)
	}
	if _, err := api.Request(tgbotapi.NewEditMessageReplyMarkup(-100, 999, one)); !strings.Contains(apiErr(err).Message, "message to edit not found") {
		t.Fatalf("an unknown message: %v", err)
	}
}
