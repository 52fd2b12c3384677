package sessions

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/oteltest"
	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// fireAgent answers like agent.Echo, or as answer says, counts its calls
// and spends tokens, so that budgets have something to count.
type fireAgent struct {
	calls  atomic.Int32
	answer func(req agent.Request) string
	tokens int64
}

func (a *fireAgent) Name() string  { return "fires" }
func (a *fireAgent) Model() string { return "echo" }
func (a *fireAgent) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	a.calls.Add(1)
	if a.answer == nil {
		r, err := agent.Echo{}.Reply(ctx, req, onDelta)
		r.Usage = agent.Usage{PromptTokens: a.tokens, TotalTokens: a.tokens}
		return r, err
	}
	text := a.answer(req)
	onDelta(text)
	return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, Content: text}},
		Usage: agent.Usage{PromptTokens: a.tokens, TotalTokens: a.tokens}}, nil
}

// fireRig is a manager and its scheduler on a fake clock, with a
// WebSocket route (untracked) and a Telegram route (tracked) that record
// what they deliver.
type fireRig struct {
	t  *testing.T
	db *store.DB
	c  *clock
	m  *Manager
	s  *Scheduler
	ag *fireAgent

	mu   sync.Mutex
	sent []Delivery
	// refused: the session keys whose chats refuse every reply for good
	// (the user blocked the bot).
	refused map[string]bool
}

func newFireRig(t *testing.T, db *store.DB, c *clock, ag *fireAgent, p Policy, list ...OperatorSchedule) *fireRig {
	t.Helper()
	r := &fireRig{t: t, db: db, c: c, ag: ag}
	r.m = New(db, ag, Options{Now: c.Now, After: c.After, Logger: quiet, Events: events(db),
		Policies: map[string]Policy{"websocket": p, "telegram": p}})
	r.m.Routes().Register("websocket", Route{Deliver: r.deliver})
	r.m.Routes().Register("telegram", Route{Deliver: r.deliver, Track: true})
	r.s = NewScheduler(r.m, SchedulerOptions{}, quiet)
	r.s.SetSchedules(list)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.s.Stop(ctx)
		r.m.Shutdown(ctx)
	})
	return r
}

var deliveries atomic.Int64

func (r *fireRig) deliver(_ context.Context, d Delivery) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused[d.SessionKey] {
		return "", fmt.Errorf("%w: Forbidden: bot was blocked by the user", ErrUndeliverable)
	}
	r.sent = append(r.sent, d)
	return fmt.Sprintf("msg-%d", deliveries.Add(1)), nil
}

// pass runs one pass of the scheduler at the clock's time and waits for
// the fires it stored to be delivered and settled.
func (r *fireRig) pass() {
	r.t.Helper()
	if err := r.s.Pass(context.Background()); err != nil {
		r.t.Fatalf("pass at %s: %v", r.c.Now().Format(time.RFC3339), err)
	}
	r.s.Wait()
}

func (r *fireRig) delivered() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.sent...)
}

func (r *fireRig) fire(key string, due time.Time) *ledger.ScheduleFire {
	r.t.Helper()
	f, err := r.db.Fire(context.Background(), key, due)
	if err != nil || f == nil {
		r.t.Fatalf("fire %s at %s: %v, %v", key, due.UTC().Format(time.RFC3339), f, err)
	}
	return f
}

func mustWhen(t *testing.T, spec schedules.Spec) schedules.When {
	t.Helper()
	w, err := spec.When()
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// A schedule fires at its minute, once: not a minute before, and never
// again however often the scheduler looks; its reply goes through the
// channel's route, the fire records it sent, and the next fire is
// planned for the next day.
func TestScheduleFiresOnceAtItsMinute(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		berlin := zone(t, "Europe/Berlin")
		c := newClock(time.Date(2026, 12, 7, 7, 58, 0, 0, berlin))
		sc := OperatorSchedule{Name: "brief", When: mustWhen(t, schedules.Spec{Cron: "0 8 * * *", Timezone: "Europe/Berlin"}),
			Target: ScheduleTarget{Channel: "telegram", SessionKey: TelegramDMKey(42), UserID: "42", ChatID: "42"}, Prompt: "Write the brief."}
		r := newFireRig(t, open(), c, &fireAgent{}, Policy{MaxHistory: 20}, sc)
		due := time.Date(2026, 12, 7, 8, 0, 0, 0, berlin)

		r.pass()
		c.Set(due.Add(-time.Second))
		r.pass()
		if n := len(r.delivered()); n != 0 || r.ag.calls.Load() != 0 {
			t.Fatalf("before 08:00: %d sent, %d model calls", n, r.ag.calls.Load())
		}
		c.Set(due)
		r.pass()
		for range 3 {
			c.Advance(20 * time.Second)
			r.pass()
		}
		sent := r.delivered()
		if len(sent) != 1 || r.ag.calls.Load() != 1 {
			t.Fatalf("%d sent, %d model calls; want 1 and 1", len(sent), r.ag.calls.Load())
		}
		d := sent[0]
		if d.SessionKey != TelegramDMKey(42) || d.ChatID != "42" || !strings.Contains(d.Reply.Text, "Write the brief.") ||
			!strings.Contains(d.Reply.Text, `Scheduled task "brief"`) {
			t.Fatalf("delivered %+v", d)
		}
		if strings.Contains(d.Reply.Text, "⏰") {
			t.Fatalf("an on-time fire is marked late: %q", d.Reply.Text)
		}
		f := r.fire(schedules.OperatorKey("brief"), due)
		if f.State != ledger.FireSent || f.DeliveryRef == "" || f.TurnSeq == 0 || f.Attempt != 1 {
			t.Fatalf("fire = %+v", f)
		}
		next, ok, err := r.db.LatestFire(context.Background(), schedules.OperatorKey("brief"))
		if err != nil || !ok || !next.Equal(due.AddDate(0, 0, 1)) {
			t.Fatalf("next fire planned at %s (%v, %v), want %s", next, ok, err, due.AddDate(0, 0, 1).UTC())
		}
	})
}

