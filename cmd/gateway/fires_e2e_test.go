package main

// Fires that run once across real crashes: the gateway binary with a
// bot.yaml schedule to a Telegram chat (the repo's fake Bot API, the real
// wire format) and a model server speaking OpenAI's streaming format,
// killed with SIGKILL at each step of a fire and started again on the same
// storage — SQLite and PostgreSQL. Each step is a world of its own (its
// gateway, database, Bot API and model server), and the worlds run side by
// side, so that the waits they share — a due minute, a dead replica's
// lease, a fire's lapsed claim — are waited once:
//
//   - before the claim: the gateway planned the fire and is killed while
//     it is not yet due; started again before its minute, or after it,
//     it fires once, on time.
//   - after the claim: the fire is claimed and its message never stored;
//     the claim lapses (sessions.SchedulerOptions.Lease, a minute) and the
//     restarted gateway claims the fire again, by then later than
//     schedules.OnTime: under misfire once it runs once, late, and its
//     reply says so. The refused message's early call (sessions/early.go:
//     the model is asked while the message's commit is in flight) may
//     have reached the model first, cancelled with the commit: the model
//     sees the fire at most twice, and the chat gets one reply.
//   - mid model call: the fire's turn is stored and the model stalls; the
//     restarted gateway's rescuer runs the turn again (the one documented
//     second model call) and delivers one reply.
//   - after the reply is stored, before Telegram's send: sendMessage
//     stalls before the Bot API takes the message; the rescuer delivers it
//     once.
//   - after the send, before its mark: the Bot API takes the message and
//     its answer never reaches the gateway; the rescuer sends it again —
//     the one duplicate the design allows, in the window between a send
//     and its delivery mark (sessions.Route.Track).
//
// Time is the processes' real clock: fires are minute-aligned, so a
// world's schedule is a daily cron at a minute the test picks relative to
// now — the last minute boundary (under schedules.OnTime ago, which a
// starting gateway fires at once) or the next one (which it plans). No
// test hook runs in the binary: the point after the claim is reached with
// a trigger in the test's database that refuses the fire's message, so
// the claim lands and nothing after it does, which is the state a kill
// right after the claim leaves. The worlds take about a minute and a
// half together: the next minute boundary, and the lapsed claim's minute.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

const (
	// fireChat is the Telegram user whose private chat the schedule
	// targets.
	fireChat = 7
	// fireAnswer is the model's answer to a fire's message; pong its
	// answer to anything else (the "ping" that closes each world).
	fireAnswer = "The brief: all is well."
	// fireMarker starts a fire's message (sessions' operatorText): the
	// model server tells fires from the user's messages by it.
	fireMarker = "[Scheduled task"
)

// fireModel is the model server: it answers a fire's message with
// fireAnswer and anything else with "pong", streamed, and counts the
// calls. With stall, the first fire call hangs until its request ends
// (the gateway was killed).
type fireModel struct {
	stall bool
	held  chan struct{} // closed when the stalled call arrived

	mu           sync.Mutex
	fires, pings int
	inputs       []string
}

func newFireModel(stall bool) *fireModel { return &fireModel{stall: stall, held: make(chan struct{})} }

func (m *fireModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	input := modelInput(r) // reads the body: the request's context now ends with its connection
	fire := strings.Contains(input, fireMarker)
	m.mu.Lock()
	m.inputs = append(m.inputs, input)
	n := 0
	if fire {
		m.fires++
		n = m.fires
	} else {
		m.pings++
	}
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	if fire && m.stall && n == 1 {
		close(m.held)
		<-r.Context().Done()
		return
	}
	answer := "pong"
	if fire {
		answer = fireAnswer
	}
	streamChunk(w, answer)
	streamEnd(w)
}

func (m *fireModel) calls() (fires, pings int, inputs []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fires, m.pings, slices.Clone(m.inputs)
}

// Ways the Bot API holds the first sendMessage.
const (
	sendsPass   = iota
	holdUnsent  // the request hangs before Telegram takes the message
	holdUnheard // Telegram takes the message; its answer never comes back
)

// fireBotAPI is the fake Bot API in front of which the first sendMessage
// may be held (hold) until its request ends: the gateway was killed.
type fireBotAPI struct {
	api   *telegramtest.Server
	hold  int
	first atomic.Bool
	held  chan struct{} // closed when the held send arrived
}

