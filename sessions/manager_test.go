package sessions

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/sessions/store"
)

var t0 = time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC)

func TestTurnsAreStoredInOrder(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		m := newManager(t, db, agent.Echo{}, newClock(t0), nil)
		var acks []Ack
		var deltas []string
		out, err := m.Handle(context.Background(), msg("websocket:ann", "hi"), Hooks{
			OnAck:   func(a Ack) { acks = append(acks, a) },
			OnDelta: func(d string) { deltas = append(deltas, d) },
		})
		if err != nil {
			t.Fatal(err)
		}
		if out.Reply.Text != "echo: hi (history: 0)" || out.Reply.Status != MsgOK || out.UserSeq != 1 || out.Reply.Seq != 2 {
			t.Fatalf("outcome = %+v", out)
		}
		if len(acks) != 1 || acks[0].Seq != 1 || strings.Join(deltas, "") != out.Reply.Text {
			t.Fatalf("acks %v deltas %q", acks, deltas)
		}
		out2 := handle(t, m, msg("websocket:ann", "again"))
		if out2.Reply.Text != "echo: again (history: 2)" || out2.ConversationID != out.ConversationID {
			t.Fatalf("second outcome = %+v", out2)
		}
		rows := transcript(t, db, out.ConversationID)
		var got []string
		for _, r := range rows {
			got = append(got, fmt.Sprintf("%d %s %q reply_to=%d %s", r.Seq, r.Role, r.Content, r.ReplyTo, r.Status))
		}
		want := []string{
			`1 user "hi" reply_to=0 ok`,
			`2 assistant "echo: hi (history: 0)" reply_to=1 ok`,
			`3 user "again" reply_to=0 ok`,
			`4 assistant "echo: again (history: 2)" reply_to=3 ok`,
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("transcript:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		conv, _ := db.Conversation(context.Background(), out.ConversationID)
		if conv.LastSeq != 4 || conv.Status != StatusActive || conv.Channel != "websocket" || conv.AgentName != "echo" {
			t.Fatalf("conversation = %+v", conv)
		}
	})
}

func TestHistoryIsTrimmedAndSurvivesRestart(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		policies := map[string]Policy{"websocket": {MaxHistory: 3}}
		m := newManager(t, db, agent.Echo{}, c, policies)
		for i := 0; i < 4; i++ {
			handle(t, m, msg("websocket:ann", fmt.Sprint("m", i)))
		}
		out := handle(t, m, msg("websocket:ann", "last"))
		if out.Reply.Text != "echo: last (history: 3)" {
			t.Fatalf("reply = %q, want history trimmed to 3", out.Reply.Text)
		}
		// A new manager (a restart) starts cold and reads history from the
		// database.
		rec := &recorder{}
		m2 := newManager(t, db, rec, c, policies)
		out = handle(t, m2, msg("websocket:ann", "after restart"))
		if out.Reply.Text != "echo: after restart (history: 3)" {
			t.Fatalf("after restart reply = %q", out.Reply.Text)
		}
		h := rec.last().History
		if h[0].Role != "assistant" || h[2].Content != "echo: last (history: 3)" {
			t.Fatalf("history after restart = %+v", h)
		}
	})
}

func TestDuplicateClientMessageIDRunsOnce(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		rec := &recorder{}
		m := newManager(t, db, rec, c, nil)
		in := msg("websocket:ann", "hello")
		in.ClientMsgID = "c-1"
		first := handle(t, m, in)
		again := handle(t, m, in)
		if !again.Duplicate || !reflect.DeepEqual(again.Reply, first.Reply) || again.UserSeq != first.UserSeq {
			t.Fatalf("resend = %+v, want the stored outcome %+v", again, first)
		}
		// After a restart the hot cache is gone: the database's unique index
		// must still catch it.
		m2 := newManager(t, db, rec, c, nil)
		handle(t, m2, msg("websocket:ann", "in between"))
		third := handle(t, m2, in)
		if !third.Duplicate || !reflect.DeepEqual(third.Reply, first.Reply) {
			t.Fatalf("resend after restart = %+v", third)
		}
		if n := rec.calls.Load(); n != 2 {
			t.Fatalf("agent called %d times, want 2 (hello once, in between once)", n)
		}
		if rows := transcript(t, db, first.ConversationID); len(rows) != 4 {
			t.Fatalf("%d rows stored, want 4", len(rows))
		}
	})
}

