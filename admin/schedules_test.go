package admin

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/browsertest"
	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

func opSchedule(t *testing.T, name, channel, key string, spec schedules.Spec) sessions.OperatorSchedule {
	t.Helper()
	w, err := spec.When()
	if err != nil {
		t.Fatal(err)
	}
	return sessions.OperatorSchedule{Name: name, Target: sessions.ScheduleTarget{Channel: channel, SessionKey: key, AllSessions: key == ""},
		When: w, Misfire: schedules.Misfire{Rule: schedules.MisfireSkip}}
}

// settle writes a fire through the store as the scheduler does.
func settle(t *testing.T, db *store.DB, key, session string, due time.Time, state, ref string) {
	t.Helper()
	ctx := context.Background()
	held, ok, err := db.ClaimFire(ctx, ledger.FireClaim{ScheduleKey: key, DueAt: due, SessionKey: session, Owner: "r1",
		LeaseUntil: due.Add(time.Minute), At: due.Add(1500 * time.Millisecond)})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := db.SettleFire(ctx, ledger.FireEnd{ScheduleKey: key, DueAt: due, From: ledger.FireClaimed, Owner: "r1", Attempt: held.Attempt,
		State: state, DeliveryRef: ref, At: due.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
}

// The schedules endpoints: the token is needed; the schedules in force
// with their next three due times in their zones and their last fires;
// one schedule's fires (a removed one's while stored, 404 for a name
// with neither); a session's reminders, opt-ins and fires; bad
// parameters refused.
func TestSchedulesAPI(t *testing.T) {
	e := newEnvWith(t, agent.Echo{}, envOptions{schedules: []sessions.OperatorSchedule{
		opSchedule(t, "brief", "telegram", "telegram:dm:42", schedules.Spec{Cron: "0 8 * * 1-5", Timezone: "Europe/Berlin"}),
		opSchedule(t, "checkin", "websocket", "", schedules.Spec{Every: 3 * time.Hour, Hours: "09:00-18:00", Timezone: "Asia/Tokyo"}),
	}})
	ctx := context.Background()
	d := time.Date(2026, 2, 27, 7, 0, 0, 0, time.UTC) // Friday 08:00 in Berlin
	settle(t, e.db, schedules.OperatorKey("brief"), "telegram:dm:42", d.AddDate(0, 0, -1), ledger.FireSent, "311")
	settle(t, e.db, schedules.OperatorKey("brief"), "telegram:dm:42", d, ledger.FireSent, "312")
	settle(t, e.db, schedules.OperatorSessionKey("checkin", "websocket:ann"), "websocket:ann", d, ledger.FireQuiet, "")
	settle(t, e.db, schedules.OperatorKey("old"), "websocket:ann", d, ledger.FireFailed, "")
	due := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	if ok, err := e.db.AddReminder(ctx, &ledger.Reminder{SessionKey: "websocket:ann", Channel: "websocket", Spec: "at x", Timezone: "Asia/Tokyo",
		Text: "call Ann", NextDueAt: &due, CreatedAt: d}, 10); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := e.db.SetScheduleOptIn(ctx, ledger.ScheduleOptIn{SessionKey: "websocket:ann", Schedule: "checkin", Channel: "websocket", CreatedAt: d}, true); err != nil {
		t.Fatal(err)
	}

	for _, path := range []string{"/admin/api/schedules", "/admin/api/schedules/brief/fires", "/admin/api/sessions/websocket:ann/schedules"} {
		if code, _, _ := e.do("GET", path, ""); code != http.StatusUnauthorized {
			t.Fatalf("%s without a token: %d", path, code)
		}
		if code, _, _ := e.do("GET", path, "wrong"); code != http.StatusUnauthorized {
			t.Fatalf("%s with a wrong token: %d", path, code)
		}
	}

	var rep ScheduleReport
	e.call("GET", "/admin/api/schedules?last=1", http.StatusOK, &rep)
	if len(rep.Schedules) != 2 || rep.Reminders.Due != 1 || rep.Reminders.Next == nil || !rep.Reminders.Next.Equal(due) {
		t.Fatalf("report %+v", rep)
	}
	brief, check := rep.Schedules[0], rep.Schedules[1]
	// Sunday 1 March 12:00 UTC: Monday to Wednesday at 08:00 in Berlin.
	want := []time.Time{time.Date(2026, 3, 2, 7, 0, 0, 0, time.UTC), time.Date(2026, 3, 3, 7, 0, 0, 0, time.UTC), time.Date(2026, 3, 4, 7, 0, 0, 0, time.UTC)}
	for i := range want {
		if !brief.Next[i].Equal(want[i]) {
			t.Fatalf("brief's next %v, want %v", brief.Next, want)
		}
	}
	// 21:00 in Tokyo: the next are 09:00, 12:00 and 15:00 there.
	if len(check.Next) != 3 || !check.Next[0].Equal(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)) || !check.Next[2].Equal(time.Date(2026, 3, 2, 6, 0, 0, 0, time.UTC)) {
		t.Fatalf("checkin's next %v", check.Next)
	}
	if brief.When != "cron 0 8 * * 1-5" || brief.Timezone != "Europe/Berlin" || brief.SessionKey != "telegram:dm:42" || brief.Misfire != "skip" ||
		len(brief.Last) != 1 || brief.Last[0].DeliveryRef != "312" || brief.Last[0].LagMS != 1500 {
		t.Fatalf("brief %+v", brief)
	}
	if !check.AllSessions || len(check.Last) != 1 || check.Last[0].SessionKey != "websocket:ann" || check.Last[0].State != ledger.FireQuiet {
		t.Fatalf("checkin %+v", check)
	}

	var fires scheduleFires
	e.call("GET", "/admin/api/schedules/brief/fires", http.StatusOK, &fires)
	if !fires.Configured || len(fires.Fires) != 2 || fires.Fires[0].DeliveryRef != "312" {
		t.Fatalf("brief's fires %+v", fires)
	}
	e.call("GET", "/admin/api/schedules/old/fires?limit=5", http.StatusOK, &fires)
	if fires.Configured || len(fires.Fires) != 1 || fires.Fires[0].State != ledger.FireFailed {
		t.Fatalf("a removed schedule's fires %+v", fires)
	}
	e.call("GET", "/admin/api/schedules/nope/fires", http.StatusNotFound, nil)
	e.call("GET", "/admin/api/schedules/brief/fires?limit=0", http.StatusBadRequest, nil)
	e.call("GET", "/admin/api/schedules/brief/fires?limit=x", http.StatusBadRequest, nil)
	e.call("GET", "/admin/api/schedules?last=101", http.StatusBadRequest, nil)

	var ss sessionSchedules
	e.call("GET", "/admin/api/sessions/websocket:ann/schedules", http.StatusOK, &ss)
	if len(ss.Reminders) != 1 || ss.Reminders[0].Text != "call Ann" || len(ss.OptIns) != 1 || ss.OptIns[0] != "checkin" ||
		len(ss.Fires) != 2 || ss.Fires[0].ScheduleKey == "" {
		t.Fatalf("ann's schedules %+v", ss)
	}
	e.call("GET", "/admin/api/sessions/websocket:nobody/schedules", http.StatusOK, &ss)
	if len(ss.Reminders) != 0 || len(ss.OptIns) != 0 || len(ss.Fires) != 0 {
		t.Fatalf("nobody's schedules %+v", ss)
	}
}

// Without a timetable the list is empty, and stored fires still show.
func TestSchedulesAPIWithoutTimetable(t *testing.T) {
	e := newEnv(t, agent.Echo{})
	settle(t, e.db, schedules.OperatorKey("old"), "websocket:ann", time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), ledger.FireSent, "")
	var rep ScheduleReport
	e.call("GET", "/admin/api/schedules", http.StatusOK, &rep)
	if rep.Schedules == nil || len(rep.Schedules) != 0 {
		t.Fatalf("report %+v", rep)
	}
	var fires scheduleFires
	e.call("GET", "/admin/api/schedules/old/fires", http.StatusOK, &fires)
	if len(fires.Fires) != 1 {
		t.Fatalf("fires %+v", fires)
	}
}

