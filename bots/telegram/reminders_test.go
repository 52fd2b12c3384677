package telegram

// /reminders against the fake Bot API, with the real session manager and
// store: the list shows each reminder's next time on its zone's clock
// with a Cancel button; a tap cancels for the tapper's own session only
// and edits the list; stale, foreign and crafted taps are answered and
// change nothing; every callback query is answered exactly once.

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions"
)

func TestRemindersCommandAndCancelButtons(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC) }
	pol := map[string]sessions.Policy{Channel: {MaxHistory: 100, Busy: sessions.BusyPolicy{Mode: sessions.BusyQueue},
		Reminders: sessions.ReminderPolicy{Enabled: true, MaxPerUser: 5, MinInterval: time.Hour}}}
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), setup{policies: pol, manager: func(o *sessions.Options) { o.Now = now }})
	add := func(key string, spec schedules.Spec, text string) int64 {
		t.Helper()
		r, err := h.mgr.Reminders().Create(context.Background(), sessions.ReminderRequest{SessionKey: key, Channel: Channel, Spec: spec, Text: text})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	bob := add("telegram:dm:7", schedules.Spec{At: time.Date(2026, 3, 29, 18, 0, 0, 0, time.UTC), Timezone: "Europe/Berlin"}, "call Bob")
	stretch := add("telegram:dm:7", schedules.Spec{Cron: "0 8 * * 1-5", Timezone: "America/New_York"}, "stretch")
	other := add("telegram:dm:8", schedules.Spec{Every: 2 * time.Hour}, "eight's")
	rem := func(id int64) string { return "rem:" + strconv.FormatInt(id, 10) }

	if !strings.Contains(api.Commands(), `"command":"reminders"`) {
		t.Fatalf("setMyCommands lacks /reminders: %s", api.Commands())
	}
	api.Push(telegramtest.DM(7, "/help"))
	if got := api.WaitSent(t, 1)[0].Text; !strings.Contains(got, "/reminders — your reminders") {
		t.Fatalf("/help lacks /reminders: %q", got)
	}
	cmd := api.Push(telegramtest.DM(7, "/reminders"))
	sent := api.WaitSent(t, 2)
	list := sent[1]
	if list.ReplyTo != cmd || !strings.Contains(list.Text, "Your reminders:\n\n1. call Bob\n   next: Sun 29 Mar 2026 20:00 CEST (Europe/Berlin)") ||
		!strings.Contains(list.Text, "2. stretch\n   next: Mon 30 Mar 2026 08:00 EDT (America/New_York)\n   repeats: cron 0 8 * * 1-5") ||
		strings.Contains(list.Text, "eight's") {
		t.Fatalf("/reminders answered %+v", list)
	}
	id := api.SentIDs()[1]
	waitButtons(t, api, 7, id, "Cancel 1: call Bob="+rem(bob), "Cancel 2: stretch="+rem(stretch))

	// User 8 taps a button of 7's list (a forwarded or crafted query):
	// the tap acts for 8's own session, which has no such reminder.
	q := api.TapStale(8, 7, id, rem(bob))
	if ans := api.WaitAnswered(t, q); ans.Text != tapNoReminderText {
		t.Fatalf("a foreign tap answered %+v", ans)
	}
	// And 7 cannot cancel 8's reminder by crafting its id.
	q = api.TapStale(7, 7, id, rem(other))
	if ans := api.WaitAnswered(t, q); ans.Text != tapNoReminderText {
		t.Fatalf("a crafted tap answered %+v", ans)
	}
	for _, data := range []string{"rem:", "rem:x", "rem:-4", "rem:0", "rem:99999999999999999999"} {
		q := api.TapStale(7, 7, id, data)
		if ans := api.WaitAnswered(t, q); ans.Text != unknownButtonText {
			t.Fatalf("tap %q answered %+v", data, ans)
		}
	}
	for _, key := range []string{"telegram:dm:7", "telegram:dm:8"} {
		if got, _ := h.mgr.Reminders().List(context.Background(), key); len(got) != map[string]int{"telegram:dm:7": 2, "telegram:dm:8": 1}[key] {
			t.Fatalf("%s's reminders after the refused taps: %+v", key, got)
		}
	}

	q = api.Tap(t, 7, 7, id, rem(bob))
	if ans := api.WaitAnswered(t, q); ans.Text != tapCancelledText {
		t.Fatalf("cancel tap answered %+v", ans)
	}
	waitButtons(t, api, 7, id, "Cancel 1: stretch="+rem(stretch))
	if text := api.Text(7, id); strings.Contains(text, "call Bob") || !strings.Contains(text, "1. stretch") {
		t.Fatalf("the list after the cancel: %q", text)
	}
	// A second tap of the same (now gone) button.
	q = api.TapStale(7, 7, id, rem(bob))
	if ans := api.WaitAnswered(t, q); ans.Text != tapNoReminderText {
		t.Fatalf("a stale tap answered %+v", ans)
	}
	q = api.Tap(t, 7, 7, id, rem(stretch))
	if ans := api.WaitAnswered(t, q); ans.Text != tapCancelledText {
		t.Fatalf("cancel tap answered %+v", ans)
	}
	api.WaitKeyboard(t, 7, id, true)
	if text := api.Text(7, id); !strings.HasPrefix(text, remindersNone) {
		t.Fatalf("the list after the last cancel: %q", text)
	}
	if got, _ := h.mgr.Reminders().List(context.Background(), "telegram:dm:8"); len(got) != 1 {
		t.Fatalf("8's reminders: %+v", got)
	}
	api.CheckAnswers(t)
}
