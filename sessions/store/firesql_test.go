package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// Many claimers on two store handles — two gateways on one database (on
// SQLite, two processes on one file) — claim the same fires, each in its
// own order: every fire is claimed exactly once, by the one whose claim
// the database took, and a fire claimed is not claimed again while its
// lease holds.
func TestClaimFireRace(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		handles := []*DB{open(), open()}
		ctx := context.Background()
		due := time.Date(2026, 3, 29, 8, 0, 0, 0, time.UTC)
		const fires, claimers = 40, 8
		now := due.Add(time.Second)
		var wins [fires]atomic.Int32
		winner := make([]string, fires)
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := make(chan error, claimers*fires)
		for c := range claimers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				db := handles[c%len(handles)]
				owner := fmt.Sprintf("replica-%d", c)
				for _, i := range rand.Perm(fires) {
					held, ok, err := db.ClaimFire(ctx, ledger.FireClaim{ScheduleKey: fmt.Sprintf("schedule:s%02d", i), DueAt: due,
						SessionKey: "telegram:dm:1", Owner: owner, LeaseUntil: now.Add(time.Minute), At: now})
					if err != nil {
						errs <- err
						continue
					}
					if ok {
						wins[i].Add(1)
						mu.Lock()
						winner[i] = owner
						mu.Unlock()
						if held.Attempt != 1 || held.Owner != owner || !held.DueAt.Equal(due) {
							errs <- fmt.Errorf("fire %d: claim %+v", i, held)
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for i := range fires {
			if n := wins[i].Load(); n != 1 {
				t.Errorf("fire %d claimed %d times", i, n)
			}
			f, err := handles[0].Fire(ctx, fmt.Sprintf("schedule:s%02d", i), due)
			if err != nil || f == nil || f.State != ledger.FireClaimed || f.Owner != winner[i] || f.Attempt != 1 || f.LateMS != 1000 {
				t.Errorf("fire %d: %+v, %v; want claimed by %s", i, f, err, winner[i])
			}
		}
	})
}

// A fire's life: planned due, claimed once, taken over when its lease ran
// out before its turn was stored (the first claimer can then store
// nothing), its turn stored, settled once.
func TestFireLifecycle(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		berlin, _ := time.LoadLocation("Europe/Berlin")
		due := time.Date(2026, 3, 29, 10, 0, 0, 0, berlin) // one instant, spelt in Berlin's time
		at := due.Add(30 * time.Second)
		key := "schedule:brief"
		if n, err := db.PlanFires(ctx, []ledger.ScheduleFire{{ScheduleKey: key, DueAt: due, CreatedAt: at.Add(-time.Hour)}}); err != nil || n != 1 {
			t.Fatalf("plan: %d, %v", n, err)
		}
		if n, err := db.PlanFires(ctx, []ledger.ScheduleFire{{ScheduleKey: key, DueAt: due.UTC()}}); err != nil || n != 0 {
			t.Fatalf("planned again: %d, %v; want nothing written", n, err)
		}
		if got, err := db.ClaimableFires(ctx, due.Add(-time.Second), 10); err != nil || len(got) != 0 {
			t.Fatalf("claimable before its time: %v, %v", got, err)
		}
		if got, err := db.ClaimableFires(ctx, at, 10); err != nil || len(got) != 1 || got[0].State != ledger.FireDue {
			t.Fatalf("claimable at its time: %+v, %v", got, err)
		}
		claim := func(owner string, at time.Time) (ledger.FireHeld, bool) {
			t.Helper()
			h, ok, err := db.ClaimFire(ctx, ledger.FireClaim{ScheduleKey: key, DueAt: due.UTC(), SessionKey: "telegram:group:-100:topic:7",
				Owner: owner, LeaseUntil: at.Add(time.Minute), At: at})
			if err != nil {
				t.Fatal(err)
			}
			return h, ok
		}
		a, ok := claim("a", at)
		if !ok || a.Attempt != 1 {
			t.Fatalf("first claim: %+v, %t", a, ok)
		}
		if _, ok := claim("b", at.Add(59*time.Second)); ok {
			t.Fatal("claimed again under a live lease")
		}
		if got, _ := db.ClaimableFires(ctx, at.Add(59*time.Second), 10); len(got) != 0 {
			t.Fatalf("claimable under a live lease: %+v", got)
		}
		if got, _ := db.ClaimableFires(ctx, at.Add(time.Minute), 10); len(got) != 1 || got[0].Owner != "a" {
			t.Fatalf("claimable once the lease ran out: %+v", got)
		}
		b, ok := claim("b", at.Add(time.Minute))
		if !ok || b.Attempt != 2 {
			t.Fatalf("claim after the lease: %+v, %t", b, ok)
		}
		if err := db.StoreFireTurn(ctx, a, "conv-1", 5, at); !errors.Is(err, ledger.ErrLostClaim) {
			t.Fatalf("the first claimer stored its turn: %v", err)
		}
		if err := db.SettleFire(ctx, ledger.FireEnd{ScheduleKey: key, DueAt: due, From: ledger.FireClaimed, Owner: "a", Attempt: 1,
			State: ledger.FireSkippedBudget, At: at}); !errors.Is(err, ledger.ErrLostClaim) {
			t.Fatalf("the first claimer settled the fire: %v", err)
		}
		if err := db.StoreFireTurn(ctx, b, "conv-1", 5, at.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, ok := claim("c", at.Add(time.Hour)); ok {
			t.Fatal("a fire whose turn is stored was claimed")
		}
		if got, _ := db.ClaimableFires(ctx, at.Add(time.Hour), 10); len(got) != 0 {
			t.Fatalf("a stored fire is claimable: %+v", got)
		}
		end := ledger.FireEnd{ScheduleKey: key, DueAt: due, From: ledger.FireStored, State: ledger.FireSent, DeliveryRef: "tg:812", At: at.Add(2 * time.Minute)}
		if err := db.SettleFire(ctx, end); err != nil {
			t.Fatal(err)
		}
		if err := db.SettleFire(ctx, end); !errors.Is(err, ledger.ErrLostClaim) {
			t.Fatalf("settled twice: %v", err)
		}
		f, err := db.Fire(ctx, key, due)
		if err != nil || f == nil {
			t.Fatal(f, err)
		}
		if f.State != ledger.FireSent || f.Owner != "b" || f.Attempt != 2 || f.ConversationID != "conv-1" || f.TurnSeq != 5 ||
			f.DeliveryRef != "tg:812" || f.SessionKey != "telegram:group:-100:topic:7" || f.LeaseUntil != nil || f.EndedAt == nil || f.StoredAt == nil {
			t.Fatalf("fire %+v", f)
		}
		if latest, ok, err := db.LatestFire(ctx, key); err != nil || !ok || !latest.Equal(due) {
			t.Fatalf("latest fire %s, %t, %v", latest, ok, err)
		}
		if _, ok, err := db.LatestFire(ctx, "schedule:none"); err != nil || ok {
			t.Fatalf("latest fire of a schedule without fires: %t, %v", ok, err)
		}
		if err := db.SettleFire(ctx, ledger.FireEnd{ScheduleKey: key, DueAt: due, From: ledger.FireStored, State: ledger.FireClaimed}); err == nil {
			t.Fatal("settled to a state that is not final")
		}
		// Another gateway opening the database migrates nothing away.
		if again, err := open().Fire(ctx, key, due); err != nil || again == nil || !reflect.DeepEqual(*again, *f) {
			t.Fatalf("after opening again: %+v, %v; want %+v", again, err, f)
		}
	})
}

