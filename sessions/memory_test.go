package sessions

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

func memoryPolicies(reset ResetPolicy, mem MemorySettings) map[string]Policy {
	p := Policy{MaxHistory: 10, Reset: reset, Memory: MemoryPolicy{Default: mem}}
	return map[string]Policy{"websocket": p, "telegram": p}
}

// requestMemory is the memory a recorded request carried, as the model
// reads it.
func requestMemory(r *recorder) string { return r.last().MemoryText() }

// A note written in one conversation reaches the model in the next one,
// after an idle reset and after a daily reset, as memory — not as a
// message of the conversation.
func TestNotesOutliveResets(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		for _, reset := range []ResetPolicy{
			{Mode: ResetIdle, IdleFor: time.Hour},
			{Mode: ResetDaily, AtHour: 4, Location: time.UTC},
		} {
			t.Run(string(reset.Mode), func(t *testing.T) {
				db := open()
				c := newClock(t0)
				rec := &recorder{}
				m := newManager(t, db, rec, c, memoryPolicies(reset, MemorySettings{Enabled: true, InjectTokens: 400}))
				key := "websocket:ann-" + string(reset.Mode)
				first := handle(t, m, msg(key, "hello, I am Ann and I grow tomatoes"))
				if got := requestMemory(rec); got != "" {
					t.Fatalf("the first turn carried memory %q before any note", got)
				}
				if _, err := m.Memory().Remember(context.Background(), NoteRequest{Channel: "websocket", User: MemoryUser(key, ""),
					Text: "The user's name is Ann; she grows tomatoes.", Author: ledger.NoteByModel, ConversationID: first.ConversationID, MessageSeq: first.Reply.Seq - 1}); err != nil {
					t.Fatal(err)
				}
				c.Advance(25 * time.Hour)
				out := handle(t, m, msg(key, "what do I grow?"))
				if out.ConversationID == first.ConversationID {
					t.Fatal("no reset happened")
				}
				req := rec.last()
				if len(req.History) != 0 {
					t.Fatalf("the new conversation's history = %+v, want none", req.History)
				}
				mem := req.MemoryText()
				if !strings.HasPrefix(mem, MemoryIntro) || !strings.Contains(mem, "grows tomatoes") {
					t.Fatalf("memory = %q", mem)
				}
				if strings.Contains(req.Input, "tomatoes") {
					t.Fatalf("the note leaked into the user's input: %q", req.Input)
				}
			})
		}
	})
}

// Relevant notes come first and the request stays within inject_tokens;
// a note forgotten on one replica is gone from the next request on
// another.
func TestInjectionRelevanceBudgetAndForget(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		dbA, dbB := open(), open()
		c := newClock(t0)
		recA, recB := &recorder{}, &recorder{}
		pol := memoryPolicies(ResetPolicy{Mode: ResetNone}, MemorySettings{Enabled: true, InjectTokens: 100})
		a := newManager(t, dbA, recA, c, pol)
		b := newManager(t, dbB, recB, c, pol)
		key := "websocket:bo"
		user := MemoryUser(key, "bo")
		ctx := context.Background()
		var kept []ledger.Note
		for _, text := range []string{"Bo keeps bees in the garden.", "Bo's daughter is called Mia.", "Bo works night shifts at the hospital.",
			"Bo is allergic to penicillin.", "Bo plays the cello on Sundays."} {
			n, err := a.Memory().Remember(ctx, NoteRequest{Channel: "websocket", User: user, Text: text, Author: ledger.NoteByUser})
			if err != nil {
				t.Fatal(err)
			}
			kept = append(kept, n)
			c.Advance(time.Minute)
		}
		handle(t, b, msg(key, "which medicine must I avoid? penicillin?"))
		req := recB.last()
		if len(req.Memory) == 0 || !strings.Contains(req.Memory[0].Text, "penicillin") {
			t.Fatalf("memory = %+v, want the penicillin note first", req.Memory)
		}
		if len(req.Memory) >= len(kept) {
			t.Fatalf("all %d notes were put in past inject_tokens: %+v", len(kept), req.Memory)
		}
		if n := agent.EstimateTokens(len(MemoryIntro)) + sumTokens(req.Memory); n > 100 {
			t.Fatalf("the memory takes %d estimated tokens, over inject_tokens 100", n)
		}
		// Forgotten on A: B's next request goes without it.
		if err := a.Memory().Forget(ctx, user, req.Memory[0].ID); err != nil {
			t.Fatal(err)
		}
		handle(t, b, msg(key, "penicillin again?"))
		if mem := recB.last().MemoryText(); strings.Contains(mem, "penicillin") || mem == "" {
			t.Fatalf("after forget, memory = %q", mem)
		}
		// Forget of a forgotten note, or of another user's, says so.
		if err := b.Memory().Forget(ctx, user, req.Memory[0].ID); !errors.Is(err, ErrNoSuchNote) {
			t.Fatalf("forget again = %v", err)
		}
		if err := b.Memory().Forget(ctx, "websocket:eve", kept[0].ID); !errors.Is(err, ErrNoSuchNote) {
			t.Fatalf("another user's forget = %v", err)
		}
		if n, err := b.Memory().ForgetAll(ctx, user); err != nil || n != int64(len(kept)-1) {
			t.Fatalf("forget all = %d, %v", n, err)
		}
		handle(t, a, msg(key, "anything left?"))
		if mem := recA.last().MemoryText(); mem != "" {
			t.Fatalf("after forget all, memory = %q", mem)
		}
	})
}

