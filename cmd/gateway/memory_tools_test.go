package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/sessions/storetest"
	"github.com/chatgate/chatgate/tools"
	"github.com/chatgate/chatgate/tools/mcpclient"
	"github.com/chatgate/chatgate/tools/memtools"
)

// memoryRig is a session manager with the gateway's memory tools, its
// agent the real openai backend against the scripted model server.
type memoryRig struct {
	m   *sessions.Manager
	llm *llmtest.Server
	db  *store.DB
}

func newMemoryRig(t *testing.T, db *store.DB, yaml string) *memoryRig {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), "bot.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	var mgr atomic.Pointer[sessions.Manager]
	ms, closeFn, err := memoryServer(func() memtools.Backend {
		if m := mgr.Load(); m != nil {
			return m.Memory()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeFn() })
	set := mcpclient.New(append(toolServers(cfg), ms), slog.New(slog.DiscardHandler))
	set.Start(context.Background())
	t.Cleanup(set.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := set.WaitListed(ctx, memtools.ServerName); err != nil {
		t.Fatal(err)
	}
	llm, backend := llmtest.Agent(t, false)
	m := sessions.New(db, backend, sessions.Options{Events: db.Events(), Policies: policies(cfg), Logger: slog.New(slog.DiscardHandler),
		Tools: mcpclient.Offer{Set: set, Servers: toolPolicy(cfg.Agent.Tools.Servers, cfg.Policies())}, MemoryTools: cfg.ServesMemoryTools(),
		Now: func() time.Time { return reminderNow }, RetryPause: 10 * time.Millisecond})
	mgr.Store(m)
	t.Cleanup(func() { shutdownWithin(t, m) })
	return &memoryRig{m: m, llm: llm, db: db}
}

// shutdownWithin shuts m down, bounded: a turn left waiting (an ask
// never decided) fails the test instead of holding the package until
// its timeout.
func shutdownWithin(t *testing.T, m *sessions.Manager) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	m.Shutdown(ctx)
}

