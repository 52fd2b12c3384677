// Package telegramtest is a local Bot API server for tests: it speaks the
// wire format the real client library uses (form-encoded POSTs to
// /bot<token>/<method>, {"ok":…,"result":…} answers) and keeps getUpdates'
// rules: asking for offset N confirms — drops — every update below N (a
// negative N keeps only the last -N), at most limit updates come back (1–100,
// default 100), timeout seconds of long polling (default 0; timed on the
// server's clock, SetClock), and a second getUpdates while one is waiting
// ends the first with 409 Conflict. Forum
// topics are as in Telegram: a pushed topic message opens its topic, and a
// send with message_thread_id answers 400 "message thread not found" for a
// topic its chat does not have (or deleted) and 400 TOPIC_CLOSED for a
// closed one; a send without it goes to the chat (a forum's General topic).
// An album is one update per item sharing a media_group_id (Server.PushAlbum).
// A bot cannot start a private chat: a send to a user who blocked it, or
// (RefuseUnstarted) who never wrote to it privately, answers 403
// (private.go).
package telegramtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The bot the server pretends to be.
const (
	Token   = "123456:TEST-token_abc"
	BotID   = 999
	BotName = "gate_bot"
)

// Server is the fake Bot API; mount it on an httptest.Server.
type Server struct {
	t testing.TB

	mu       sync.Mutex
	cond     *sync.Cond
	updates  []map[string]any
	pushed   []map[string]any // every update queued, confirmed or not (Replay)
	nextID   int
	nextMsg  int
	albums   int // media groups made (Server.NewAlbum)
	sent     []Sent
	actions  int
	commands string
	webhook  map[string]string
	fail429  int                    // sendMessage answers 429 this many times first
	conflict int                    // getUpdates answers 409 this many times first
	bare     map[string]bareFailure // FailBare
	polls    int
	calls    []Call
	files    files
	// waiting is the getUpdates request now waiting, if any; a newer one
	// ends it with 409, as Telegram does.
	waiting   *poller
	conflicts int // live long polls ended by a newer one

	// failParse: the next HTML messages refused as unparsable, valid or not
	failParse int
	sentModes []string    // parse_mode of each of sent
	stream    streamState // sendMessageDraft and editMessageText
	topics    topics
	cb        callbackState
	private   privateState // who may be written to privately (private.go)
	// allowed are the update kinds the last getUpdates (or setWebhook)
	// asked for with allowed_updates (nil: every kind); as Telegram does,
	// the setting stays until changed and other updates are not delivered.
	allowed []string
	uploads []Upload                 // files sent (uploads.go)
	holds   map[string]chan struct{} // methods held (Server.Hold)
	losses  map[string]chan struct{} // methods whose answers are held (Server.LoseAnswer)
	cuts    map[string]int           // answers to cut, by method (Server.CutAnswers)
	drops   map[string]int           // requests to drop unread, by method (Server.DropRequests)
}

// Call is one request the bot made: its method and form parameters.
type Call struct {
	Method string
	Params url.Values
	At     time.Time // when it arrived, on the server's clock (SetClock)
}

type poller struct {
	r          *http.Request
	terminated bool
	ended      bool // EndPoll: answer now, empty
}

// Sent is a message the bot sent.
type Sent struct {
	ChatID  int64
	Text    string
	ReplyTo int
	Thread  int // message_thread_id: the topic it went to, 0 for none
}

// New returns an empty server.
func New(t testing.TB) *Server {
	a := &Server{t: t, nextID: 1, nextMsg: 1}
	a.cond = sync.NewCond(&a.mu)
	return a
}

func (a *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	method := strings.TrimPrefix(r.URL.Path, "/bot"+Token+"/")
	if ch := a.losing(method); ch != nil {
		a.serveLosing(ch, w, r)
		return
	}
	if a.dropping(method) {
		a.closeConn(w)
		return
	}
	if a.cutting(method) {
		a.serveCut(w, r)
		return
	}
	a.serve(w, r)
}

