package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/browsertest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// memoryEnv is an admin env whose WebSocket users keep up to three notes
// (memory on), and whose Telegram users' memory is off; notes are
// written on its clock.
func memoryEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, agent.Echo{}, envOptions{managerClock: true, policies: map[string]sessions.Policy{
		"websocket": {MaxHistory: 10, Memory: sessions.MemoryPolicy{Default: sessions.MemorySettings{Enabled: true, MaxNotes: 3}}},
	}})
}

// keep stores a note of user directly, as its author wrote it.
func (e *env) keep(user, text, author string) int64 {
	e.t.Helper()
	n := &ledger.Note{UserKey: user, Text: text, Author: author, CreatedAt: e.clock.Now()}
	if ok, err := e.db.AddNote(context.Background(), n, 0); err != nil || !ok {
		e.t.Fatal(ok, err)
	}
	e.clock.Advance(time.Minute)
	return n.ID
}

// post calls the API as alice with a body, and returns the status and
// the answer.
func (e *env) post(path, body string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// noteTexts is a user's notes as the API lists them, "author:text|…".
func (e *env) noteTexts(user string) string {
	e.t.Helper()
	var got userNotes
	e.call("GET", "/admin/api/users/"+user+"/notes", http.StatusOK, &got)
	var parts []string
	for _, n := range got.Notes {
		if n.UserKey != user {
			e.t.Fatalf("%s's notes list one of %s: %+v", user, n.UserKey, n)
		}
		parts = append(parts, n.Author+":"+n.Text)
	}
	return strings.Join(parts, "|")
}

// The operator lists a user's notes, newest first, with whether the
// user's memory is on; adds one written as the operator (where memory is
// off too, within the user's limit); forgets one — only of the user
// named, never another's by its id — or all. Bad user keys, ids and
// bodies are refused and change nothing, and every action is logged
// with who did it.
func TestMemoryAPI(t *testing.T) {
	e := memoryEnv(t)
	tea := e.keep("websocket:ann", "Ann drinks tea", ledger.NoteByUser)
	e.keep("websocket:ann", "Ann works on Zephyr", ledger.NoteByModel)
	bobs := e.keep("websocket:bob", "Bob's note", ledger.NoteByUser)

	var got userNotes
	e.call("GET", "/admin/api/users/websocket:ann/notes", http.StatusOK, &got)
	if got.User != "websocket:ann" || !got.Enabled || len(got.Notes) != 2 || got.Notes[1].ID != tea || got.Notes[0].Text != "Ann works on Zephyr" {
		t.Fatalf("ann's notes: %+v", got)
	}
	e.call("GET", "/admin/api/users/telegram:dm:42/notes", http.StatusOK, &got)
	if got.Enabled || got.Notes == nil || len(got.Notes) != 0 {
		t.Fatalf("a user with no notes, memory off: %+v", got)
	}

	// Added by the operator: kept as theirs, without a source; where the
	// user's memory is off too.
	code, body := e.post("/admin/api/users/websocket:ann/notes", `{"text":"  Ann's account is\nthe family plan "}`)
	var added ledger.Note
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &added) != nil || added.Author != ledger.NoteByOperator ||
		added.Text != "Ann's account is the family plan" || added.UserKey != "websocket:ann" || added.ConversationID != "" {
		t.Fatalf("add: %d %s", code, body)
	}
	if code, body := e.post("/admin/api/users/telegram:dm:42/notes", `{"text":"prefers voice notes"}`); code != http.StatusCreated {
		t.Fatalf("add where memory is off: %d %s", code, body)
	}
	// Refused: over the limit, bad notes and bodies, bad user keys.
	for _, c := range []struct {
		path, body string
		code       int
		says       string
	}{
		{"/admin/api/users/websocket:ann/notes", `{"text":"a fourth"}`, http.StatusConflict, "forget one first"},
		{"/admin/api/users/websocket:bob/notes", `{"text":""}`, http.StatusBadRequest, "empty"},
		{"/admin/api/users/websocket:bob/notes", `{"text":"` + strings.Repeat("x", sessions.MaxNoteText+1) + `"}`, http.StatusBadRequest, "at most"},
		{"/admin/api/users/websocket:bob/notes", `{}`, http.StatusBadRequest, "text"},
		{"/admin/api/users/websocket:bob/notes", `{"text":"x","user":"websocket:ann"}`, http.StatusBadRequest, "unknown field"},
		{"/admin/api/users/websocket:bob/notes", `{"text":"x"} {"text":"y"}`, http.StatusBadRequest, "one JSON object"},
		{"/admin/api/users/websocket:bob/notes", `text=x`, http.StatusBadRequest, "JSON"},
		{"/admin/api/users/sms:1/notes", `{"text":"x"}`, http.StatusBadRequest, "user key"},
		{"/admin/api/users/websocket:/notes", `{"text":"x"}`, http.StatusBadRequest, "user key"},
		{"/admin/api/users/telegram:group:-100/notes", `{"text":"x"}`, http.StatusBadRequest, "telegram:group:-100:USER_ID"},
		{"/admin/api/users/telegram:dm:42:topic:7/notes", `{"text":"x"}`, http.StatusBadRequest, `names a Telegram topic`},
	} {
		if code, body := e.post(c.path, c.body); code != c.code || !strings.Contains(body, c.says) {
			t.Fatalf("POST %s %.40s: %d %s; want %d saying %q", c.path, c.body, code, body, c.code, c.says)
		}
	}
	if got := e.noteTexts("websocket:bob"); got != "user:Bob's note" {
		t.Fatalf("bob's notes after refused adds: %s", got)
	}

	// Forget: another user's id is not found under ann, and stays.
	e.call("DELETE", fmt.Sprintf("/admin/api/users/websocket:ann/notes/%d", bobs), http.StatusNotFound, nil)
	for _, bad := range []string{"abc", "0", "-1"} {
		e.call("DELETE", "/admin/api/users/websocket:ann/notes/"+bad, http.StatusBadRequest, nil)
	}
	var forgot struct{ Forgotten int64 }
	e.call("DELETE", fmt.Sprintf("/admin/api/users/websocket:ann/notes/%d", tea), http.StatusOK, &forgot)
	if forgot.Forgotten != 1 {
		t.Fatalf("forget one: %+v", forgot)
	}
	e.call("DELETE", fmt.Sprintf("/admin/api/users/websocket:ann/notes/%d", tea), http.StatusNotFound, nil)
	if got := e.noteTexts("websocket:ann"); got != "operator:Ann's account is the family plan|model:Ann works on Zephyr" {
		t.Fatalf("ann's notes after forgetting one: %s", got)
	}
	e.call("DELETE", "/admin/api/users/websocket:ann/notes", http.StatusOK, &forgot)
	if forgot.Forgotten != 2 || e.noteTexts("websocket:ann") != "" {
		t.Fatalf("forget all: %+v, left %q", forgot, e.noteTexts("websocket:ann"))
	}
	if got := e.noteTexts("websocket:bob"); got != "user:Bob's note" {
		t.Fatalf("bob's notes after ann's were forgotten: %s", got)
	}

	var acts []string
	for _, rec := range e.logs.records(t) {
		if rec["msg"] == "admin action" && (rec["action"] == "remember" || rec["action"] == "forget") {
			acts = append(acts, fmt.Sprintf("%v %v %v %v", rec["who"], rec["action"], rec["target"], rec["note"]))
		}
	}
	want := []string{"alice remember websocket:ann <nil>", "alice remember telegram:dm:42 <nil>", "alice remember websocket:ann <nil>",
		"alice remember websocket:bob <nil>", "alice remember websocket:bob <nil>",
		fmt.Sprintf("alice forget websocket:ann %d", bobs), fmt.Sprintf("alice forget websocket:ann %d", tea),
		fmt.Sprintf("alice forget websocket:ann %d", tea), "alice forget websocket:ann all"}
	if fmt.Sprint(acts) != fmt.Sprint(want) {
		t.Fatalf("logged:\n%s\nwant:\n%s", strings.Join(acts, "\n"), strings.Join(want, "\n"))
	}
}