func (h *fireBotAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.hold == sendsPass || !strings.HasSuffix(r.URL.Path, "/sendMessage") || !h.first.CompareAndSwap(false, true) {
		h.api.ServeHTTP(w, r)
		return
	}
	if h.hold == holdUnheard {
		h.api.ServeHTTP(httptest.NewRecorder(), r) // sent: the chat has it
	} else {
		r.ParseForm() // the body read: the request's context ends with its connection
	}
	close(h.held)
	<-r.Context().Done()
}

// fireWorld is one scenario's world.
type fireWorld struct {
	name    string
	driver  string
	dsn     string
	due     time.Time
	misfire string // the schedule's misfire rule and max_late, as bot.yaml lines
	dir     string
	addr    string
	tg      *fireBotAPI
	model   *fireModel
	db      *store.DB // the test's own handle on the world's storage
	config  string
	procs   map[string]*process
	gens    int // processes started
	current *process
}

// newFireWorld builds a world whose schedule is due at due (a minute
// boundary, UTC), daily.
func newFireWorld(t *testing.T, name, driver string, due time.Time, hold int, stall bool, misfire string) *fireWorld {
	return newCronWorld(t, name, driver, fmt.Sprintf("%d %d * * *", due.Minute(), due.Hour()), due, hold, stall, misfire)
}

// newCronWorld builds a world whose schedule's times are cron (UTC); due
// is the fire the test follows.
func newCronWorld(t *testing.T, name, driver, cron string, due time.Time, hold int, stall bool, misfire string) *fireWorld {
	t.Helper()
	w := &fireWorld{name: name, driver: driver, due: due, misfire: misfire, dir: t.TempDir(), addr: freeAddr(t),
		model: newFireModel(stall), procs: map[string]*process{}}
	w.tg = &fireBotAPI{api: telegramtest.New(t), hold: hold, held: make(chan struct{})}
	apiSrv := httptest.NewServer(w.tg)
	t.Cleanup(apiSrv.Close)
	modelSrv := httptest.NewServer(w.model)
	t.Cleanup(modelSrv.Close)
	switch driver {
	case store.DriverSQLite:
		w.dsn = filepath.Join(w.dir, "gateway.db")
	case store.DriverPostgres:
		w.dsn = pgtest.DSN(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := store.Open(ctx, driver, w.dsn, store.OpenOptions{})
	if err != nil {
		t.Fatalf("%s: open its storage: %v", name, err)
	}
	t.Cleanup(func() { db.Close() })
	w.db = db
	w.config = fmt.Sprintf(`
gateway:
  listen: %s
storage:
  driver: %s
  dsn: %q
agent:
  backend: openai
  openai: {base_url: %s/v1, model: m, max_retries: 0}
channels:
  telegram:
    token: %q
    api_url: %s
    poll_timeout: 1s
session:
  debounce_ms: 0
schedules:
  - name: brief
    cron: %q
    target: {channel: telegram, chat: %d}
    prompt: Write the morning brief.
%s
shutdown:
  drain_timeout: 1s
log:
  level: info
`, w.addr, driver, w.dsn, modelSrv.URL, telegramtest.Token, apiSrv.URL, cron, fireChat, misfire)
	return w
}

// key is the schedule's fire key.
func (w *fireWorld) key() string { return schedules.OperatorKey("brief") }

// start starts a gateway process of the world.
func (w *fireWorld) start(t *testing.T) {
	t.Helper()
	w.gens++
	name := fmt.Sprintf("%s #%d", w.name, w.gens)
	w.current = startGateway(t, w.dir, w.config)
	w.procs[name] = w.current
}

// fire is the world's fire due at due as storage has it (nil: none).
func (w *fireWorld) fire(t *testing.T, due time.Time) *ledger.ScheduleFire {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := w.db.Fire(ctx, w.key(), due)
	if err != nil {
		t.Fatalf("%s: read the fire: %v", w.name, err)
	}
	return f
}

// awaitFire waits, bounded by deadline, until the fire due at due is in
// storage and cond holds for it.
func (w *fireWorld) awaitFire(t *testing.T, what string, due, deadline time.Time, cond func(f *ledger.ScheduleFire) bool) *ledger.ScheduleFire {
	t.Helper()
	for {
		f := w.fire(t, due)
		if f != nil && cond(f) {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: gave up waiting for %s; the fire: %+v", w.name, what, f)
		}
		select {
		case err := <-w.current.exited:
			t.Fatalf("%s: the gateway exited (%v) while waiting for %s", w.name, err, what)
		case <-time.After(50 * time.Millisecond): // polling storage for the fire's next state
		}
	}
}

// await waits for ch, bounded.
func (w *fireWorld) await(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case err := <-w.current.exited:
		t.Fatalf("%s: the gateway exited (%v) while waiting for %s", w.name, err, what)
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: gave up waiting for %s", w.name, what)
	}
}

// fireTurn is the fire's turn, with its message.
func (w *fireWorld) fireTurn(t *testing.T, f *ledger.ScheduleFire) *ledger.Turn {
	t.Helper()
	turn, err := w.db.TurnAt(context.Background(), f.ConversationID, f.TurnSeq)
	if err != nil || turn == nil {
		t.Fatalf("%s: the fire's turn %s/%d: %v, %v", w.name, f.ConversationID, f.TurnSeq, turn, err)
	}
	return turn
}

// fireMessages are the fire messages stored, and every final reply to
// them.
func (w *fireWorld) fireMessages(t *testing.T) (msgs []sessions.Message, finals []sessions.Message) {
	t.Helper()
	if err := w.db.Gorm().Where("client_msg_id LIKE ?", ledger.FireMsgPrefix+"%").Order("conversation_id, seq").Find(&msgs).Error; err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		var replies []sessions.Message
		if err := w.db.Gorm().Where("conversation_id = ? AND reply_to = ? AND role = 'assistant'", m.ConversationID, m.Seq).Find(&replies).Error; err != nil {
			t.Fatal(err)
		}
		for _, r := range replies {
			if ledger.SettlesTurn(&r) {
				finals = append(finals, r)
			}
		}
	}
	return msgs, finals
}