func TestLazyResetAnswersTriggeringMessageInNewConversation(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		m := newManager(t, db, agent.Echo{}, c, map[string]Policy{
			"websocket": {MaxHistory: 100, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}},
		})
		first := handle(t, m, msg("websocket:ann", "one"))
		c.Advance(59 * time.Minute)
		if out := handle(t, m, msg("websocket:ann", "two")); out.Reset != nil || out.Reply.Text != "echo: two (history: 2)" {
			t.Fatalf("reset before the idle period: %+v", out)
		}
		c.Advance(time.Hour)
		var hooked *ResetEvent
		out, err := m.Handle(context.Background(), msg("websocket:ann", "three"), Hooks{OnReset: func(e ResetEvent) { hooked = &e }})
		if err != nil {
			t.Fatal(err)
		}
		if out.Reset == nil || out.Reset.Reason != ReasonIdle || hooked == nil || out.Reset.OldConversation != first.ConversationID {
			t.Fatalf("outcome reset = %+v, hook = %+v", out.Reset, hooked)
		}
		if out.ConversationID == first.ConversationID || out.Reply.Text != "echo: three (history: 0)" {
			t.Fatalf("triggering message not answered in the new conversation: %+v", out)
		}
		convs := conversations(t, db, "websocket:ann")
		if len(convs) != 2 || convs[0].Status != StatusArchived || convs[0].ResetReason != ReasonIdle || convs[1].Status != StatusActive {
			t.Fatalf("conversations = %+v", convs)
		}
		if old := transcript(t, db, first.ConversationID); len(old) != 4 {
			t.Fatalf("archived conversation has %d messages, want 4 (nothing deleted)", len(old))
		}
		if cur := transcript(t, db, out.ConversationID); len(cur) != 2 || cur[0].Content != "three" {
			t.Fatalf("new conversation = %+v", cur)
		}
	})
}