// turn runs one turn of user whose model calls name with args once
// (none: name ""), then answers; it returns the reply.
func (r *memoryRig) turn(t *testing.T, channel, user, id, name, args string) string {
	t.Helper()
	if name == "" {
		r.llm.Script(func(llmtest.Request) llmtest.Answer { return llmtest.Answer{Text: "ok"} })
	} else {
		r.llm.Script(llmtest.ToolThenAnswer(name, args))
	}
	key := sessions.WebSocketKey(user)
	if channel == "telegram" {
		key = "telegram:dm:" + user
	}
	tk, err := r.m.Submit(context.Background(), sessions.Inbound{Channel: channel, SessionKey: key, UserID: user, ClientMsgID: id, Text: "message " + id}, sessions.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := tk.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return out.Reply.Text
}

const memoryYAML = `
session:
  memory:
    enabled: true
    users:
      "websocket:bob": {enabled: false}
channels:
  telegram:
    session:
      memory: {enabled: false}
`

// The model keeps, recalls and forgets a user's notes through the
// gateway's own MCP server, over the real openai backend; a note kept in
// one conversation reaches the model in the next, after a reset, as a
// system message marked as memory before the user's message; nobody
// else's model reaches it.
func TestMemoryToolsThroughTheModel(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		r := newMemoryRig(t, open(), memoryYAML)
		ctx := context.Background()
		reply := r.turn(t, "websocket", "ann", "a1", "memory__remember", `{"text": "Ann keeps bees in Graz."}`)
		if !strings.HasPrefix(reply, "done: Noted (note ") {
			t.Fatalf("reply %q", reply)
		}
		offered := slices.Sorted(slices.Values(r.llm.Received()[0].Tools))
		if !slices.Equal(offered, []string{"memory__forget", "memory__recall", "memory__remember"}) {
			t.Fatalf("offered %v", offered)
		}
		notes, err := r.m.Memory().List(ctx, "websocket:ann")
		if err != nil || len(notes) != 1 {
			t.Fatalf("ann's notes %+v, %v", notes, err)
		}
		n := notes[0]
		if n.Author != ledger.NoteByModel || n.ConversationID == "" || n.MessageSeq != 1 || n.Text != "Ann keeps bees in Graz." {
			t.Fatalf("stored %+v", n)
		}
		var calls []ledger.ToolCall
		r.db.Gorm().Where("name = ?", "memory__remember").Find(&calls)
		if len(calls) != 1 || calls[0].State != ledger.ToolDone {
			t.Fatalf("tool calls %+v", calls)
		}

		// A new conversation: the note is there, as memory.
		if _, err := r.m.Reset(ctx, sessions.Inbound{Channel: "websocket", SessionKey: "websocket:ann", UserID: "ann"}); err != nil {
			t.Fatal(err)
		}
		r.turn(t, "websocket", "ann", "a2", "", "")
		req := r.llm.Received()[len(r.llm.Received())-1]
		var sys []string
		for _, m := range req.Messages {
			if m.Role == "system" {
				sys = append(sys, m.Text())
			}
		}
		last := req.Messages[len(req.Messages)-2]
		if last.Role != "system" || !strings.HasPrefix(last.Text(), sessions.MemoryIntro) || !strings.Contains(last.Text(), "Ann keeps bees in Graz.") ||
			req.Last().Role != "user" || strings.Contains(req.Last().Text(), "bees") {
			t.Fatalf("the request after the reset: system %q, last %q", sys, req.Last().Text())
		}
		reply = r.turn(t, "websocket", "ann", "a3", "memory__recall", `{"query": "bees"}`)
		if !strings.Contains(reply, "Ann keeps bees in Graz.") || !strings.Contains(reply, "by model") {
			t.Fatalf("recall: %q", reply)
		}

		// Eve's model goes after Ann's notes: by id, by naming Ann in the
		// arguments, by writing the gateway's _meta keys into them.
		attacks := []struct{ name, args, refusal string }{
			{"memory__forget", `{"id": ` + jsonInt(n.ID) + `}`, "not one of the notes kept"},
			{"memory__recall", `{}`, "No note found."},
			{"memory__recall", `{"query": "bees"}`, "No note found."},
			{"memory__recall", `{"user": "websocket:ann"}`, "unexpected additional properties"},
			{"memory__recall", `{"_meta": {"` + tools.MetaSessionKey + `": "websocket:ann", "` + tools.MetaChannel + `": "websocket"}}`, ""},
			{"memory__remember", `{"text": "Ann is a spy.", "_meta": {"` + tools.MetaSessionKey + `": "websocket:ann"}}`, ""},
		}
		for i, a := range attacks {
			reply := r.turn(t, "websocket", "eve", "e"+jsonInt(int64(i)), a.name, a.args)
			if strings.Contains(reply, "bees") || strings.Contains(reply, "is forgotten") {
				t.Fatalf("%s %s reached Ann's notes: %q", a.name, a.args, reply)
			}
			if a.refusal != "" && !strings.Contains(reply, a.refusal) {
				t.Fatalf("%s %s: %q; want %q", a.name, a.args, reply, a.refusal)
			}
		}
		if got, _ := r.m.Memory().List(ctx, "websocket:ann"); len(got) != 1 || got[0].ID != n.ID {
			t.Fatalf("Ann's notes after Eve's attacks: %+v", got)
		}

		// Where memory is off — a channel, or one user — the tools are
		// not offered, and a model naming one anyway runs nothing.
		for _, c := range []struct{ channel, user string }{{"telegram", "7"}, {"websocket", "bob"}} {
			reply = r.turn(t, c.channel, c.user, "off-"+c.user, "memory__remember", `{"text": "x"}`)
			if reply != "done: "+sessions.ToolGoneText {
				t.Fatalf("%s %s without memory: %q", c.channel, c.user, reply)
			}
			if last := r.llm.Received()[len(r.llm.Received())-1]; slices.ContainsFunc(last.Tools, func(s string) bool { return strings.HasPrefix(s, "memory__") }) {
				t.Fatalf("%s %s was offered %v", c.channel, c.user, last.Tools)
			}
		}
		if got, _ := r.m.Memory().List(ctx, "websocket:bob"); len(got) != 0 {
			t.Fatalf("a note where memory is off: %+v", got)
		}

		reply = r.turn(t, "websocket", "ann", "a4", "memory__forget", `{"id": `+jsonInt(n.ID)+`}`)
		if !strings.Contains(reply, "is forgotten") {
			t.Fatalf("forget: %q", reply)
		}
		r.turn(t, "websocket", "ann", "a5", "", "")
		// (The conversation's own messages still say it: the forget
		// takes it from memory, not from the transcript.)
		for _, m := range r.llm.Received()[len(r.llm.Received())-1].Messages {
			if m.Role == "system" && strings.HasPrefix(m.Text(), sessions.MemoryIntro) {
				t.Fatalf("a forgotten note reached the next request's memory: %q", m.Text())
			}
		}
	})
}