// Across a change of the clocks, in two zones: an operator's cron
// schedule in Berlin at 02:30 fires at 03:00 on the night the clock skips
// 02:30, and a user's daily 09:00 reminder in New York fires at 09:00 on
// both sides of its change (14:00 UTC, then 13:00 UTC).
func TestFiresFollowTheirZoneAcrossDST(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		berlin, ny := zone(t, "Europe/Berlin"), zone(t, "America/New_York")
		c := newClock(time.Date(2027, 3, 12, 12, 0, 0, 0, time.UTC))
		night := OperatorSchedule{Name: "night", When: mustWhen(t, schedules.Spec{Cron: "30 2 * * *", Timezone: "Europe/Berlin"}),
			Target: ScheduleTarget{Channel: "websocket", SessionKey: WebSocketKey("ops"), UserID: "ops"}, Prompt: "Night check."}
		standup := OperatorSchedule{Name: "standup", When: mustWhen(t, schedules.Spec{Cron: "15 9 * * *", Timezone: "America/New_York"}),
			Target: ScheduleTarget{Channel: "websocket", SessionKey: WebSocketKey("team"), UserID: "team"}, Prompt: "Stand-up."}
		r := newFireRig(t, db, c, &fireAgent{}, Policy{MaxHistory: 20}, night, standup)
		// A reminder in each zone, made as the reminder tools make them.
		remind := func(key, tz, cron string, first time.Time) *ledger.Reminder {
			t.Helper()
			spec := schedules.Spec{Cron: cron, Timezone: tz}
			if next := mustWhen(t, spec).Next(first.Add(-time.Minute)); !next.Equal(first) {
				t.Fatalf("%s %s: first %s, want %s", tz, cron, next, first)
			}
			rem := &ledger.Reminder{SessionKey: key, Channel: "websocket", Spec: spec.Text(), Timezone: tz, Text: "Water the plants.",
				NextDueAt: &first, CreatedAt: c.Now()}
			if ok, err := db.AddReminder(context.Background(), rem, 10); err != nil || !ok {
				t.Fatalf("add reminder: %v, %v", ok, err)
			}
			return rem
		}
		inNY := remind(WebSocketKey("ann"), "America/New_York", "0 9 * * *", time.Date(2027, 3, 13, 9, 0, 0, 0, ny))
		inBerlin := remind(WebSocketKey("bob"), "Europe/Berlin", "0 12 * * *", time.Date(2027, 3, 27, 12, 0, 0, 0, berlin))
		want := []struct {
			at   time.Time
			key  string
			hour int // in UTC
		}{
			{time.Date(2027, 3, 13, 9, 0, 0, 0, ny), schedules.ReminderKey(inNY.ID), 14},
			{time.Date(2027, 3, 13, 9, 15, 0, 0, ny), schedules.OperatorKey("standup"), 14},
			{time.Date(2027, 3, 14, 9, 0, 0, 0, ny), schedules.ReminderKey(inNY.ID), 13}, // EDT began at 02:00
			{time.Date(2027, 3, 14, 9, 15, 0, 0, ny), schedules.OperatorKey("standup"), 13},
			{time.Date(2027, 3, 27, 2, 30, 0, 0, berlin), schedules.OperatorKey("night"), 1},
			{time.Date(2027, 3, 27, 12, 0, 0, 0, berlin), schedules.ReminderKey(inBerlin.ID), 11},
			{time.Date(2027, 3, 28, 3, 0, 0, 0, berlin), schedules.OperatorKey("night"), 1},       // 02:30 does not exist that night
			{time.Date(2027, 3, 28, 12, 0, 0, 0, berlin), schedules.ReminderKey(inBerlin.ID), 10}, // CEST began at 02:00
		}
		r.pass()
		for i, w := range want {
			if w.at.UTC().Hour() != w.hour {
				t.Fatalf("fire %d: %s is not the DST change's hour %d UTC", i, w.at.UTC(), w.hour)
			}
			before := len(r.delivered())
			c.Set(w.at.Add(-time.Minute))
			r.pass()
			if got := len(r.delivered()); got != before {
				t.Fatalf("fire %d: %d sent a minute before %s", i, got-before, w.at)
			}
			c.Set(w.at)
			r.pass()
			if got := len(r.delivered()); got != before+1 {
				t.Fatalf("fire %d: %d sent at %s, want 1", i, got-before, w.at)
			}
			if f := r.fire(w.key, w.at); f.State != ledger.FireSent {
				t.Fatalf("fire %d: %+v", i, f)
			}
		}
	})
}