// Fires missed while down are recorded skipped: those not written and
// those planned due; a fire someone claimed is left alone. A claimed
// fire over budget is settled skipped_budget by its claimer.
func TestSkipFires(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		key := "reminder:7"
		h := func(n int) time.Time { return time.Date(2026, 4, 1, n, 0, 0, 0, time.UTC) }
		now := h(10).Add(5 * time.Minute)
		if _, err := db.PlanFires(ctx, []ledger.ScheduleFire{{ScheduleKey: key, DueAt: h(7)}}); err != nil {
			t.Fatal(err)
		}
		held, ok, err := db.ClaimFire(ctx, ledger.FireClaim{ScheduleKey: key, DueAt: h(9), Owner: "a", LeaseUntil: now.Add(time.Minute), At: now})
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		n, err := db.SkipFires(ctx, key, "websocket:ann", []time.Time{h(6), h(7), h(8), h(9)}, "missed while no gateway ran", now)
		if err != nil || n != 3 {
			t.Fatalf("skipped %d, %v; want 3", n, err)
		}
		if n, err := db.SkipFires(ctx, key, "websocket:ann", []time.Time{h(6)}, "again", now); err != nil || n != 0 {
			t.Fatalf("skipped again: %d, %v", n, err)
		}
		fires, err := db.Fires(ctx, key, time.Time{}, 10)
		if err != nil || len(fires) != 4 {
			t.Fatalf("fires %+v, %v", fires, err)
		}
		want := []string{ledger.FireClaimed, ledger.FireSkippedLate, ledger.FireSkippedLate, ledger.FireSkippedLate}
		for i, f := range fires {
			if f.State != want[i] || (f.State == ledger.FireSkippedLate && (f.Reason != "missed while no gateway ran" || f.EndedAt == nil)) {
				t.Errorf("fire %d (newest first): %+v, want %s", i, f, want[i])
			}
		}
		if older, err := db.Fires(ctx, key, h(8), 10); err != nil || len(older) != 2 || !older[0].DueAt.Equal(h(7)) {
			t.Fatalf("fires before 08:00: %+v, %v", older, err)
		}
		if err := db.SettleFire(ctx, ledger.FireEnd{ScheduleKey: key, DueAt: h(9), From: ledger.FireClaimed, Owner: held.Owner, Attempt: held.Attempt,
			State: ledger.FireSkippedBudget, Reason: "over tokens_per_day", At: now}); err != nil {
			t.Fatal(err)
		}
		if s, err := db.SessionFires(ctx, "websocket:ann", 10); err != nil || len(s) != 3 {
			t.Fatalf("fires of the session: %+v, %v", s, err)
		}
	})
}