// The admin page's Schedules tab shows each schedule with its next and
// last fires and the reminders line, and a conversation shows its
// session's reminders and the message a fire made, in Chromium. Stored
// text (a fire's reason) is shown as text, never as markup.
func TestSchedulesPageInBrowser(t *testing.T) {
	e := newEnvWith(t, agent.Echo{}, envOptions{schedules: []sessions.OperatorSchedule{
		opSchedule(t, "brief", "websocket", "websocket:ann", schedules.Spec{Cron: "0 8 * * *", Timezone: "Europe/Berlin"}),
	}})
	ann := e.connect("ann")
	ann.say("a-1", "hello from ann")
	conv, err := e.db.ActiveConversation(context.Background(), "websocket:ann")
	if err != nil || conv == nil {
		t.Fatal(conv, err)
	}
	due := time.Date(2026, 3, 1, 7, 0, 0, 0, time.UTC)
	ctx := context.Background()
	held, ok, err := e.db.ClaimFire(ctx, ledger.FireClaim{ScheduleKey: schedules.OperatorKey("brief"), DueAt: due, SessionKey: "websocket:ann",
		Owner: "r1", LeaseUntil: due.Add(time.Hour), At: due.Add(3 * time.Second)})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := e.db.StoreFireTurn(ctx, held, conv.ID, 1, due); err != nil {
		t.Fatal(err)
	}
	if err := e.db.SettleFire(ctx, ledger.FireEnd{ScheduleKey: schedules.OperatorKey("brief"), DueAt: due, From: ledger.FireStored,
		State: ledger.FireFailed, Reason: "<img src=x onerror=alert(1)>", At: due}); err != nil {
		t.Fatal(err)
	}
	rem := due.Add(48 * time.Hour)
	if ok, err := e.db.AddReminder(ctx, &ledger.Reminder{SessionKey: "websocket:ann", Channel: "websocket", Spec: "at x", Text: "call Bob",
		NextDueAt: &rem, CreatedAt: due}, 10); err != nil || !ok {
		t.Fatal(ok, err)
	}

	bctx := browsertest.New(t, 1200, 900)
	err = chromedp.Do(bctx,
		chromedp.Navigate(e.url+"/admin/#schedules"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", aliceToken),
		chromedp.Click("#save"),
		browsertest.WaitText("#schedules-rows td", "brief"),
		browsertest.WaitText("#schedules-rows", "cron 0 8 * * * (Europe/Berlin)"),
		browsertest.WaitText("#schedules-rows", "failed · 3 s late · websocket:ann · <img src=x onerror=alert(1)>"),
		browsertest.WaitText("#reminders-line", "Reminders: 1 due, kept by 1 session;"),
		chromedp.Click("#tab-sessions"),
		browsertest.WaitText("#sessions td", "websocket:ann"),
		chromedp.Click("#sessions tr"),
		browsertest.WaitText("#transcript li.user .fire", "⏰ schedule:brief · failed"),
		browsertest.WaitText("#conv-schedules", "Reminders: call Bob"),
	)
	if err != nil {
		t.Fatalf("schedules page: %v", err)
	}
	imgs, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('img').length`))
	if err != nil || imgs != 0 {
		t.Fatalf("stored text became markup: %d images, %v", imgs, err)
	}
}