// A gateway down across its fires: under misfire once, the latest missed
// fire runs late when it is at most max_late late and its reply says it
// is late; every other missed fire is recorded skipped_late, and 23
// missed hourly fires never become 23 messages. Beyond max_late, or under
// skip, nothing is sent.
func TestMissedFiresRunOnceLateOrAreSkipped(t *testing.T) {
	for _, tc := range []struct {
		name    string
		misfire schedules.Misfire
		down    time.Duration // from the 00:00 fire to the restart
		sent    int
	}{
		{"once within max_late", schedules.Misfire{Rule: schedules.MisfireOnce, MaxLate: 10 * time.Minute}, 23*time.Hour + 5*time.Minute, 1},
		{"once beyond max_late", schedules.Misfire{Rule: schedules.MisfireOnce, MaxLate: 10 * time.Minute}, 23*time.Hour + 30*time.Minute, 0},
		{"skip", schedules.Misfire{Rule: schedules.MisfireSkip}, 23*time.Hour + 5*time.Minute, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := t.TempDir() + "/g.db"
			start := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
			c := newClock(start.Add(-30 * time.Second))
			sc := OperatorSchedule{Name: "hourly", When: mustWhen(t, schedules.Spec{Cron: "0 * * * *"}), Misfire: tc.misfire,
				Target: ScheduleTarget{Channel: "websocket", SessionKey: WebSocketKey("ann"), UserID: "ann"}, Prompt: "Check in."}
			db := openStore(t, store.DriverSQLite, path)
			first := newFireRig(t, db, c, &fireAgent{}, Policy{MaxHistory: 50}, sc)
			first.pass()
			c.Set(start)
			first.pass()
			if n := len(first.delivered()); n != 1 {
				t.Fatalf("the 00:00 fire: %d sent", n)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			first.s.Stop(ctx)
			first.m.Shutdown(ctx)
			cancel()

			// Down until the restart: a new process on the same file.
			c.Set(start.Add(tc.down))
			ag := &fireAgent{}
			again := newFireRig(t, openStore(t, store.DriverSQLite, path), c, ag, Policy{MaxHistory: 50}, sc)
			again.pass()
			again.pass()
			sent := again.delivered()
			if len(sent) != tc.sent || int(ag.calls.Load()) != tc.sent {
				t.Fatalf("%d sent, %d model calls after the restart; want %d", len(sent), ag.calls.Load(), tc.sent)
			}
			fires, err := again.db.Fires(context.Background(), schedules.OperatorKey("hourly"), start.Add(48*time.Hour), 100)
			if err != nil {
				t.Fatal(err)
			}
			states := map[string]int{}
			for _, f := range fires {
				states[f.State]++
			}
			if states[ledger.FireSkippedLate] != 23-tc.sent || states[ledger.FireSent] != 1+tc.sent {
				t.Fatalf("fires by state: %v", states)
			}
			if tc.sent == 1 {
				if !strings.HasPrefix(sent[0].Reply.Text, "⏰ This comes 5 min late") {
					t.Fatalf("late reply: %q", sent[0].Reply.Text)
				}
				f := again.fire(schedules.OperatorKey("hourly"), start.Add(23*time.Hour))
				if f.State != ledger.FireSent || f.LateMS != (5*time.Minute).Milliseconds() {
					t.Fatalf("the late fire: %+v", f)
				}
			}
			// The next fire is planned after the restart, and runs on time.
			c.Set(start.Add(24 * time.Hour))
			again.pass()
			if n := len(again.delivered()); n != tc.sent+1 {
				t.Fatalf("after the restart the next fire: %d sent in all, want %d", n, tc.sent+1)
			}
		})
	}
}

// A fire over a budget — its user's, or the schedule's own — is skipped
// and recorded with its reason, with no model call and nothing sent. A
// quiet schedule's "nothing to report" is stored and not sent.
func TestFiresOverBudgetAndQuietOnesSendNothing(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(time.Date(2026, 12, 7, 7, 59, 30, 0, time.UTC))
		every := mustWhen(t, schedules.Spec{Cron: "0 * * * *"})
		ann := ScheduleTarget{Channel: "websocket", SessionKey: WebSocketKey("ann"), UserID: "ann"}
		bob := ScheduleTarget{Channel: "websocket", SessionKey: WebSocketKey("bob"), UserID: "bob"}
		cat := ScheduleTarget{Channel: "websocket", SessionKey: WebSocketKey("cat"), UserID: "cat"}
		ag := &fireAgent{tokens: 60, answer: func(req agent.Request) string {
			if strings.Contains(req.Input, "quiet please") {
				return "NOTHING_TO_REPORT."
			}
			return "news"
		}}
		p := Policy{MaxHistory: 20, Budget: BudgetPolicy{Users: map[string]Budget{ledger.UsageUser(WebSocketKey("ann")): {TokensPerDay: 50}}}}
		r := newFireRig(t, db, c, ag, p,
			OperatorSchedule{Name: "ann-news", When: every, Target: ann, Prompt: "news"},
			OperatorSchedule{Name: "bob-news", When: every, Target: bob, Prompt: "news", TokensPerDay: 100},
			OperatorSchedule{Name: "cat-quiet", When: every, Target: cat, Prompt: "quiet please", Quiet: true})
		// ann spends 60 tokens of her 50 in a turn of her own.
		if _, err := r.m.Handle(context.Background(), msg(WebSocketKey("ann"), "hi"), Hooks{}); err != nil {
			t.Fatal(err)
		}
		ag.calls.Store(0)
		r.pass()
		for h := 8; h <= 9; h++ {
			c.Set(time.Date(2026, 12, 7, h, 0, 0, 0, time.UTC))
			r.pass()
		}
		// 08:00: ann over budget (no call); bob's schedule runs (60 of its
		// 100); cat quiet. 09:00: ann again no call; bob's schedule runs
		// once more (it was at 60 < 100: 120 now); cat quiet.
		if got := ag.calls.Load(); got != 4 {
			t.Fatalf("%d model calls, want 4 (bob twice, cat twice)", got)
		}
		c.Set(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
		r.pass()
		if got := ag.calls.Load(); got != 5 {
			t.Fatalf("%d model calls after 10:00, want 5 (bob over its own budget, cat quiet)", got)
		}
		for _, d := range r.delivered() {
			if d.SessionKey != WebSocketKey("bob") || d.Reply.Text != "news" {
				t.Fatalf("delivered %+v: only bob's news goes out", d)
			}
		}
		if n := len(r.delivered()); n != 2 {
			t.Fatalf("%d sent, want bob's 2", n)
		}
		check := func(name string, h int, state, reason string) {
			t.Helper()
			f := r.fire(schedules.OperatorKey(name), time.Date(2026, 12, 7, h, 0, 0, 0, time.UTC))
			if f.State != state || !strings.Contains(f.Reason, reason) {
				t.Fatalf("%s at %02d:00: %s %q, want %s %q", name, h, f.State, f.Reason, state, reason)
			}
		}
		check("ann-news", 8, ledger.FireSkippedBudget, "the user is over their budget (tokens_per_day)")
		check("bob-news", 9, ledger.FireSent, "")
		check("bob-news", 10, ledger.FireSkippedBudget, "the schedule is over its own budget (tokens_per_day 100)")
		check("cat-quiet", 8, ledger.FireQuiet, "")
		check("cat-quiet", 10, ledger.FireQuiet, "")
		// The quiet reply is stored, in the conversation's transcript.
		convs := conversations(t, db, WebSocketKey("cat"))
		rows := transcript(t, db, convs[0].ID)
		if len(rows) != 6 || rows[1].Content != "NOTHING_TO_REPORT." {
			t.Fatalf("cat's transcript: %+v", rows)
		}
		// bob's spend is tallied under the schedule too.
		day, _, err := db.UserUsage(context.Background(), schedules.OperatorKey("bob-news"), "2026-12-07", "2026-12-01")
		if err != nil || day.PromptTokens != 120 || day.Turns != 2 {
			t.Fatalf("the schedule's tally: %+v, %v", day, err)
		}
	})
}