func (a *Server) serve(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/file/") {
		a.serveFile(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	prefix := "/bot" + Token + "/"
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, prefix) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"ok":false,"error_code":401,"description":"Unauthorized"}`)
		return
	}
	body := &cutBody{ReadCloser: r.Body}
	r.Body = body
	if err := parseRequest(r); err != nil {
		if body.cut != nil {
			// The client went away while its body was going up (a
			// cancelled call, a killed process): like the Bot API, the
			// fake never had the request whole and does not act on it.
			panic(http.ErrAbortHandler)
		}
		a.t.Errorf("bad form: %v", err)
	}
	method := strings.TrimPrefix(r.URL.Path, prefix)
	a.mu.Lock()
	a.calls = append(a.calls, Call{Method: method, Params: r.Form, At: a.clockNow()})
	a.cond.Broadcast()
	a.mu.Unlock()
	if !a.held(method, r) {
		return // the client went away while held
	}
	a.mu.Lock()
	if f := a.bare[method]; f.n > 0 {
		a.bare[method] = bareFailure{status: f.status, n: f.n - 1}
		a.mu.Unlock()
		w.WriteHeader(f.status)
		fmt.Fprint(w, `{"ok":false}`)
		return
	}
	a.mu.Unlock()
	ok := func(result any) {
		json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": result})
	}
	switch method {
	case "getMe":
		ok(map[string]any{"id": BotID, "is_bot": true, "first_name": "Gate", "username": BotName})
	case "getUpdates":
		a.mu.Lock()
		if a.conflict > 0 {
			a.conflict--
			a.mu.Unlock()
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"ok":false,"error_code":409,"description":"Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"}`)
			return
		}
		a.mu.Unlock()
		offset, _ := strconv.Atoi(r.FormValue("offset"))
		timeout, _ := strconv.Atoi(r.FormValue("timeout"))
		limit := 100
		if v := r.FormValue("limit"); v != "" {
			// The Bot API server clamps limit into 1–100.
			n, _ := strconv.Atoi(v)
			limit = min(max(n, 1), 100)
		}
		if !a.noteAllowed(w, r) {
			return
		}
		updates, conflict := a.poll(r, offset, limit, time.Duration(timeout)*time.Second)
		if conflict {
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"ok":false,"error_code":409,"description":"Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"}`)
			return
		}
		ok(updates)
	case "sendMessage":
		a.mu.Lock()
		if a.fail429 > 0 {
			a.fail429--
			a.mu.Unlock()
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 3","parameters":{"retry_after":3}}`)
			return
		}
		if a.refusePrivate(w, r) || a.refuseEntities(w, r) {
			a.mu.Unlock()
			return
		}
		if a.refuseLength(w, r, "message is too long") || a.refuseThread(w, r) {
			a.mu.Unlock()
			return
		}
		kb, _, refused := markupOf(w, r)
		if refused {
			a.mu.Unlock()
			return
		}
		chat, _ := strconv.ParseInt(r.FormValue("chat_id"), 10, 64)
		replyTo, _ := strconv.Atoi(r.FormValue("reply_to_message_id"))
		thread := threadOf(r)
		a.sent = append(a.sent, Sent{ChatID: chat, Text: r.FormValue("text"), ReplyTo: replyTo, Thread: thread})
		a.sentModes = append(a.sentModes, r.FormValue("parse_mode"))
		id := a.nextMsg
		a.nextMsg++
		a.noteSent(chat, id)
		a.setMarkup(msgKey{chat, id}, kb)
		msg := a.withMarkup(botMessage(chat, id, thread, r.FormValue("text")), msgKey{chat, id})
		a.cond.Broadcast()
		a.mu.Unlock()
		ok(msg)
	case "sendChatAction":
		a.mu.Lock()
		if a.refusePrivate(w, r) || a.refuseThread(w, r) {
			a.mu.Unlock()
			return
		}
		a.actions++
		a.mu.Unlock()
		ok(true)
	case "setMyCommands":
		a.mu.Lock()
		a.commands = r.FormValue("commands")
		a.mu.Unlock()
		ok(true)
	case "setWebhook":
		if !a.noteAllowed(w, r) {
			return
		}
		a.mu.Lock()
		a.webhook = map[string]string{"url": r.FormValue("url"), "secret_token": r.FormValue("secret_token")}
		a.mu.Unlock()
		ok(true)
	case "deleteWebhook":
		ok(true)
	case "getFile":
		a.getFile(w, r)
	case "deleteMessage":
		a.serveDelete(w, r)
	default:
		if a.serveStreaming(method, w, r) || a.serveCallbacks(method, w, r) || a.serveUploads(method, w, r) {
			return
		}
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"ok":false,"error_code":404,"description":"Not Found: method %s"}`, method)
	}
}

// poll answers getUpdates: confirm below offset, then wait (up to timeout,
// or until the client goes away, or a newer getUpdates ends this one) for
// an update at or above it, and return at most limit of them.
func (a *Server) poll(r *http.Request, offset, limit int, timeout time.Duration) ([]map[string]any, bool) {
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-r.Context().Done():
		case <-stop:
		case <-time.After(timeout):
		}
		a.mu.Lock()
		a.cond.Broadcast()
		a.mu.Unlock()
	}()
	a.mu.Lock()
	defer a.mu.Unlock()
	// The timeout runs on the server's clock (SetClock): with a fake one
	// a long poll ends when the test moves the clock past it (and Pokes).
	deadline := a.clockNow().Add(timeout)
	a.polls++
	if prev := a.waiting; prev != nil {
		prev.terminated = true
		if prev.r.Context().Err() == nil {
			a.conflicts++
		}
		a.cond.Broadcast()
	}
	me := &poller{r: r}
	a.waiting = me
	a.cond.Broadcast() // WaitPolling
	defer func() {
		if a.waiting == me {
			a.waiting = nil
		}
	}()
	for {
		if offset < 0 {
			// A negative offset keeps the last -offset updates and forgets
			// the ones before them.
			a.updates = a.updates[max(len(a.updates)+offset, 0):]
			offset = 0
		}
		kept := a.updates[:0]
		for _, u := range a.updates {
			if u["update_id"].(int) >= offset && a.allowedLocked(u) {
				kept = append(kept, u)
			}
		}
		a.updates = kept
		if me.terminated {
			return nil, true
		}
		if me.ended {
			return []map[string]any{}, false
		}
		if len(a.updates) > 0 || !a.clockNow().Before(deadline) || r.Context().Err() != nil {
			out := make([]map[string]any, min(len(a.updates), limit))
			copy(out, a.updates)
			return out, false
		}
		a.cond.Wait()
	}
}

// Push queues an update carrying message and returns the message id; a
// topic message registers its topic (Server.noteTopic).
func (a *Server) Push(message map[string]any) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.noteTopic(message)
	id := a.nextMsg
	a.nextMsg++
	message["message_id"] = id
	message["date"] = 1
	a.queue(map[string]any{"update_id": a.nextID, "message": message})
	a.nextID++
	a.cond.Broadcast()
	return id
}

// queue adds update u, under a.mu.
func (a *Server) queue(u map[string]any) {
	a.notePrivate(u)
	a.updates = append(a.updates, u)
	a.pushed = append(a.pushed, u)
}

// Replay queues again every update from update id from on that the bot
// confirmed, as they were: as if the getUpdates calls that confirmed them
// never reached Telegram (the bot died before they were sent).
func (a *Server) Replay(from int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	queued := map[int]bool{}
	for _, u := range a.updates {
		queued[u["update_id"].(int)] = true
	}
	var again []map[string]any
	for _, u := range a.pushed {
		if id := u["update_id"].(int); id >= from && !queued[id] {
			again = append(again, u)
		}
	}
	a.updates = append(again, a.updates...)
	slices.SortFunc(a.updates, func(x, y map[string]any) int { return x["update_id"].(int) - y["update_id"].(int) })
	a.cond.Broadcast()
}

// PushUpdate queues an update of another kind (edited_message, …).
func (a *Server) PushUpdate(kind string, body map[string]any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	body["message_id"] = a.nextMsg
	a.nextMsg++
	body["date"] = 1
	a.queue(map[string]any{"update_id": a.nextID, kind: body})
	a.nextID++
	a.cond.Broadcast()
}

// PushEdit queues an edited_message update: message (as pushed, with
// its message_id) edited at editDate to text.
func (a *Server) PushEdit(message map[string]any, editDate int, text string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	body := map[string]any{}
	for k, v := range message {
		body[k] = v
	}
	delete(body, "entities")
	body["text"] = text
	body["edit_date"] = editDate
	a.queue(map[string]any{"update_id": a.nextID, "edited_message": body})
	a.nextID++
	a.cond.Broadcast()
}

// noteAllowed keeps a request's allowed_updates; a malformed one is
// refused with 400.
func (a *Server) noteAllowed(w http.ResponseWriter, r *http.Request) bool {
	v := r.FormValue("allowed_updates")
	if v == "" {
		return true
	}
	var kinds []string
	if err := json.Unmarshal([]byte(v), &kinds); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"ok":false,"error_code":400,"description":"Bad Request: can't parse allowed updates"}`)
		return false
	}
	a.mu.Lock()
	a.allowed = kinds
	a.mu.Unlock()
	return true
}