func TestResetModes(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	at := func(s string) time.Time {
		tm, err := time.ParseInLocation("2006-01-02 15:04", s, berlin)
		if err != nil {
			panic(err)
		}
		return tm
	}
	tests := []struct {
		name       string
		policy     ResetPolicy
		started    time.Time
		lastActive time.Time
		now        time.Time
		want       string // reason, "" for no reset
	}{
		{"none never resets", ResetPolicy{Mode: ResetNone}, at("2026-01-01 00:00"), at("2026-01-01 00:00"), at("2026-06-01 00:00"), ""},
		{"idle just before", ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}, at("2026-05-01 10:00"), at("2026-05-01 10:00"), at("2026-05-01 10:59"), ""},
		{"idle exactly at", ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}, at("2026-05-01 10:00"), at("2026-05-01 10:00"), at("2026-05-01 11:00"), ReasonIdle},
		{"daily before the hour", ResetPolicy{Mode: ResetDaily, AtHour: 4, Location: berlin}, at("2026-05-01 05:00"), at("2026-05-02 03:59"), at("2026-05-02 03:59"), ""},
		{"daily at the hour", ResetPolicy{Mode: ResetDaily, AtHour: 4, Location: berlin}, at("2026-05-01 05:00"), at("2026-05-02 03:59"), at("2026-05-02 04:00"), ReasonDaily},
		{"daily started after today's boundary", ResetPolicy{Mode: ResetDaily, AtHour: 4, Location: berlin}, at("2026-05-02 04:00"), at("2026-05-02 23:00"), at("2026-05-03 03:00"), ""},
		{"daily in the zone, not UTC", ResetPolicy{Mode: ResetDaily, AtHour: 1, Location: berlin}, at("2026-05-01 23:30"), at("2026-05-01 23:30"), at("2026-05-02 01:00"), ReasonDaily},
		{"both: idle first", ResetPolicy{Mode: ResetBoth, IdleFor: 30 * time.Minute, AtHour: 4, Location: berlin}, at("2026-05-01 20:00"), at("2026-05-01 20:00"), at("2026-05-02 05:00"), ReasonIdle},
		{"both: daily first", ResetPolicy{Mode: ResetBoth, IdleFor: 8 * time.Hour, AtHour: 4, Location: berlin}, at("2026-05-01 20:00"), at("2026-05-02 03:00"), at("2026-05-02 04:30"), ReasonDaily},
		{"both: neither", ResetPolicy{Mode: ResetBoth, IdleFor: time.Hour, AtHour: 4, Location: berlin}, at("2026-05-02 05:00"), at("2026-05-02 09:00"), at("2026-05-02 09:30"), ""},
		// 2026-03-29: Berlin skips 02:00–03:00. A 02:00 reset happens at 03:00 CEST.
		{"DST gap: not before the gap ends", ResetPolicy{Mode: ResetDaily, AtHour: 2, Location: berlin}, at("2026-03-28 12:00"), at("2026-03-29 01:59"), at("2026-03-29 01:59"), ""},
		{"DST gap: at the end of the gap", ResetPolicy{Mode: ResetDaily, AtHour: 2, Location: berlin}, at("2026-03-28 12:00"), at("2026-03-29 01:59"), at("2026-03-29 03:00"), ReasonDaily},
		// 2026-10-25: Berlin repeats 02:00–03:00. Only the first 02:00 resets.
		{"DST repeat: first 02:00 resets", ResetPolicy{Mode: ResetDaily, AtHour: 2, Location: berlin}, at("2026-10-24 12:00"), at("2026-10-24 12:00"), time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC), ReasonDaily},
		{"DST repeat: second 02:00 does not", ResetPolicy{Mode: ResetDaily, AtHour: 2, Location: berlin}, time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.policy.Validate(); err != nil {
				t.Fatal(err)
			}
			c := &Conversation{StartedAt: tt.started.UTC(), LastActivityAt: tt.lastActive.UTC()}
			reason, expired := tt.policy.Expired(c, tt.now.UTC())
			if expired != (tt.want != "") || reason != tt.want {
				t.Fatalf("Expired = %q, %v; want %q", reason, expired, tt.want)
			}
		})
	}
}

func TestDailyBoundary(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	tests := []struct {
		name string
		hour int
		now  time.Time
		want time.Time
	}{
		{"ordinary day, after", 4, time.Date(2026, 5, 2, 12, 0, 0, 0, time.UTC), time.Date(2026, 5, 2, 2, 0, 0, 0, time.UTC)},
		{"ordinary day, before: yesterday", 4, time.Date(2026, 5, 2, 1, 0, 0, 0, time.UTC), time.Date(2026, 5, 1, 2, 0, 0, 0, time.UTC)},
		{"gap day: 02:00 is 03:00 CEST", 2, time.Date(2026, 3, 29, 12, 0, 0, 0, time.UTC), time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)},
		{"repeat day: first 02:00 CEST", 2, time.Date(2026, 10, 25, 12, 0, 0, 0, time.UTC), time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC)},
		{"day after repeat", 2, time.Date(2026, 10, 26, 12, 0, 0, 0, time.UTC), time.Date(2026, 10, 26, 1, 0, 0, 0, time.UTC)},
		{"midnight boundary", 0, time.Date(2026, 5, 2, 21, 59, 0, 0, time.UTC), time.Date(2026, 5, 1, 22, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ResetPolicy{Mode: ResetDaily, AtHour: tt.hour, Location: berlin}.Boundary(tt.now)
			if !got.Equal(tt.want) {
				t.Fatalf("Boundary = %s, want %s", got.UTC(), tt.want)
			}
		})
	}
}