// A fire takes its place in the line after the user's running turn: its
// model call starts after the user's turn ended, and sees it. It is
// not the user's activity: the conversation's last activity stays the
// user's.
func TestFireWaitsForTheUsersTurnAndIsNotTheirActivity(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(time.Date(2026, 12, 7, 7, 59, 0, 0, time.UTC))
		rec := &recorder{block: make(chan struct{}), started: make(chan struct{}, 4)}
		var calls atomic.Int32
		ag := &fireAgent{answer: func(req agent.Request) string {
			calls.Add(1)
			return fmt.Sprintf("answer (history: %d)", len(req.History))
		}}
		sc := OperatorSchedule{Name: "brief", When: mustWhen(t, schedules.Spec{Cron: "0 8 * * *"}),
			Target: ScheduleTarget{Channel: "websocket", SessionKey: WebSocketKey("ann"), UserID: "ann"}, Prompt: "brief"}
		r := newFireRig(t, db, c, ag, Policy{MaxHistory: 20, Busy: BusyPolicy{Mode: BusyInterrupt}}, sc)
		// ann's turn runs (blocked) on the recorder.
		r.m.Reconfigure(Settings{Agent: rec, Policies: map[string]Policy{"websocket": {MaxHistory: 20, Busy: BusyPolicy{Mode: BusyInterrupt}}}})
		user, err := r.m.Submit(context.Background(), msg(WebSocketKey("ann"), "hello"), Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		<-rec.started
		r.m.Reconfigure(Settings{Agent: ag, Policies: map[string]Policy{"websocket": {MaxHistory: 20, Busy: BusyPolicy{Mode: BusyInterrupt}}}})
		r.pass() // plans 08:00
		c.Set(time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC))
		if err := r.s.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
		// The fire's message is stored behind ann's; it interrupts nothing.
		if calls.Load() != 0 {
			t.Fatal("the fire's turn ran beside the user's")
		}
		close(rec.block)
		out, err := user.Wait(context.Background())
		if err != nil || out.Reply.Status != ledger.MsgOK || !strings.Contains(out.Reply.Text, "hello") {
			t.Fatalf("the user's turn: %+v, %v (it must not be interrupted by the fire)", out.Reply, err)
		}
		r.s.Wait()
		sent := r.delivered()
		if len(sent) != 1 || sent[0].Reply.Text != "answer (history: 2)" {
			t.Fatalf("sent %+v: the fire's turn sees the user's turn", sent)
		}
		conv := conversations(t, db, WebSocketKey("ann"))[0]
		if !conv.LastActivityAt.Equal(time.Date(2026, 12, 7, 7, 59, 0, 0, time.UTC)) {
			t.Fatalf("last activity %s: the fire counted as the user's", conv.LastActivityAt)
		}
	})
}

// Only the gateway stores messages with a fire's client id: a user who
// sends one (to take a fire's place, or answer for it) is refused.
func TestUsersCannotSendAFiresClientID(t *testing.T) {
	c := newClock(t0)
	m := newManager(t, openStore(t, store.DriverSQLite, t.TempDir()+"/g.db"), agent.Echo{}, c, queued)
	in := msg("websocket:ann", "hi")
	in.ClientMsgID = ledger.FireMsgID(schedules.OperatorKey("brief"), t0)
	if _, err := m.Handle(context.Background(), in, Hooks{}); !errors.Is(err, ErrFireID) {
		t.Fatalf("a fire's client id from a user: %v, want ErrFireID", err)
	}
	in = msg("websocket:ann", "hi")
	in.Scheduled = true
	if _, err := m.Handle(context.Background(), in, Hooks{}); !errors.Is(err, ErrFireID) {
		t.Fatalf("a scheduled message without a fire's id: %v, want ErrFireID", err)
	}
}

