package telegramtest

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// streamState is what the streaming calls need: where each sent message
// is (edits change its text in place, keeping its Thread), the drafts
// taken, the server's clock, and the variants that refuse drafts or
// throttle edits.
type streamState struct {
	now          func() time.Time
	drafts       []Draft
	index        map[msgKey]int // chat and message id → index in sent
	refuseDrafts bool
	failDrafts   string // a 400 description every draft is answered with
	editEvery429 int    // every n-th editMessageText answers 429
	editCalls    int
	editsRefused int
	notModified  int
	deleted      map[msgKey]bool // messages the bot deleted (deleteMessage)
}

// Draft is a draft the bot streamed with sendMessageDraft.
type Draft struct {
	ChatID  int64
	DraftID int
	Text    string
	Thread  int // message_thread_id: the topic it was shown in, 0 for none
}

// Drafts returns the drafts sendMessageDraft took so far, in order.
func (a *Server) Drafts() []Draft {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Draft(nil), a.stream.drafts...)
}

type msgKey struct {
	chat int64
	id   int
}

// SetClock makes the server stamp each call (Call.At) with now instead of
// the wall clock, so that a test driving the bot on a fake clock measures
// the bot's pace on that clock, and time getUpdates' timeout on it: a long
// poll then ends when the test moves now past it and calls Poke.
func (a *Server) SetClock(now func() time.Time) {
	a.mu.Lock()
	a.stream.now = now
	a.mu.Unlock()
}

// RefuseDrafts makes sendMessageDraft answer as a Bot API server that
// does not know the method: HTTP 404 {"ok":false,"error_code":404,
// "description":"Not Found"}.
func (a *Server) RefuseDrafts() {
	a.mu.Lock()
	a.stream.refuseDrafts = true
	a.mu.Unlock()
}

// FailDrafts makes every sendMessageDraft answer 400 "Bad Request: " and
// description, as a server that knows the method but will not take it
// from this bot or in this chat.
func (a *Server) FailDrafts(description string) {
	a.mu.Lock()
	a.stream.failDrafts = description
	a.mu.Unlock()
}

// Throttle429Edits makes every n-th editMessageText answer 429 Too Many
// Requests with parameters.retry_after 2, changing nothing.
func (a *Server) Throttle429Edits(n int) {
	a.mu.Lock()
	a.stream.editEvery429 = n
	a.mu.Unlock()
}

// EditsRefused counts editMessageText calls answered 429.
func (a *Server) EditsRefused() int { a.mu.Lock(); defer a.mu.Unlock(); return a.stream.editsRefused }

// clockNow is the time a call is stamped with. Called under a.mu.
func (a *Server) clockNow() time.Time {
	if a.stream.now != nil {
		return a.stream.now()
	}
	return time.Now()
}

// noteSent remembers where message id of chat is in the sent list, for
// editMessageText. Called under a.mu.
func (a *Server) noteSent(chat int64, id int) {
	if a.stream.index == nil {
		a.stream.index = map[msgKey]int{}
	}
	a.stream.index[msgKey{chat, id}] = len(a.sent) - 1
}

// serveStreaming answers sendMessageDraft and editMessageText as the Bot
// API does, and reports whether method was one of them.
func (a *Server) serveStreaming(method string, w http.ResponseWriter, r *http.Request) bool {
	fail := func(code int, body string) {
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}
	switch method {
	case "sendMessageDraft":
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.stream.refuseDrafts {
			fail(http.StatusNotFound, `{"ok":false,"error_code":404,"description":"Not Found"}`)
			return true
		}
		if a.stream.failDrafts != "" {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]any{"ok": false, "error_code": 400, "description": "Bad Request: " + a.stream.failDrafts})
			return true
		}
		draft, _ := strconv.Atoi(r.FormValue("draft_id"))
		if draft == 0 {
			fail(http.StatusBadRequest, `{"ok":false,"error_code":400,"description":"Bad Request: draft_id must be non-zero"}`)
			return true
		}
		if a.refusePrivate(w, r) || a.refuseEntities(w, r) || a.refuseLength(w, r, "text is too long") || a.refuseThread(w, r) {
			return true
		}
		chat, _ := strconv.ParseInt(r.FormValue("chat_id"), 10, 64)
		a.stream.drafts = append(a.stream.drafts, Draft{ChatID: chat, DraftID: draft, Text: r.FormValue("text"), Thread: threadOf(r)})
		a.cond.Broadcast()
		json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": true})
		return true
	case "editMessageText":
		a.mu.Lock()
		defer a.mu.Unlock()
		a.stream.editCalls++
		if n := a.stream.editEvery429; n > 0 && a.stream.editCalls%n == 0 {
			a.stream.editsRefused++
			fail(http.StatusTooManyRequests, `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 2","parameters":{"retry_after":2}}`)
			return true
		}
		chat, _ := strconv.ParseInt(r.FormValue("chat_id"), 10, 64)
		id, _ := strconv.Atoi(r.FormValue("message_id"))
		i, ok := a.stream.index[msgKey{chat, id}]
		if !ok || a.stream.deleted[msgKey{chat, id}] {
			fail(http.StatusBadRequest, `{"ok":false,"error_code":400,"description":"Bad Request: message to edit not found"}`)
			return true
		}
		if a.refuseEntities(w, r) || a.refuseLength(w, r, "MESSAGE_TOO_LONG") {
			return true
		}
		// Without reply_markup the edit removes the message's inline
		// keyboard, as Telegram does.
		kb, _, refused := markupOf(w, r)
		if refused {
			return true
		}
		k := msgKey{chat, id}
		text := r.FormValue("text")
		if a.sent[i].Text == text && sameMarkup(a.cb.markups[k], kb) {
			a.stream.notModified++
			fail(http.StatusBadRequest, `{"ok":false,"error_code":400,"description":"`+errNotModified+`"}`)
			return true
		}
		a.sent[i].Text = text
		a.setMarkup(k, kb)
		a.cond.Broadcast()
		m := a.withMarkup(botMessage(chat, id, a.sent[i].Thread, text), k)
		m["edit_date"] = 2
		json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": m})
		return true
	}
	return false
}

