package telegramtest

// Inline keyboards and callback queries, as the Bot API has them: a send
// or an edit may carry reply_markup {"inline_keyboard": [[{text,
// callback_data}]]} (callback_data 1–64 bytes, else 400
// BUTTON_DATA_INVALID; more than 100 buttons, or a markup over 10 KB,
// 400 "reply markup is too long", the Bot API's words for MTProto's
// REPLY_MARKUP_TOO_LONG); the server keeps each message's current markup.
// editMessageText without reply_markup removes the message's inline
// keyboard (as Telegram does), editMessageReplyMarkup without it too; an
// edit that changes neither text nor markup answers 400 "message is not
// modified". A user's tap (Tap) is an update with a callback_query,
// delivered through getUpdates like any other; the bot must answer each
// one with answerCallbackQuery, once — a second answer, or one for an id
// Telegram never sent, answers 400 "query is too old and response timeout
// expired or query ID is invalid".

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"unicode/utf8"
)

// Button is an inline keyboard button: its label and the data a tap sends.
type Button struct {
	Text         string `json:"text"`
	CallbackData string `json:"callback_data,omitempty"`
}

// Answer is one answerCallbackQuery call, refused or not.
type Answer struct {
	QueryID   string
	Text      string
	ShowAlert bool
	// Refused is set for an answer the server refused: a second one for
	// the query, or one for a query it never sent.
	Refused bool
}

// callbackState is the inline keyboards of the messages sent and the
// callback queries sent to the bot.
type callbackState struct {
	markups  map[msgKey][][]Button // current inline keyboard of a sent message
	queries  map[string]bool       // query id → answered
	order    []string              // query ids, in the order they were sent
	answers  []Answer
	nextTap  int
	notModRM int // editMessageReplyMarkup answered "message is not modified"
}

// Bounds of an inline keyboard: its buttons, and its markup's bytes (as
// JSON here; Telegram measures its own encoding, about as long).
const (
	maxButtons     = 100
	maxMarkupBytes = 10 << 10
)

const errNotModified = "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message"

// markupOf reads r's reply_markup: its inline keyboard, and whether r
// carries one. A malformed one, or a button Telegram refuses, is answered
// 400 (and refused is true). Called under a.mu.
func markupOf(w http.ResponseWriter, r *http.Request) (kb [][]Button, present, refused bool) {
	v := r.FormValue("reply_markup")
	if v == "" {
		return nil, false, false
	}
	fail := func(why string) ([][]Button, bool, bool) {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"ok": false, "error_code": 400, "description": "Bad Request: " + why})
		return nil, false, true
	}
	var m struct {
		InlineKeyboard *[][]map[string]any `json:"inline_keyboard"`
	}
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return fail("can't parse reply keyboard markup JSON object")
	}
	if m.InlineKeyboard == nil {
		return nil, false, false // a reply keyboard and the like: not kept
	}
	buttons := 0
	for _, row := range *m.InlineKeyboard {
		buttons += len(row)
	}
	if buttons > maxButtons || len(v) > maxMarkupBytes {
		return fail("reply markup is too long")
	}
	kb = [][]Button{}
	for _, row := range *m.InlineKeyboard {
		var out []Button
		for _, raw := range row {
			text, _ := raw["text"].(string)
			data, hasData := raw["callback_data"].(string)
			if text == "" {
				return fail("can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard")
			}
			if hasData && (len(data) < 1 || len(data) > 64 || !utf8.ValidString(data)) {
				return fail("BUTTON_DATA_INVALID")
			}
			out = append(out, Button{Text: text, CallbackData: data})
		}
		kb = append(kb, out)
	}
	return kb, true, false
}

// sameMarkup reports whether two keyboards are the same; no keyboard and
// an empty one are the same.
func sameMarkup(a, b [][]Button) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return slices.EqualFunc(a, b, func(x, y []Button) bool { return slices.Equal(x, y) })
}

// setMarkup keeps message k's keyboard (none when kb is empty). Called
// under a.mu.
func (a *Server) setMarkup(k msgKey, kb [][]Button) {
	if a.cb.markups == nil {
		a.cb.markups = map[msgKey][][]Button{}
	}
	if len(kb) == 0 {
		delete(a.cb.markups, k)
		return
	}
	a.cb.markups[k] = kb
}

// withMarkup adds message k's keyboard to a Message the server answers
// with. Called under a.mu.
func (a *Server) withMarkup(m map[string]any, k msgKey) map[string]any {
	if kb := a.cb.markups[k]; len(kb) > 0 {
		m["reply_markup"] = map[string]any{"inline_keyboard": kb}
	}
	return m
}