// Two replicas on one PostgreSQL, 200 schedules due in the same minute,
// both schedulers looking at once and again: each fire runs exactly
// once, counted at the model and in the chats.
func TestTwoReplicasFireEachScheduleOnce(t *testing.T) {
	dsn := postgresDSN(t)
	c := newClock(time.Date(2026, 12, 7, 7, 59, 30, 0, time.UTC))
	hourly := mustWhen(t, schedules.Spec{Cron: "0 * * * *"})
	var list []OperatorSchedule
	for i := range 200 {
		list = append(list, OperatorSchedule{Name: fmt.Sprintf("s%03d", i), When: hourly, Prompt: "go",
			Target: ScheduleTarget{Channel: "telegram", SessionKey: TelegramDMKey(int64(1000 + i)), UserID: fmt.Sprint(1000 + i), ChatID: fmt.Sprint(1000 + i)}})
	}
	ag := &fireAgent{}
	a := newFireRig(t, openStore(t, store.DriverPostgres, dsn), c, ag, Policy{MaxHistory: 20}, list...)
	b := newFireRig(t, openStore(t, store.DriverPostgres, dsn), c, ag, Policy{MaxHistory: 20}, list...)
	a.pass()
	b.pass()
	c.Set(time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC))
	for range 3 {
		var wg sync.WaitGroup
		for _, r := range []*fireRig{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := r.s.Pass(context.Background()); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		a.s.Wait()
		b.s.Wait()
	}
	if got := ag.calls.Load(); got != 200 {
		t.Fatalf("%d model calls, want 200", got)
	}
	per := map[string]int{}
	for _, d := range append(a.delivered(), b.delivered()...) {
		per[d.ChatID]++
	}
	if len(per) != 200 {
		t.Fatalf("%d chats got a reply, want 200", len(per))
	}
	for chat, n := range per {
		if n != 1 {
			t.Fatalf("chat %s got %d replies", chat, n)
		}
	}
	if len(a.delivered()) == 0 || len(b.delivered()) == 0 {
		t.Logf("one replica ran every fire (%d and %d)", len(a.delivered()), len(b.delivered()))
	}
	for _, sc := range list {
		f := a.fire(schedules.OperatorKey(sc.Name), time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC))
		if f.State != ledger.FireSent || f.Attempt != 1 {
			t.Fatalf("%s: %+v", sc.Name, f)
		}
	}
}

// A reminder made in the chat (Reminders.Create, as the reminder tools
// make it) fires at its time as a turn of its owner's conversation, once;
// one cancelled before its time never fires.
func TestAReminderMadeInTheChatFiresOnce(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		c := newClock(time.Date(2026, 12, 7, 17, 0, 0, 0, time.UTC))
		p := Policy{MaxHistory: 20, Reminders: ReminderPolicy{Enabled: true}}
		r := newFireRig(t, open(), c, &fireAgent{}, p)
		at := time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC)
		call, err := r.m.Reminders().Create(context.Background(), ReminderRequest{SessionKey: WebSocketKey("ann"), Channel: "websocket",
			Spec: schedules.Spec{At: at}, Text: "Call Ann."})
		if err != nil {
			t.Fatal(err)
		}
		other, err := r.m.Reminders().Create(context.Background(), ReminderRequest{SessionKey: WebSocketKey("ann"), Channel: "websocket",
			Spec: schedules.Spec{At: at}, Text: "Never mind."})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.m.Reminders().Cancel(context.Background(), WebSocketKey("ann"), other.ID); err != nil {
			t.Fatal(err)
		}
		c.Set(at.Add(-time.Second))
		r.pass()
		if len(r.delivered()) != 0 {
			t.Fatal("a reminder fired before its time")
		}
		c.Set(at)
		r.pass()
		c.Advance(time.Minute)
		r.pass()
		sent := r.delivered()
		if len(sent) != 1 || sent[0].SessionKey != WebSocketKey("ann") || !strings.Contains(sent[0].Reply.Text, "Call Ann.") ||
			!strings.Contains(sent[0].Reply.Text, "[Reminder the user asked for") {
			t.Fatalf("sent %+v", sent)
		}
		if f := r.fire(schedules.ReminderKey(call.ID), at); f.State != ledger.FireSent {
			t.Fatalf("the reminder's fire: %+v", f)
		}
		left, err := r.m.Reminders().List(context.Background(), WebSocketKey("ann"))
		if err != nil || len(left) != 0 {
			t.Fatalf("reminders left after a one-time reminder fired: %+v, %v", left, err)
		}
	})
}

// fireCounts is an Observer that counts fires by kind and outcome.
type fireCounts struct {
	noObserver
	mu       sync.Mutex
	claimed  map[string]int
	outcomes map[string]int
}

func (o *fireCounts) FireClaimed(kind string, lag time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.claimed[kind]++
}

func (o *fireCounts) FireEnded(kind, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.outcomes[kind+" "+outcome]++
}

// A schedule for every session of a channel goes to those that opted in,
// each its own fire, claimed, run and settled on its own; a session that
// opted out gets nothing. The metrics hear of each fire once.
func TestAllSessionsScheduleGoesToThoseWhoOptedIn(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(time.Date(2026, 12, 7, 8, 59, 30, 0, time.UTC))
		obs := &fireCounts{claimed: map[string]int{}, outcomes: map[string]int{}}
		sc := OperatorSchedule{Name: "checkin", When: mustWhen(t, schedules.Spec{Every: 2 * time.Hour, Hours: "08:00-22:00"}),
			Target: ScheduleTarget{Channel: "websocket", AllSessions: true}, Prompt: "Ask how the day goes."}
		r := &fireRig{t: t, db: db, c: c, ag: &fireAgent{}}
		r.m = New(db, r.ag, Options{Now: c.Now, After: c.After, Logger: quiet, Events: events(db), Observer: obs,
			Policies: map[string]Policy{"websocket": {MaxHistory: 20}}})
		r.m.Routes().Register("websocket", Route{Deliver: r.deliver})
		r.s = NewScheduler(r.m, SchedulerOptions{}, quiet)
		r.s.SetSchedules([]OperatorSchedule{sc})
		t.Cleanup(func() { r.m.Shutdown(context.Background()) })
		for _, u := range []string{"ann", "bob", "cat"} {
			if err := db.SetScheduleOptIn(context.Background(), ledger.ScheduleOptIn{SessionKey: WebSocketKey(u), Schedule: "checkin",
				Channel: "websocket", CreatedAt: c.Now()}, true); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.SetScheduleOptIn(context.Background(), ledger.ScheduleOptIn{SessionKey: WebSocketKey("cat"), Schedule: "checkin",
			Channel: "websocket"}, false); err != nil {
			t.Fatal(err)
		}
		r.pass()
		c.Set(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
		r.pass()
		r.pass() // the sessions' fires, planned by the fan-out, run
		got := map[string]int{}
		for _, d := range r.delivered() {
			got[d.SessionKey]++
		}
		if len(got) != 2 || got[WebSocketKey("ann")] != 1 || got[WebSocketKey("bob")] != 1 {
			t.Fatalf("delivered to %v, want ann and bob once each", got)
		}
		for _, u := range []string{"ann", "bob"} {
			key := schedules.OperatorSessionKey("checkin", WebSocketKey(u))
			if f := r.fire(key, c.Now()); f.State != ledger.FireSent || f.SessionKey != WebSocketKey(u) {
				t.Fatalf("%s's fire: %+v", u, f)
			}
		}
		obs.mu.Lock()
		defer obs.mu.Unlock()
		if obs.claimed["schedule"] != 2 || obs.outcomes["schedule sent"] != 2 || len(obs.outcomes) != 1 {
			t.Fatalf("metrics: claimed %v, outcomes %v (the fan-out itself is not a fire the users see)", obs.claimed, obs.outcomes)
		}
	})
}

