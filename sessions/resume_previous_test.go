package sessions

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/store"
)

// activeOf returns the key's active conversation id, failing when there is
// none.
func activeOf(t *testing.T, db *store.DB, key string) string {
	t.Helper()
	c, err := db.ActiveConversation(context.Background(), key)
	if err != nil || c == nil {
		t.Fatalf("active conversation of %s: %v, %v", key, c, err)
	}
	return c.ID
}

// /resume goes back to the conversation before the last reset: the echo
// agent sees its history again; the conversation it left is archived
// (manual) and stays stored; a second resume goes back again.
func TestResumePreviousReopensTheArchivedConversation(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		m := newManager(t, db, agent.Echo{}, newClock(t0), nil)
		var published []ResetEvent
		var mu sync.Mutex
		m.Routes().Register("websocket", Route{Reset: func(e ResetEvent) { mu.Lock(); published = append(published, e); mu.Unlock() }})
		const key = "websocket:ann"
		first := handle(t, m, msg(key, "one"))
		handle(t, m, msg(key, "two"))
		if _, err := m.Reset(context.Background(), msg(key, "")); err != nil {
			t.Fatal(err)
		}
		second := handle(t, m, msg(key, "fresh"))
		if second.Reply.Text != "echo: fresh (history: 0)" {
			t.Fatalf("after reset: %q", second.Reply.Text)
		}

		res, err := m.Conversations().ResumePrevious(context.Background(), msg(key, ""))
		if err != nil {
			t.Fatal(err)
		}
		ev := res.Event
		if ev.Reason != ReasonResume || ev.OldConversation != second.ConversationID || ev.NewConversation != first.ConversationID ||
			ev.OldMessages != 2 || res.Conversation.LastSeq != 4 || res.Conversation.Status != StatusActive {
			t.Fatalf("resumed = %+v", res)
		}
		mu.Lock()
		if n := len(published); n != 2 || published[1] != ev {
			t.Fatalf("published %+v, want the reset and then %+v", published, ev)
		}
		mu.Unlock()
		if got := activeOf(t, db, key); got != first.ConversationID {
			t.Fatalf("active = %s, want the reopened %s", got, first.ConversationID)
		}
		out := handle(t, m, msg(key, "back"))
		if out.ConversationID != first.ConversationID || out.Reply.Text != "echo: back (history: 4)" {
			t.Fatalf("after resume: %+v", out)
		}
		left, _ := db.Conversation(context.Background(), second.ConversationID)
		if left.Status != StatusArchived || left.ResetReason != ReasonManual || left.ArchivedAt == nil || left.LastSeq != 2 {
			t.Fatalf("the conversation left = %+v", left)
		}
		reopened, _ := db.Conversation(context.Background(), first.ConversationID)
		if reopened.ArchivedAt != nil || reopened.ResetReason != "" {
			t.Fatalf("reopened = %+v", reopened)
		}

		// Again: back to the one just left.
		res, err = m.Conversations().ResumePrevious(context.Background(), msg(key, ""))
		if err != nil || res.Event.NewConversation != second.ConversationID {
			t.Fatalf("second resume = %+v, %v", res, err)
		}
		if out := handle(t, m, msg(key, "and again")); out.Reply.Text != "echo: and again (history: 2)" {
			t.Fatalf("after the second resume: %q", out.Reply.Text)
		}
	})
}

// With nothing archived — a new key, a key with only its active
// conversation, or only empty archived ones — there is nothing to resume,
// and nothing changes.
func TestResumePreviousWithNothingArchived(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		m := newManager(t, db, agent.Echo{}, newClock(t0), nil)
		const key = "websocket:bob"
		if _, err := m.Conversations().ResumePrevious(context.Background(), msg(key, "")); !errors.Is(err, ErrNothingToResume) {
			t.Fatalf("new key: %v, want ErrNothingToResume", err)
		}
		out := handle(t, m, msg(key, "hi"))
		if _, err := m.Conversations().ResumePrevious(context.Background(), msg(key, "")); !errors.Is(err, ErrNothingToResume) {
			t.Fatalf("only an active conversation: %v", err)
		}
		if got := activeOf(t, db, key); got != out.ConversationID {
			t.Fatalf("active = %s, want %s untouched", got, out.ConversationID)
		}
		if _, err := m.Conversations().ResumePrevious(context.Background(), Inbound{Channel: "websocket"}); !errors.Is(err, ErrBadInbound) {
			t.Fatalf("no key: %v", err)
		}
	})
}