// The page's Memory button beside a conversation opens the Memory tab
// on the conversation's user: their notes, shown as text; the operator
// adds one, forgets one and then all, each confirmed; another user's
// notes stay.
func TestAdminMemoryInBrowser(t *testing.T) {
	e := memoryEnv(t)
	e.connect("ann").say("a-1", "hello from ann")
	e.keep("websocket:ann", `<img src=x onerror=alert(1)><b>bold</b>`, ledger.NoteByUser)
	zephyr := e.keep("websocket:ann", "Ann works on Zephyr", ledger.NoteByModel)
	e.keep("websocket:bob", "Bob's note", ledger.NoteByUser)

	const shown = `Array.from(document.querySelectorAll('#notes-rows tr[data-id]')).map(tr => tr.querySelector('.note-text').textContent).join('|')`
	ctx := browsertest.New(t, 1200, 900)
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.url+"/admin/"),
		chromedp.WaitVisible("#token"),
		chromedp.Evaluate[chromedp.Void](`window.alerted = false; window.alert = () => { window.alerted = true; }; window.confirm = () => true`),
		chromedp.SendKeys("#token", aliceToken),
		chromedp.Click("#save"),
		browsertest.WaitText("#sessions td", "websocket:ann"),
		chromedp.Click("#sessions tr"),
		browsertest.WaitText("#conv-memory", "Memory (2 notes)"),
		chromedp.Click("#conv-memory"),
		browsertest.WaitJS(`!document.getElementById('memory-view').hidden && document.getElementById('m-user').value === 'websocket:ann'`),
		browsertest.WaitJS(shown+` === 'Ann works on Zephyr|<img src=x onerror=alert(1)><b>bold</b>'`),
		browsertest.WaitText("#memory-line", "websocket:ann: 2 notes; memory is on"),
		chromedp.SendKeys("#note-text", "Ann's account is the family plan"),
		chromedp.Click("#note-form button[type=submit]"),
		browsertest.WaitJS(shown+` === "Ann's account is the family plan|Ann works on Zephyr|<img src=x onerror=alert(1)><b>bold</b>"`),
		browsertest.WaitJS(`document.querySelector('#notes-rows tr td:nth-child(2)').textContent === 'operator' && document.getElementById('note-text').value === ''`),
		chromedp.Click(fmt.Sprintf(`#notes-rows tr[data-id="%d"] button.forget`, zephyr)),
		browsertest.WaitJS(shown+` === "Ann's account is the family plan|<img src=x onerror=alert(1)><b>bold</b>"`),
	)
	if err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('memory-view').innerText + '\n' + document.getElementById('error').innerText`))
		t.Fatalf("memory tab: %v\n%s", err, text)
	}
	safe, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelectorAll('img, b').length === 0 && !window.alerted`))
	if err != nil || !safe {
		t.Fatalf("a note's markup became page elements, or ran: %v", err)
	}
	if got := e.noteTexts("websocket:ann"); got != "operator:Ann's account is the family plan|user:<img src=x onerror=alert(1)><b>bold</b>" {
		t.Fatalf("ann's notes after the page's add and forget: %s", got)
	}

	// Forget all asks first: refused, nothing goes; accepted, all go.
	err = chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`window.asked = ''; window.confirm = (q) => { window.asked = q; return false; }`),
		chromedp.Click("#forget-all"),
		browsertest.WaitJS(`window.asked.startsWith('Forget all 2 notes of websocket:ann?')`),
	)
	if err != nil {
		t.Fatalf("forget all, refused: %v", err)
	}
	if got := e.noteTexts("websocket:ann"); strings.Count(got, "|") != 1 {
		t.Fatalf("ann's notes after a refused forget all: %s", got)
	}
	err = chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.Click("#forget-all"),
		browsertest.WaitJS(shown+` === ''`),
		browsertest.WaitText("#memory-line", "websocket:ann: no notes; memory is on"),
	)
	if err != nil {
		t.Fatalf("forget all: %v", err)
	}
	if got := e.noteTexts("websocket:ann"); got != "" {
		t.Fatalf("ann's notes after forget all: %s", got)
	}
	if got := e.noteTexts("websocket:bob"); got != "user:Bob's note" {
		t.Fatalf("bob's notes: %s", got)
	}
}