// ping sends the chat a message and waits for its answer: the chat's
// turns run in order, and the fire is settled already, so nothing of the
// fire is on its way after it.
func (w *fireWorld) ping(t *testing.T) {
	t.Helper()
	w.tg.api.Push(telegramtest.DM(fireChat, "ping"))
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range w.tg.api.Messages() {
			if s.Text == "pong" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the ping was never answered; sent: %+v", w.name, w.tg.api.Messages())
		}
		time.Sleep(20 * time.Millisecond) // polling the chat for the answer
	}
}

// fireSends are the messages the chat got, but the ping's answer.
func (w *fireWorld) fireSends() []telegramtest.Sent {
	var out []telegramtest.Sent
	for _, s := range w.tg.api.Messages() {
		if s.Text != "pong" {
			out = append(out, s)
		}
	}
	return out
}

// fireWant is how a world ends.
type fireWant struct {
	sends      int // sendMessage calls with the fire's reply
	modelCalls int // model calls for the fire
	// earlyCall: one more model call may have come, an early call
	// (sessions/early.go: the agent called while the message's commit is
	// in flight) whose commit never landed — cancelled, nothing of it
	// stored or sent.
	earlyCall bool
	late      bool // the reply says it is late
	attempt   int  // the fire's claims (0: not checked)
}