// A fire is traced: a span "schedule fire" per fire run, with its key,
// due time, lag and how far it got here, and the fire's message a child
// of it.
func TestAFireHasASpan(t *testing.T) {
	rec := oteltest.New(t)
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	c := newClock(time.Date(2026, 12, 7, 7, 59, 30, 0, time.UTC))
	ag := &fireAgent{}
	m := New(db, ag, Options{Now: c.Now, Logger: quiet, TracerProvider: rec, Policies: map[string]Policy{"websocket": {MaxHistory: 20}}})
	m.Routes().Register("websocket", Route{Deliver: func(context.Context, Delivery) (string, error) { return "", nil }})
	s := NewScheduler(m, SchedulerOptions{}, quiet)
	s.SetSchedules([]OperatorSchedule{{Name: "brief", When: mustWhen(t, schedules.Spec{Cron: "0 8 * * *"}), Prompt: "brief",
		Target: ScheduleTarget{Channel: "websocket", SessionKey: WebSocketKey("ann"), UserID: "ann"}}})
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	if err := s.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Set(time.Date(2026, 12, 7, 8, 0, 2, 0, time.UTC))
	if err := s.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Wait()
	rec.WaitEnded(t, "schedule fire", 1)
	fire := rec.Named("schedule fire")[0]
	if oteltest.Attr(fire, "chatgate.fire") != schedules.OperatorKey("brief") || oteltest.Attr(fire, "chatgate.due") != "2026-12-07T08:00:00Z" ||
		oteltest.Attr(fire, "chatgate.lag_ms") != "2000" || oteltest.Attr(fire, "chatgate.fire_state") != ledger.FireStored {
		t.Fatalf("fire span attributes: %v", fire.Attributes)
	}
	msgs := rec.Named("message")
	if len(msgs) != 1 || msgs[0].Parent.SpanID() != fire.SpanContext.SpanID() {
		t.Fatalf("the fire's message span is not its child: %v", rec.Names())
	}
}

// A fire that finds its conversation due for a reset (idle here) archives
// it, as the user's message would, and runs in the new one.
func TestAFireDueForAResetRunsInTheNewConversation(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC))
		ag := &fireAgent{answer: func(req agent.Request) string { return fmt.Sprintf("history: %d", len(req.History)) }}
		sc := OperatorSchedule{Name: "brief", When: mustWhen(t, schedules.Spec{Cron: "0 8 * * *"}), Prompt: "brief",
			Target: ScheduleTarget{Channel: "websocket", SessionKey: WebSocketKey("ann"), UserID: "ann"}}
		r := newFireRig(t, db, c, ag, Policy{MaxHistory: 20, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}}, sc)
		if _, err := r.m.Handle(context.Background(), msg(WebSocketKey("ann"), "good morning"), Hooks{}); err != nil {
			t.Fatal(err)
		}
		c.Set(time.Date(2026, 12, 7, 7, 59, 30, 0, time.UTC))
		r.pass()
		c.Set(time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC))
		r.pass()
		convs := conversations(t, db, WebSocketKey("ann"))
		if len(convs) != 2 {
			t.Fatalf("%d conversations, want the idle one archived and a new one", len(convs))
		}
		var archived, active int
		for _, cv := range convs {
			switch cv.Status {
			case ledger.StatusArchived:
				archived++
				if cv.ResetReason != "idle" || cv.LastSeq != 2 {
					t.Fatalf("archived %+v", cv)
				}
			case ledger.StatusActive:
				active++
			}
		}
		sent := r.delivered()
		if archived != 1 || active != 1 || len(sent) != 1 || sent[0].Reply.Text != "history: 0" {
			t.Fatalf("archived %d, active %d, sent %+v: the fire runs in the new conversation", archived, active, sent)
		}
	})
}