// A reopened conversation's idle clock starts again: the idle sweep
// right after the resume leaves it alone, and the next message is answered
// in it.
func TestResumedConversationIsNotSweptAtOnce(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		m := newManager(t, db, agent.Echo{}, c, map[string]Policy{
			"websocket": {MaxHistory: 100, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}},
		})
		const key = "websocket:cy"
		first := handle(t, m, msg(key, "before"))
		c.Advance(2 * time.Hour)
		if n, err := NewSweeper(m, nil).SweepIdle(context.Background()); n != 1 || err != nil {
			t.Fatalf("sweep = %d, %v", n, err)
		}
		res, err := m.Conversations().ResumePrevious(context.Background(), msg(key, ""))
		if err != nil || res.Event.NewConversation != first.ConversationID || res.Event.OldConversation != "" {
			t.Fatalf("resume after the sweep = %+v, %v", res, err)
		}
		if n, err := NewSweeper(m, nil).SweepIdle(context.Background()); n != 0 || err != nil {
			t.Fatalf("sweep right after the resume archived %d, %v", n, err)
		}
		c.Advance(30 * time.Minute)
		out := handle(t, m, msg(key, "after"))
		if out.ConversationID != first.ConversationID || out.Reset != nil || out.Reply.Text != "echo: after (history: 2)" {
			t.Fatalf("after the resume: %+v", out)
		}
	})
}

// With a daily reset, a conversation from before the day's boundary is not
// taken again by the next message once resumed.
func TestResumedConversationSurvivesTheDailyCheck(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	c := newClock(time.Date(2026, 3, 10, 3, 0, 0, 0, time.UTC))
	m := newManager(t, db, agent.Echo{}, c, map[string]Policy{
		"websocket": {MaxHistory: 100, Reset: ResetPolicy{Mode: ResetDaily, AtHour: 4}},
	})
	const key = "websocket:dee"
	first := handle(t, m, msg(key, "yesterday"))
	c.Advance(2 * time.Hour) // past 04:00
	if out := handle(t, m, msg(key, "today")); out.Reset == nil || out.Reset.Reason != ReasonDaily {
		t.Fatalf("no daily reset: %+v", out)
	}
	if _, err := m.Conversations().ResumePrevious(context.Background(), msg(key, "")); err != nil {
		t.Fatal(err)
	}
	out := handle(t, m, msg(key, "still yesterday's"))
	if out.Reset != nil || out.ConversationID != first.ConversationID || out.Reply.Text != "echo: still yesterday's (history: 2)" {
		t.Fatalf("after resuming: %+v", out)
	}
}

// The first message after a sweep archived the conversation gets the
// OnReset hook, marked Earlier, naming the archived conversation and why;
// a user's own reset (manual) and a conversation that just goes on get
// none.
func TestFirstMessageAfterASweepIsToldWhy(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		m := newManager(t, db, agent.Echo{}, c, map[string]Policy{
			"websocket": {MaxHistory: 100, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}},
		})
		const key = "websocket:eve"
		var got []ResetEvent
		hooks := Hooks{OnReset: func(ev ResetEvent) { got = append(got, ev) }}
		send := func(text string) Outcome {
			t.Helper()
			out, err := m.Handle(context.Background(), msg(key, text), hooks)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		first := send("one")
		send("two")
		if len(got) != 0 {
			t.Fatalf("hooks before any reset: %+v", got)
		}
		c.Advance(2 * time.Hour)
		if n, _ := NewSweeper(m, nil).SweepIdle(context.Background()); n != 1 {
			t.Fatalf("sweep archived %d", n)
		}
		out := send("three")
		if len(got) != 1 {
			t.Fatalf("hooks after the sweep: %+v", got)
		}
		if ev := got[0]; !ev.Earlier || ev.Reason != ReasonIdle || ev.OldConversation != first.ConversationID ||
			ev.NewConversation != out.ConversationID || ev.OldMessages != 4 {
			t.Fatalf("hook = %+v", ev)
		}
		send("four")
		if _, err := m.Reset(context.Background(), msg(key, "")); err != nil {
			t.Fatal(err)
		}
		send("five")
		if len(got) != 1 {
			t.Fatalf("hooks after a manual reset: %+v", got[1:])
		}
	})
}

// ResumePrevious and messages of the same key at once: every message is
// stored exactly once, in one of the two conversations, and the key keeps
// exactly one active conversation.
func TestResumePreviousWithConcurrentTurns(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		m := newManager(t, db, agent.Echo{}, newClock(t0), nil)
		const key = "websocket:fay"
		handle(t, m, msg(key, "a"))
		if _, err := m.Reset(context.Background(), msg(key, "")); err != nil {
			t.Fatal(err)
		}
		handle(t, m, msg(key, "b"))
		var wg sync.WaitGroup
		const n = 20
		for i := 0; i < n; i++ {
			wg.Go(func() {
				if _, err := m.Handle(context.Background(), msg(key, "x"), Hooks{}); err != nil {
					t.Error(err)
				}
			})
			if i%5 == 0 {
				wg.Go(func() {
					if _, err := m.Conversations().ResumePrevious(context.Background(), msg(key, "")); err != nil {
						t.Error(err)
					}
				})
			}
		}
		wg.Wait()
		convs, err := db.ListConversations(context.Background(), store.ListFilter{SessionKey: key})
		if err != nil {
			t.Fatal(err)
		}
		active, users := 0, 0
		for _, c := range convs {
			if c.Status == StatusActive {
				active++
			}
			for _, row := range transcript(t, db, c.ID) {
				if row.Role == agent.RoleUser && row.Content == "x" {
					users++
				}
			}
		}
		if active != 1 || users != n {
			t.Fatalf("%d active conversations, %d of %d messages stored", active, users, n)
		}
	})
}

