package sessions

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions/store"
)

var testModels = []Model{
	{Name: "Fast", ID: "fast-1", ContextTokens: 1000, PricePer1KPrompt: 1, PricePer1KCompletion: 2},
	{Name: "Smart", ID: "smart-1", ContextTokens: 8000, PricePer1KPrompt: 10, PricePer1KCompletion: 30},
}

func modelManager(t testing.TB, db Store, ag agent.Agent, c *clock, opts Options) *Manager {
	t.Helper()
	opts.Now, opts.Logger, opts.Events = c.Now, quiet, events(db)
	m := New(db, ag, opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	return m
}

// The model a key chose goes into its next turns' requests — the early
// call of a message its own turn, and a turn claimed after a debounce —
// stays across a reset and a restart, and "" goes back to the default.
func TestChosenModelReachesTheAgent(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		ctx := context.Background()
		db := open()
		c := newClock(t0)
		rec := &recorder{}
		m := modelManager(t, db, rec, c, Options{Models: testModels})
		in := msg("websocket:ann", "one")
		if !m.Standing().OffersModels() {
			t.Fatal("OffersModels = false with models")
		}
		st, err := m.Standing().Models(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		// The agent's own model ("echo") is none of the offered ones.
		if !reflect.DeepEqual(st.Models, testModels) || st.Chosen != "" || !st.UsesDefault || st.Gone || st.Current != (Model{ID: "echo"}) {
			t.Fatalf("before a choice: %+v", st)
		}
		handle(t, m, in)
		if got := rec.last().Model; got != nil {
			t.Fatalf("before a choice the request asks for %+v", got)
		}
		st, err = m.Standing().ChooseModel(ctx, in, "smart")
		if err != nil {
			t.Fatal(err)
		}
		if st.Chosen != "Smart" || st.Current != testModels[1] || st.UsesDefault {
			t.Fatalf("after choosing smart: %+v", st)
		}
		want := &agent.ModelSpec{Name: "Smart", ID: "smart-1", PricePer1KPrompt: 10, PricePer1KCompletion: 30}
		handle(t, m, msg("websocket:ann", "two"))
		if got := rec.last().Model; !reflect.DeepEqual(got, want) {
			t.Fatalf("request's model = %+v, want %+v", got, want)
		}
		if _, err := m.Reset(ctx, in); err != nil {
			t.Fatal(err)
		}
		handle(t, m, msg("websocket:ann", "after the reset"))
		if got := rec.last(); !reflect.DeepEqual(got.Model, want) || len(got.History) != 0 {
			t.Fatalf("after /new: model %+v, history %d", got.Model, len(got.History))
		}
		// Another key is not touched.
		handle(t, m, msg("websocket:bob", "hi"))
		if got := rec.last().Model; got != nil {
			t.Fatalf("bob's request asks for %+v", got)
		}
		if _, err := m.Standing().ChooseModel(ctx, in, "Nope"); !errors.Is(err, ErrUnknownModel) {
			t.Fatalf("choosing an unknown model: %v", err)
		}

		// A restart reads the choice from storage; a debounced turn (claimed,
		// not early) asks for it too.
		ctxShut, cancel := context.WithTimeout(ctx, 5*time.Second)
		m.Shutdown(ctxShut)
		cancel()
		rec2 := &recorder{}
		m2 := modelManager(t, db, rec2, c, Options{Models: testModels,
			Policies: map[string]Policy{"websocket": {MaxHistory: 100, Busy: BusyPolicy{Mode: BusyCollect, Debounce: time.Millisecond}}}})
		handle(t, m2, msg("websocket:ann", "three"))
		if got := rec2.last().Model; !reflect.DeepEqual(got, want) {
			t.Fatalf("after a restart: %+v, want %+v", got, want)
		}
		if st, err := m2.Standing().ChooseModel(ctx, in, ""); err != nil || st.Chosen != "" || !st.UsesDefault {
			t.Fatalf("back to the default: %+v, %v", st, err)
		}
		handle(t, m2, msg("websocket:ann", "four"))
		if got := rec2.last().Model; got != nil {
			t.Fatalf("back to the default, the request asks for %+v", got)
		}
	})
}

