package telegram

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// backButton returns the data of the Go back button on the n-th message
// sent (1-based) to chat, and that message's id, failing unless the
// message shows exactly that button.
func backButton(t *testing.T, api *telegramtest.Server, chat int64, n int) (id int, data string) {
	t.Helper()
	id = api.SentIDs()[n-1]
	kb := api.Keyboard(chat, id)
	if len(kb) != 1 || len(kb[0]) != 1 || kb[0][0].Text != backButtonText || !strings.HasPrefix(kb[0][0].CallbackData, backData+":") {
		t.Fatalf("message %d (%q) shows the keyboard %+v, want one Go back button", n, api.Messages()[n-1].Text, kb)
	}
	return id, kb[0][0].CallbackData
}

// active is the id of key's active conversation.
func active(t *testing.T, h *harness, key string) string {
	t.Helper()
	c, err := h.db.ActiveConversation(context.Background(), key)
	if err != nil || c == nil {
		t.Fatalf("active conversation of %s: %+v, %v", key, c, err)
	}
	return c.ID
}

// TestGoBackButton: the notice of an idle reset has a Go back button.
// Tapped, it takes the chat back to the conversation the notice told of,
// as /resume does — the tap is answered, the chat told, the button
// removed — and a second tap (a client still showing it) is answered
// with a note and changes nothing. A notice whose conversation has moved
// on since (a /new archived a newer one) is out of date: its tap says so
// and the button goes. Every tap is answered exactly once.
func TestGoBackButton(t *testing.T) {
	for _, driver := range []string{store.DriverSQLite, store.DriverPostgres} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			s := setup{policies: idle30}
			if driver == store.DriverPostgres {
				s.dsn = pgtest.DSN(t)
			}
			clock := clocktest.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
			s.now, s.opts.Now = clock.Now, clock.Now
			api := telegramtest.New(t)
			h := start(t, api, t.TempDir(), s)
			key := sessions.TelegramDMKey(7)
			api.Push(telegramtest.DM(7, "before"))
			api.WaitSent(t, 1)
			old := active(t, h, key)
			clock.Advance(31 * time.Minute)
			api.Push(telegramtest.DM(7, "after"))
			if sent := api.WaitSent(t, 3); sent[2].Text != "echo: after (history: 0)" {
				t.Fatalf("after the idle time: %q", texts(sent))
			}
			notice, data := backButton(t, api, 7, 2)
			if data != backData+":"+old {
				t.Fatalf("the button's data = %q, want the archived conversation %s", data, old)
			}

			q := api.Tap(t, 7, 7, notice, data)
			if got := api.WaitAnswered(t, q).Text; got != backDoneText {
				t.Fatalf("the tap was answered %q", got)
			}
			api.WaitKeyboard(t, 7, notice, true)
			if got := api.WaitSent(t, 4)[3].Text; got != "Back to your previous conversation (2 messages)." {
				t.Fatalf("the chat was told %q", got)
			}
			if got := active(t, h, key); got != old {
				t.Fatalf("active conversation %s, want the one gone back to, %s", got, old)
			}
			api.Push(telegramtest.DM(7, "again"))
			if got := api.WaitSent(t, 5)[4].Text; got != "echo: again (history: 2)" {
				t.Fatalf("after going back: %q", got)
			}
			again := api.TapStale(7, 7, notice, data)
			if got := api.WaitAnswered(t, again).Text; got != backActiveText {
				t.Fatalf("the second tap was answered %q, want %q", got, backActiveText)
			}
			if got := active(t, h, key); got != old {
				t.Fatalf("the second tap moved the chat to %s", got)
			}

			// Idle again: a new notice for the same conversation; then /new
			// archives the conversation the idle reset opened, and the
			// notice is out of date.
			clock.Advance(31 * time.Minute)
			api.Push(telegramtest.DM(7, "later"))
			api.WaitSent(t, 7)
			notice, data = backButton(t, api, 7, 6)
			api.Push(telegramtest.DM(7, "/new"))
			if got := api.WaitSent(t, 8)[7].Text; got != resetText {
				t.Fatalf("/new answered %q", got)
			}
			current := active(t, h, key)
			stale := api.Tap(t, 7, 7, notice, data)
			if got := api.WaitAnswered(t, stale).Text; got != backStaleText {
				t.Fatalf("the out-of-date tap was answered %q, want %q", got, backStaleText)
			}
			api.WaitKeyboard(t, 7, notice, true)
			if got := active(t, h, key); got != current {
				t.Fatalf("the out-of-date tap moved the chat to %s", got)
			}
			// Nothing more was sent for the stale taps: the next message is
			// the next thing the chat gets.
			api.Push(telegramtest.DM(7, "still here"))
			if sent := api.WaitSent(t, 9); len(sent) != 9 || sent[8].Text != "echo: still here (history: 0)" {
				t.Fatalf("sent after the taps: %q", texts(sent[8:]))
			}
			api.CheckAnswers(t)
		})
	}
}

// TestGoBackButtonOfASweepNoticeAndInAGroup: the notice a sweep sends at
// once (notify_resets) has the button too; in a group, a member tapping
// another member's notice is told it is not theirs, and the button stays
// for its owner.
func TestGoBackButtonOfASweepNoticeAndInAGroup(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	api := telegramtest.New(t)
	done := make(chan struct{}, 4)
	h := start(t, api, t.TempDir(), setup{now: clock.Now, policies: idle30, beforeStart: countNotices(done),
		opts: Options{NotifyResets: true, Now: clock.Now}})
	const group = -1001
	api.Push(telegramtest.DM(7, "hi"))
	api.Push(telegramtest.Group(group, 8, "@"+telegramtest.BotName+" hi"))
	api.WaitSent(t, 2)
	swept := active(t, h, sessions.TelegramDMKey(7))
	clock.Advance(31 * time.Minute)
	if n, err := sessions.NewSweeper(h.mgr, nil).SweepIdle(context.Background()); n != 2 || err != nil {
		t.Fatalf("sweep archived %d, %v", n, err)
	}
	waitNotices(t, done, 1)
	notice, data := backButton(t, api, 7, 3)
	q := api.Tap(t, 7, 7, notice, data)
	if got := api.WaitAnswered(t, q).Text; got != backDoneText {
		t.Fatalf("the tap was answered %q", got)
	}
	api.WaitKeyboard(t, 7, notice, true)
	if got := active(t, h, sessions.TelegramDMKey(7)); got != swept {
		t.Fatalf("active conversation %s, want the swept one, %s", got, swept)
	}

	api.Push(telegramtest.Group(group, 8, "@"+telegramtest.BotName+" back"))
	api.WaitSent(t, 6) // told back, the group's notice, its answer
	var groupNotice int
	for i, m := range api.Messages() {
		if m.ChatID == group && strings.HasPrefix(m.Text, "(A new conversation") {
			groupNotice = i + 1
		}
	}
	if groupNotice == 0 {
		t.Fatalf("no notice in the group: %q", texts(api.Messages()))
	}
	notice, data = backButton(t, api, group, groupNotice)
	other := api.Tap(t, 9, group, notice, data)
	if got := api.WaitAnswered(t, other).Text; got != backNotYoursText {
		t.Fatalf("another member's tap was answered %q", got)
	}
	owner := api.Tap(t, 8, group, notice, data)
	if got := api.WaitAnswered(t, owner).Text; got != backDoneText {
		t.Fatalf("the owner's tap was answered %q", got)
	}
	api.WaitKeyboard(t, group, notice, true)
	api.CheckAnswers(t)
}