// A reminder and an all_sessions fire to Telegram go to the chat their
// session key names (a reminder's target is its session key alone; an
// opted-in session may never have written): a Telegram reply without a
// chat is undeliverable.
func TestTelegramFiresReachTheChatTheirKeyNames(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(time.Date(2026, 12, 7, 7, 59, 30, 0, time.UTC))
		p := Policy{MaxHistory: 20, Reminders: ReminderPolicy{Enabled: true}}
		sc := OperatorSchedule{Name: "checkin", When: mustWhen(t, schedules.Spec{Cron: "0 8 * * *"}), Prompt: "How is it going?",
			Target: ScheduleTarget{Channel: "telegram", AllSessions: true}}
		r := newFireRig(t, db, c, &fireAgent{}, p, sc)
		member := TelegramTopicKey(TelegramGroupKey(-100123, 7, true), 3)
		if err := db.SetScheduleOptIn(context.Background(), ledger.ScheduleOptIn{SessionKey: member, Schedule: "checkin", Channel: "telegram",
			CreatedAt: c.Now()}, true); err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
		if _, err := r.m.Reminders().Create(context.Background(), ReminderRequest{SessionKey: TelegramDMKey(42), Channel: "telegram",
			Spec: schedules.Spec{At: at}, Text: "Call Ann."}); err != nil {
			t.Fatal(err)
		}
		r.pass()
		c.Set(at)
		r.pass()
		r.pass()
		got := map[string]Delivery{}
		for _, d := range r.delivered() {
			got[d.SessionKey] = d
		}
		if d := got[TelegramDMKey(42)]; d.ChatID != "42" || d.UserID != "42" {
			t.Fatalf("the reminder went to chat %q user %q, want 42", d.ChatID, d.UserID)
		}
		if d := got[member]; d.ChatID != "-100123/3" || d.UserID != "7" {
			t.Fatalf("the check-in went to chat %q user %q, want -100123/3, 7", d.ChatID, d.UserID)
		}
		for _, cv := range append(conversations(t, db, TelegramDMKey(42)), conversations(t, db, member)...) {
			if cv.ChatID == "" {
				t.Fatalf("a fire opened conversation %s with no chat: later deliveries in it would go nowhere", cv.ID)
			}
		}
	})
}

// A fire whose runner died after storing its message, before recording
// it, is found by its message when its claim lapses: it settles from the
// turn that ran, whatever its misfire rule says of a late fire.
func TestAFireStoredBeforeACrashSettlesFromItsTurn(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		due := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
		c := newClock(due)
		ag := &fireAgent{}
		sc := OperatorSchedule{Name: "brief", When: mustWhen(t, schedules.Spec{Cron: "0 8 * * *"}), Prompt: "brief",
			Misfire: schedules.Misfire{Rule: schedules.MisfireSkip}, Target: ScheduleTarget{Channel: "websocket", SessionKey: WebSocketKey("ann"), UserID: "ann"}}
		r := newFireRig(t, db, c, ag, Policy{MaxHistory: 20}, sc)
		key := schedules.OperatorKey("brief")
		// The runner that died: its claim, and its message stored.
		if _, ok, err := db.ClaimFire(context.Background(), ledger.FireClaim{ScheduleKey: key, DueAt: due, SessionKey: WebSocketKey("ann"),
			Owner: "dead", LeaseUntil: due.Add(time.Minute), At: due}); err != nil || !ok {
			t.Fatalf("claim: %v, %v", ok, err)
		}
		tk, err := r.m.Submit(context.Background(), Inbound{Channel: "websocket", SessionKey: WebSocketKey("ann"), UserID: "ann",
			ClientMsgID: ledger.FireMsgID(key, due), Text: "brief", Scheduled: true}, Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tk.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Five minutes on: the claim has lapsed, and under skip a fire that
		// late is not run — but this one ran.
		c.Set(due.Add(5 * time.Minute))
		r.pass()
		if f := r.fire(key, due); f.State != ledger.FireSent || f.TurnSeq != 1 {
			t.Fatalf("the fire: %+v, want sent from its turn", f)
		}
		if n := ag.calls.Load(); n != 1 {
			t.Fatalf("%d model calls, want the one turn's", n)
		}
	})
}

// A fire's message is the schedule's: a user cannot edit it.
func TestUsersCannotEditAFiresMessage(t *testing.T) {
	c := newClock(t0)
	m := newManager(t, openStore(t, store.DriverSQLite, t.TempDir()+"/g.db"), agent.Echo{}, c, queued)
	in := msg("websocket:ann", "mine now")
	in.ClientMsgID = "e1"
	if _, err := m.Edit(context.Background(), in, ledger.FireMsgID(schedules.OperatorKey("brief"), t0), Hooks{}); !errors.Is(err, ErrFireID) {
		t.Fatalf("an edit of a fire's message: %v, want ErrFireID", err)
	}
}

// A reload that moves a schedule's time: the new time fires, the fire
// planned at the old time is dropped (after the grace a replica that has
// not reloaded yet gets), and nothing runs at the old time.
func TestAReloadThatMovesAScheduleFiresAtTheNewTime(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		c := newClock(time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC))
		target := ScheduleTarget{Channel: "websocket", SessionKey: WebSocketKey("ann"), UserID: "ann"}
		ag := &fireAgent{}
		r := newFireRig(t, open(), c, ag, Policy{MaxHistory: 20},
			OperatorSchedule{Name: "brief", When: mustWhen(t, schedules.Spec{Cron: "0 10 * * *"}), Prompt: "brief", Target: target})
		r.pass() // plans 10:00
		r.s.SetSchedules([]OperatorSchedule{{Name: "brief", When: mustWhen(t, schedules.Spec{Cron: "0 9 * * *"}), Prompt: "brief", Target: target}})
		c.Set(time.Date(2026, 12, 7, 8, 30, 0, 0, time.UTC))
		r.pass()
		for _, at := range []string{"09:00", "10:00", "10:06"} {
			h, _ := time.Parse("15:04", at)
			c.Set(time.Date(2026, 12, 7, h.Hour(), h.Minute(), 0, 0, time.UTC))
			r.pass()
		}
		if n := len(r.delivered()); n != 1 || ag.calls.Load() != 1 {
			t.Fatalf("%d sent, %d model calls: want the 09:00 fire alone", n, ag.calls.Load())
		}
		key := schedules.OperatorKey("brief")
		if f := r.fire(key, time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)); f.State != ledger.FireSent {
			t.Fatalf("09:00: %+v", f)
		}
		if f := r.fire(key, time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)); f.State != ledger.FireDropped || !strings.Contains(f.Reason, "times changed") {
			t.Fatalf("10:00: %+v", f)
		}
	})
}