// On PostgreSQL with two replicas, a resume on one reaches the other's
// listeners as a remote reset with reason resume, and the other replica's
// next message goes to the reopened conversation (its cached copy of the
// one archived is dropped).
func TestResumePreviousReachesTheOtherReplica(t *testing.T) {
	dsn := postgresDSN(t)
	c := newClock(t0)
	a, _ := replica(t, dsn, agent.Echo{}, c, Options{})
	b, _ := replica(t, dsn, agent.Echo{}, c, Options{})
	lb := watch(b)
	startRescuer(t, a)
	startRescuer(t, b)
	knowPeers(t, a, b)
	const key = "websocket:gus"
	first := handle(t, a, msg(key, "one"))
	if _, err := a.Reset(context.Background(), msg(key, "")); err != nil {
		t.Fatal(err)
	}
	if ev := lb.reset(t); ev.Reason != ReasonManual {
		t.Fatalf("B got %+v", ev)
	}
	second := handle(t, b, msg(key, "on B")) // B caches the new conversation
	res, err := a.Conversations().ResumePrevious(context.Background(), msg(key, ""))
	if err != nil {
		t.Fatal(err)
	}
	ev := lb.reset(t)
	if !ev.Remote || ev.Reason != ReasonResume || ev.NewConversation != first.ConversationID || ev.OldConversation != second.ConversationID {
		t.Fatalf("B got %+v, A resumed %+v", ev, res.Event)
	}
	out := handle(t, b, msg(key, "back on B"))
	if out.ConversationID != first.ConversationID || out.Reply.Text != "echo: back on B (history: 2)" {
		t.Fatalf("B after the resume: %+v", out)
	}
}

// ResumeConversation goes back to the conversation it names only while
// ResumePrevious would: once it is active again, once the key has moved
// on (a newer archive), or for another key, it changes nothing and says
// why.
func TestResumeConversationOnlyWhileItIsThePreviousOne(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		clock := newClock(t0)
		m := newManager(t, db, agent.Echo{}, clock, nil)
		ctx := context.Background()
		const key = "websocket:ann"
		first := handle(t, m, msg(key, "one"))
		clock.Advance(time.Minute)
		if _, err := m.Reset(ctx, msg(key, "")); err != nil {
			t.Fatal(err)
		}
		second := handle(t, m, msg(key, "two"))
		clock.Advance(time.Minute)
		if _, err := m.Conversations().ResumeConversation(ctx, msg("websocket:bob", ""), first.ConversationID); !errors.Is(err, ErrNotYours) {
			t.Fatalf("another key's resume: %v, want ErrNotYours", err)
		}
		res, err := m.Conversations().ResumeConversation(ctx, msg(key, ""), first.ConversationID)
		if err != nil || res.Event.NewConversation != first.ConversationID || res.Event.OldConversation != second.ConversationID {
			t.Fatalf("resume = %+v, %v", res, err)
		}
		if _, err := m.Conversations().ResumeConversation(ctx, msg(key, ""), first.ConversationID); !errors.Is(err, ErrAlreadyActive) {
			t.Fatalf("second resume of it: %v, want ErrAlreadyActive", err)
		}
		// The key moves on: a reset archives the first one again, and a
		// notice naming the second (archived before) is out of date.
		clock.Advance(time.Minute)
		if _, err := m.Reset(ctx, msg(key, "")); err != nil {
			t.Fatal(err)
		}
		handle(t, m, msg(key, "three"))
		if _, err := m.Conversations().ResumeConversation(ctx, msg(key, ""), second.ConversationID); !errors.Is(err, ErrNotPrevious) {
			t.Fatalf("resume of an older archive: %v, want ErrNotPrevious", err)
		}
		if _, err := m.Conversations().ResumeConversation(ctx, msg(key, ""), "no-such-conversation"); !errors.Is(err, ErrNotPrevious) {
			t.Fatalf("resume of an unknown conversation: %v, want ErrNotPrevious", err)
		}
		third := activeOf(t, db, key)
		if third == first.ConversationID || third == second.ConversationID {
			t.Fatalf("a refused resume changed the active conversation to %s", third)
		}
		if res, err := m.Conversations().ResumeConversation(ctx, msg(key, ""), first.ConversationID); err != nil || activeOf(t, db, key) != first.ConversationID {
			t.Fatalf("resume of the previous one = %+v, %v", res, err)
		}
	})
}
