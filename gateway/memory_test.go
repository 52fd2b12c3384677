package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
)

var memoryClock = time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)

// memoryEnv keeps up to three notes per user, but none for eve, whose
// memory is off; its rate limit lets a test send its frames at once.
func memoryEnv(t *testing.T) *env {
	t.Helper()
	pol := map[string]sessions.Policy{Channel: {MaxHistory: 10, Reset: sessions.ResetPolicy{Mode: sessions.ResetNone},
		Memory: sessions.MemoryPolicy{Default: sessions.MemorySettings{Enabled: true, MaxNotes: 3},
			Users: map[string]sessions.MemorySettings{sessions.WebSocketKey("eve"): {}}}}}
	return newEnv(t, agent.Echo{}, WSOptions{RatePerSecond: 1000, RateBurst: 100}, pol, func() time.Time { return memoryClock })
}

// addNote keeps a note for principal as author, through the manager.
func addNote(t *testing.T, e *env, principal, text, author string) int64 {
	t.Helper()
	n, err := e.mgr.Memory().Remember(context.Background(), sessions.NoteRequest{Channel: Channel, User: sessions.WebSocketKey(principal),
		Text: text, Author: author})
	if err != nil {
		t.Fatal(err)
	}
	return n.ID
}

// notesOf is a memory frame's notes as "id:author:text|…".
func notesOf(t *testing.T, f map[string]any) string {
	t.Helper()
	list, ok := f["notes"].([]any)
	if !ok {
		t.Fatalf("memory frame without notes: %v", f)
	}
	var parts []string
	for _, it := range list {
		n := it.(map[string]any)
		parts = append(parts, fmt.Sprintf("%d:%v:%v", num(n["id"]), n["author"], n["text"]))
	}
	return strings.Join(parts, "|")
}