// check waits, bounded by deadline, for the fire to settle, pings the
// chat, and checks the world's end: the fire sent with the reference of
// the message the chat got; one message of the fire stored with one final
// reply; the chat got that reply want.sends times and nothing else of the
// fire; the model was called want.modelCalls times for it; the next fire
// planned a day later.
func (w *fireWorld) check(t *testing.T, deadline time.Time, want fireWant) {
	t.Helper()
	logsOnFailure(t, w.procs)
	t.Cleanup(func() {
		if t.Failed() {
			w.logStorage(t)
		}
	})
	f := w.awaitFire(t, "the fire settled", w.due, deadline, func(f *ledger.ScheduleFire) bool { return ledger.FireSettled(f.State) })
	w.ping(t)
	if f.State != ledger.FireSent {
		t.Fatalf("the fire ended %s (%s), want sent", f.State, f.Reason)
	}
	if want.attempt > 0 && f.Attempt != want.attempt {
		t.Errorf("the fire was claimed %d times, want %d", f.Attempt, want.attempt)
	}
	sends := w.fireSends()
	if len(sends) != want.sends {
		t.Errorf("the chat got %d messages of the fire, want %d: %+v", len(sends), want.sends, sends)
	}
	msgs, finals := w.fireMessages(t)
	if len(msgs) != 1 || len(finals) != 1 || finals[0].Status != ledger.MsgOK {
		t.Fatalf("%d fire messages stored, with final replies %+v; want one, answered once", len(msgs), finals)
	}
	for _, s := range sends {
		if s.ChatID != fireChat || s.Text != finals[0].Content {
			t.Errorf("the chat got %+v, want the stored reply %q in chat %d", s, finals[0].Content, fireChat)
		}
	}
	if got := finals[0].Content; want.late != strings.HasPrefix(got, "⏰ This comes ") || !strings.HasSuffix(got, fireAnswer) {
		t.Errorf("the reply %q: late notice %v, want %v, ending with the model's answer", got, !want.late, want.late)
	}
	// The fake Bot API numbers the messages it takes from 1; the ping's
	// answer came last.
	if len(sends) > 0 && f.DeliveryRef != strconv.Itoa(len(sends)) {
		t.Errorf("the fire's delivery reference is %q, want the last send's message id %d", f.DeliveryRef, len(sends))
	}
	if late := time.Duration(f.LateMS) * time.Millisecond; want.late != (late > schedules.OnTime) {
		t.Errorf("the fire was claimed %s late; want late (over %s): %v", late, schedules.OnTime, want.late)
	}
	fires, pings, inputs := w.model.calls()
	if extra := fires - want.modelCalls; pings != 1 || extra < 0 || extra > 0 && !(extra == 1 && want.earlyCall) {
		t.Errorf("the model was called %d times for the fire and %d for the ping, want %d (one more: %v) and 1: %q", fires, pings, want.modelCalls, want.earlyCall, inputs)
	}
	if next, ok, err := w.db.LatestFire(context.Background(), w.key()); err != nil || !ok || !next.Equal(w.due.AddDate(0, 0, 1)) {
		t.Errorf("the next fire is planned at %s (%v, %v), want a day later", next, ok, err)
	}
}

// logStorage logs the world's fires and messages.
func (w *fireWorld) logStorage(t *testing.T) {
	var fires []ledger.ScheduleFire
	w.db.Gorm().Order("due_at").Find(&fires)
	for _, f := range fires {
		t.Logf("fire %s %s: %s owner=%s attempt=%d late=%dms turn=%s/%d ref=%q reason=%q", f.ScheduleKey, f.DueAt.Format(time.TimeOnly), f.State,
			f.Owner, f.Attempt, f.LateMS, f.ConversationID, f.TurnSeq, f.DeliveryRef, f.Reason)
	}
	var msgs []sessions.Message
	w.db.Gorm().Order("conversation_id, seq").Find(&msgs)
	for _, m := range msgs {
		id := ""
		if m.ClientMsgID != nil {
			id = *m.ClientMsgID
		}
		t.Logf("message %d %s id=%s reply_to=%d status=%s turn=%s owner=%s attempt=%d created=%s: %q", m.Seq, m.Role, id, m.ReplyTo, m.Status,
			m.TurnState, m.TurnOwner, m.TurnAttempt, m.CreatedAt.UTC().Format(time.TimeOnly+".000"), m.Content)
	}
}

// holdFireMessages makes the world's database refuse every fire's
// message (a trigger in the test's database, not in the binary); release
// drops it.
func (w *fireWorld) holdFireMessages(t *testing.T) (release func()) {
	t.Helper()
	g := w.db.Gorm()
	stmts := []string{`CREATE TRIGGER hold_fire_messages BEFORE INSERT ON messages
		WHEN NEW.client_msg_id LIKE 'fire:%' BEGIN SELECT RAISE(ABORT, 'a fire''s message, held by the test'); END`}
	drop := []string{"DROP TRIGGER hold_fire_messages"}
	if w.driver == store.DriverPostgres {
		stmts = []string{
			`CREATE FUNCTION hold_fire_messages() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'a fire''s message, held by the test'; END $$`,
			`CREATE TRIGGER hold_fire_messages BEFORE INSERT ON messages FOR EACH ROW
			WHEN (NEW.client_msg_id LIKE 'fire:%') EXECUTE FUNCTION hold_fire_messages()`,
		}
		drop = []string{"DROP TRIGGER hold_fire_messages ON messages", "DROP FUNCTION hold_fire_messages()"}
	}
	for _, s := range stmts {
		if err := g.Exec(s).Error; err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
	}
	return func() {
		for _, s := range drop {
			if err := g.Exec(s).Error; err != nil {
				t.Fatalf("%s: %v", w.name, err)
			}
		}
	}
}

