package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// fireAt claims the fire (key, due) for session and settles it as state
// at ended; state stored leaves it stored, in conversation conv at seq.
func fireAt(t *testing.T, db *DB, key, session string, due time.Time, state string, ended time.Time, conv string, seq int64) {
	t.Helper()
	ctx := context.Background()
	held, ok, err := db.ClaimFire(ctx, ledger.FireClaim{ScheduleKey: key, DueAt: due, SessionKey: session, Owner: "r1",
		LeaseUntil: due.Add(time.Minute), At: due.Add(2 * time.Second)})
	if err != nil || !ok {
		t.Fatalf("claim %s at %s: %t, %v", key, due, ok, err)
	}
	from := ledger.FireClaimed
	if conv != "" {
		if err := db.StoreFireTurn(ctx, held, conv, seq, due.Add(3*time.Second)); err != nil {
			t.Fatal(err)
		}
		from = ledger.FireStored
	}
	if state == ledger.FireStored {
		return
	}
	if err := db.SettleFire(ctx, ledger.FireEnd{ScheduleKey: key, DueAt: due, From: from, Owner: "r1", Attempt: held.Attempt,
		State: state, DeliveryRef: "msg-" + fmt.Sprint(seq), At: ended}); err != nil {
		t.Fatal(err)
	}
}

// A schedule's fires are those of its own key and of its keys per
// session, and of no other schedule, even one whose name begins with its
// name or would match it as a LIKE pattern (an _ in the name).
func TestOperatorFires(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		due := time.Date(2026, 3, 30, 6, 0, 0, 0, time.UTC)
		for i, key := range []string{
			schedules.OperatorKey("a_b"),
			schedules.OperatorSessionKey("a_b", "telegram:dm:1"),
			schedules.OperatorSessionKey("a_b", "telegram:dm:2"),
			schedules.OperatorKey("axb"),                         // a_b as a LIKE pattern matches it
			schedules.OperatorSessionKey("axb", "telegram:dm:1"), //
			schedules.OperatorKey("a_bc"),                        // begins with a_b
			schedules.ReminderKey(7),
		} {
			fireAt(t, db, key, "telegram:dm:1", due.Add(time.Duration(i)*time.Hour), ledger.FireSent, due.Add(time.Duration(i)*time.Hour), "", 0)
		}
		got, err := db.OperatorFires(ctx, "a_b", 10)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, f := range got {
			keys = append(keys, f.ScheduleKey)
		}
		want := "[schedule:a_b:telegram:dm:2 schedule:a_b:telegram:dm:1 schedule:a_b]" // newest first
		if fmt.Sprint(keys) != want {
			t.Fatalf("fires of a_b: %v, want %v", keys, want)
		}
		if got, err := db.OperatorFires(ctx, "a_b", 1); err != nil || len(got) != 1 || got[0].ScheduleKey != "schedule:a_b:telegram:dm:2" {
			t.Fatalf("limit 1: %+v, %v", got, err)
		}
	})
}

// The retention purge deletes settled fires that ended before the
// cutoff, but never a schedule key's latest fire (the scheduler counts
// what it missed from it), nor a fire not settled.
func TestPurgeFires(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		day := time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC)
		convs := createConversations(t, db, 1, day, "")
		if err := db.Append(ctx, ledger.Append{Conv: convs[0], Messages: []ledger.Message{{ConversationID: convs[0].ID, Seq: 1, Role: "user",
			Content: "brief", Status: ledger.MsgOK, CreatedAt: day}}, At: day}); err != nil {
			t.Fatal(err)
		}
		brief := schedules.OperatorKey("brief")
		for d := range 5 { // five daily fires, settled on their day
			at := day.AddDate(0, 0, d)
			fireAt(t, db, brief, "websocket:u0", at, ledger.FireSent, at, "", 0)
		}
		// A yearly one whose only fire is old: it stays.
		fireAt(t, db, schedules.OperatorKey("yearly"), "websocket:u0", day, ledger.FireSkippedLate, day, "", 0)
		// An old fire whose turn is stored and not settled yet, and a
		// newer one of the same key: the stored one stays.
		rem := schedules.ReminderKey(1)
		fireAt(t, db, rem, "websocket:u0", day, ledger.FireStored, day, convs[0].ID, 1)
		fireAt(t, db, rem, "websocket:u0", day.AddDate(0, 0, 4), ledger.FireQuiet, day.AddDate(0, 0, 4), "", 0)

		n, err := db.PurgeFires(ctx, day.AddDate(0, 0, 3)) // ended before the 4th
		if err != nil {
			t.Fatal(err)
		}
		if n != 3 {
			t.Fatalf("purged %d fires, want the 3 of brief settled before the cutoff", n)
		}
		var left []string
		var rows []ledger.ScheduleFire
		db.Gorm().Order("schedule_key, due_at").Find(&rows)
		for _, f := range rows {
			left = append(left, f.ScheduleKey+"@"+f.DueAt.UTC().Format("01-02")+"="+f.State)
		}
		want := "[reminder:1@01-01=stored reminder:1@01-05=quiet schedule:brief@01-04=sent schedule:brief@01-05=sent schedule:yearly@01-01=skipped_late]"
		if fmt.Sprint(left) != want {
			t.Fatalf("left %v\nwant %v", left, want)
		}
		// Run again: nothing more goes (the latest of each stays, however old).
		if n, err := db.PurgeFires(ctx, day.AddDate(1, 0, 0)); err != nil || n != 1 {
			t.Fatalf("a year on: purged %d, %v; want only brief's 4th", n, err)
		}
	})
}

