package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// A reminder made by a tool call is made once: the call run again (after
// a crash cut it before its outcome was stored) finds the one it made.
func TestAddReminderByCallKey(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		now := time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)
		due := now.Add(time.Hour)
		mk := func(key, callKey, text string) *ledger.Reminder {
			return &ledger.Reminder{SessionKey: key, Channel: "telegram", Spec: "at 2026-04-01T10:00:00Z", Text: text,
				NextDueAt: &due, CreatedAt: now, CallKey: callKey}
		}
		first := mk("telegram:dm:1", "conv/3/call_1", "call Ann")
		if ok, err := db.AddReminder(ctx, first, 5); err != nil || !ok || first.ID == 0 {
			t.Fatalf("add: %t, %v, id %d", ok, err, first.ID)
		}
		again := mk("telegram:dm:1", "conv/3/call_1", "call Ann")
		if ok, err := db.AddReminder(ctx, again, 5); err != nil || !ok || again.ID != first.ID {
			t.Fatalf("the call run again: %t, %v, id %d; want the first's id %d", ok, err, again.ID, first.ID)
		}
		other := mk("telegram:dm:1", "conv/3/call_2", "call Bob")
		if ok, err := db.AddReminder(ctx, other, 5); err != nil || !ok || other.ID == first.ID {
			t.Fatalf("another call: %t, %v, id %d", ok, err, other.ID)
		}
		if list, err := db.Reminders(ctx, "telegram:dm:1"); err != nil || len(list) != 2 {
			t.Fatalf("reminders %+v, %v; want 2", list, err)
		}
		// A key another session's reminder holds is refused, not handed
		// over.
		stolen := mk("telegram:dm:2", "conv/3/call_1", "x")
		if ok, err := db.AddReminder(ctx, stolen, 5); err == nil || ok {
			t.Fatalf("a call key of another session: %t, %v", ok, err)
		}
	})
}

// Creates racing on two connection pools (two replicas) keep the limit:
// exactly limit of them are stored.
func TestAddReminderLimitRace(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		dbs := []*DB{open(), open()}
		ctx := context.Background()
		now := time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)
		const limit, tries = 3, 24
		for round := range 3 {
			key := fmt.Sprintf("websocket:race:%d", round)
			var wins atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range tries {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					due := now.Add(time.Duration(i+1) * time.Hour)
					r := &ledger.Reminder{SessionKey: key, Channel: "websocket", Spec: "at " + due.Format(time.RFC3339), Text: "t",
						NextDueAt: &due, CreatedAt: now}
					ok, err := dbs[i%2].AddReminder(ctx, r, limit)
					if err != nil {
						t.Error(err)
					}
					if ok {
						wins.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			list, err := dbs[0].Reminders(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if wins.Load() != limit || len(list) != limit {
				t.Fatalf("round %d: %d creates succeeded and %d reminders are stored; want %d", round, wins.Load(), len(list), limit)
			}
		}
	})
}