// fireDrivers are the stores the tests run on: PostgreSQL only when
// CHATGATE_TEST_POSTGRES_DSN is set (it is skipped in a subtest that says
// so otherwise).
func fireDrivers(t *testing.T) []string {
	drivers := []string{store.DriverSQLite}
	t.Run(store.DriverPostgres, func(t *testing.T) {
		pgtest.DSN(t) // skips, saying why, when the variable is unset
		drivers = append(drivers, store.DriverPostgres)
	})
	return drivers
}

// TestFireKilledAtEachStep kills the gateway with SIGKILL at each step of
// a fire to a Telegram chat and starts it again on the same storage (see
// the top of this file); on SQLite and PostgreSQL. Every world ends with
// the fire settled sent and one reply in the chat — two, the same, only
// where the kill fell between the send and its mark — and the model
// called once for the fire, twice only where the kill cut its call.
func TestFireKilledAtEachStep(t *testing.T) {
	buildBinary(t) // skips in -short; not counted in the waits
	began := time.Now()
	now := began.UTC()
	// past: a minute boundary under 30 s ago, which a starting gateway
	// fires at once, on time (within schedules.OnTime), or the next one
	// when the last is older. next: a minute boundary at least 30 s
	// ahead, for the worlds killed before their fire's claim.
	past := now.Add(30 * time.Second).Truncate(time.Minute)
	if past.After(now) {
		past = past.Add(-time.Minute)
		if now.Sub(past) > 30*time.Second {
			past = past.Add(time.Minute)
		}
	}
	next := now.Add(30 * time.Second).Truncate(time.Minute).Add(time.Minute)
	const once = "    misfire: once\n    max_late: 10m"

	type scenario struct {
		name string
		due  time.Time
		hold int
		// stall: the model hangs on the fire's first call.
		stall bool
		want  fireWant
	}
	scenarios := []scenario{
		{name: "before the claim, restarted before due", due: next, want: fireWant{sends: 1, modelCalls: 1, attempt: 1}},
		{name: "before the claim, restarted after due", due: next, want: fireWant{sends: 1, modelCalls: 1, attempt: 1}},
		// The claim lapses a minute after it was taken: claimed again, the
		// fire is late, and misfire once runs it once, saying so. The
		// refused message's early call may have reached the model.
		{name: "after the claim", due: past, want: fireWant{sends: 1, modelCalls: 1, earlyCall: true, late: true, attempt: 2}},
		// The turn is run again: the model's second call for the fire.
		{name: "mid model call", due: past, stall: true, want: fireWant{sends: 1, modelCalls: 2, attempt: 1}},
		{name: "after the reply is stored, before the send", due: past, hold: holdUnsent, want: fireWant{sends: 1, modelCalls: 1, attempt: 1}},
		// The one duplicate the design allows: the send landed, its mark
		// did not, and the rescuer sends the stored reply again.
		{name: "after the send, before its mark", due: past, hold: holdUnheard, want: fireWant{sends: 2, modelCalls: 1, attempt: 1}},
	}
	type running struct {
		scenario
		w *fireWorld
	}
	var worlds []running
	for _, driver := range fireDrivers(t) {
		for _, sc := range scenarios {
			w := newFireWorld(t, driver+"/"+sc.name, driver, sc.due, sc.hold, sc.stall, once)
			worlds = append(worlds, running{sc, w})
		}
	}
	// The worlds to kill before their due minute first.
	slices.SortStableFunc(worlds, func(a, b running) int { return a.due.Compare(b.due) * -1 })
	releases := map[*fireWorld]func(){}
	for _, r := range worlds {
		if r.name == "after the claim" {
			releases[r.w] = r.w.holdFireMessages(t)
		}
		r.w.start(t)
	}

	// Each world to its step, killed there, and started again (but the
	// one restarted after its due time).
	bound := time.Now().Add(90 * time.Second)
	var driving *fireWorld
	t.Cleanup(func() {
		if t.Failed() && driving != nil {
			logsOnFailure(t, driving.procs)
		}
	})
	for _, r := range worlds {
		w := r.w
		driving = w
		switch r.name {
		case "before the claim, restarted before due", "before the claim, restarted after due":
			f := w.awaitFire(t, "the fire planned", w.due, bound, func(f *ledger.ScheduleFire) bool { return true })
			kill9(t, w.current)
			if f.State != ledger.FireDue || !time.Now().Before(w.due) {
				t.Fatalf("%s: killed at %s with the fire %s, want due at %s", w.name, time.Now().UTC().Format(time.TimeOnly), f.State, w.due.Format(time.TimeOnly))
			}
		case "after the claim":
			w.awaitFire(t, "the fire claimed", w.due, bound, func(f *ledger.ScheduleFire) bool { return f.State == ledger.FireClaimed })
			kill9(t, w.current)
			if msgs, _ := w.fireMessages(t); len(msgs) != 0 {
				t.Fatalf("%s: the fire's message was stored past the hold", w.name)
			}
			releases[w]()
		case "mid model call":
			// The turn runs as soon as its message is stored; the fire
			// records that a moment later.
			w.await(t, "the model's call", w.model.held)
			w.awaitFire(t, "the fire's turn stored", w.due, bound, func(f *ledger.ScheduleFire) bool { return f.State == ledger.FireStored })
			kill9(t, w.current)
			f := w.fire(t, w.due)
			if turn := w.fireTurn(t, f); f.State != ledger.FireStored || turn.State != ledger.TurnRunning {
				t.Fatalf("%s: killed with the fire %s and its turn %s, want stored and running", w.name, f.State, turn.State)
			}
		default: // the sends held
			w.await(t, "the send", w.tg.held)
			w.awaitFire(t, "the fire's turn stored", w.due, bound, func(f *ledger.ScheduleFire) bool { return f.State == ledger.FireStored })
			kill9(t, w.current)
			f := w.fire(t, w.due)
			if turn := w.fireTurn(t, f); f.State != ledger.FireStored || turn.State != ledger.TurnAnswered || !turn.Track {
				t.Fatalf("%s: killed with the fire %s and its turn %s (tracked %v), want stored, and answered but not delivered", w.name, f.State, turn.State, turn.Track)
			}
			if n, want := len(w.tg.api.Messages()), map[int]int{holdUnsent: 0, holdUnheard: 1}[r.hold]; n != want {
				t.Fatalf("%s: the chat got %d messages before the kill, want %d", w.name, n, want)
			}
		}
		if r.name != "before the claim, restarted after due" {
			w.start(t)
		}
	}
	driving = nil
	for _, r := range worlds {
		if r.name == "before the claim, restarted after due" {
			if wait := time.Until(r.w.due.Add(time.Second)); wait > 0 {
				time.Sleep(wait) // down across the due minute: the wall clock is the process's
			}
			r.w.start(t)
		}
	}

	// The ends. A fire's claim lapses a minute after it was taken, and a
	// dead replica's turns are taken over once its lease (30 s) ended.
	deadline := time.Now().Add(2 * time.Minute)
	for _, r := range worlds {
		t.Run(r.w.name, func(t *testing.T) { r.w.check(t, deadline, r.want) })
	}
	t.Logf("%d worlds, killed at each step and ended in %s", len(worlds), time.Since(began).Round(time.Second))
}

