package telegram

// /reminders against the fake Bot API, with the real session manager and
// store: the list shows each reminder's next time on its zone's clock
// with a Cancel button; a tap cancels for the tapper's own session only
// and edits the list; stale, foreign and crafted taps are answered and
// change nothing; a long list is cut to one message; every callback query
// is answered exactly once.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/bots/telegram/tgformat"
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

// TestRemindersListFitsTelegramLimits: 50 reminders of the longest text
// listed (300 runes, emoji of two UTF-16 units each) are far over one
// message; the list is cut to fit — the fake refuses a text over 4,096
// units, so an uncut list would not arrive at all — says how many it
// leaves out, and has a Cancel button for each reminder it shows. After a
// cancel the list, edited, still fits and shows one more.
func TestRemindersListFitsTelegramLimits(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC) }
	pol := map[string]sessions.Policy{Channel: {MaxHistory: 100, Busy: sessions.BusyPolicy{Mode: sessions.BusyQueue},
		Reminders: sessions.ReminderPolicy{Enabled: true, MaxPerUser: 50, MinInterval: time.Hour}}}
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), setup{policies: pol, manager: func(o *sessions.Options) { o.Now = now }})
	const total = 50
	var first int64
	for i := range total {
		text := fmt.Sprintf("%02d %s", i, strings.Repeat("😀", (sessions.MaxReminderText-3)/4))
		r, err := h.mgr.Reminders().Create(context.Background(), sessions.ReminderRequest{SessionKey: "telegram:dm:7", Channel: Channel,
			Spec: schedules.Spec{Cron: "0 8 * * 1-5", Timezone: "America/New_York"}, Text: text})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = r.ID
		}
	}
	check := func(text string, n int) int {
		t.Helper()
		shown := strings.Count(text, "\n   next: ")
		more := "\n\n" + fmt.Sprintf(remindersMore, total-n-shown)
		if shown < 3 || shown >= total-n || tgformat.Units(text) > MaxMessageUnits || !strings.HasSuffix(text, more) {
			t.Fatalf("the list shows %d of %d in %d units: …%q", shown, total-n, tgformat.Units(text), text[max(0, len(text)-120):])
		}
		return shown
	}
	api.Push(telegramtest.DM(7, "/reminders"))
	shown := check(api.WaitSent(t, 1)[0].Text, 0)
	id := api.SentIDs()[0]
	waitFor := func(want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for len(buttons(api.Keyboard(7, id))) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d buttons, want %d", len(buttons(api.Keyboard(7, id))), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(shown)
	if got := buttons(api.Keyboard(7, id))[0]; !strings.HasSuffix(got, "=rem:"+strconv.FormatInt(first, 10)) {
		t.Fatalf("the first button is %q", got)
	}

	q := api.Tap(t, 7, 7, id, "rem:"+strconv.FormatInt(first, 10))
	if ans := api.WaitAnswered(t, q); ans.Text != tapCancelledText {
		t.Fatalf("cancel answered %+v", ans)
	}
	deadline := time.Now().Add(20 * time.Second)
	for strings.Contains(api.Text(7, id), "1. 00 ") {
		if time.Now().After(deadline) {
			t.Fatalf("the list was not edited after the cancel: %q", api.Text(7, id)[:60])
		}
		time.Sleep(5 * time.Millisecond)
	}
	if again := check(api.Text(7, id), 1); again != shown {
		t.Fatalf("after the cancel the list shows %d, before %d", again, shown)
	}
	waitFor(shown)
	api.CheckAnswers(t)
}