// An export carries the fires whose turns are in the conversation, and
// the text and Markdown transcripts mark the scheduled message; a fire
// of another conversation of the session is not in it.
func TestExportCarriesFires(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		at := time.Date(2026, 3, 30, 6, 0, 0, 0, time.UTC)
		convs := createConversations(t, db, 1, at, "")
		c := convs[0]
		msgs := []ledger.Message{
			{ConversationID: c.ID, Seq: 1, Role: "user", Content: "hello", Status: ledger.MsgOK, CreatedAt: at},
			{ConversationID: c.ID, Seq: 2, Role: "user", Content: "Morning brief, please.", Status: ledger.MsgOK, CreatedAt: at},
		}
		if err := db.Append(ctx, ledger.Append{Conv: c, Messages: msgs, At: at}); err != nil {
			t.Fatal(err)
		}
		fireAt(t, db, schedules.OperatorKey("brief"), c.SessionKey, at, ledger.FireSent, at.Add(time.Minute), c.ID, 2)
		fireAt(t, db, schedules.ReminderKey(3), c.SessionKey, at, ledger.FireSent, at.Add(time.Minute), "other-conv", 1)
		fireAt(t, db, schedules.OperatorKey("skipped"), c.SessionKey, at.Add(-time.Hour), ledger.FireSkippedLate, at, "", 0)

		x, err := db.ExportConversation(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(x.Fires) != 1 {
			t.Fatalf("export fires %+v, want the one of this conversation", x.Fires)
		}
		f := x.Fires[0]
		if f.ScheduleKey != "schedule:brief" || f.TurnSeq != 2 || f.State != ledger.FireSent || f.DeliveryRef != "msg-2" || !f.DueAt.Equal(at) {
			t.Fatalf("export fire %+v", f)
		}
		var text, md strings.Builder
		if err := x.Write(&text, FormatText); err != nil {
			t.Fatal(err)
		}
		if err := x.Write(&md, FormatMarkdown); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text.String(), "   2 user      [scheduled schedule:brief, due 2026-03-30T06:00:00Z: sent] Morning brief") {
			t.Fatalf("text transcript does not mark the scheduled message:\n%s", text.String())
		}
		if strings.Count(text.String(), "[scheduled") != 1 {
			t.Fatalf("text transcript marks more than the scheduled message:\n%s", text.String())
		}
		if !strings.Contains(md.String(), "Scheduled: `schedule:brief, due 2026-03-30T06:00:00Z: sent`") {
			t.Fatalf("Markdown transcript does not mark the scheduled message:\n%s", md.String())
		}
	})
}

// ReminderCount counts the reminders still due and the sessions keeping
// them, and finds the soonest.
func TestReminderCount(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		now := time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)
		if c, err := db.ReminderCount(ctx); err != nil || c.Due != 0 || c.Next != nil {
			t.Fatalf("no reminders: %+v, %v", c, err)
		}
		var ids []int64
		for i, key := range []string{"telegram:dm:1", "telegram:dm:1", "websocket:ann"} {
			due := now.Add(time.Duration(3-i) * time.Hour)
			r := &ledger.Reminder{SessionKey: key, Channel: "telegram", Spec: "at x", Text: "t", NextDueAt: &due, CreatedAt: now}
			if ok, err := db.AddReminder(ctx, r, 10); err != nil || !ok {
				t.Fatal(ok, err)
			}
			ids = append(ids, r.ID)
		}
		if ok, err := db.CancelReminder(ctx, ids[2], "websocket:ann", now); err != nil || !ok {
			t.Fatal(ok, err)
		}
		c, err := db.ReminderCount(ctx)
		if err != nil || c.Due != 2 || c.Sessions != 1 || c.Next == nil || !c.Next.Equal(now.Add(2*time.Hour)) {
			t.Fatalf("count %+v (next %v), %v", c, c.Next, err)
		}
	})
}

// The operator's reads of fires and the purge pass the store's hooks
// under their own names, as the scheduler's calls do.
func TestFireQueriesAreObserved(t *testing.T) {
	db := openStore(t, DriverSQLite, t.TempDir()+"/gateway.db")
	r := &hookRefuser{}
	defer db.Observe(r)()
	ctx := context.Background()
	calls := map[string]func() error{
		"OperatorFires":     func() error { _, err := db.OperatorFires(ctx, "brief", 3); return err },
		"ConversationFires": func() error { _, err := db.ConversationFires(ctx, "k", "c"); return err },
		"ReminderCount":     func() error { _, err := db.ReminderCount(ctx); return err },
		"PurgeFires":        func() error { _, err := db.PurgeFires(ctx, time.Now()); return err },
	}
	for name, call := range calls {
		r.mu.Lock()
		r.calls = nil
		r.mu.Unlock()
		if err := call(); !errors.Is(err, errHookRefused) {
			t.Errorf("%s returned %v, want the hook's refusal", name, err)
		}
		r.mu.Lock()
		if fmt.Sprint(r.calls) != "["+name+"]" {
			t.Errorf("%s: the hook saw %v", name, r.calls)
		}
		r.mu.Unlock()
	}
}