func sumTokens(ns []agent.Note) int {
	n := 0
	for _, x := range ns {
		n += agent.EstimateTokens(len(x.Text))
	}
	return n
}

// In a group chat its members share, a note is its writer's: injected
// only into the turns of that member, and no member can write or forget
// another's.
func TestGroupMembersKeepTheirOwnNotes(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		rec := &recorder{}
		m := newManager(t, db, rec, c, memoryPolicies(ResetPolicy{Mode: ResetNone}, MemorySettings{Enabled: true, InjectTokens: 400}))
		chat := TelegramGroupKey(-100, 0, false) // group_scope: chat
		ann, eve := MemoryUser(chat, "1"), MemoryUser(chat, "2")
		if ann == eve || ann == "" || MemoryUser(chat, "") != "" {
			t.Fatalf("members' memory users: %q, %q; unknown sender: %q", ann, eve, MemoryUser(chat, ""))
		}
		if got := MemoryUser(TelegramTopicKey(TelegramDMKey(7), 3), "7"); got != TelegramDMKey(7) {
			t.Fatalf("a topic's memory user = %q", got)
		}
		ctx := context.Background()
		note, err := m.Memory().Remember(ctx, NoteRequest{Channel: "telegram", User: ann, Text: "Ann's password hint is blue.", Author: ledger.NoteByModel})
		if err != nil {
			t.Fatal(err)
		}
		in := func(user, text string) Inbound {
			return Inbound{Channel: "telegram", SessionKey: chat, UserID: user, ChatID: "-100", Text: text}
		}
		handle(t, m, in("2", "what is Ann's password hint?"))
		if mem := rec.last().MemoryText(); mem != "" {
			t.Fatalf("Eve's turn carried %q", mem)
		}
		handle(t, m, in("1", "what is my password hint?"))
		if mem := rec.last().MemoryText(); !strings.Contains(mem, "blue") {
			t.Fatalf("Ann's turn carried %q", mem)
		}
		if err := m.Memory().Forget(ctx, eve, note.ID); !errors.Is(err, ErrNoSuchNote) {
			t.Fatalf("Eve forgetting Ann's note = %v", err)
		}
		if list, _ := m.Memory().List(ctx, eve); len(list) != 0 {
			t.Fatalf("Eve lists %+v", list)
		}
	})
}