// The memory frame lists the connection's user's notes, newest first;
// remember keeps one the user wrote (from the conversation shown), forget
// deletes one or all, and each change reaches every connection of the
// session. Another user's id gets the same not_found as an id nobody
// has; the limit, a bad note, memory off and bad frames get error frames
// and change nothing.
func TestMemoryFrames(t *testing.T) {
	e := memoryEnv(t)
	byModel := addNote(t, e, "ann", "Ann works on Zephyr", ledger.NoteByModel)
	evesOld := addNote(t, e, "eve", "kept before eve's memory was turned off", ledger.NoteByOperator)

	ann, _ := e.connect(map[string]any{"user": "ann"})
	ann2, _ := e.connect(map[string]any{"user": "ann"})
	eve, _ := e.connect(map[string]any{"user": "eve"})
	ann.send(map[string]any{"type": "message", "id": "a-1", "text": "hello"})
	conv := ann.expect("reply")
	convID, err := e.db.ActiveConversation(context.Background(), sessions.WebSocketKey("ann"))
	if err != nil || convID == nil {
		t.Fatal(conv, convID, err)
	}

	ann.send(map[string]any{"type": "memory"})
	f := ann.expect("memory")
	if f["enabled"] != true || notesOf(t, f) != fmt.Sprintf("%d:model:Ann works on Zephyr", byModel) {
		t.Fatalf("ann's memory frame %v", f)
	}
	first := f["notes"].([]any)[0].(map[string]any)
	if first["created_at"] != "2026-03-28T12:00:00Z" || first["conversation_id"] != nil {
		t.Fatalf("a note by the model, without a source: %v", first)
	}

	// Remember: both of ann's connections get the list after it; the text
	// is kept as text, on one line.
	ann.send(map[string]any{"type": "remember", "text": "I drink <b>tea</b>,\nnot coffee"})
	var teaID int64
	for _, c := range []*client{ann, ann2} {
		f := c.expect("memory")
		list := f["notes"].([]any)
		tea := list[0].(map[string]any)
		teaID = num(tea["id"])
		if len(list) != 2 || tea["text"] != "I drink <b>tea</b>, not coffee" || tea["author"] != "user" || tea["conversation_id"] != convID.ID {
			t.Fatalf("after remember: %v", f)
		}
	}

	// Eve cannot forget ann's note, and is told what she would be told of
	// an id nobody has.
	eve.send(map[string]any{"type": "forget", "id": teaID})
	refused := eve.expect("error")
	eve.send(map[string]any{"type": "forget", "id": 999_999})
	unknown := eve.expect("error")
	if refused["code"] != "not_found" || refused["message"] != strings.ReplaceAll(unknown["message"].(string), "999999", fmt.Sprint(teaID)) {
		t.Fatalf("eve's forget of ann's note: %v; of no note: %v", refused, unknown)
	}
	eve.send(map[string]any{"type": "forget", "all": true})
	if f := eve.expect("memory"); notesOf(t, f) != "" || f["enabled"] != false {
		t.Fatalf("eve's notes after forgetting all: %v", f)
	}
	if got, _ := e.mgr.Memory().List(context.Background(), sessions.WebSocketKey("ann")); len(got) != 2 {
		t.Fatalf("ann's notes after eve's frames: %+v", got)
	}
	if got, _ := e.mgr.Memory().List(context.Background(), sessions.WebSocketKey("eve")); len(got) != 0 {
		t.Fatalf("eve's note %d outlived her forget all: %+v", evesOld, got)
	}
	// Memory off: eve's remember is refused, and nothing is kept.
	eve.send(map[string]any{"type": "remember", "text": "eve likes jazz"})
	if ef := eve.expect("error"); ef["code"] != "unsupported" || !strings.Contains(ef["message"].(string), "not enabled") {
		t.Fatalf("remember with memory off: %v", ef)
	}

	// The limit (three notes), then bad notes: refused, nothing kept.
	ann.send(map[string]any{"type": "remember", "text": "third"})
	ann.expect("memory")
	ann2.expect("memory")
	ann.send(map[string]any{"type": "remember", "text": "fourth"})
	if ef := ann.expect("error"); ef["code"] != "limit_reached" || !strings.Contains(ef["message"].(string), "forget one first") {
		t.Fatalf("a fourth note: %v", ef)
	}
	for _, text := range []string{"", " \n\t", strings.Repeat("x", sessions.MaxNoteText+1), "nul \x00 inside"} {
		ann.send(map[string]any{"type": "remember", "text": text})
		if ef := ann.expect("error"); ef["code"] != "bad_frame" {
			t.Fatalf("remember %.20q: %v", text, ef)
		}
	}

	// Forget one, then all: both connections follow.
	ann.send(map[string]any{"type": "forget", "id": teaID})
	for _, c := range []*client{ann, ann2} {
		if f := c.expect("memory"); strings.Contains(notesOf(t, f), "tea") || len(f["notes"].([]any)) != 2 {
			t.Fatalf("after forget: %v", f)
		}
	}
	ann.send(map[string]any{"type": "forget", "id": teaID})
	if ef := ann.expect("error"); ef["code"] != "not_found" || !strings.Contains(ef["message"].(string), "forgotten already") {
		t.Fatalf("a second forget: %v", ef)
	}

	for _, bad := range []string{
		`{"type":"forget"}`,
		`{"type":"forget","id":"12"}`,
		`{"type":"forget","id":-3}`,
		`{"type":"forget","all":false}`,
		`{"type":"forget","id":2,"session":"websocket:eve"}`,
		`{"type":"remember","text":"x","user":"eve"}`,
		`{"type":"memory","user":"eve"}`,
		`{"type":"remember","text":"x","id":12}`,
		`{"type":"remember","text":"x","id":""}`,
		`{"type":"remember","text":"x","id":"` + strings.Repeat("i", 129) + `"}`,
	} {
		ann.sendRaw(bad)
		if ef := ann.expect("error"); ef["code"] != "bad_frame" {
			t.Fatalf("%s: %v", bad, ef)
		}
	}

	ann.send(map[string]any{"type": "forget", "all": true})
	for _, c := range []*client{ann, ann2} {
		if f := c.expect("memory"); notesOf(t, f) != "" {
			t.Fatalf("after forget all: %v", f)
		}
	}

	if got, _ := e.mgr.Memory().List(context.Background(), sessions.WebSocketKey("ann")); len(got) != 0 {
		t.Fatalf("ann's notes after forget all: %+v", got)
	}

	// A remember with the client's id, sent again (a resend after a
	// reconnect), keeps one note; the same id from another user is
	// theirs.
	for range 2 {
		ann.send(map[string]any{"type": "remember", "id": "r-1", "text": "I cycle to work"})
		if f := ann.expect("memory"); len(f["notes"].([]any)) != 1 {
			t.Fatalf("remember r-1: %v", f)
		}
		ann2.expect("memory")
	}
}