// serveCallbacks answers editMessageReplyMarkup and answerCallbackQuery,
// and reports whether method was one of them.
func (a *Server) serveCallbacks(method string, w http.ResponseWriter, r *http.Request) bool {
	fail := func(desc string) {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"ok": false, "error_code": 400, "description": "Bad Request: " + desc})
	}
	switch method {
	case "editMessageReplyMarkup":
		a.mu.Lock()
		defer a.mu.Unlock()
		chat, _ := strconv.ParseInt(r.FormValue("chat_id"), 10, 64)
		id, _ := strconv.Atoi(r.FormValue("message_id"))
		k := msgKey{chat, id}
		i, ok := a.stream.index[k]
		if !ok || a.stream.deleted[k] {
			fail("message to edit not found")
			return true
		}
		kb, _, refused := markupOf(w, r)
		if refused {
			return true
		}
		if sameMarkup(a.cb.markups[k], kb) {
			a.cb.notModRM++
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]any{"ok": false, "error_code": 400, "description": errNotModified})
			return true
		}
		a.setMarkup(k, kb)
		a.cond.Broadcast()
		m := a.withMarkup(botMessage(chat, id, a.sent[i].Thread, a.sent[i].Text), k)
		m["edit_date"] = 2
		json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": m})
		return true
	case "answerCallbackQuery":
		a.mu.Lock()
		defer a.mu.Unlock()
		qid := r.FormValue("callback_query_id")
		text := r.FormValue("text")
		ans := Answer{QueryID: qid, Text: text, ShowAlert: r.FormValue("show_alert") == "true"}
		answered, known := a.cb.queries[qid]
		if !known || answered {
			ans.Refused = true
			a.cb.answers = append(a.cb.answers, ans)
			a.cond.Broadcast()
			fail("query is too old and response timeout expired or query ID is invalid")
			return true
		}
		if utf8.RuneCountInString(text) > 200 {
			ans.Refused = true
			a.cb.answers = append(a.cb.answers, ans)
			a.cond.Broadcast()
			fail("MESSAGE_TOO_LONG")
			return true
		}
		a.cb.queries[qid] = true
		a.cb.answers = append(a.cb.answers, ans)
		a.cond.Broadcast()
		json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": true})
		return true
	}
	return false
}

// Keyboard is the inline keyboard message id of chat shows now (nil for
// none).
func (a *Server) Keyboard(chat int64, id int) [][]Button {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.cb.markups[msgKey{chat, id}])
}

// Tap makes user tap the button with data on message id of chat: an
// update with a callback_query, delivered by getUpdates like any other.
// It returns the query's id. The button must be on the message's
// keyboard now (TapStale taps one that is not).
func (a *Server) Tap(t testing.TB, user, chat int64, id int, data string) string {
	t.Helper()
	a.mu.Lock()
	found := false
	for _, row := range a.cb.markups[msgKey{chat, id}] {
		for _, b := range row {
			found = found || b.CallbackData == data
		}
	}
	a.mu.Unlock()
	if !found {
		t.Fatalf("no button %q on message %d of chat %d: %v", data, id, chat, a.Keyboard(chat, id))
	}
	return a.TapStale(user, chat, id, data)
}

// TapStale sends a callback query whether or not the button is there: a
// client that still showed a removed keyboard, or crafted data.
func (a *Server) TapStale(user, chat int64, id int, data string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cb.nextTap++
	qid := fmt.Sprintf("cq%d", a.cb.nextTap)
	if a.cb.queries == nil {
		a.cb.queries = map[string]bool{}
	}
	a.cb.queries[qid] = false
	a.cb.order = append(a.cb.order, qid)
	k := msgKey{chat, id}
	thread, text := 0, ""
	if i, ok := a.stream.index[k]; ok {
		thread, text = a.sent[i].Thread, a.sent[i].Text
	}
	msg := a.withMarkup(botMessage(chat, id, thread, text), k)
	if chat < 0 {
		msg["chat"] = map[string]any{"id": chat, "type": "supergroup", "title": "G"}
	}
	q := map[string]any{
		"id":            qid,
		"from":          map[string]any{"id": user, "is_bot": false, "first_name": "U" + strconv.FormatInt(user, 10)},
		"message":       msg,
		"chat_instance": strconv.FormatInt(chat, 10),
		"data":          data,
	}
	a.queue(map[string]any{"update_id": a.nextID, "callback_query": q})
	a.nextID++
	a.cond.Broadcast()
	return qid
}

// Answers returns every answerCallbackQuery call so far, refused ones too.
func (a *Server) Answers() []Answer {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.cb.answers)
}

// WaitAnswered waits until query qid has an answer the server took, and
// returns it, bounded.
func (a *Server) WaitAnswered(t testing.TB, qid string) Answer {
	t.Helper()
	var got Answer
	a.waitFor(t, func() bool {
		for _, ans := range a.cb.answers {
			if ans.QueryID == qid && !ans.Refused {
				got = ans
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("callback query %s never answered; answers: %+v", qid, a.cb.answers) })
	return got
}

// WaitKeyboard waits until message id of chat shows no inline keyboard
// (gone) or one (!gone), bounded.
func (a *Server) WaitKeyboard(t testing.TB, chat int64, id int, gone bool) {
	t.Helper()
	a.waitFor(t, func() bool { return (len(a.cb.markups[msgKey{chat, id}]) == 0) == gone }, func() string {
		return fmt.Sprintf("message %d of chat %d: keyboard %v, want gone=%v", id, chat, a.cb.markups[msgKey{chat, id}], gone)
	})
}

// CheckAnswers fails the test unless every callback query sent so far
// was answered exactly once (no refused answers either).
func (a *Server) CheckAnswers(t testing.TB) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	n := map[string]int{}
	for _, ans := range a.cb.answers {
		if ans.Refused {
			t.Errorf("answerCallbackQuery refused: %+v", ans)
			continue
		}
		n[ans.QueryID]++
	}
	for _, qid := range a.cb.order {
		if n[qid] != 1 {
			t.Errorf("callback query %s answered %d times, want once", qid, n[qid])
		}
	}
}

// Text is the text message id of chat shows now.
func (a *Server) Text(chat int64, id int) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i, ok := a.stream.index[msgKey{chat, id}]; ok {
		return a.sent[i].Text
	}
	return ""
}