func TestSweepsAreIdempotentAndReachHotConversations(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		berlin, _ := time.LoadLocation("Europe/Berlin")
		m := newManager(t, db, agent.Echo{}, c, map[string]Policy{
			"websocket": {MaxHistory: 100, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: 30 * time.Minute}},
			"telegram":  {MaxHistory: 100, Reset: ResetPolicy{Mode: ResetDaily, AtHour: 4, Location: berlin}},
		})
		var events []ResetEvent
		var mu sync.Mutex
		record := func(e ResetEvent) { mu.Lock(); events = append(events, e); mu.Unlock() }
		m.Routes().Register("websocket", Route{Reset: record})
		m.Routes().Register("telegram", Route{Reset: record})

		ann := handle(t, m, msg("websocket:ann", "hi"))
		c.Advance(20 * time.Minute)
		handle(t, m, msg("websocket:bob", "hi"))
		tg := handle(t, m, Inbound{Channel: "telegram", SessionKey: "telegram:dm:7", Text: "hi"})

		c.Advance(10 * time.Minute) // ann idle 30m, bob 10m
		if n, err := NewSweeper(m, nil).SweepIdle(context.Background()); err != nil || n != 1 {
			t.Fatalf("idle sweep archived %d (%v), want 1", n, err)
		}
		if n, _ := NewSweeper(m, nil).SweepIdle(context.Background()); n != 0 {
			t.Fatalf("repeated idle sweep archived %d, want 0", n)
		}
		if len(events) != 1 || events[0].SessionKey != "websocket:ann" || events[0].Reason != ReasonIdle {
			t.Fatalf("events = %+v", events)
		}
		// ann's conversation was hot in memory: the next message must still
		// open a new conversation.
		out := handle(t, m, msg("websocket:ann", "back"))
		if out.ConversationID == ann.ConversationID || out.Reply.Text != "echo: back (history: 0)" {
			t.Fatalf("after the sweep: %+v", out)
		}

		// Daily: telegram's conversation started 09:20 UTC on 2026-03-10;
		// the next boundary is 04:00 Berlin = 03:00 UTC on 2026-03-11.
		c.Set(time.Date(2026, 3, 11, 2, 59, 0, 0, time.UTC))
		if n, _ := NewSweeper(m, nil).SweepDaily(context.Background(), "telegram"); n != 0 {
			t.Fatalf("daily sweep before the boundary archived %d", n)
		}
		c.Set(time.Date(2026, 3, 11, 3, 0, 0, 0, time.UTC))
		if n, _ := NewSweeper(m, nil).SweepDaily(context.Background(), "telegram"); n != 1 {
			t.Fatalf("daily sweep at the boundary archived %d, want 1", n)
		}
		if n, _ := NewSweeper(m, nil).SweepDaily(context.Background(), "telegram"); n != 0 {
			t.Fatalf("repeated daily sweep archived %d", n)
		}
		if conv, _ := db.Conversation(context.Background(), tg.ConversationID); conv.Status != StatusArchived || conv.ResetReason != ReasonDaily {
			t.Fatalf("telegram conversation = %+v", conv)
		}
		if n, _ := NewSweeper(m, nil).SweepDaily(context.Background(), "websocket"); n != 0 {
			t.Fatal("daily sweep ran for a channel without a daily policy")
		}
	})
}