// TestFireBeforeTelegramConnects: a gateway starts while the Bot API
// refuses getMe (three times: the bot connects some 7 s later), and a fire
// is due at once. The fire waits for the bot and reaches the chat once —
// run before, its turn was stored untracked, its reply went nowhere and
// the fire was settled sent.
func TestFireBeforeTelegramConnects(t *testing.T) {
	buildBinary(t)
	now := time.Now().UTC()
	due := now.Truncate(time.Minute)
	if now.Sub(due) > 30*time.Second {
		due = due.Add(time.Minute)
	}
	w := newFireWorld(t, "sqlite/telegram down at start", store.DriverSQLite, due, sendsPass, false, "    misfire: once")
	w.tg.api.FailBare("getMe", http.StatusBadGateway, 3)
	w.start(t)
	w.check(t, time.Now().Add(90*time.Second), fireWant{sends: 1, modelCalls: 1, attempt: 1})
}

// TestFireMissedWhileDown: an hourly schedule whose gateway was down for
// a day, started again two to three minutes after the latest of its 24
// missed fires. The fire before the outage is in storage as that gateway
// left it (sent), written by the test: a process's clock is real, and
// waiting out schedules.OnTime for a fire to be late is a minute or more
// per world. With misfire once within max_late the latest missed fire
// runs once, late, and its reply says so; beyond max_late, or with skip,
// it is recorded skipped and nothing is sent. The 23 before it are
// skipped either way: 24 missed fires never become 24 messages.
func TestFireMissedWhileDown(t *testing.T) {
	buildBinary(t)
	due := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute) // the latest missed fire
	cron := fmt.Sprintf("%d * * * *", due.Minute())
	cases := []struct {
		name, misfire string
		sent          bool
	}{
		{"once within max_late", "    misfire: once\n    max_late: 10m", true},
		{"once beyond max_late", "    misfire: once\n    max_late: 1m", false},
		{"skip", "    misfire: skip", false},
	}
	type running struct {
		name string
		sent bool
		w    *fireWorld
	}
	var worlds []running
	for _, driver := range fireDrivers(t) {
		for _, c := range cases {
			w := newCronWorld(t, driver+"/"+c.name, driver, cron, due, sendsPass, false, c.misfire)
			before := due.Add(-24 * time.Hour)
			claimed, ended := before.Add(time.Second), before.Add(3*time.Second)
			if err := w.db.Gorm().Create(&ledger.ScheduleFire{ScheduleKey: w.key(), DueAt: before, SessionKey: sessions.TelegramDMKey(fireChat),
				State: ledger.FireSent, Owner: "a gateway since stopped", Attempt: 1, DeliveryRef: "1", CreatedAt: before.Add(-time.Hour),
				ClaimedAt: &claimed, EndedAt: &ended}).Error; err != nil {
				t.Fatal(err)
			}
			w.start(t)
			worlds = append(worlds, running{c.name, c.sent, w})
		}
	}
	deadline := time.Now().Add(time.Minute)
	for _, r := range worlds {
		t.Run(r.w.name, func(t *testing.T) {
			w := r.w
			logsOnFailure(t, w.procs)
			f := w.awaitFire(t, "the missed fire settled", due, deadline, func(f *ledger.ScheduleFire) bool { return ledger.FireSettled(f.State) })
			w.ping(t)
			fires, err := w.db.Fires(context.Background(), w.key(), due.Add(time.Second), 100)
			if err != nil {
				t.Fatal(err)
			}
			states := map[string]int{}
			for _, f := range fires {
				states[f.State]++
			}
			wantSent, wantSkipped := 1, 24
			if r.sent {
				wantSent, wantSkipped = 2, 23
			}
			if len(fires) != 25 || states[ledger.FireSent] != wantSent || states[ledger.FireSkippedLate] != wantSkipped {
				t.Errorf("the day's fires: %d, by state %v; want 25, %d sent and %d skipped_late", len(fires), states, wantSent, wantSkipped)
			}
			sends := w.fireSends()
			modelFires, _, _ := w.model.calls()
			msgs, finals := w.fireMessages(t)
			if !r.sent {
				if f.State != ledger.FireSkippedLate || f.Reason != sessions.SkippedLateReason {
					t.Errorf("the missed fire ended %s (%q), want skipped_late", f.State, f.Reason)
				}
				if len(sends) != 0 || modelFires != 0 || len(msgs) != 0 {
					t.Errorf("a skipped fire: %d sent, %d model calls, %d messages stored; want none", len(sends), modelFires, len(msgs))
				}
				return
			}
			if f.State != ledger.FireSent || f.LateMS <= schedules.OnTime.Milliseconds() {
				t.Errorf("the missed fire ended %s, %d ms late; want sent, late", f.State, f.LateMS)
			}
			if len(sends) != 1 || modelFires != 1 || len(msgs) != 1 || len(finals) != 1 {
				t.Fatalf("%d sent, %d model calls, %d messages with %d final replies stored; want one each", len(sends), modelFires, len(msgs), len(finals))
			}
			if got := sends[0].Text; !strings.HasPrefix(got, "⏰ This comes ") || !strings.HasSuffix(got, fireAnswer) || got != finals[0].Content {
				t.Errorf("the late reply %q (stored %q), want it to start with the late notice", got, finals[0].Content)
			}
		})
	}
}