// NotModified counts editMessageText calls refused because the text was
// unchanged.
func (a *Server) NotModified() int { a.mu.Lock(); defer a.mu.Unlock(); return a.stream.notModified }

// DeleteMessage makes a sent message disappear, as if the user deleted
// it: editing it answers "message to edit not found".
func (a *Server) DeleteMessage(chat int64, id int) {
	a.mu.Lock()
	delete(a.stream.index, msgKey{chat, id})
	a.mu.Unlock()
}

// SentIDs returns the message ids of the messages sent so far, in the
// order of Messages.
func (a *Server) SentIDs() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := make([]int, len(a.sent))
	for k, i := range a.stream.index {
		ids[i] = k.id
	}
	return ids
}

func utf16Count(s string) int {
	n := 0
	for _, r := range s {
		n++
		if r >= 0x10000 {
			n++
		}
	}
	return n
}

// WaitCalls waits until cond holds for the calls made so far, or within
// has passed, and reports whether it held; it never fails the test, so
// it may wait on any goroutine. Every request wakes it, and so does Poke;
// cond runs under the server's lock and must not keep calls.
func (a *Server) WaitCalls(cond func(calls []Call) bool, within time.Duration) bool {
	return a.waitUntil(func() bool { return cond(a.calls) }, within)
}

// Poke wakes WaitCalls to test its condition again, for a condition that
// also looks at something other than the calls.
func (a *Server) Poke() {
	a.mu.Lock()
	a.cond.Broadcast()
	a.mu.Unlock()
}

// serveDelete answers deleteMessage as the Bot API does: the message
// disappears (editing it fails from then on) and the call answers true,
// or 400 "message to delete not found" for one that is not there.
func (a *Server) serveDelete(w http.ResponseWriter, r *http.Request) {
	chat, _ := strconv.ParseInt(r.FormValue("chat_id"), 10, 64)
	id, _ := strconv.Atoi(r.FormValue("message_id"))
	a.mu.Lock()
	defer a.mu.Unlock()
	k := msgKey{chat, id}
	if _, ok := a.stream.index[k]; !ok || a.stream.deleted[k] {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"ok":false,"error_code":400,"description":"Bad Request: message to delete not found"}`)
		return
	}
	if a.stream.deleted == nil {
		a.stream.deleted = map[msgKey]bool{}
	}
	a.stream.deleted[k] = true
	a.cond.Broadcast()
	json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": true})
}

// Deleted reports whether the bot deleted message id of chat.
func (a *Server) Deleted(chat int64, id int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stream.deleted[msgKey{chat, id}]
}

// refuseLength answers 400 as the Bot API does when a text is empty or
// over 4096 UTF-16 code units once its entities are parsed (with parse_mode
// HTML the tags do not count and an entity counts as its character), and
// reports whether it did. tooLong is the method's description of a text
// over the limit. Called under a.mu, after refuseEntities.
func (a *Server) refuseLength(w http.ResponseWriter, r *http.Request, tooLong string) bool {
	text := r.FormValue("text")
	if strings.EqualFold(r.FormValue("parse_mode"), "HTML") {
		text = visibleHTML(text)
	}
	why := ""
	switch {
	case strings.TrimSpace(text) == "":
		why = "message text is empty"
	case utf16Count(text) > 4096:
		why = tooLong
	default:
		return false
	}
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]any{"ok": false, "error_code": 400, "description": "Bad Request: " + why})
	return true
}

// visibleHTML is the text Telegram shows for HTML that CheckHTML accepts:
// without its tags, its entities resolved.
func visibleHTML(s string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '<')
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i])
		j := strings.IndexByte(s[i:], '>')
		if j < 0 {
			break
		}
		s = s[i+j+1:]
	}
	return html.UnescapeString(b.String())
}
