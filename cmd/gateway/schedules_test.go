package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/admin"
	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// settleFire writes one fire through the store as the scheduler does:
// claimed lag after due, then settled as state.
func settleFire(t *testing.T, db *store.DB, key, session string, due time.Time, lag time.Duration, state, ref, reason string) {
	t.Helper()
	ctx := context.Background()
	held, ok, err := db.ClaimFire(ctx, ledger.FireClaim{ScheduleKey: key, DueAt: due, SessionKey: session, Owner: "r1",
		LeaseUntil: due.Add(lag + time.Minute), At: due.Add(lag)})
	if err != nil || !ok {
		t.Fatalf("claim %s: %t, %v", key, ok, err)
	}
	if err := db.SettleFire(ctx, ledger.FireEnd{ScheduleKey: key, DueAt: due, From: ledger.FireClaimed, Owner: "r1", Attempt: held.Attempt,
		State: state, DeliveryRef: ref, Reason: reason, At: due.Add(lag + time.Second)}); err != nil {
		t.Fatal(err)
	}
}

// TestSchedulesCommand: `gateway schedules` lists bot.yaml's schedules
// with their next three due times in their own zones and their last
// outcomes from a real SQLite file, as text and JSON; `schedules fires`
// lists one schedule's fires (an all_sessions one's by session, a
// removed one's still), and bad use is refused.
func TestSchedulesCommand(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "g.db")
	cfg := writeConfig(t, fmt.Sprintf(`storage:
  dsn: %s
schedules:
  - name: brief
    cron: "0 8 * * *"
    timezone: Europe/Berlin
    target: {channel: telegram, chat: 42}
    prompt: Write the morning brief.
    quiet: true
  - name: check_in
    every: 2h
    active_hours: "09:00-17:00"
    timezone: America/New_York
    misfire: skip
    target: {channel: websocket, all_sessions: true}
    prompt: Ask how the day goes.
`, dbPath))
	db, err := store.Open(context.Background(), "sqlite", dbPath, store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d1 := time.Date(2026, 3, 27, 7, 0, 0, 0, time.UTC) // 08:00 in Berlin
	settleFire(t, db, schedules.OperatorKey("brief"), "telegram:dm:42", d1.AddDate(0, 0, -1), 2*time.Second, ledger.FireSent, "901", "")
	settleFire(t, db, schedules.OperatorKey("brief"), "telegram:dm:42", d1, 1500*time.Millisecond, ledger.FireQuiet, "", "")
	settleFire(t, db, schedules.OperatorSessionKey("check_in", "websocket:ann"), "websocket:ann", d1.Add(6*time.Hour), 3*time.Hour,
		ledger.FireSkippedLate, "", "missed while\nno gateway ran")
	settleFire(t, db, schedules.OperatorKey("gone"), "websocket:bob", d1, 0, ledger.FireFailed, "", "the model failed")
	due := time.Date(2026, 4, 1, 6, 0, 0, 0, time.UTC)
	if ok, err := db.AddReminder(context.Background(), &ledger.Reminder{SessionKey: "telegram:dm:42", Channel: "telegram",
		Spec: "at 2026-04-01T06:00:00Z", Text: "call Ann", NextDueAt: &due, CreatedAt: d1}, 10); err != nil || !ok {
		t.Fatal(ok, err)
	}
	db.Close()

	code, out, errs := runCmd(t, "schedules", "-c", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"brief: cron 0 8 * * * (Europe/Berlin) → telegram chat 42; misfire once, max_late 10m0s, quiet\n",
		"check_in: every 2h0m0s 09:00-17:00 (America/New_York) → websocket: every session that opted in; misfire skip\n",
		"2026-03-27 08:00 CET", "quiet", "901",
		"websocket:ann", "skipped_late", "3h0m0s", "missed while no gateway ran",
		"reminders: 1 due, kept by 1 session; the next at 2026-04-01T06:00:00Z",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "gone") {
		t.Errorf("a schedule no longer configured is listed:\n%s", out)
	}
	// brief's fires, newest first: the quiet one above the sent one.
	if q, s := strings.Index(out, "quiet  2s"), strings.Index(out, "sent   2s"); q < 0 || s < 0 || q > s {
		t.Errorf("brief's last fires not newest first with their lag:\n%s", out)
	}

	code, out, errs = runCmd(t, "schedules", "-c", cfg, "-json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep admin.ScheduleReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Schedules) != 2 || rep.Reminders.Due != 1 {
		t.Fatalf("report %+v", rep)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	ny, _ := time.LoadLocation("America/New_York")
	brief, check := rep.Schedules[0], rep.Schedules[1]
	if len(brief.Next) != 3 || len(check.Next) != 3 {
		t.Fatalf("next fires %v and %v, want 3 each", brief.Next, check.Next)
	}
	for i, n := range brief.Next {
		l := n.In(berlin)
		if l.Hour() != 8 || l.Minute() != 0 || !n.After(rep.At) || (i > 0 && l.YearDay() == brief.Next[i-1].In(berlin).YearDay()) {
			t.Fatalf("brief's next fires %v: want 08:00 Berlin on three days after %v", brief.Next, rep.At)
		}
	}
	for _, n := range check.Next {
		l := n.In(ny)
		if h := l.Hour(); h < 9 || h > 16 || h%2 != 1 || l.Minute() != 0 {
			t.Fatalf("check_in's next fires %v: want 09:00, 11:00, … 15:00 in New York", check.Next)
		}
	}
	if brief.SessionKey != "telegram:dm:42" || !check.AllSessions || check.Misfire != "skip" || check.MaxLate != "" || !brief.Quiet {
		t.Fatalf("rows %+v %+v", brief, check)
	}
	if len(brief.Last) != 2 || brief.Last[0].State != ledger.FireQuiet || brief.Last[1].DeliveryRef != "901" || brief.Last[1].LagMS != 2000 {
		t.Fatalf("brief's last fires %+v", brief.Last)
	}

	code, out, _ = runCmd(t, "schedules", "fires", "brief", "-c", cfg, "-limit", "1")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, "quiet") || strings.Contains(out, "901") {
		t.Fatalf("fires brief -limit 1: exit %d\n%s", code, out)
	}
	code, out, _ = runCmd(t, "schedules", "fires", "-c", cfg, "gone")
	if code != 0 || !strings.Contains(out, "gone is no longer in the configuration") || !strings.Contains(out, "the model failed") {
		t.Fatalf("fires of a removed schedule: exit %d\n%s", code, out)
	}
	code, out, _ = runCmd(t, "schedules", "fires", "check_in", "-c", cfg, "-json")
	var fires struct {
		Configured bool            `json:"configured"`
		Fires      []admin.FireRow `json:"fires"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &fires) != nil || !fires.Configured || len(fires.Fires) != 1 || fires.Fires[0].SessionKey != "websocket:ann" {
		t.Fatalf("fires check_in -json: exit %d\n%s", code, out)
	}
	for _, bad := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"schedules", "fires", "-c", cfg}, 2, "missing the schedule's name"},
		{[]string{"schedules", "fires", "nope", "-c", cfg}, 1, `no schedule "nope"`},
		{[]string{"schedules", "-c", cfg, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"schedules", "-c", cfg, "-last", "-1"}, 2, "-last wants"},
	} {
		code, _, errs := runCmd(t, bad.args...)
		if code != bad.code || !strings.Contains(errs, bad.says) {
			t.Errorf("gateway %v: exit %d, %q; want %d saying %q", bad.args, code, errs, bad.code, bad.says)
		}
	}
}