// allowedLocked reports whether update u is of a kind the bot asked for.
func (a *Server) allowedLocked(u map[string]any) bool {
	if len(a.allowed) == 0 {
		return true
	}
	for _, kind := range a.allowed {
		if _, ok := u[kind]; ok {
			return true
		}
	}
	return false
}

// Messages returns what the bot sent so far.
func (a *Server) Messages() []Sent {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Sent(nil), a.sent...)
}

// Commands is the JSON the bot gave setMyCommands.
func (a *Server) Commands() string { a.mu.Lock(); defer a.mu.Unlock(); return a.commands }

// Actions counts sendChatAction calls.
func (a *Server) Actions() int { a.mu.Lock(); defer a.mu.Unlock(); return a.actions }

// Webhook is what setWebhook was given.
func (a *Server) Webhook() map[string]string { a.mu.Lock(); defer a.mu.Unlock(); return a.webhook }

// Fail429 makes the next n sendMessage calls answer 429 retry_after 3.
func (a *Server) Fail429(n int) { a.mu.Lock(); a.fail429 = n; a.mu.Unlock() }

// ParseModes returns the parse_mode of each message Messages returns, in
// the same order ("" for plain text).
func (a *Server) ParseModes() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.sentModes...)
}

// FailParse makes the next n messages sent with parse_mode HTML answer 400
// "can't parse entities" even when their HTML is valid, as Telegram does
// for markup it cannot take.
func (a *Server) FailParse(n int) { a.mu.Lock(); a.failParse = n; a.mu.Unlock() }

