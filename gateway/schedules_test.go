package gateway

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// scheduleEnv serves a WebSocket channel whose Schedules door is a
// timetable of list on a real SQLite store.
func scheduleEnv(t *testing.T, now func() time.Time, list []sessions.OperatorSchedule) (*env, *sessions.Timetable) {
	t.Helper()
	db, err := store.Open(context.Background(), store.DriverSQLite, filepath.Join(t.TempDir(), "g.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mgr := sessions.New(db, agent.Echo{}, sessions.Options{Logger: quiet, Now: now})
	tt := sessions.NewTimetable(db, now)
	tt.Set(list)
	mgr.Standing().UseTimetable(tt)
	doors := SessionsOf(mgr)
	doors.Schedules = tt
	ws := NewWebSocket(doors, WSOptions{Logger: quiet, RatePerSecond: 1000, RateBurst: 1000})
	srv := New(quiet)
	srv.Handle("GET /ws", ws)
	hs := httptest.NewServer(srv.mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ws.Shutdown(ctx)
		hs.Close()
		mgr.Shutdown(ctx)
		db.Close()
	})
	return &env{t: t, srv: hs, mgr: mgr, db: db, ws: ws}, tt
}

func opSchedule(t *testing.T, name, channel, key string, spec schedules.Spec) sessions.OperatorSchedule {
	t.Helper()
	w, err := spec.When()
	if err != nil {
		t.Fatal(err)
	}
	return sessions.OperatorSchedule{Name: name, Target: sessions.ScheduleTarget{Channel: channel, SessionKey: key, AllSessions: key == ""}, When: w}
}

// The schedules frames: the list of this channel's all_sessions
// schedules with opted_in, an opt-in answered to every connection of the
// session, names of schedules not offered here refused with not_found
// and nothing stored, malformed frames refused with bad_frame, and the
// status frame's scheduled.
func TestScheduleFrames(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC))
	e, tt := scheduleEnv(t, clock.Now, []sessions.OperatorSchedule{
		opSchedule(t, "checkin", Channel, "", schedules.Spec{Every: 2 * time.Hour, Timezone: "America/New_York"}),
		opSchedule(t, "tg_only", "telegram", "", schedules.Spec{Cron: "0 9 * * *"}),
		opSchedule(t, "brief", Channel, "websocket:ann", schedules.Spec{Cron: "0 8 * * *", Timezone: "Europe/Berlin"}),
	})
	ann, _ := e.connect(map[string]any{"user": "ann"})
	ann2, _ := e.connect(map[string]any{"user": "ann"})
	bob, _ := e.connect(map[string]any{"user": "bob"})

	ann.send(map[string]any{"type": "schedules"})
	f := ann.expect("schedules")
	list := f["schedules"].([]any)
	if len(list) != 1 {
		t.Fatalf("schedules frame %v", f)
	}
	s := list[0].(map[string]any)
	if s["name"] != "checkin" || s["opted_in"] != false || s["timezone"] != "America/New_York" || s["next"] != "2026-03-29T02:00:00Z" ||
		s["when"] != "every 2h0m0s (America/New_York)" {
		t.Fatalf("checkin listed as %v", s)
	}

	ann.send(map[string]any{"type": "schedule_opt_in", "name": "checkin", "on": true})
	if s := ann.expect("schedules")["schedules"].([]any)[0].(map[string]any); s["opted_in"] != true {
		t.Fatalf("after opting in: %v", s)
	}
	if s := ann2.expect("schedules")["schedules"].([]any)[0].(map[string]any); s["opted_in"] != true {
		t.Fatalf("the session's other connection got %v", s)
	}

	// bob names what is not offered to a WebSocket session.
	for _, name := range []string{"tg_only", "brief", "nope", "checkin:websocket:ann"} {
		bob.send(map[string]any{"type": "schedule_opt_in", "name": name, "on": true})
		if er := bob.expect("error"); er["code"] != "not_found" {
			t.Fatalf("opt in to %q: %v", name, er)
		}
	}
	for _, raw := range []string{
		`{"type":"schedule_opt_in","name":"checkin"}`,
		`{"type":"schedule_opt_in","on":true}`,
		`{"type":"schedule_opt_in","name":"","on":true}`,
		`{"type":"schedule_opt_in","name":"checkin","on":"yes"}`,
		`{"type":"status","name":"checkin"}`,
		`{"type":"schedules","on":true}`,
		fmt.Sprintf(`{"type":"schedule_opt_in","name":"%0200d","on":true}`, 0),
	} {
		bob.sendRaw(raw)
		if er := bob.expect("error"); er["code"] != "bad_frame" {
			t.Fatalf("%s: %v", raw, er)
		}
	}
	if names, err := e.db.SessionOptIns(context.Background(), "websocket:bob"); err != nil || len(names) != 0 {
		t.Fatalf("refused frames stored %v, %v", names, err)
	}

	ann.send(map[string]any{"type": "status"})
	sc, ok := ann.expect("status")["scheduled"].(map[string]any)
	if !ok || fmt.Sprint(sc["schedules"]) != "[checkin brief]" || num(sc["offered"]) != 0 || num(sc["reminders"]) != 0 ||
		sc["next_schedule"] != "2026-03-29T02:00:00Z" || sc["next_schedule_timezone"] != "America/New_York" {
		t.Fatalf("status scheduled %v", sc)
	}
	bob.send(map[string]any{"type": "status"})
	if sc := bob.expect("status")["scheduled"].(map[string]any); num(sc["offered"]) != 1 || fmt.Sprint(sc["schedules"]) != "[]" {
		t.Fatalf("bob's status scheduled %v", sc)
	}

	// A reload takes checkin out: ann can opt out, bob cannot opt in.
	tt.Set(nil)
	bob.send(map[string]any{"type": "schedule_opt_in", "name": "checkin", "on": true})
	if er := bob.expect("error"); er["code"] != "not_found" {
		t.Fatalf("opt in to a schedule taken out: %v", er)
	}
	ann.send(map[string]any{"type": "schedule_opt_in", "name": "checkin", "on": false})
	if f := ann.expect("schedules"); len(f["schedules"].([]any)) != 0 {
		t.Fatalf("after opting out of a schedule taken out: %v", f)
	}
}

// Without a Schedules door the frames are refused as unsupported.
func TestScheduleFramesUnsupported(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	c, _ := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "schedules"})
	if er := c.expect("error"); er["code"] != "unsupported" {
		t.Fatalf("schedules without a timetable: %v", er)
	}
	c.send(map[string]any{"type": "status"})
	if _, ok := c.expect("status")["scheduled"]; ok {
		t.Fatal("status without a timetable tells scheduled")
	}
}