// A chosen model's prices make the reply's cost; the default model is
// priced by the backend's own. The request names the chosen model's id.
func TestChosenModelPricesTheReply(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		ctx := context.Background()
		db := open()
		llm, ag := llmtest.AgentWith(t, openai.Config{PricePer1KPrompt: 1000, PricePer1KCompletion: 1000})
		llm.Script(func(llmtest.Request) llmtest.Answer {
			return llmtest.Answer{Text: "ok", Usage: &llmtest.Usage{PromptTokens: 100, CompletionTokens: 10}}
		})
		// "m" is the backend's model: an entry with that id is the default.
		models := append([]Model{{Name: "Mini", ID: "m", PricePer1KPrompt: 1000, PricePer1KCompletion: 1000}}, testModels...)
		m := modelManager(t, db, ag, newClock(t0), Options{Models: models, Policies: map[string]Policy{"websocket": {MaxHistory: 100,
			Budget: BudgetPolicy{Default: Budget{CostPerDay: 500, CostPerMonth: 1000}}}}})
		in := msg("websocket:ann", "hi")
		st, err := m.Standing().Models(ctx, in)
		if err != nil || st.Current.Name != "Mini" || !st.UsesDefault {
			t.Fatalf("default: %+v, %v", st, err)
		}
		out := handle(t, m, in)
		if _, err := m.Standing().ChooseModel(ctx, in, "Fast"); err != nil {
			t.Fatal(err)
		}
		handle(t, m, msg("websocket:ann", "again"))
		reqs := llm.Received()
		if len(reqs) != 2 || reqs[0].Model != "m" || reqs[1].Model != "fast-1" {
			t.Fatalf("models asked for: %+v", reqs)
		}
		rows := transcript(t, db, out.ConversationID)
		if len(rows) != 4 {
			t.Fatalf("rows = %+v", rows)
		}
		if got, want := rows[1].Cost, 100.0+10; math.Abs(got-want) > 1e-9 {
			t.Fatalf("default model's cost = %v, want %v", got, want)
		}
		if got, want := rows[3].Cost, 100*1.0/1000+10*2.0/1000; math.Abs(got-want) > 1e-9 {
			t.Fatalf("Fast's cost = %v, want %v", got, want)
		}
		// Status tells the day's and the month's spend against the budget.
		status, err := m.Standing().Status(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		u := status.Usage
		if u.Day.Turns != 2 || u.Day.Tokens() != 220 || math.Abs(u.Day.Cost-(rows[1].Cost+rows[3].Cost)) > 1e-9 || u.Month != u.Day ||
			u.Budget != (Budget{CostPerDay: 500, CostPerMonth: 1000}) || !u.DayEnds.Equal(t0.Truncate(24*time.Hour).Add(24*time.Hour)) {
			t.Fatalf("usage = %+v", u)
		}
	})
}

func TestNoModelsOffered(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	m := newManager(t, db, agent.Echo{}, newClock(t0), nil)
	in := msg("websocket:ann", "hi")
	if m.Standing().OffersModels() {
		t.Fatal("OffersModels = true without models")
	}
	if _, err := m.Standing().ChooseModel(context.Background(), in, "Fast"); !errors.Is(err, ErrNoModels) {
		t.Fatalf("ChooseModel without models: %v", err)
	}
	st, err := m.Standing().Models(context.Background(), in)
	if err != nil || len(st.Models) != 0 || st.Current != (Model{ID: "echo"}) {
		t.Fatalf("Models = %+v, %v", st, err)
	}
}

// A choice made on one replica reaches the next turn of another, which
// had read the key's earlier choice: the event drops what it kept.
func TestModelChoiceReachesTheOtherReplica(t *testing.T) {
	dsn := postgresDSN(t)
	c := newClock(t0)
	recB := &recorder{}
	a, _ := replica(t, dsn, agent.Echo{}, c, Options{Models: testModels})
	b, _ := replica(t, dsn, recB, c, Options{Models: testModels})
	lb := watch(b)
	startRescuer(t, a)
	startRescuer(t, b)
	knowPeers(t, a, b)
	ctx := context.Background()
	in := msg("websocket:ann", "hi")
	if _, err := b.Standing().ChooseModel(ctx, in, "Fast"); err != nil {
		t.Fatal(err)
	}
	handle(t, b, in)
	if got := recB.last().Model; got == nil || got.ID != "fast-1" {
		t.Fatalf("B's turn asks for %+v", got)
	}
	if _, err := a.Standing().ChooseModel(ctx, in, "Smart"); err != nil {
		t.Fatal(err)
	}
	// Notifications arrive in order: once B hears of A's next reset, it
	// has heard of the choice before it.
	if _, err := a.Reset(ctx, msg("websocket:bob", "")); err != nil {
		t.Fatal(err)
	}
	lb.reset(t)
	handle(t, b, msg("websocket:ann", "again"))
	if got := recB.last().Model; got == nil || got.ID != "smart-1" {
		t.Fatalf("after A's choice, B's turn asks for %+v", got)
	}
}

