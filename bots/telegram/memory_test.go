package telegram

// /remember, /memory and /forget against the fake Bot API, with the real
// session manager and store: a note kept by command is listed with its
// number, day and author as plain text, with a Forget button; a tap
// forgets for the tapper's own user only and edits the list; Forget
// everything asks Yes or Cancel first; where memory is off notes are
// still listed and forgotten but /remember refuses; in a group shared by
// its members each member sees and forgets only their own notes, listed
// in their private chat and never in the group (which is told to start a
// chat with the bot when Telegram refuses the private message); a long
// list is cut within Telegram's limits. Every callback query is answered
// exactly once.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/bots/telegram/tgformat"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// memoryOn is a policy with memory on (at most max notes a user, 0: the
// default) or off.
func memoryOn(on bool, max int) map[string]sessions.Policy {
	return map[string]sessions.Policy{Channel: {MaxHistory: 100, Busy: sessions.BusyPolicy{Mode: sessions.BusyQueue},
		Memory: sessions.MemoryPolicy{Default: sessions.MemorySettings{Enabled: on, MaxNotes: max}}}}
}

// memoryNow is the clock of the memory tests: the day the lists show.
func memoryNow() time.Time { return time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC) }

// notesOf is the text of user's notes, newest first.
func notesOf(t *testing.T, h *harness, user string) []string {
	t.Helper()
	list, err := h.mgr.Memory().List(context.Background(), user)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range list {
		out = append(out, n.Text)
	}
	return out
}

// keepNote keeps a note for user as author wrote it, and returns its id.
func keepNote(t *testing.T, h *harness, user, author, text string) int64 {
	t.Helper()
	n, err := h.mgr.Memory().Remember(context.Background(), sessions.NoteRequest{Channel: Channel, User: user, Text: text, Author: author})
	if err != nil {
		t.Fatal(err)
	}
	return n.ID
}

// forgetButton is the label=data of a note's Forget button on the list
// of chat's notes.
func forgetButton(chat, id int64, text string) string {
	return fmt.Sprintf("Forget #%d: %s=mem:f:%d:%d", id, text, chat, id)
}