// What a fire's reason and a reminder's text carry reaches the database
// as every text does (ledger.StorableText): the same on both stores.
func TestScheduleTextIsStorable(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		bad := "a\x00b\xffc"
		due := time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)
		if _, err := db.SkipFires(ctx, "schedule:x", "", []time.Time{due}, bad, due); err != nil {
			t.Fatal(err)
		}
		f, err := db.Fire(ctx, "schedule:x", due)
		if err != nil || f == nil || f.Reason != ledger.StorableText(bad) {
			t.Fatalf("fire %+v, %v", f, err)
		}
		r := &ledger.Reminder{SessionKey: "websocket:ann", Channel: "websocket", Spec: "every 1h0m0s", Text: bad, NextDueAt: &due, CreatedAt: due}
		if ok, err := db.AddReminder(ctx, r, 5); err != nil || !ok {
			t.Fatal(ok, err)
		}
		if got, err := db.Reminder(ctx, r.ID); err != nil || got == nil || got.Text != ledger.StorableText(bad) {
			t.Fatalf("reminder %+v, %v", got, err)
		}
	})
}

// Reminders: at most the session's limit still due; listed, cancelled by
// their own session once, found due through their index and moved on by
// one replica of two.
func TestReminders(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db, other := open(), open()
		ctx := context.Background()
		now := time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)
		add := func(key string, due time.Time) (*ledger.Reminder, bool) {
			t.Helper()
			r := &ledger.Reminder{SessionKey: key, Channel: "telegram", Spec: "cron 0 8 * * *", Timezone: "Europe/Berlin", Text: "call Ann",
				NextDueAt: &due, CreatedAt: now}
			ok, err := db.AddReminder(ctx, r, 2)
			if err != nil {
				t.Fatal(err)
			}
			return r, ok
		}
		r1, ok1 := add("telegram:dm:1", now.Add(time.Hour))
		r2, ok2 := add("telegram:dm:1", now.Add(-time.Minute))
		if _, ok3 := add("telegram:dm:1", now); !ok1 || !ok2 || ok3 {
			t.Fatalf("added %t %t %t; want the third over the limit of 2", ok1, ok2, ok3)
		}
		if _, ok := add("telegram:dm:2", now); !ok {
			t.Fatal("another session's reminder counted against the first's")
		}
		if ok, err := db.CancelReminder(ctx, r1.ID, "telegram:dm:2", now); err != nil || ok {
			t.Fatalf("cancelled by another session: %t, %v", ok, err)
		}
		if ok, err := db.CancelReminder(ctx, r1.ID, "telegram:dm:1", now); err != nil || !ok {
			t.Fatalf("cancel: %t, %v", ok, err)
		}
		if ok, err := db.CancelReminder(ctx, r1.ID, "telegram:dm:1", now); err != nil || ok {
			t.Fatalf("cancelled twice: %t, %v", ok, err)
		}
		if _, ok := add("telegram:dm:1", now.Add(2*time.Hour)); !ok {
			t.Fatal("a cancelled reminder still counts against the limit")
		}
		list, err := db.Reminders(ctx, "telegram:dm:1")
		if err != nil || len(list) != 2 || list[0].ID != r2.ID {
			t.Fatalf("reminders %+v, %v", list, err)
		}
		due, err := db.DueReminders(ctx, now, 10)
		if err != nil || len(due) != 2 || due[0].ID != r2.ID {
			t.Fatalf("due reminders %+v, %v", due, err)
		}
		next := now.Add(24 * time.Hour)
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h := []*DB{db, other}[i%2]
				ok, err := h.AdvanceReminder(ctx, r2.ID, *r2.NextDueAt, &next)
				if err != nil {
					t.Error(err)
				}
				if ok {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("the reminder was moved on %d times", wins.Load())
		}
		got, _ := db.Reminder(ctx, r2.ID)
		if got == nil || got.NextDueAt == nil || !got.NextDueAt.Equal(next) {
			t.Fatalf("reminder after advancing: %+v", got)
		}
		if ok, err := db.AdvanceReminder(ctx, r2.ID, next, nil); err != nil || !ok {
			t.Fatal(ok, err)
		}
		if list, _ := db.Reminders(ctx, "telegram:dm:1"); len(list) != 1 {
			t.Fatalf("a reminder due no more is still listed: %+v", list)
		}
	})
}

