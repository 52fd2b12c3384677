package sessions_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/faults"
	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// The fault-at-every-step harness's scenario for a fire (schedule-fire
// in TestFaultAtEveryStep): the fire of a schedule to a Telegram chat
// (whose delivery is confirmed) runs once without faults, which counts
// its ledger calls (N) — the scheduler's plan, claim, the message stored,
// the turn claimed, its reply stored, its delivery marked, the fire
// settled; then once for every k in 1..N with an outage from the k-th
// call, before it reaches the database and again after it landed with its
// answer lost, healed once it has failed a few calls. The scheduler keeps
// looking, the clock moving on 20 s a look. Every run must end, with no
// restart, in:
//
//   - one message of the fire stored, and one final reply to it;
//   - that reply sent to the chat once (nothing sent twice, nothing lost);
//   - the fire settled sent, with the channel's reference;
//   - the schedule's next fire planned.
func runFireFaults(t *testing.T, open func() *store.DB, k int, mode faults.Mode) faultRun {
	t.Helper()
	label := fmt.Sprintf("outage from step %d (%s)", k, mode)
	db := open()
	defer db.Close()
	if db.Driver() == store.DriverPostgres {
		if err := db.Gorm().Exec("TRUNCATE schedule_fires, usage_days").Error; err != nil {
			t.Fatal(err)
		}
	}
	log, dump := runLog(t, label)
	defer dump()
	due := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	c := clocktest.New(due.Add(-30 * time.Second))
	ag := &countingAgent{}
	m := sessions.New(db, ag, sessions.Options{Events: db.Events(), Now: c.Now, Logger: log,
		Policies:    map[string]sessions.Policy{"telegram": {MaxHistory: 20, Reset: sessions.ResetPolicy{Mode: sessions.ResetNone}}},
		RescueEvery: 20 * time.Millisecond, RetryPause: 10 * time.Millisecond})
	var mu sync.Mutex
	var sent []string
	m.Routes().Register("telegram", sessions.Route{Track: true, Deliver: func(_ context.Context, d sessions.Delivery) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, d.ClientMsgID)
		return fmt.Sprintf("tg-%d", len(sent)), nil
	}})
	startRescuer(t, m)
	defer m.Shutdown(context.Background())
	w, err := schedules.ParseCron("0 8 * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	s := sessions.NewScheduler(m, sessions.SchedulerOptions{}, log)
	s.SetSchedules([]sessions.OperatorSchedule{{Name: "brief", When: w, Prompt: "Write the brief.",
		Target: sessions.ScheduleTarget{Channel: "telegram", SessionKey: sessions.TelegramDMKey(7), UserID: "7", ChatID: "7"}}})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Stop(ctx)
	}()

	fs := faults.New(db)
	if k > 0 {
		fs.Outage(k, mode)
	}
	healed := healAfter(fs, k)
	key := schedules.OperatorKey("brief")
	aside := faults.Aside(context.Background())
	settled := func() bool {
		f, err := db.Fire(aside, key, due)
		return err == nil && f != nil && ledger.FireSettled(f.State)
	}
	look := func() {
		_ = s.Pass(context.Background()) // an outage fails passes; the next one tries again
		s.Wait()
	}
	look() // plans 08:00
	c.Set(due)
	for i := 0; !settled(); i++ {
		if i == 60 {
			f, _ := db.Fire(aside, key, due)
			var rows []sessions.Message
			db.Gorm().Order("conversation_id, seq").Find(&rows)
			for _, r := range rows {
				t.Logf("%d %s %q reply_to=%d status=%s state=%s owner=%s att=%d due=%v track=%v", r.Seq, r.Role, r.Content, r.ReplyTo, r.Status, r.TurnState, r.TurnOwner, r.TurnAttempt, r.TurnDue, r.TurnTrack)
			}
			t.Errorf("%s: the fire is not settled after 60 looks (20 min): %+v", label, f)
			break
		}
		look()
		if settled() {
			break
		}
		<-healedOrNow(healed, i)
		// Time moves on: claims lapse, handed-back deliveries come due.
		c.Advance(20 * time.Second)
		// A pass of the rescuer, as its ticker would make: it runs turns
		// an outage cut and delivers what was handed back.
		_, _, _ = m.Rescuer().Recover(context.Background(), 0) // an outage fails it; the next look tries again
	}
	struck := ""
	if steps := fs.Steps(); k > 0 && len(steps) >= k {
		struck = steps[k-1]
	}
	f, err := db.Fire(aside, key, due)
	if err != nil || f == nil || f.State != ledger.FireSent || !strings.HasPrefix(f.DeliveryRef, "tg-") {
		t.Errorf("%s: the fire ended %+v (%v), want sent with the chat's reference", label, f, err)
		// What the turn's rows say, for the one who reads this.
		var rows []sessions.Message
		db.Gorm().Order("conversation_id, seq").Find(&rows)
		for _, r := range rows {
			t.Logf("%d %s %q reply_to=%d status=%s/%s state=%s owner=%s att=%d lead=%d track=%v ref=%q", r.Seq, r.Role, r.Content, r.ReplyTo,
				r.Status, r.Error, r.TurnState, r.TurnOwner, r.TurnAttempt, r.TurnLead, r.TurnTrack, r.DeliveryRef)
		}
		mu.Lock()
		t.Logf("sent to the chat: %q", sent)
		mu.Unlock()
	}
	var msgs []sessions.Message
	if err := db.Gorm().Where("client_msg_id LIKE ?", ledger.FireMsgPrefix+"%").Find(&msgs).Error; err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Errorf("%s: %d messages of the fire stored, want 1", label, len(msgs))
	}
	for _, line := range finalRepliesPerTurn(t, db) {
		t.Errorf("%s: %s", label, line)
	}
	// Sent once: the delivery's mark may take the rescuer a look or two
	// after the outage, and nothing more is sent after the fire settled
	// (its delivery mark came first).
	mu.Lock()
	got := slices.Clone(sent)
	mu.Unlock()
	if len(got) != 1 {
		t.Errorf("%s: sent %d times: %v", label, len(got), got)
	}
	if next, ok, err := db.LatestFire(aside, key); err != nil || !ok || !next.Equal(due.AddDate(0, 0, 1)) {
		t.Errorf("%s: the next fire planned at %s (%v, %v), want the next day's", label, next, ok, err)
	}
	return faultRun{calls: fs.Calls(), steps: fs.Steps(), struck: struck}
}

// healedOrNow waits for the outage's end on the first looks, so that a
// run does not spend its looks while the outage lasts; later looks go on
// at once.
func healedOrNow(healed <-chan struct{}, look int) <-chan struct{} {
	if look < 3 {
		return healed
	}
	now := make(chan struct{})
	close(now)
	return now
}