// waitText waits until message id of chat shows want, bounded.
func waitText(t *testing.T, api *telegramtest.Server, chat int64, id int, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for api.Text(chat, id) != want {
		if time.Now().After(deadline) {
			t.Fatalf("message %d shows %q, want %q", id, api.Text(chat, id), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMemoryCommandsAndForgetButtons(t *testing.T) {
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), setup{policies: memoryOn(true, 0), now: memoryNow})
	const user = "telegram:dm:7"
	api.Push(telegramtest.DM(7, "/help"))
	if got := api.WaitSent(t, 1)[0].Text; !strings.Contains(got, "/remember — keep a note") || !strings.Contains(got, "/memory — your notes") {
		t.Fatalf("/help lacks the memory commands: %q", got)
	}
	// The menu is set once connected, before the first poll.
	for _, c := range []string{"remember", "memory", "forget"} {
		if !strings.Contains(api.Commands(), `"command":"`+c+`"`) {
			t.Fatalf("setMyCommands lacks /%s: %s", c, api.Commands())
		}
	}
	api.Push(telegramtest.DM(7, "/remember"))
	if got := api.WaitSent(t, 2)[1].Text; got != rememberUsage {
		t.Fatalf("/remember alone answered %q", got)
	}

	api.Push(telegramtest.DM(7, "/remember I prefer\n metric   units"))
	metric := keepNoteID(t, h, user, "I prefer metric units")
	if got := api.WaitSent(t, 3)[2].Text; got != fmt.Sprintf(rememberedText, metric, metric) {
		t.Fatalf("/remember answered %q", got)
	}
	model := keepNote(t, h, user, ledger.NoteByModel, "has a cat called Tom")
	// Markdown and HTML in a note are its text: shown as written.
	const marked = `I write <b>bold</b> & *stars* _under_ [a](http://x) <script>`
	api.Push(telegramtest.DM(7, "/remember "+marked))
	api.WaitSent(t, 4)
	markedID := keepNoteID(t, h, user, marked)

	cmd := api.Push(telegramtest.DM(7, "/memory"))
	sent := api.WaitSent(t, 5)
	id := api.SentIDs()[4]
	want := memoryHead +
		fmt.Sprintf("\n\n#%d · 28 Mar 2026 · by you\n%s", markedID, marked) +
		fmt.Sprintf("\n\n#%d · 28 Mar 2026 · by me\nhas a cat called Tom", model) +
		fmt.Sprintf("\n\n#%d · 28 Mar 2026 · by you\nI prefer metric units", metric)
	if sent[4].ReplyTo != cmd || sent[4].Text != want {
		t.Fatalf("/memory answered %+v, want %q", sent[4], want)
	}
	if mode := api.ParseModes()[4]; mode != "" {
		t.Fatalf("the list went with parse_mode %q: a note's markup would be read", mode)
	}
	waitButtons(t, api, 7, id, forgetButton(7, markedID, "I write <b>bold</b>…"), forgetButton(7, model, "has a cat called Tom"),
		forgetButton(7, metric, "I prefer metric uni…"), buttonForgetAll+"=mem:all:7")

	for _, data := range []string{"mem:", "mem:f", "mem:f:7", "mem:f:7:x", "mem:f:7:0", "mem:f:7:-3", "mem:f:x:1",
		"mem:zap:7", "mem:all:7:1", "mem:yes", "mem:f:7:99999999999999999999"} {
		q := api.TapStale(7, 7, id, data)
		if ans := api.WaitAnswered(t, q); ans.Text != unknownButtonText {
			t.Fatalf("tap %q answered %+v", data, ans)
		}
	}
	if got := notesOf(t, h, user); len(got) != 3 {
		t.Fatalf("notes after the crafted taps: %q", got)
	}

	q := api.Tap(t, 7, 7, id, fmt.Sprintf("mem:f:7:%d", model))
	if ans := api.WaitAnswered(t, q); ans.Text != fmt.Sprintf(tapForgotText, model) {
		t.Fatalf("Forget answered %+v", ans)
	}
	waitButtons(t, api, 7, id, forgetButton(7, markedID, "I write <b>bold</b>…"), forgetButton(7, metric, "I prefer metric uni…"),
		buttonForgetAll+"=mem:all:7")
	if text := api.Text(7, id); !strings.HasPrefix(text, fmt.Sprintf(forgotText, model)+"\n\n"+memoryHead) || strings.Contains(text, "cat called Tom") {
		t.Fatalf("the list after Forget: %q", text)
	}
	if got := notesOf(t, h, user); strings.Join(got, "|") != marked+"|I prefer metric units" {
		t.Fatalf("notes after Forget: %q", got)
	}
	// The same button again (a client that still showed it).
	q = api.TapStale(7, 7, id, fmt.Sprintf("mem:f:7:%d", model))
	if ans := api.WaitAnswered(t, q); ans.Text != tapNoNoteText {
		t.Fatalf("a stale Forget answered %+v", ans)
	}

	// Forget everything asks first; Cancel keeps them.
	q = api.Tap(t, 7, 7, id, "mem:all:7")
	if ans := api.WaitAnswered(t, q); ans.Text != tapConfirmText {
		t.Fatalf("Forget everything answered %+v", ans)
	}
	waitButtons(t, api, 7, id, buttonForgetAllYes+"=mem:yes:7", buttonCancel+"=mem:no:7")
	if text := api.Text(7, id); text != fmt.Sprintf(confirmAllText, 2) {
		t.Fatalf("the question: %q", text)
	}
	q = api.Tap(t, 7, 7, id, "mem:no:7")
	if ans := api.WaitAnswered(t, q); ans.Text != tapKeptNotesText {
		t.Fatalf("Cancel answered %+v", ans)
	}
	waitButtons(t, api, 7, id, forgetButton(7, markedID, "I write <b>bold</b>…"), forgetButton(7, metric, "I prefer metric uni…"),
		buttonForgetAll+"=mem:all:7")
	if got := notesOf(t, h, user); len(got) != 2 {
		t.Fatalf("notes after Cancel: %q", got)
	}
	// And Yes forgets them all.
	q = api.Tap(t, 7, 7, id, "mem:all:7")
	api.WaitAnswered(t, q)
	waitButtons(t, api, 7, id, buttonForgetAllYes+"=mem:yes:7", buttonCancel+"=mem:no:7")
	q = api.Tap(t, 7, 7, id, "mem:yes:7")
	if ans := api.WaitAnswered(t, q); ans.Text != fmt.Sprintf(tapForgotAllText, 2) {
		t.Fatalf("Yes answered %+v", ans)
	}
	api.WaitKeyboard(t, 7, id, true)
	waitText(t, api, 7, id, fmt.Sprintf(forgotAllText, 2)+"\n\n"+memoryNone+memoryNoneAsk)
	if got := notesOf(t, h, user); len(got) != 0 {
		t.Fatalf("notes after Yes: %q", got)
	}
	for _, c := range api.Calls("editMessageText") {
		if c.Params.Get("parse_mode") != "" {
			t.Fatalf("an edit of the list with parse_mode: %v", c.Params)
		}
	}
	// Forget everything with nothing left (a stale button).
	q = api.TapStale(7, 7, id, "mem:all:7")
	if ans := api.WaitAnswered(t, q); ans.Text != tapNoNotesText {
		t.Fatalf("Forget everything of no notes answered %+v", ans)
	}

	// /forget alone lists; /forget N forgets one of the sender's.
	api.Push(telegramtest.DM(7, "/forget"))
	if got := api.WaitSent(t, 6)[5].Text; got != memoryNone+memoryNoneAsk {
		t.Fatalf("/forget alone answered %q", got)
	}
	api.Push(telegramtest.DM(7, "/remember tea, no sugar"))
	api.WaitSent(t, 7)
	tea := keepNoteID(t, h, user, "tea, no sugar")
	other := keepNote(t, h, "telegram:dm:8", ledger.NoteByUser, "eight's")
	for i, c := range []struct{ cmd, want string }{
		{"/forget twelve", forgetUsage},
		{"/forget 0", forgetUsage},
		{fmt.Sprintf("/forget %d", other), fmt.Sprintf(forgetNoNote, other)},
		{fmt.Sprintf("/forget #%d", tea), fmt.Sprintf(forgotText, tea)},
		{fmt.Sprintf("/forget %d", tea), fmt.Sprintf(forgetNoNote, tea)},
	} {
		api.Push(telegramtest.DM(7, c.cmd))
		if got := api.WaitSent(t, 8+i)[7+i].Text; got != c.want {
			t.Fatalf("%s answered %q, want %q", c.cmd, got, c.want)
		}
	}
	if got := notesOf(t, h, "telegram:dm:8"); len(got) != 1 {
		t.Fatalf("8's notes after 7's /forget: %q", got)
	}

	api.CheckAnswers(t)
}

// keepNoteID is the id of user's note with text, once it is kept.
func keepNoteID(t *testing.T, h *harness, user, text string) int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		list, err := h.mgr.Memory().List(context.Background(), user)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range list {
			if n.Text == text {
				if n.Author != ledger.NoteByUser || n.UserKey != user {
					t.Fatalf("kept %+v", n)
				}
				return n.ID
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never kept %q: %+v", user, text, list)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRememberGivenBackKeepsOneNote: the bot stops after /remember kept
// its note and was answered, but before Telegram heard the update
// confirmed; Telegram sends it again to the next bot, which keeps no
// second note (the note's call key is the message's) and answers as the
// first did.
func TestRememberGivenBackKeepsOneNote(t *testing.T) {
	api := telegramtest.New(t)
	dir := t.TempDir()
	h1 := start(t, api, dir, setup{policies: memoryOn(true, 0), now: memoryNow})
	api.Push(telegramtest.DM(7, "/remember lives in Lyon"))
	upd := api.LastUpdateID()
	first := api.WaitSent(t, 1)[0].Text
	h1.shutdown(time.Second)

	api.Replay(upd)
	h2 := start(t, api, dir, setup{policies: memoryOn(true, 0), now: memoryNow, beforeStart: func(h *harness) {
		if err := h.mgr.Conversations().SetChannelState(context.Background(), fmt.Sprintf("telegram:%d:offset", telegramtest.BotID), ""); err != nil {
			t.Fatal(err)
		}
	}})
	if again := api.WaitSent(t, 2)[1].Text; again != first || !strings.HasPrefix(first, "Noted (#") {
		t.Fatalf("the update again answered %q, first %q", again, first)
	}
	if got := notesOf(t, h2, "telegram:dm:7"); len(got) != 1 || got[0] != "lives in Lyon" {
		t.Fatalf("notes after the update came twice: %q", got)
	}
}

func TestRememberRefusedWhereMemoryIsOff(t *testing.T) {
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), setup{policies: memoryOn(false, 0), now: memoryNow})
	const user = "telegram:dm:7"
	// Kept while memory was on, or by the operator: still the user's.
	op := keepNote(t, h, user, ledger.NoteByOperator, "account manager: Ann")

	api.Push(telegramtest.DM(7, "/remember I prefer metric units"))
	if got := api.WaitSent(t, 1)[0].Text; got != rememberOff {
		t.Fatalf("/remember where memory is off answered %q", got)
	}
	api.Push(telegramtest.DM(7, "/remember"))
	if got := api.WaitSent(t, 2)[1].Text; got != rememberUsage+rememberOffNote {
		t.Fatalf("/remember alone answered %q", got)
	}
	if got := notesOf(t, h, user); len(got) != 1 {
		t.Fatalf("notes: %q", got)
	}
	api.Push(telegramtest.DM(7, "/memory"))
	want := memoryOffHead + "\n\n" + memoryHead + fmt.Sprintf("\n\n#%d · 28 Mar 2026 · by the operator\naccount manager: Ann", op)
	if got := api.WaitSent(t, 3)[2].Text; got != want {
		t.Fatalf("/memory answered %q, want %q", got, want)
	}
	id := api.SentIDs()[2]
	q := api.Tap(t, 7, 7, id, fmt.Sprintf("mem:f:7:%d", op))
	if ans := api.WaitAnswered(t, q); ans.Text != fmt.Sprintf(tapForgotText, op) {
		t.Fatalf("Forget answered %+v", ans)
	}
	api.WaitKeyboard(t, 7, id, true)
	waitText(t, api, 7, id, fmt.Sprintf(forgotText, op)+"\n\n"+memoryNone)
	if got := notesOf(t, h, user); len(got) != 0 {
		t.Fatalf("notes after Forget: %q", got)
	}
	api.CheckAnswers(t)
}

// In a group whose members share one conversation (group_scope chat),
// each member's notes are their own and never shown to the group:
// /memory (and /forget alone) in the group sends the sender's notes of
// that group to their private chat, and the group gets only a short
// note — no note's text, no buttons; /remember and /forget <id> answer in
// the group without any note's text. Taps on the private list act on the
// tapper's notes of the group; data naming another chat reaches only the
// tapper's own notes there, never another member's, and a tap on a list
// left in the group changes nothing. On SQLite and on PostgreSQL.
func TestMemoryInGroupIsEachMembersOwn(t *testing.T) {
	for _, driver := range []string{store.DriverSQLite, store.DriverPostgres} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			dsn := ""
			if driver == store.DriverPostgres {
				dsn = pgtest.DSN(t)
			}
			api := telegramtest.New(t)
			h := start(t, api, t.TempDir(), setup{policies: memoryOn(true, 0), now: memoryNow, dsn: dsn, opts: Options{GroupScope: "chat"}})
			const chat, other, a, b = -100, -200, 7, 8
			userA, userB := "telegram:group:-100:7", "telegram:group:-100:8"
			// Both wrote to the bot privately before: it may write to them.
			api.RefuseUnstarted()
			api.Started(a)
			api.Started(b)
			api.Push(telegramtest.Group(chat, a, "/remember A is vegetarian"))
			api.Push(telegramtest.Group(chat, b, "/remember B's PIN hint: blue"))
			api.WaitSent(t, 2)
			noteA, noteB := keepNoteID(t, h, userA, "A is vegetarian"), keepNoteID(t, h, userB, "B's PIN hint: blue")
			if got := texts(api.Messages()); got[0] != fmt.Sprintf(rememberedText, noteA, noteA) || got[1] != fmt.Sprintf(rememberedText, noteB, noteB) {
				t.Fatalf("/remember in the group answered %q", got)
			}
			// Notes of the same members elsewhere: A's own private chat,
			// and another group.
			privA := keepNote(t, h, "telegram:dm:7", ledger.NoteByUser, "A's private note")
			privB := keepNote(t, h, "telegram:dm:8", ledger.NoteByUser, "B's private note")
			otherA := keepNote(t, h, "telegram:group:-200:7", ledger.NoteByModel, "A in the other group")
			otherB := keepNote(t, h, "telegram:group:-200:8", ledger.NoteByModel, "B in the other group")

			// listOf sends /memory (or /forget) from user in the group: the
			// n-th and n+1-th messages are the private list and the note
			// in the group.
			listOf := func(user int64, cmd string, n int) (string, int) {
				t.Helper()
				id := api.Push(telegramtest.Group(chat, user, cmd))
				sent := api.WaitSent(t, n+1)
				list, note := sent[n-1], sent[n]
				if list.ChatID != user || list.ReplyTo != 0 || note.ChatID != chat || note.ReplyTo != id || note.Text != memorySentAside {
					t.Fatalf("%s from %d sent %+v, then %+v", cmd, user, list, note)
				}
				return list.Text, api.SentIDs()[n-1]
			}
			textA, listA := listOf(a, "/memory", 3)
			textB, _ := listOf(b, "/forget", 5)
			wantA := memoryGroupLine + "G\n\n" + memoryHead + fmt.Sprintf("\n\n#%d · 28 Mar 2026 · by you\nA is vegetarian", noteA)
			if textA != wantA {
				t.Fatalf("A's list: %q, want %q", textA, wantA)
			}
			if !strings.Contains(textB, "PIN hint") || strings.Contains(textB, "vegetarian") || strings.Contains(textB, "private note") {
				t.Fatalf("B's list: %q", textB)
			}
			waitButtons(t, api, a, listA, fmt.Sprintf("Forget #%d: A is vegetarian=mem:f:%d:%d", noteA, chat, noteA), buttonForgetAll+"=mem:all:-100")

			tap := func(data, want string) {
				t.Helper()
				q := api.TapStale(a, a, listA, data)
				if ans := api.WaitAnswered(t, q); ans.Text != want {
					t.Fatalf("A's tap of %q answered %+v, want %q", data, ans, want)
				}
			}
			// A forges a Forget of B's note of the group, and of B's notes
			// of the other group and B's private chat: none is A's.
			tap(fmt.Sprintf("mem:f:%d:%d", chat, noteB), tapNoNoteText)
			tap(fmt.Sprintf("mem:f:%d:%d", other, otherB), tapNoNoteText)
			tap(fmt.Sprintf("mem:f:%d:%d", chat, privB), tapNoNoteText)
			// A's own private note is not a note of the group either.
			tap(fmt.Sprintf("mem:f:%d:%d", chat, privA), tapNoNoteText)
			// Naming B's private chat is no list of A's.
			tap(fmt.Sprintf("mem:f:%d:%d", b, privB), unknownButtonText)
			tap(fmt.Sprintf("mem:yes:%d", b), unknownButtonText)
			// Naming the other group reaches A's own note there only.
			tap(fmt.Sprintf("mem:f:%d:%d", other, otherA), fmt.Sprintf(tapForgotText, otherA))
			waitText(t, api, a, listA, memoryGroupLine+"-200\n\n"+fmt.Sprintf(forgotText, otherA)+"\n\n"+memoryNone+memoryNoneGroup)
			tap(fmt.Sprintf("mem:yes:%d", other), fmt.Sprintf(tapForgotAllText, 0))
			for user, want := range map[string]int{userB: 1, "telegram:dm:8": 1, "telegram:group:-200:8": 1, "telegram:group:-200:7": 0, "telegram:dm:7": 1, userA: 1} {
				if got := notesOf(t, h, user); len(got) != want {
					t.Fatalf("%s's notes after A's forged taps: %q, want %d", user, got, want)
				}
			}

			// A's list again, and its buttons: they act on A's notes of
			// the group, and the group's line stays.
			_, listA = listOf(a, "/memory", 7)
			q := api.Tap(t, a, a, listA, "mem:all:-100")
			if ans := api.WaitAnswered(t, q); ans.Text != tapConfirmText {
				t.Fatalf("Forget everything answered %+v", ans)
			}
			waitText(t, api, a, listA, memoryGroupLine+"G\n\n"+confirmOneText)
			q = api.Tap(t, a, a, listA, "mem:no:-100")
			api.WaitAnswered(t, q)
			waitText(t, api, a, listA, wantA)
			q = api.Tap(t, a, a, listA, fmt.Sprintf("mem:f:%d:%d", chat, noteA))
			if ans := api.WaitAnswered(t, q); ans.Text != fmt.Sprintf(tapForgotText, noteA) {
				t.Fatalf("A's Forget answered %+v", ans)
			}
			api.WaitKeyboard(t, a, listA, true)
			waitText(t, api, a, listA, memoryGroupLine+"G\n\n"+fmt.Sprintf(forgotText, noteA)+"\n\n"+memoryNone+memoryNoneGroup)
			if got := notesOf(t, h, userA); len(got) != 0 {
				t.Fatalf("A's notes: %q", got)
			}
			for _, user := range []string{userB, "telegram:dm:7", "telegram:dm:8"} {
				if got := notesOf(t, h, user); len(got) != 1 {
					t.Fatalf("%s's notes after A's Forget: %q", user, got)
				}
			}

			// A list a group got before lists went to private chats: a
			// tap there, its owner's or anyone's, changes nothing.
			note := api.SentIDs()[7]
			for _, data := range []string{fmt.Sprintf("mem:no:%d", a), fmt.Sprintf("mem:no:%d", chat), fmt.Sprintf("mem:f:%d:%d", chat, noteB)} {
				q := api.TapStale(a, chat, note, data)
				if ans := api.WaitAnswered(t, q); ans.Text != tapListElsewhere {
					t.Fatalf("a tap of %q in the group answered %+v", data, ans)
				}
			}
			// /forget <id> in the group forgets the sender's own, and says
			// so without the note's text.
			api.Push(telegramtest.Group(chat, b, fmt.Sprintf("/forget %d", noteB)))
			if got := api.WaitSent(t, 9)[8]; got.ChatID != chat || got.Text != fmt.Sprintf(forgotText, noteB) {
				t.Fatalf("/forget %d in the group answered %+v", noteB, got)
			}
			if got := notesOf(t, h, userB); len(got) != 0 {
				t.Fatalf("B's notes after /forget: %q", got)
			}
			if api.Text(chat, note) != memorySentAside {
				t.Fatalf("the group's note changed: %q", api.Text(chat, note))
			}

			// The group saw no note's text and no buttons.
			for i, m := range api.Messages() {
				if m.ChatID != chat {
					continue
				}
				for _, secret := range []string{"vegetarian", "PIN", "private note", "other group"} {
					if strings.Contains(m.Text, secret) {
						t.Fatalf("the group was shown %q: %+v", secret, m)
					}
				}
				if kb := api.Keyboard(chat, api.SentIDs()[i]); len(kb) != 0 {
					t.Fatalf("the group got buttons: %+v on %+v", kb, m)
				}
			}
			for _, c := range api.Calls("editMessageText") {
				if c.Params.Get("chat_id") == strconv.Itoa(chat) {
					t.Fatalf("a message of the group was edited: %v", c.Params)
				}
			}
			api.CheckAnswers(t)
		})
	}
}

