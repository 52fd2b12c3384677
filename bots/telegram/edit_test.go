package telegram

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
)

// editNotes tells the test what each edit did, once the bot applied it.
type editNotes struct {
	*sessions.Manager
	edits chan<- sessions.EditOutcome
}

func (s editNotes) Edit(ctx context.Context, in sessions.Inbound, originalID string, h sessions.Hooks) (sessions.EditOutcome, error) {
	out, err := s.Manager.Edit(ctx, in, originalID, h)
	if err == nil {
		s.edits <- out
	}
	return out, err
}

// nextEdit is the next edit the bot applied, bounded.
func nextEdit(t *testing.T, edits <-chan sessions.EditOutcome) sessions.EditOutcome {
	t.Helper()
	select {
	case ed := <-edits:
		return ed
	case <-time.After(20 * time.Second):
		t.Fatal("no edit was applied")
		return sessions.EditOutcome{}
	}
}

// editSetup is a bot whose manager waits out Telegram's debounce on c.
func editSetup(c *clocktest.Clock, ag *calls, edits chan sessions.EditOutcome, opts Options) setup {
	return setup{agent: ag, opts: opts, policies: busy(sessions.BusyPolicy{Debounce: tgDebounce}),
		manager: func(o *sessions.Options) { o.Now, o.After = c.Now, c.After },
		sess:    func(m *sessions.Manager) Sessions { return allDoors(editNotes{Manager: m, edits: edits}) }}
}

// TestEditedMessage: an edit that arrives while its message waits out
// the debounce replaces the text — one agent call, with the edited text,
// one reply; an edit after the reply is answered once more, as a new
// message that quotes the edit, in reply to the edited message, and a
// repeated update of that edit is not answered again.
func TestEditedMessage(t *testing.T) {
	api := telegramtest.New(t)
	c := clocktest.New(time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC))
	ag := &calls{}
	edits := make(chan sessions.EditOutcome, 4)
	h := start(t, api, t.TempDir(), editSetup(c, ag, edits, Options{}))
	first := telegramtest.DM(7, "helo wrld")
	id := api.Push(first)
	if !c.WaitTimers(1, 20*time.Second) {
		t.Fatal("the message's turn did not wait out the debounce")
	}
	api.PushEdit(first, 100, "hello world")
	if ed := nextEdit(t, edits); !ed.Replaced {
		t.Fatalf("edit inside the debounce = %+v, want the text replaced", ed)
	}
	c.Advance(2 * tgDebounce)
	sent := api.WaitSent(t, 1)
	if want := (telegramtest.Sent{ChatID: 7, Text: "echo: hello world (history: 0)", ReplyTo: id}); sent[0] != want {
		t.Fatalf("sent %+v, want %+v", sent[0], want)
	}
	if got := ag.byKey()[sessions.TelegramDMKey(7)]; len(got) != 1 || !slices.Equal(got[0], []string{"hello world"}) {
		t.Fatalf("agent calls %q, want one with the edited text", got)
	}

	// After the reply: a new message quoting the edit.
	api.PushEdit(first, 200, "hello world!")
	if ed := nextEdit(t, edits); ed.Replaced || ed.Ticket == nil {
		t.Fatalf("edit after the reply = %+v, want a new message", ed)
	}
	if !c.WaitTimers(2, 20*time.Second) {
		t.Fatal("the edit's turn did not wait out the debounce")
	}
	c.Advance(2 * tgDebounce)
	quoted := sessions.EditedText("hello world", "hello world!")
	sent = api.WaitSent(t, 2)
	if want := (telegramtest.Sent{ChatID: 7, Text: fmt.Sprintf("echo: %s (history: 2)", quoted), ReplyTo: id}); sent[1] != want {
		t.Fatalf("sent %+v, want %+v", sent[1], want)
	}
	if got := ag.byKey()[sessions.TelegramDMKey(7)]; len(got) != 2 || !slices.Equal(got[1], []string{quoted}) {
		t.Fatalf("agent calls %q, want a second one with the quoted edit", got)
	}

	// The same edit again (a repeated update) sends nothing: the next
	// message's reply is the next one sent.
	api.PushEdit(first, 200, "hello world!")
	nextEdit(t, edits)
	api.WaitConfirmed(t, api.LastUpdateID())
	next := api.Push(telegramtest.DM(7, "thanks"))
	if !c.WaitTimers(3, 20*time.Second) {
		t.Fatal("the next message's turn did not wait out the debounce")
	}
	c.Advance(2 * tgDebounce)
	sent = api.WaitSent(t, 3)
	if len(sent) != 3 || sent[2].ReplyTo != next || ag.count() != 3 {
		t.Fatalf("sent %+v with %d agent calls, want the next message's reply third", sent, ag.count())
	}
	rows := transcript(t, h, sessions.TelegramDMKey(7))
	if len(rows) != 6 || rows[0].Content != "hello world" || rows[2].Content != quoted {
		t.Fatalf("transcript %+v", rows)
	}
}

// TestEditsIgnored: with edits: ignore the bot does not ask for edits,
// and one that comes anyway changes nothing and is not answered.
func TestEditsIgnored(t *testing.T) {
	api := telegramtest.New(t)
	c := clocktest.New(time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC))
	ag := &calls{}
	edits := make(chan sessions.EditOutcome, 4)
	h := start(t, api, t.TempDir(), editSetup(c, ag, edits, Options{Edits: EditsIgnore}))
	first := telegramtest.DM(7, "helo")
	id := api.Push(first)
	if !c.WaitTimers(1, 20*time.Second) {
		t.Fatal("the message's turn did not wait out the debounce")
	}
	api.PushEdit(first, 100, "hello")
	api.WaitPending(t, 0) // dropped: not asked for
	c.Advance(2 * tgDebounce)
	if sent := api.WaitSent(t, 1); sent[0].Text != "echo: helo (history: 0)" || sent[0].ReplyTo != id {
		t.Fatalf("sent %+v, want the unedited message answered", sent[0])
	}
	for _, call := range api.Calls("getUpdates") {
		if v := call.Params.Get("allowed_updates"); v != `["message","callback_query"]` {
			t.Fatalf("getUpdates asked for %s", v)
		}
	}
	next := api.Push(telegramtest.DM(7, "thanks"))
	if !c.WaitTimers(2, 20*time.Second) {
		t.Fatal("the next message's turn did not wait out the debounce")
	}
	c.Advance(2 * tgDebounce)
	if sent := api.WaitSent(t, 2); len(sent) != 2 || sent[1].ReplyTo != next || len(edits) != 0 {
		t.Fatalf("sent %+v, %d edits applied; want only the next message's reply", sent, len(edits))
	}
	if rows := transcript(t, h, sessions.TelegramDMKey(7)); len(rows) != 4 {
		t.Fatalf("transcript %+v", rows)
	}
}
