package telegram

// /schedules against the fake Bot API, with the real session manager,
// store and timetable: the list and its Subscribe buttons, a tap that
// subscribes and one that unsubscribes, a name too long for a button's
// data, taps that name a schedule not offered here (crafted, another
// channel's, one with a single target, one a reload took out), /status's
// line, and every callback query answered exactly once.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
)

func opSchedule(t *testing.T, name, channel, key string, spec schedules.Spec) sessions.OperatorSchedule {
	t.Helper()
	w, err := spec.When()
	if err != nil {
		t.Fatal(err)
	}
	return sessions.OperatorSchedule{Name: name, Target: sessions.ScheduleTarget{Channel: channel, SessionKey: key, AllSessions: key == ""}, When: w}
}

func TestSchedulesCommandAndButtons(t *testing.T) {
	long := strings.Repeat("l", 60) // "sched:+" and it pass 64 bytes
	for _, pg := range []bool{false, true} {
		t.Run(map[bool]string{false: "sqlite", true: "postgres"}[pg], func(t *testing.T) {
			clock := clocktest.New(time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC))
			all := []sessions.OperatorSchedule{
				opSchedule(t, "checkin", Channel, "", schedules.Spec{Every: 2 * time.Hour, Hours: "08:00-22:00", Timezone: "Europe/Berlin"}),
				opSchedule(t, long, Channel, "", schedules.Spec{Cron: "0 9 * * 1", Timezone: "UTC"}),
				opSchedule(t, "ws_only", "websocket", "", schedules.Spec{Cron: "0 9 * * *"}),
				opSchedule(t, "brief", Channel, "telegram:dm:9", schedules.Spec{Cron: "0 8 * * *"}),
			}
			s := setup{now: clock.Now, policies: queued, schedules: all, manager: func(o *sessions.Options) { o.Now = clock.Now }}
			if pg {
				s.dsn = pgtest.DSN(t)
			}
			api := telegramtest.New(t)
			h := start(t, api, t.TempDir(), s)
			ctx := t.Context()

			api.Push(telegramtest.DM(7, "/schedules"))
			sent := api.WaitSent(t, 1)
			id := api.SentIDs()[0]
			want := schedulesHeadText +
				"\n• checkin — every 2h0m0s 08:00-22:00 (Europe/Berlin), next Sun 29 Mar 08:00 CEST: not subscribed" +
				"\n• " + long + " — cron 0 9 * * 1 (UTC), next Mon 30 Mar 09:00 UTC: not subscribed"
			if sent[0].Text != want {
				t.Fatalf("/schedules answered\n%s\nwant\n%s", sent[0].Text, want)
			}
			longData := schedButtonData(long, true)
			if len(longData) > 64 || !strings.HasPrefix(longData, "sched:+#") {
				t.Fatalf("the long name's data %q", longData)
			}
			waitButtons(t, api, 7, id, "Subscribe to checkin=sched:+checkin", "Subscribe to "+cut(long, 40)+"="+longData)

			q := api.Tap(t, 7, 7, id, "sched:+checkin")
			if ans := api.WaitAnswered(t, q); ans.Text != "Subscribed to checkin" {
				t.Fatalf("tap answered %+v", ans)
			}
			waitButtons(t, api, 7, id, "✓ checkin — Unsubscribe=sched:-checkin", "Subscribe to "+cut(long, 40)+"="+longData)
			if !strings.Contains(api.Text(7, id), "checkin — every 2h0m0s 08:00-22:00 (Europe/Berlin), next Sun 29 Mar 08:00 CEST: subscribed") {
				t.Fatalf("the list after the tap: %q", api.Text(7, id))
			}
			q = api.Tap(t, 7, 7, id, longData)
			if ans := api.WaitAnswered(t, q); ans.Text != "Subscribed to "+long {
				t.Fatalf("tap on the long name answered %+v", ans)
			}
			if keys, err := h.db.OptedIn(ctx, long, Channel, "", 10); err != nil || fmt.Sprint(keys) != "[telegram:dm:7]" {
				t.Fatalf("opted in to the long one: %v, %v", keys, err)
			}

			// Taps naming what is not offered to a Telegram session: each is
			// answered, and nothing is stored.
			for data, answer := range map[string]string{
				"sched:+ws_only":                     tapScheduleGoneText,
				"sched:+brief":                       tapScheduleGoneText,
				"sched:+nope":                        tapScheduleGoneText,
				"sched:+#0000000000000000":           tapScheduleGoneText,
				"sched:-ws_only":                     tapScheduleGoneText,
				"sched:checkin":                      unknownButtonText,
				"sched:":                             unknownButtonText,
				"sched:+" + strings.Repeat("x", 500): tapScheduleGoneText,
			} {
				q := api.TapStale(8, 8, id, data)
				if ans := api.WaitAnswered(t, q); ans.Text != answer {
					t.Fatalf("crafted tap %q answered %+v, want %q", data, ans, answer)
				}
			}
			if names, err := h.db.SessionOptIns(ctx, "telegram:dm:8"); err != nil || len(names) != 0 {
				t.Fatalf("crafted taps stored %v, %v", names, err)
			}

			// /status: a reminder, and the schedules the chat gets.
			due := time.Date(2026, 3, 30, 6, 0, 0, 0, time.UTC)
			if ok, err := h.db.AddReminder(ctx, &ledger.Reminder{SessionKey: "telegram:dm:7", Channel: Channel, Spec: "at x", Timezone: "Europe/Berlin",
				Text: "call Ann", NextDueAt: &due, CreatedAt: clock.Now()}, 10); err != nil || !ok {
				t.Fatal(ok, err)
			}
			api.Push(telegramtest.DM(7, "/status"))
			status := api.WaitSent(t, 2)[1].Text
			if want := "Scheduled: 1 reminder, next Mon 30 Mar 08:00 CEST (Europe/Berlin); schedules checkin, " + long +
				", next Sun 29 Mar 08:00 CEST (Europe/Berlin)."; !strings.Contains(status, want) {
				t.Fatalf("/status lacks %q:\n%s", want, status)
			}
			api.Push(telegramtest.DM(8, "/status"))
			if status := api.WaitSent(t, 3)[2].Text; !strings.Contains(status, "Scheduled: nothing yet — /schedules to subscribe.") {
				t.Fatalf("/status of a chat subscribed to nothing:\n%s", status)
			}

			// A reload takes checkin out: a new subscription is refused and
			// the list updated; the subscriber can still unsubscribe.
			h.tt.Set(all[1:])
			q = api.TapStale(8, 8, id, "sched:+checkin")
			if ans := api.WaitAnswered(t, q); ans.Text != tapScheduleGoneText {
				t.Fatalf("tap on a schedule taken out answered %+v", ans)
			}
			q = api.Tap(t, 7, 7, id, "sched:-checkin")
			if ans := api.WaitAnswered(t, q); ans.Text != "Unsubscribed from checkin" {
				t.Fatalf("unsubscribe answered %+v", ans)
			}
			waitButtons(t, api, 7, id, "✓ "+cut(long, 40)+" — Unsubscribe="+schedButtonData(long, false))
			if names, _ := h.db.SessionOptIns(ctx, "telegram:dm:7"); fmt.Sprint(names) != "["+long+"]" {
				t.Fatalf("opt-ins left %v", names)
			}
			api.CheckAnswers(t)
		})
	}
}

// Without a timetable /schedules offers nothing, and a crafted tap is
// answered.
func TestSchedulesWithoutTimetable(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{policies: queued})
	api.Push(telegramtest.DM(7, "/schedules"))
	if got := api.WaitSent(t, 1)[0].Text; got != schedulesNoneText {
		t.Fatalf("/schedules answered %q", got)
	}
	q := api.TapStale(7, 7, api.SentIDs()[0], "sched:+checkin")
	if ans := api.WaitAnswered(t, q); ans.Text != tapSchedulesOffText {
		t.Fatalf("tap answered %+v", ans)
	}
	api.Push(telegramtest.DM(7, "/status"))
	if got := api.WaitSent(t, 2)[1].Text; strings.Contains(got, "Scheduled") {
		t.Fatalf("/status without a timetable:\n%s", got)
	}
	api.CheckAnswers(t)
}