// In a group, /memory from a member the bot may not write to privately —
// who never started it, or blocked it — is told in the group to start a
// chat with it, and nothing of their notes is sent anywhere; once they
// wrote to the bot privately, /memory sends them their list. A group
// without a title is named by its id.
func TestMemoryInGroupNeedsPrivateChat(t *testing.T) {
	api := telegramtest.New(t)
	api.RefuseUnstarted()
	h := start(t, api, t.TempDir(), setup{policies: memoryOn(true, 0), now: memoryNow})
	const chat, user = -300, 9
	keepNote(t, h, "telegram:group:-300:9", ledger.NoteByUser, "nine's secret")
	untitled := func(text string) map[string]any {
		m := telegramtest.Group(chat, user, text)
		delete(m["chat"].(map[string]any), "title")
		return m
	}
	tried := func(n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := 0
			for _, c := range api.Calls("sendMessage") {
				if c.Params.Get("chat_id") == strconv.Itoa(user) {
					got++
				}
			}
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d sends to %d, want %d", got, user, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	cmd := api.Push(untitled("/memory"))
	if got := api.WaitSent(t, 1)[0]; got.ChatID != chat || got.ReplyTo != cmd || got.Text != memoryNoPrivate {
		t.Fatalf("/memory of a member who never started the bot answered %+v", got)
	}
	tried(1) // refused: Telegram took nothing

	api.Push(telegramtest.DM(user, "/start"))
	api.WaitSent(t, 2)
	api.Push(untitled("/forget"))
	sent := api.WaitSent(t, 4)
	if sent[2].ChatID != user || !strings.HasPrefix(sent[2].Text, memoryGroupLine+"-300\n\n"+memoryHead) || !strings.Contains(sent[2].Text, "nine's secret") ||
		sent[3].ChatID != chat || sent[3].Text != memorySentAside {
		t.Fatalf("/forget once started sent %+v", sent[2:])
	}

	api.Block(user)
	api.Push(untitled("/memory"))
	if got := api.WaitSent(t, 5)[4]; got.ChatID != chat || got.Text != memoryNoPrivate {
		t.Fatalf("/memory of a member who blocked the bot answered %+v", got)
	}
	tried(4) // the refused one, /start's answer, the list, the refused one
	for _, m := range api.Messages() {
		if m.ChatID == chat && strings.Contains(m.Text, "secret") {
			t.Fatalf("the group was shown the note: %+v", m)
		}
	}
}

// A list longer than one message is cut within Telegram's limits (the
// fake refuses a text over 4,096 UTF-16 units and a markup over 100
// buttons or 10 KB), saying how many notes are not shown.
func TestMemoryListFitsTelegramLimits(t *testing.T) {
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), setup{policies: memoryOn(true, 100), now: memoryNow})
	// 7: many short notes whose labels take the most bytes as JSON.
	for i := range 40 {
		keepNote(t, h, "telegram:dm:7", ledger.NoteByUser, fmt.Sprintf("%s %d", strings.Repeat("<&>", 7), i))
	}
	// 8: notes of the longest text.
	for i := range 12 {
		keepNote(t, h, "telegram:dm:8", ledger.NoteByUser, fmt.Sprintf("%03d %s", i, strings.Repeat("x", sessions.MaxNoteText-4)))
	}
	api.Push(telegramtest.DM(7, "/memory"))
	got := api.WaitSent(t, 1)[0].Text
	waitCount := func(chat int64, id, want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for len(buttons(api.Keyboard(chat, id))) != want {
			if time.Now().After(deadline) {
				t.Fatalf("message %d has %d buttons, want %d", id, len(buttons(api.Keyboard(chat, id))), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if !strings.HasSuffix(got, "\n\n"+fmt.Sprintf(memoryMore, 40-maxNotesListed)) || strings.Count(got, "\n#") != maxNotesListed {
		t.Fatalf("7's list: %q", got)
	}
	waitCount(7, api.SentIDs()[0], maxNotesListed+1)

	api.Push(telegramtest.DM(8, "/memory"))
	got = api.WaitSent(t, 2)[1].Text
	shown := strings.Count(got, "\n#")
	if shown < 3 || tgformat.Units(got) > MaxMessageUnits || !strings.HasSuffix(got, "\n\n"+fmt.Sprintf(memoryMore, 12-shown)) {
		t.Fatalf("8's list shows %d notes in %d units: …%q", shown, tgformat.Units(got), got[len(got)-80:])
	}
	waitCount(8, api.SentIDs()[1], shown+1)
}

// memoryText keeps within one message and maxNotesListed, counts what
// it leaves out, and needs no room for the count after the last note.
func TestMemoryTextBounds(t *testing.T) {
	notes := func(n int, text func(i int) string) []ledger.Note {
		var out []ledger.Note
		for i := range n {
			out = append(out, ledger.Note{ID: int64(1000 + i), Text: text(i), Author: ledger.NoteByUser, CreatedAt: memoryNow()})
		}
		return out
	}
	sized := func(units int) func(i int) string {
		return func(i int) string { return fmt.Sprintf("%03d %s", i, strings.Repeat("x", units-4)) }
	}
	emoji := func(int) string { return strings.Repeat("😀", sessions.MaxNoteText/4) } // 2 units a rune
	head := tgformat.Units(memoryHead)
	// exact: four notes fill the message but for less than the count of
	// those not shown takes.
	exact := (MaxMessageUnits-head)/4 - tgformat.Units(noteEntry(notes(1, sized(100))[0])) + 100
	for _, c := range []struct {
		name  string
		list  []ledger.Note
		group string
		lead  string
		shown int
	}{
		{"short", notes(40, func(i int) string { return "n" + strconv.Itoa(i) }), "", "", maxNotesListed},
		{"longest", notes(12, sized(sessions.MaxNoteText)), "", "", 3},
		{"longest, all shown", notes(3, sized(sessions.MaxNoteText)), "", "", 3},
		{"exact, all shown", notes(4, sized(exact)), "", "", 4},
		{"exact and one more", notes(5, sized(exact)), "", "", 3},
		{"exact after a lead", notes(4, sized(exact)), "", fmt.Sprintf(forgotText, int64(math.MaxInt64)), 3},
		{"exact for a group", notes(4, sized(exact)), "G", "", 3},
		{"emoji", notes(20, emoji), "", "", 7}, // 7 × 531 units
		// The longest group title (its emoji two units each: 272 units of
		// line) after a lead leaves room for 6.
		{"emoji for a group", notes(20, emoji), groupLabel(&tgbotapi.Chat{ID: -1, Title: strings.Repeat("😀", 200)}),
			fmt.Sprintf(forgotText, int64(math.MaxInt64)), 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			text, shown := memoryText(c.list, true, c.group, c.lead)
			if tgformat.Units(text) > MaxMessageUnits {
				t.Fatalf("%d units", tgformat.Units(text))
			}
			if len(shown) != c.shown || strings.Count(text, "\n#") != c.shown {
				t.Fatalf("shows %d notes (%d in the text), want %d", len(shown), strings.Count(text, "\n#"), c.shown)
			}
			more := fmt.Sprintf(memoryMore, len(c.list)-c.shown)
			if strings.HasSuffix(text, "\n\n"+more) != (c.shown < len(c.list)) {
				t.Fatalf("shows %d of %d; ends %q", c.shown, len(c.list), text[max(0, len(text)-60):])
			}
		})
	}
}

// The largest keyboard a list has — the most notes, the largest ids and
// chat (a group's are negative: the longest is math.MinInt64), labels of
// characters JSON escapes — is within Telegram's bounds, and its data
// within 64 bytes.
func TestMemoryKeyboardBounds(t *testing.T) {
	var list []ledger.Note
	for i := range maxNotesListed {
		list = append(list, ledger.Note{ID: math.MaxInt64 - int64(i), Text: strings.Repeat("<&>", 300)})
	}
	kb := memoryKeyboard(list, math.MinInt64)
	raw, err := json.Marshal(kb)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, row := range kb.InlineKeyboard {
		for _, b := range row {
			n++
			if len(*b.CallbackData) > 64 {
				t.Fatalf("data %q over 64 bytes", *b.CallbackData)
			}
		}
	}
	if n != maxNotesListed+1 || n > 100 || len(raw) > 8<<10 {
		t.Fatalf("%d buttons, %d bytes of markup", n, len(raw))
	}
	if got := *kb.InlineKeyboard[0][0].CallbackData; got != "mem:f:-9223372036854775808:9223372036854775807" {
		t.Fatalf("the longest data is %q", got)
	}
	for _, b := range confirmKeyboard(math.MinInt64).InlineKeyboard[0] {
		if len(*b.CallbackData) > 64 {
			t.Fatalf("data %q over 64 bytes", *b.CallbackData)
		}
	}
}

// memoryAgent echoes, keeping each request's memory text.
type memoryAgent struct {
	agent.Echo
	mu   sync.Mutex
	seen []string
}

func (a *memoryAgent) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	a.mu.Lock()
	a.seen = append(a.seen, req.MemoryText())
	a.mu.Unlock()
	return a.Echo.Reply(ctx, req, onDelta)
}

// A message sent on behalf of the chat — an anonymous admin's, which
// Telegram sends from one stand-in user for all of them — is nobody's
// own: its turn carries no notes (not even those kept for the stand-in
// before), and /remember, /memory and /forget from it are refused with
// why; a member's own message carries theirs.
func TestMemoryOnBehalfOfTheChat(t *testing.T) {
	api := telegramtest.New(t)
	ag := &memoryAgent{}
	pol := memoryOn(true, 0)
	p := pol[Channel]
	p.Memory.Default.InjectTokens = 400
	pol[Channel] = p
	h := start(t, api, t.TempDir(), setup{agent: ag, policies: pol, now: memoryNow, opts: Options{GroupScope: "chat"}})
	const chat, member, standIn = -100, 7, 1087968824 // Telegram's GroupAnonymousBot
	keepNote(t, h, fmt.Sprintf("telegram:group:%d:%d", chat, standIn), ledger.NoteByModel, "An admin's secret plan")
	keepNote(t, h, fmt.Sprintf("telegram:group:%d:%d", chat, member), ledger.NoteByUser, "The member likes tea")
	onBehalf := func(text string) map[string]any {
		m := telegramtest.Group(chat, standIn, text+" @"+telegramtest.BotName)
		m["sender_chat"] = map[string]any{"id": chat, "type": "supergroup", "title": "G"}
		return m
	}
	api.Push(onBehalf("what is the plan?"))
	api.WaitSent(t, 1)
	api.Push(telegramtest.Group(chat, member, "what do I like? @"+telegramtest.BotName))
	api.WaitSent(t, 2)
	ag.mu.Lock()
	seen := slices.Clone(ag.seen)
	ag.mu.Unlock()
	if len(seen) != 2 || seen[0] != "" || !strings.Contains(seen[1], "tea") || strings.Contains(seen[1], "secret") {
		t.Fatalf("memory of the two turns: %q", seen)
	}
	for i, cmd := range []string{"/remember the plan is secret", "/memory", "/forget 1"} {
		api.Push(onBehalf(cmd))
		if got := api.WaitSent(t, 3+i)[2+i]; got.Text != memoryOnBehalf {
			t.Fatalf("%s on behalf of the chat answered %q", cmd, got.Text)
		}
	}
	if got := notesOf(t, h, fmt.Sprintf("telegram:group:%d:%d", chat, standIn)); len(got) != 1 {
		t.Fatalf("the stand-in's notes: %q", got)
	}
	// Nor is a conversation of the stand-in's (group_scope user) anyone's
	// memory: its extraction at a reset would have nobody to write for.
	for _, key := range []string{fmt.Sprintf("telegram:group:%d:%d", chat, standIn), fmt.Sprintf("telegram:group:%d", chat)} {
		if u := sessions.MemoryUser(key, strconv.Itoa(standIn)); u != "" {
			t.Fatalf("the stand-in of %s has memory user %q", key, u)
		}
	}
}