// refuseEntities answers 400 "can't parse entities", as the Bot API does,
// when r carries parse_mode HTML and its text fails CheckHTML (or FailParse
// asked for a refusal), and reports whether it did. Methods that take a
// parse_mode (sendMessage, editMessageText) call it, under a.mu, before
// taking the message.
func (a *Server) refuseEntities(w http.ResponseWriter, r *http.Request) bool {
	mode := r.FormValue("parse_mode")
	if !strings.EqualFold(mode, "HTML") {
		return false
	}
	why := ""
	if err := CheckHTML(r.FormValue("text")); err != nil {
		why = err.Error()
	} else if a.failParse > 0 {
		a.failParse--
		why = "refused by FailParse"
	} else {
		return false
	}
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]any{"ok": false, "error_code": 400,
		"description": "Bad Request: can't parse entities: " + why})
	return true
}

type bareFailure struct{ status, n int }

// FailBare makes the next n calls of method answer HTTP status with a
// bare {"ok":false}: no error_code, no description, as a Bot API server
// (or a proxy before it) in trouble may.
func (a *Server) FailBare(method string, status, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.bare == nil {
		a.bare = map[string]bareFailure{}
	}
	a.bare[method] = bareFailure{status: status, n: n}
}

// Conflict makes the next n getUpdates calls answer 409.
func (a *Server) Conflict(n int) { a.mu.Lock(); a.conflict = n; a.mu.Unlock() }

// Calls returns the requests made so far for method ("" for all).
func (a *Server) Calls(method string) []Call {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Call
	for _, c := range a.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Conflicts counts getUpdates requests that were still waiting for their
// client when a newer one ended them: two pollers at once.
func (a *Server) Conflicts() int { a.mu.Lock(); defer a.mu.Unlock(); return a.conflicts }

// EndPoll ends the waiting getUpdates, if any, at once with no updates —
// a long poll that comes back empty before its timeout, as Telegram's
// does now and then.
func (a *Server) EndPoll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waiting != nil {
		a.waiting.ended = true
		a.cond.Broadcast()
	}
}

// Pending counts updates not yet confirmed.
func (a *Server) Pending() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.updates) }

// LastUpdateID is the id of the newest update pushed.
func (a *Server) LastUpdateID() int { a.mu.Lock(); defer a.mu.Unlock(); return a.nextID - 1 }