func TestSchedules(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	m := New(openStore(t, store.DriverSQLite, t.TempDir()+"/gateway.db"), agent.Echo{}, Options{Policies: map[string]Policy{
		"websocket": {Reset: ResetPolicy{Mode: ResetBoth, IdleFor: time.Hour, AtHour: 4, Location: berlin}},
		"telegram":  {Reset: ResetPolicy{Mode: ResetNone}},
	}, RetentionDays: 30})
	got := fmt.Sprint(NewSweeper(m, nil).Schedules())
	want := "[idle: * * * * * daily:websocket: daily at 04:00 Europe/Berlin purge: @hourly]"
	if got != want {
		t.Fatalf("schedules = %s, want %s", got, want)
	}
	sw := NewSweeper(m, quiet)
	if err := sw.Start(); err != nil {
		t.Fatal(err)
	}
	defer sw.Stop()
	if n := len(sw.entries()); n != 3 {
		t.Fatalf("%d cron entries, want 3", n)
	}
	// The daily entry fires at the boundary Boundary() computes.
	from := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)
	next := sw.entries()["daily:websocket"].Next(from)
	if want := time.Date(2026, 3, 29, 2, 0, 0, 0, time.UTC); !next.Equal(want) {
		t.Fatalf("daily sweep next = %s, want %s (04:00 CEST)", next.UTC(), want)
	}
	m.Shutdown(context.Background())
}

func TestManualReset(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		m := newManager(t, db, agent.Echo{}, newClock(t0), nil)
		var published []ResetEvent
		m.Routes().Register("websocket", Route{Reset: func(e ResetEvent) { published = append(published, e) }})
		first := handle(t, m, msg("websocket:ann", "hi"))
		ev, err := m.Reset(context.Background(), msg("websocket:ann", ""))
		if err != nil {
			t.Fatal(err)
		}
		if ev.OldConversation != first.ConversationID || ev.NewConversation == "" || ev.Reason != ReasonManual || len(published) != 1 {
			t.Fatalf("reset event = %+v, published %v", ev, published)
		}
		out := handle(t, m, msg("websocket:ann", "fresh"))
		if out.ConversationID != ev.NewConversation || out.Reply.Text != "echo: fresh (history: 0)" {
			t.Fatalf("after reset: %+v", out)
		}
		if conv, _ := db.Conversation(context.Background(), first.ConversationID); conv.ResetReason != ReasonManual || conv.ArchivedAt == nil {
			t.Fatalf("archived = %+v", conv)
		}
	})
}

func TestUnreachableAgentKeepsMessage(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		srv := httptest.NewServer(nil)
		url := srv.URL
		srv.Close()
		llm := openai.New(openai.Config{BaseURL: url + "/v1", APIKey: "k", Model: "m", MaxRetries: 0})
		c := newClock(t0)
		m := newManager(t, db, llm, c, nil)
		out := handle(t, m, msg("websocket:ann", "are you there?"))
		if out.Reply.Status != MsgFailed || out.Reply.Text != DefaultFailureText || !strings.Contains(out.Reply.Error, "unreachable") {
			t.Fatalf("outcome = %+v", out)
		}
		rows := transcript(t, db, out.ConversationID)
		if len(rows) != 2 || rows[0].Content != "are you there?" || rows[0].Status != MsgOK || rows[1].Status != MsgFailed {
			t.Fatalf("rows = %+v", rows)
		}
		// The failure notice is not history; the user's message is.
		rec := &recorder{}
		m2 := newManager(t, db, rec, c, nil)
		handle(t, m2, msg("websocket:ann", "now?"))
		if h := rec.last().History; len(h) != 1 || h[0].Content != "are you there?" {
			t.Fatalf("history = %+v", h)
		}
	})
}

func TestStopInterruptsTurn(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		rec := &recorder{block: make(chan struct{}), started: make(chan struct{}, 1)}
		m := newManager(t, db, rec, newClock(t0), nil)
		done := make(chan Outcome, 1)
		go func() { done <- handle(t, m, msg("websocket:ann", "long task")) }()
		<-rec.started
		if !m.Stop("websocket:ann") {
			t.Fatal("Stop found no running turn")
		}
		out := <-done
		if out.Reply.Status != MsgInterrupted || out.Reply.Text != "partial " || out.Reply.Error != InterruptedByUser {
			t.Fatalf("outcome = %+v", out)
		}
		if m.Stop("websocket:ann") {
			t.Fatal("Stop found a turn after it ended")
		}
	})
}