// Memory off: nothing is written but by the operator, nothing injected;
// what was kept stays listable and forgettable. Bad notes are refused
// with the reason, and max_notes holds.
func TestMemoryRefusals(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		pol := memoryPolicies(ResetPolicy{Mode: ResetNone}, MemorySettings{Enabled: false, InjectTokens: 400})
		p := pol["websocket"]
		p.Memory.Users = map[string]MemorySettings{"websocket:on": {Enabled: true, InjectTokens: 400, MaxNotes: 2}}
		pol["websocket"] = p
		rec := &recorder{}
		m := newManager(t, db, rec, c, pol)
		ctx := context.Background()
		if _, err := m.Memory().Remember(ctx, NoteRequest{Channel: "websocket", User: "websocket:off", Text: "x", Author: ledger.NoteByUser}); !errors.Is(err, ErrMemoryOff) {
			t.Fatalf("remember where memory is off = %v", err)
		}
		if _, err := m.Memory().Remember(ctx, NoteRequest{Channel: "websocket", User: "websocket:off", Text: "kept by the operator", Author: ledger.NoteByOperator}); err != nil {
			t.Fatalf("the operator's note = %v", err)
		}
		handle(t, m, msg("websocket:off", "kept by the operator?"))
		if mem := rec.last().MemoryText(); mem != "" {
			t.Fatalf("memory off, the request carried %q", mem)
		}
		if list, err := m.Memory().List(ctx, "websocket:off"); err != nil || len(list) != 1 {
			t.Fatalf("list where memory is off = %+v, %v", list, err)
		}
		for _, bad := range []string{"", "  \n ", "a\x00b", "\xff\xfe", strings.Repeat("x", MaxNoteText+1)} {
			if _, err := m.Memory().Remember(ctx, NoteRequest{Channel: "websocket", User: "websocket:on", Text: bad, Author: ledger.NoteByUser}); !errors.Is(err, ErrBadNote) {
				t.Fatalf("remember %q = %v", bad, err)
			}
		}
		n, err := m.Memory().Remember(ctx, NoteRequest{Channel: "websocket", User: "websocket:on", Text: "line one\nline two", Author: ledger.NoteByUser, CallKey: "k1"})
		if err != nil || n.Text != "line one line two" {
			t.Fatalf("a note of two lines = %+v, %v", n, err)
		}
		again, err := m.Memory().Remember(ctx, NoteRequest{Channel: "websocket", User: "websocket:on", Text: "line one\nline two", Author: ledger.NoteByUser, CallKey: "k1"})
		if err != nil || again.ID != n.ID {
			t.Fatalf("the same call key again = %+v, %v; want note %d", again, err, n.ID)
		}
		if _, err := m.Memory().Remember(ctx, NoteRequest{Channel: "websocket", User: "websocket:on", Text: "two", Author: ledger.NoteByUser}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Memory().Remember(ctx, NoteRequest{Channel: "websocket", User: "websocket:on", Text: "three", Author: ledger.NoteByUser}); !errors.Is(err, ErrTooManyNotes) {
			t.Fatalf("past max_notes = %v", err)
		}
	})
}

// In a group chat its members share, a turn that answers several
// members' messages at once (collect mode merges them) reads and writes
// no member's notes: its request carries none, so that Ann's notes never
// reach a turn that answers Bob.
func TestMergedMembersTurnCarriesNoNotes(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		rec := &recorder{}
		pol := memoryPolicies(ResetPolicy{Mode: ResetNone}, MemorySettings{Enabled: true, InjectTokens: 400})
		p := pol["telegram"]
		p.Busy = BusyPolicy{Mode: BusyCollect, Debounce: 200 * time.Millisecond}
		pol["telegram"] = p
		m := newManager(t, db, rec, c, pol)
		chat := TelegramGroupKey(-100, 0, false)
		ctx := context.Background()
		if _, err := m.Memory().Remember(ctx, NoteRequest{Channel: "telegram", User: MemoryUser(chat, "1"), Text: "Ann's locker code is 4711.", Author: ledger.NoteByUser}); err != nil {
			t.Fatal(err)
		}
		in := func(user, id, text string) Inbound {
			return Inbound{Channel: "telegram", SessionKey: chat, UserID: user, ChatID: "-100", ClientMsgID: id, Text: text}
		}
		// Ann, then Bob within the debounce: one turn answers both.
		var tickets []*Ticket
		for _, x := range []Inbound{in("1", "a1", "my locker code?"), in("2", "b1", "what is Ann's locker code?")} {
			tk, err := m.Submit(ctx, x, Hooks{})
			if err != nil {
				t.Fatal(err)
			}
			tickets = append(tickets, tk)
		}
		for _, tk := range tickets {
			if _, err := tk.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		req := rec.last()
		if len(req.Inputs()) != 2 {
			t.Fatalf("the turn answered %q: want both messages merged", req.Inputs())
		}
		if mem := req.MemoryText(); mem != "" {
			t.Fatalf("a turn answering Ann and Bob carried %q", mem)
		}
		// Ann alone: her notes again.
		handle(t, m, in("1", "a2", "my locker code?"))
		if mem := rec.last().MemoryText(); !strings.Contains(mem, "4711") {
			t.Fatalf("Ann's own turn carried %q", mem)
		}
	})
}