func TestScheduleOptIns(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		now := time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)
		for _, o := range []ledger.ScheduleOptIn{
			{SessionKey: "telegram:dm:3", Schedule: "checkin", Channel: "telegram"},
			{SessionKey: "telegram:dm:1", Schedule: "checkin", Channel: "telegram"},
			{SessionKey: "telegram:dm:1", Schedule: "checkin", Channel: "telegram"}, // again
			{SessionKey: "telegram:dm:2", Schedule: "checkin", Channel: "telegram"},
			{SessionKey: "websocket:ann", Schedule: "checkin", Channel: "websocket"},
			{SessionKey: "telegram:dm:1", Schedule: "brief", Channel: "telegram"},
		} {
			o.CreatedAt = now
			if err := db.SetScheduleOptIn(ctx, o, true); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.SetScheduleOptIn(ctx, ledger.ScheduleOptIn{SessionKey: "telegram:dm:2", Schedule: "checkin"}, false); err != nil {
			t.Fatal(err)
		}
		page, err := db.OptedIn(ctx, "checkin", "telegram", "", 1)
		if err != nil || fmt.Sprint(page) != "[telegram:dm:1]" {
			t.Fatalf("first page %v, %v", page, err)
		}
		page, err = db.OptedIn(ctx, "checkin", "telegram", page[0], 10)
		if err != nil || fmt.Sprint(page) != "[telegram:dm:3]" {
			t.Fatalf("next page %v, %v", page, err)
		}
		if names, err := db.SessionOptIns(ctx, "telegram:dm:1"); err != nil || fmt.Sprint(names) != "[brief checkin]" {
			t.Fatalf("opt-ins of a session %v, %v", names, err)
		}
	})
}

// hookRefuser fails every call before it reaches the database and
// records the calls' names.
type hookRefuser struct {
	mu    sync.Mutex
	calls []string
}

var errHookRefused = errors.New("refused by the test's hook")

func (r *hookRefuser) Before(_ context.Context, c ledger.Call) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c.Op)
	return errHookRefused
}

func (r *hookRefuser) After(_ context.Context, _ ledger.Call, err error) error { return err }

// Every method of the schedules' rows passes the store's hooks under its
// own name, as the turn ledger's do: the fault injector and the storage
// health see them.
func TestScheduleCallsAreObserved(t *testing.T) {
	db := openStore(t, DriverSQLite, t.TempDir()+"/gateway.db")
	r := &hookRefuser{}
	defer db.Observe(r)()
	impl := reflect.ValueOf(db)
	for _, name := range []string{"ClaimFire", "PlanFires", "SkipFires", "StoreFireTurn", "SettleFire", "ClaimableFires", "LatestFire",
		"Fire", "Fires", "SessionFires", "AddReminder", "Reminders", "Reminder", "CancelReminder", "DueReminders", "AdvanceReminder",
		"SetScheduleOptIn", "OptedIn", "SessionOptIns"} {
		m := impl.MethodByName(name)
		if !m.IsValid() {
			t.Fatalf("DB has no method %s", name)
		}
		args := make([]reflect.Value, m.Type().NumIn())
		for j := range args {
			args[j] = reflect.Zero(m.Type().In(j))
		}
		args[0] = reflect.ValueOf(context.Background())
		r.mu.Lock()
		r.calls = nil
		r.mu.Unlock()
		out := m.Call(args)
		if err, _ := out[len(out)-1].Interface().(error); !errors.Is(err, errHookRefused) {
			t.Errorf("%s returned %v, want the hook's refusal", name, err)
		}
		r.mu.Lock()
		if fmt.Sprint(r.calls) != "["+name+"]" {
			t.Errorf("%s: the hook saw %v", name, r.calls)
		}
		r.mu.Unlock()
	}
}