// A schedule's own budget holds across an all_sessions fan-out: its fires
// run one at a time here, so that the first one's spend is counted before
// the next is checked; the rest are skipped with no model call.
func TestAScheduleBudgetHoldsAcrossItsFanOut(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(time.Date(2026, 12, 7, 7, 59, 30, 0, time.UTC))
		ag := &fireAgent{tokens: 60}
		sc := OperatorSchedule{Name: "checkin", When: mustWhen(t, schedules.Spec{Cron: "0 8 * * *"}), Prompt: "hi", TokensPerDay: 50,
			Target: ScheduleTarget{Channel: "websocket", AllSessions: true}}
		r := newFireRig(t, db, c, ag, Policy{MaxHistory: 20}, sc)
		for i := range 8 {
			if err := db.SetScheduleOptIn(context.Background(), ledger.ScheduleOptIn{SessionKey: WebSocketKey(fmt.Sprint("u", i)), Schedule: "checkin",
				Channel: "websocket", CreatedAt: c.Now()}, true); err != nil {
				t.Fatal(err)
			}
		}
		r.pass()
		c.Set(time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC))
		for range 4 {
			r.pass()
		}
		if n := ag.calls.Load(); n != 1 {
			t.Fatalf("%d model calls under a budget of 50 tokens at 60 a call, want 1", n)
		}
		var skipped int
		for i := range 8 {
			f := r.fire(schedules.OperatorSessionKey("checkin", WebSocketKey(fmt.Sprint("u", i))), c.Now())
			if f.State == ledger.FireSkippedBudget {
				skipped++
			}
		}
		if skipped != 7 {
			t.Fatalf("%d of the 8 sessions' fires skipped for the budget, want 7", skipped)
		}
	})
}

// A minutely schedule down for a day records its latest missed fires
// skipped, not one row per minute.
func TestALongOutageRecordsItsLatestMissedFires(t *testing.T) {
	c := newClock(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC))
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	sc := OperatorSchedule{Name: "tick", When: mustWhen(t, schedules.Spec{Cron: "* * * * *"}), Prompt: "tick", Misfire: schedules.Misfire{Rule: schedules.MisfireSkip},
		Target: ScheduleTarget{Channel: "websocket", SessionKey: WebSocketKey("ann"), UserID: "ann"}}
	r := newFireRig(t, db, c, &fireAgent{}, Policy{MaxHistory: 20}, sc)
	r.pass()
	c.Set(time.Date(2026, 12, 8, 0, 0, 30, 0, time.UTC))
	r.pass()
	r.pass()
	var n int64
	if err := db.Gorm().Model(&ledger.ScheduleFire{}).Where("state = ?", ledger.FireSkippedLate).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	if n < 2 || n > keptSkips+2 {
		t.Fatalf("%d missed fires recorded for a day of minutes, want at most %d", n, keptSkips+2)
	}
	if len(r.delivered()) != 2 {
		t.Fatalf("%d sent after a day down; want the two 00:00 fires, on time", len(r.delivered()))
	}
}

// A chat that refuses a fire's reply for good (the user blocked the bot)
// stops costing model calls: the recurring reminder is cancelled and the
// session's opt-in withdrawn after the first refusal, and their next
// times call nothing.
func TestUndeliverableFiresStopTheirReminderAndOptIn(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(time.Date(2026, 12, 7, 7, 59, 30, 0, time.UTC))
		ag := &fireAgent{}
		p := Policy{MaxHistory: 20, Reminders: ReminderPolicy{Enabled: true}}
		sc := OperatorSchedule{Name: "checkin", When: mustWhen(t, schedules.Spec{Cron: "0 9 * * *"}), Prompt: "hi",
			Target: ScheduleTarget{Channel: "telegram", AllSessions: true}}
		r := newFireRig(t, db, c, ag, p, sc)
		blocked := TelegramDMKey(42)
		r.refused = map[string]bool{blocked: true}
		if _, err := r.m.Reminders().Create(context.Background(), ReminderRequest{SessionKey: blocked, Channel: "telegram",
			Spec: schedules.Spec{Cron: "0 8 * * *"}, Text: "Stretch."}); err != nil {
			t.Fatal(err)
		}
		if err := db.SetScheduleOptIn(context.Background(), ledger.ScheduleOptIn{SessionKey: blocked, Schedule: "checkin", Channel: "telegram",
			CreatedAt: c.Now()}, true); err != nil {
			t.Fatal(err)
		}
		for _, at := range []time.Time{time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC), time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)} {
			c.Set(at)
			r.pass()
			r.pass()
		}
		if n := ag.calls.Load(); n != 2 {
			t.Fatalf("%d model calls on the first day, want the reminder's and the check-in's", n)
		}
		if f := r.fire(schedules.OperatorSessionKey("checkin", blocked), time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)); f.State != ledger.FireFailed ||
			!strings.Contains(f.Reason, "undeliverable") {
			t.Fatalf("the check-in's fire: %+v", f)
		}
		if left, _ := r.m.Reminders().List(context.Background(), blocked); len(left) != 0 {
			t.Fatalf("the reminder is still due: %+v", left)
		}
		if in, _ := db.OptedIn(context.Background(), "checkin", "telegram", "", 10); len(in) != 0 {
			t.Fatalf("still opted in: %v", in)
		}
		for _, at := range []time.Time{time.Date(2026, 12, 8, 8, 0, 0, 0, time.UTC), time.Date(2026, 12, 8, 9, 0, 0, 0, time.UTC)} {
			c.Set(at)
			r.pass()
			r.pass()
		}
		if n := ag.calls.Load(); n != 2 {
			t.Fatalf("%d model calls after the second day, want still 2", n)
		}
	})
}