// Status reports the conversation, the window against the model's
// context, the summary, the model, the busy mode and the next reset.
func TestStatus(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		ctx := context.Background()
		db := open()
		c := newClock(t0) // 09:00 UTC
		berlin, _ := time.LoadLocation("Europe/Berlin")
		policy := Policy{MaxHistory: 4, Busy: BusyPolicy{Mode: BusyQueue},
			Reset: ResetPolicy{Mode: ResetBoth, IdleFor: time.Hour, AtHour: 4, Location: berlin}}
		m := modelManager(t, db, agent.Echo{}, c, Options{Models: testModels, ContextTokens: 500,
			Instructions: "Be brief.", Policies: map[string]Policy{"websocket": policy}})
		in := msg("websocket:ann", "")
		st, err := m.Standing().Status(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if st.Conversation != "" || st.Messages != 0 || !st.NextReset.IsZero() || st.Busy != BusyQueue ||
			st.Model.Current != (Model{ID: "echo", ContextTokens: 500}) {
			t.Fatalf("before any message: %+v", st)
		}
		if got := conversations(t, db, "websocket:ann"); len(got) != 0 {
			t.Fatalf("Status opened a conversation: %+v", got)
		}
		for _, text := range []string{"one", "two", "three"} {
			handle(t, m, msg("websocket:ann", text))
			c.Advance(time.Minute)
		}
		st, err = m.Standing().Status(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if st.Messages != 6 || st.HistoryMessages != 4 || st.Summary != nil {
			t.Fatalf("after three turns: %+v", st)
		}
		// The window: the instructions, then the last four messages.
		want := len("Be brief.")/4 + 4
		for _, s := range []string{"two", "echo: two (history: 2)", "three", "echo: three (history: 4)"} {
			want += len(s)/4 + 4
		}
		if st.HistoryTokens != want {
			t.Fatalf("history tokens = %d, want %d", st.HistoryTokens, want)
		}
		if pct, ok := st.ContextPercent(); !ok || pct != math.Round(float64(want)*1000/500)/10 {
			t.Fatalf("context = %v %v", pct, ok)
		}
		// Idle: an hour after the last message (09:02); daily: 04:00 in
		// Berlin the next day (02:00 UTC) — the idle one comes first.
		if want := t0.Add(2*time.Minute + time.Hour); !st.NextReset.Equal(want) || st.NextResetReason != ReasonIdle {
			t.Fatalf("next reset = %v %s, want %v idle", st.NextReset, st.NextResetReason, want)
		}
		if st.Reset.TimeZone() != berlin {
			t.Fatalf("time zone = %v", st.Reset.TimeZone())
		}

		// Compaction on (off until now, so that no turn made a summary in
		// the background): a summary now.
		policy.Compaction = CompactionPolicy{Enabled: true, KeepLast: 2}
		m.Reconfigure(Settings{Policies: map[string]Policy{"websocket": policy}, Instructions: "Be brief."})
		n, err := m.Compact(ctx, msg("websocket:ann", ""))
		if err != nil || n == 0 {
			t.Fatalf("Compact = %d, %v", n, err)
		}
		if _, err := m.Standing().ChooseModel(ctx, in, "Smart"); err != nil {
			t.Fatal(err)
		}
		st, err = m.Standing().Status(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if st.Summary == nil || st.Summary.Through != 4 || st.Summary.Text == "" {
			t.Fatalf("summary = %+v", st.Summary)
		}
		if st.Model.Current.Name != "Smart" || st.Model.Current.ContextTokens != 8000 {
			t.Fatalf("model = %+v", st.Model)
		}
		if st.HistoryMessages != 2 || st.Messages != 6 {
			t.Fatalf("after compaction: %d in the window, %d messages", st.HistoryMessages, st.Messages)
		}

		// Daily only: the next 04:00 in Berlin after the conversation started.
		policy.Reset.Mode = ResetDaily
		m.Reconfigure(Settings{Policies: map[string]Policy{"websocket": policy}, Instructions: "Be brief."})
		st, err = m.Standing().Status(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if want := time.Date(2026, 3, 11, 4, 0, 0, 0, berlin); !st.NextReset.Equal(want) || st.NextResetReason != ReasonDaily {
			t.Fatalf("next daily reset = %v %s, want %v", st.NextReset, st.NextResetReason, want)
		}
		// The models stay with the agent a reload kept.
		if st.Model.Current.Name != "Smart" {
			t.Fatalf("after a reload without a new agent: %+v", st.Model)
		}
	})
}