// groupTurn runs one turn of member user in the group chat its members
// share, whose model calls name with args once, then answers.
func (r *memoryRig) groupTurn(t *testing.T, user, id, name, args string) string {
	t.Helper()
	r.llm.Script(llmtest.ToolThenAnswer(name, args))
	in := sessions.Inbound{Channel: "telegram", SessionKey: sessions.TelegramGroupKey(-100, 0, false), UserID: user, ChatID: "-100",
		ClientMsgID: id, Text: "message " + id}
	tk, err := r.m.Submit(context.Background(), in, sessions.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := tk.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return out.Reply.Text
}

// In a group chat its members share, a member's model keeps notes about
// that member only, and another member's model — told by its member to
// read, forget or overwrite them — reaches none of them.
func TestGroupMemberCannotReachAnothersNotesThroughTheModel(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		r := newMemoryRig(t, open(), "session:\n  memory: {enabled: true}\n")
		ctx := context.Background()
		chat := sessions.TelegramGroupKey(-100, 0, false)
		ann, eve := sessions.MemoryUser(chat, "1"), sessions.MemoryUser(chat, "2")
		if reply := r.groupTurn(t, "1", "g1", "memory__remember", `{"text": "Ann's locker code is 4711."}`); !strings.HasPrefix(reply, "done: Noted") {
			t.Fatalf("Ann's remember: %q", reply)
		}
		notes, _ := r.m.Memory().List(ctx, ann)
		if len(notes) != 1 {
			t.Fatalf("Ann's notes %+v", notes)
		}
		// Eve, in the same conversation (it holds Ann's message), asks her
		// model for Ann's notes, to forget them, to write about Ann.
		for i, a := range []struct{ name, args string }{
			{"memory__recall", `{"query": "locker code"}`},
			{"memory__recall", `{}`},
			{"memory__forget", `{"id": ` + jsonInt(notes[0].ID) + `}`},
			{"memory__remember", `{"text": "Ann's locker code is 0000."}`},
		} {
			reply := r.groupTurn(t, "2", "e"+jsonInt(int64(i)), a.name, a.args)
			if strings.Contains(reply, "4711") || strings.Contains(reply, "is forgotten") {
				t.Fatalf("Eve's %s %s reached Ann's notes: %q", a.name, a.args, reply)
			}
			// Eve's request never carries Ann's notes as memory.
			for _, m := range r.llm.Received()[len(r.llm.Received())-1].Messages {
				if m.Role == "system" && strings.HasPrefix(m.Text(), sessions.MemoryIntro) && strings.Contains(m.Text(), "4711") {
					t.Fatalf("Eve's turn carried Ann's note: %q", m.Text())
				}
			}
		}
		if got, _ := r.m.Memory().List(ctx, ann); len(got) != 1 || got[0].Text != "Ann's locker code is 4711." {
			t.Fatalf("Ann's notes after Eve's turns: %+v", got)
		}
		// What Eve's model wrote is Eve's own note, whatever it says.
		if got, _ := r.m.Memory().List(ctx, eve); len(got) != 1 || got[0].Author != ledger.NoteByModel {
			t.Fatalf("Eve's notes: %+v", got)
		}
	})
}

// With session.memory.approve: ask, each memory tool call of that user
// waits for their decision, as an MCP tool's with approve: ask: denied,
// nothing is kept; allowed, the note is. Others' calls run at once.
func TestMemoryToolsAskWhereTheUserSaysSo(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		r := newMemoryRig(t, open(), `
session:
  memory:
    enabled: true
    users:
      "websocket:cy": {approve: ask}
`)
		ctx := context.Background()
		var mu sync.Mutex
		allow := false
		var asked []string
		r.m.Routes().Register("websocket", sessions.Route{Ask: func(ctx context.Context, a sessions.ToolAsk) (string, error) {
			mu.Lock()
			asked = append(asked, a.SessionKey+" "+a.Call.Name)
			d := sessions.ToolDecision{SessionKey: a.SessionKey, UserID: a.UserID, ID: a.Call.ID, Allow: allow}
			mu.Unlock()
			go func() {
				// A decision storage refused would leave the turn waiting
				// out its approve timeout: the test says so instead.
				if _, err := r.m.Approvals().DecideTool(context.WithoutCancel(ctx), d); err != nil && !errors.Is(err, sessions.ErrToolDecided) {
					t.Errorf("deciding the ask of %s: %v", a.SessionKey, err)
				}
			}()
			return "", nil
		}})
		reply := r.turn(t, "websocket", "cy", "c1", "memory__remember", `{"text": "Cy keeps goats."}`)
		if got, _ := r.m.Memory().List(ctx, "websocket:cy"); len(got) != 0 || !strings.Contains(reply, "denied") {
			t.Fatalf("a denied remember: reply %q, notes %+v", reply, got)
		}
		mu.Lock()
		allow = true
		mu.Unlock()
		r.turn(t, "websocket", "cy", "c2", "memory__remember", `{"text": "Cy keeps goats."}`)
		if got, _ := r.m.Memory().List(ctx, "websocket:cy"); len(got) != 1 {
			t.Fatalf("an allowed remember: notes %+v", got)
		}
		r.turn(t, "websocket", "ann", "a1", "memory__remember", `{"text": "Ann keeps bees."}`)
		if got, _ := r.m.Memory().List(ctx, "websocket:ann"); len(got) != 1 {
			t.Fatalf("ann's remember: notes %+v", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"websocket:cy memory__remember", "websocket:cy memory__remember"}; !slices.Equal(asked, want) {
			t.Fatalf("asked %q, want %q", asked, want)
		}
	})
}