func TestShutdownDrainsThenInterrupts(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		rec := &recorder{block: make(chan struct{}), started: make(chan struct{}, 3)}
		m := New(db, rec, Options{Now: newClock(t0).Now, Logger: quiet})
		results := make(chan Outcome, 3)
		for _, u := range []string{"a", "b", "c"} {
			go func() { results <- handle(t, m, msg("websocket:"+u, "work")) }()
		}
		for i := 0; i < 3; i++ {
			<-rec.started
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // drain deadline already passed: interrupt at once
		if err := m.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			out := <-results
			if out.Reply.Status != MsgInterrupted || out.Reply.Error != InterruptedByShutdown {
				t.Fatalf("outcome = %+v", out)
			}
			rows := transcript(t, db, out.ConversationID)
			if len(rows) != 2 || rows[1].Status != MsgInterrupted || rows[1].Content != "partial " {
				t.Fatalf("rows = %+v", rows)
			}
		}
		if _, err := m.Handle(context.Background(), msg("websocket:a", "late"), Hooks{}); !errors.Is(err, ErrShuttingDown) {
			t.Fatalf("Handle after shutdown = %v, want ErrShuttingDown", err)
		}
	})
}

// queued is the busy mode of one turn per message.
var queued = map[string]Policy{"websocket": {MaxHistory: 100, Busy: BusyPolicy{Mode: BusyQueue}}}

func TestOneUsersTurnsNeverInterleave(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		m := newManager(t, db, agent.Echo{}, newClock(t0), queued)
		var wg sync.WaitGroup
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				in := msg("websocket:ann", fmt.Sprint("m", i))
				if _, err := m.Handle(context.Background(), in, Hooks{}); err != nil {
					t.Error(err)
				}
			}(i)
		}
		wg.Wait()
		expectPairedTurns(t, db, "websocket:ann", 20)
	})
}

func TestBadInbound(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	m := newManager(t, db, agent.Echo{}, newClock(t0), nil)
	for _, in := range []Inbound{
		{Channel: "websocket", SessionKey: "websocket:a", Text: "   "},
		{Channel: "", SessionKey: "websocket:a", Text: "x"},
		{Channel: "websocket", SessionKey: "websocket:a", Text: strings.Repeat("x", 64<<10+1)},
		{Channel: "websocket", SessionKey: "websocket:a", Text: "\xff"},
	} {
		if _, err := m.Handle(context.Background(), in, Hooks{}); err == nil {
			t.Fatalf("Handle(%.20q) accepted bad input", in.Text)
		}
	}
	var n int64
	db.Gorm().Model(&Message{}).Count(&n)
	if n != 0 {
		t.Fatalf("%d messages stored from bad input", n)
	}
}

// panicky is a broken backend.
type panicky struct{}

func (panicky) Name() string  { return "panicky" }
func (panicky) Model() string { return "panicky" }
func (panicky) Reply(context.Context, agent.Request, func(string)) (agent.Reply, error) {
	panic("backend bug")
}

func TestPanickingAgentFailsTheTurnOnly(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	m := newManager(t, db, panicky{}, newClock(t0), nil)
	out := handle(t, m, msg("websocket:ann", "hello"))
	if out.Reply.Status != MsgFailed || !strings.Contains(out.Reply.Error, "panicked") {
		t.Fatalf("outcome = %+v", out)
	}
	if rows := transcript(t, db, out.ConversationID); len(rows) != 2 || rows[0].Content != "hello" {
		t.Fatalf("rows = %+v", rows)
	}
}
