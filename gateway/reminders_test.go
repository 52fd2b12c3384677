package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions"
)

var reminderClock = time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)

func reminderEnv(t *testing.T) *env {
	t.Helper()
	pol := map[string]sessions.Policy{Channel: {MaxHistory: 10, Reset: sessions.ResetPolicy{Mode: sessions.ResetNone},
		Reminders: sessions.ReminderPolicy{Enabled: true, MaxPerUser: 5, MinInterval: time.Hour}}}
	return newEnv(t, agent.Echo{}, WSOptions{}, pol, func() time.Time { return reminderClock })
}

func addReminder(t *testing.T, e *env, principal string, spec schedules.Spec, text string) int64 {
	t.Helper()
	r, err := e.mgr.Reminders().Create(context.Background(), sessions.ReminderRequest{SessionKey: sessions.WebSocketKey(principal),
		Channel: Channel, Spec: spec, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// The reminders frame lists the connection's own reminders, on their
// zone's clock; reminder_cancel cancels one of them and every connection
// of the session gets the list as it is after; another session's id, a
// second cancel and bad frames get error frames and change nothing.
func TestReminderFrames(t *testing.T) {
	e := reminderEnv(t)
	once := addReminder(t, e, "ann", schedules.Spec{At: time.Date(2026, 3, 29, 18, 0, 0, 0, time.UTC), Timezone: "Europe/Berlin"}, "call Bob")
	daily := addReminder(t, e, "ann", schedules.Spec{Cron: "0 8 * * *", Timezone: "America/New_York"}, "stretch")
	eves := addReminder(t, e, "eve", schedules.Spec{Every: 2 * time.Hour}, "eve's")

	ann, _ := e.connect(map[string]any{"user": "ann"})
	ann2, _ := e.connect(map[string]any{"user": "ann"})
	eve, _ := e.connect(map[string]any{"user": "eve"})

	ann.send(map[string]any{"type": "reminders"})
	f := ann.expect("reminders")
	list, _ := f["reminders"].([]any)
	if f["enabled"] != true || len(list) != 2 {
		t.Fatalf("reminders frame %v", f)
	}
	first, second := list[0].(map[string]any), list[1].(map[string]any)
	if num(first["id"]) != once || first["text"] != "call Bob" || first["next"] != "2026-03-29T20:00:00+02:00" ||
		first["timezone"] != "Europe/Berlin" || first["repeats"] != nil {
		t.Fatalf("one-time reminder %v", first)
	}
	if num(second["id"]) != daily || second["next"] != "2026-03-29T08:00:00-04:00" || second["repeats"] != "cron 0 8 * * *" {
		t.Fatalf("daily reminder %v", second)
	}

	// Eve cannot cancel Ann's reminder: her session has no such id.
	eve.send(map[string]any{"type": "reminder_cancel", "id": once})
	if ef := eve.expect("error"); ef["code"] != "not_found" {
		t.Fatalf("eve's cancel of ann's reminder: %v", ef)
	}
	eve.send(map[string]any{"type": "reminders"})
	if got := eve.expect("reminders")["reminders"].([]any); len(got) != 1 || num(got[0].(map[string]any)["id"]) != eves {
		t.Fatalf("eve's list %v", got)
	}

	ann.send(map[string]any{"type": "reminder_cancel", "id": once})
	for _, c := range []*client{ann, ann2} {
		got := c.expect("reminders")["reminders"].([]any)
		if len(got) != 1 || num(got[0].(map[string]any)["id"]) != daily {
			t.Fatalf("after the cancel: %v", got)
		}
	}
	ann.send(map[string]any{"type": "reminder_cancel", "id": once})
	if ef := ann.expect("error"); ef["code"] != "not_found" || !strings.Contains(ef["message"].(string), "no reminder") {
		t.Fatalf("a second cancel: %v", ef)
	}

	for _, bad := range []string{
		`{"type":"reminder_cancel"}`,
		`{"type":"reminder_cancel","id":"12"}`,
		`{"type":"reminder_cancel","id":-3}`,
		`{"type":"reminder_cancel","id":1.5}`,
		`{"type":"reminder_cancel","id":2,"session":"websocket:eve"}`,
		`{"type":"reminder\u005fcancel","id":"x"}`,
		`{"type":"reminders","id":3}`,
	} {
		ann.sendRaw(bad)
		if ef := ann.expect("error"); ef["code"] != "bad_frame" {
			t.Fatalf("%s: %v", bad, ef)
		}
	}
	if got, _ := e.mgr.Reminders().List(context.Background(), sessions.WebSocketKey("eve")); len(got) != 1 {
		t.Fatalf("eve's reminders after ann's frames: %+v", got)
	}
	if got, _ := e.mgr.Reminders().List(context.Background(), sessions.WebSocketKey("ann")); len(got) != 1 || got[0].ID != daily {
		t.Fatalf("ann's reminders: %+v", got)
	}
}
