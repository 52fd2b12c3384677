package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
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
	"github.com/chatgate/chatgate/tools/remindtools"
)

// reminderRig is a session manager with the gateway's reminder tools,
// its agent the real openai backend against the scripted model server.
type reminderRig struct {
	m   *sessions.Manager
	llm *llmtest.Server
	db  *store.DB
	set *mcpclient.Set
}

var reminderNow = time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)

func newReminderRig(t *testing.T, db *store.DB, yaml string) *reminderRig {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), "bot.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	var mgr atomic.Pointer[sessions.Manager]
	rs, closeFn, err := reminderServer(func() remindtools.Backend {
		if m := mgr.Load(); m != nil {
			return m.Reminders()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeFn() })
	set := mcpclient.New(append(toolServers(cfg), rs), slog.New(slog.DiscardHandler))
	set.Start(context.Background())
	t.Cleanup(set.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := set.WaitListed(ctx, remindtools.ServerName); err != nil {
		t.Fatal(err)
	}
	llm, backend := llmtest.Agent(t, false)
	m := sessions.New(db, backend, sessions.Options{Events: db.Events(), Policies: policies(cfg), Logger: slog.New(slog.DiscardHandler),
		Tools: mcpclient.Offer{Set: set, Servers: toolPolicy(cfg.Agent.Tools.Servers, cfg.Policies())},
		Now:   func() time.Time { return reminderNow }, RetryPause: 10 * time.Millisecond})
	mgr.Store(m)
	t.Cleanup(func() { shutdownWithin(t, m) })
	return &reminderRig{m: m, llm: llm, db: db, set: set}
}

// turn runs one turn of user on channel whose model calls name with args
// once, then answers with the call's result; it returns the reply.
func (r *reminderRig) turn(t *testing.T, channel, user, id, name, args string) string {
	t.Helper()
	r.llm.Script(llmtest.ToolThenAnswer(name, args))
	key := sessions.WebSocketKey(user)
	if channel == "telegram" {
		key = "telegram:dm:" + user
	}
	tk, err := r.m.Submit(context.Background(), sessions.Inbound{Channel: channel, SessionKey: key, UserID: user, ClientMsgID: id, Text: "please"}, sessions.Hooks{})
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

const reminderYAML = `
session:
  schedules: {enabled: true, max_per_user: 3, min_interval: 1h}
channels:
  telegram:
    session:
      schedules: {enabled: false}
`

// The model makes, lists and cancels a user's reminders through the
// gateway's own MCP server, over the real openai backend: the calls are
// offered where session.schedules allows, run at once, kept in the tool
// ledger, and act for the turn's session only.
func TestReminderToolsThroughTheModel(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		r := newReminderRig(t, open(), reminderYAML)
		ctx := context.Background()
		reply := r.turn(t, "websocket", "ann", "a1", "reminders__create",
			`{"text": "Remind Ann to call Bob", "at": "2026-03-29T18:00:00+02:00", "timezone": "Europe/Berlin"}`)
		if !strings.HasPrefix(reply, "done: Reminder ") || !strings.Contains(reply, "Sun 29 Mar 2026 18:00 CEST (Europe/Berlin)") {
			t.Fatalf("reply %q", reply)
		}
		offered := slices.Sorted(slices.Values(r.llm.Received()[0].Tools))
		if !slices.Equal(offered, []string{"reminders__cancel", "reminders__create", "reminders__list"}) {
			t.Fatalf("offered %v", offered)
		}
		ann, err := r.m.Reminders().List(ctx, "websocket:ann")
		if err != nil || len(ann) != 1 {
			t.Fatalf("ann's reminders %+v, %v", ann, err)
		}
		if got := ann[0]; got.Channel != "websocket" || got.Timezone != "Europe/Berlin" || got.Text != "Remind Ann to call Bob" ||
			!got.NextDueAt.Equal(time.Date(2026, 3, 29, 16, 0, 0, 0, time.UTC)) || got.CallKey == "" {
			t.Fatalf("stored %+v", got)
		}
		var calls []ledger.ToolCall
		r.db.Gorm().Where("name = ?", "reminders__create").Find(&calls)
		if len(calls) != 1 || calls[0].State != ledger.ToolDone || calls[0].IdempotencyKey() != ann[0].CallKey {
			t.Fatalf("tool calls %+v", calls)
		}

		reply = r.turn(t, "websocket", "ann", "a2", "reminders__create", `{"text": "water", "every": "10m"}`)
		if !strings.Contains(reply, "more often than allowed") {
			t.Fatalf("an interval under min_interval: %q", reply)
		}
		reply = r.turn(t, "websocket", "ann", "a3", "reminders__create", `{"text": "old", "at": "2026-03-01T10:00:00Z"}`)
		if !strings.Contains(reply, "not in the future") {
			t.Fatalf("a time in the past: %q", reply)
		}
		reply = r.turn(t, "websocket", "ann", "a4", "reminders__list", `{}`)
		if !strings.Contains(reply, "Remind Ann to call Bob") {
			t.Fatalf("list: %q", reply)
		}

		// Eve's model (a prompt injection, say) goes after Ann's
		// reminders: by id, by naming Ann's session in the arguments, and
		// by writing the gateway's _meta keys into them. The arguments'
		// schema refuses what it does not name, and the server reads its
		// caller from the request's own _meta, which only the gateway's
		// client writes.
		id := ann[0].ID
		attacks := []struct{ name, args, refusal string }{
			{"reminders__cancel", `{"id": ` + jsonInt(id) + `}`, "not one of your reminders"},
			{"reminders__list", `{}`, "The user has no reminders."},
			{"reminders__list", `{"session_key": "websocket:ann"}`, "unexpected additional properties"},
			{"reminders__list", `{"_meta": {"` + tools.MetaSessionKey + `": "websocket:ann", "` + tools.MetaChannel + `": "websocket"}}`, ""},
			{"reminders__cancel", `{"id": ` + jsonInt(id) + `, "_meta": {"` + tools.MetaSessionKey + `": "websocket:ann"}}`, ""},
			{"reminders__create", `{"text": "spam", "every": "2h", "_meta": {"` + tools.MetaSessionKey + `": "websocket:ann"}}`, ""},
		}
		for i, a := range attacks {
			reply := r.turn(t, "websocket", "eve", "e"+jsonInt(int64(i)), a.name, a.args)
			if strings.Contains(reply, "Remind Ann") || strings.Contains(reply, "is cancelled") {
				t.Fatalf("%s %s reached Ann's reminders: %q", a.name, a.args, reply)
			}
			if a.refusal != "" && !strings.Contains(reply, a.refusal) {
				t.Fatalf("%s %s: %q; want %q", a.name, a.args, reply, a.refusal)
			}
		}
		if got, _ := r.m.Reminders().List(ctx, "websocket:ann"); len(got) != 1 || got[0].ID != id {
			t.Fatalf("Ann's reminders after Eve's attacks: %+v", got)
		}
		if got, _ := r.m.Reminders().List(ctx, "websocket:eve"); len(got) != 0 {
			t.Fatalf("Eve's attacks made reminders: %+v", got)
		}

		// Where session.schedules is off the tools are not offered, and a
		// model naming one anyway runs nothing.
		reply = r.turn(t, "telegram", "7", "t1", "reminders__create", `{"text": "x", "at": "2026-03-29T18:00:00Z"}`)
		if reply != "done: "+sessions.ToolGoneText {
			t.Fatalf("telegram without reminders: %q", reply)
		}
		if last := r.llm.Received()[len(r.llm.Received())-1]; len(last.Tools) != 0 {
			t.Fatalf("telegram was offered %d tools", len(last.Tools))
		}
		if got, _ := r.m.Reminders().List(ctx, "telegram:dm:7"); len(got) != 0 {
			t.Fatalf("a reminder on a channel without them: %+v", got)
		}

		reply = r.turn(t, "websocket", "ann", "a5", "reminders__cancel", `{"id": `+jsonInt(id)+`}`)
		if !strings.Contains(reply, "is cancelled") {
			t.Fatalf("cancel: %q", reply)
		}
		if got, _ := r.m.Reminders().List(ctx, "websocket:ann"); len(got) != 0 {
			t.Fatalf("after cancel: %+v", got)
		}
	})
}

// A create run again with the same idempotency key — the tool ledger
// runs an idempotent call again when a crash cut it — makes one reminder,
// and the tools are offered as idempotent and run without asking.
func TestReminderCreateRunAgainMakesOne(t *testing.T) {
	r := newReminderRig(t, storetest.Open(t, store.DriverSQLite, t.TempDir()+"/g.db", store.OpenOptions{}), reminderYAML)
	rule, ok := r.set.Rule("reminders__create")
	if !ok || !rule.Idempotent || rule.Approve != tools.ApproveAuto {
		t.Fatalf("rule %+v, %t", rule, ok)
	}
	ctx := tools.WithCaller(context.Background(), tools.Caller{SessionKey: "websocket:ann", Channel: "websocket", UserID: "ann"})
	args := `{"text": "stretch", "cron": "0 9 * * 1-5", "timezone": "America/New_York"}`
	var texts []string
	for range 3 {
		res, err := r.set.Call(ctx, "reminders__create", args, "conv-1/4/call_9")
		if err != nil || res.IsError {
			t.Fatalf("%+v, %v", res, err)
		}
		texts = append(texts, res.Text)
	}
	if texts[0] != texts[1] || texts[1] != texts[2] {
		t.Fatalf("results differ: %q", texts)
	}
	if got, _ := r.m.Reminders().List(ctx, "websocket:ann"); len(got) != 1 {
		t.Fatalf("a call run 3 times made %d reminders", len(got))
	}
	// A fire's turn (nobody asking) may list reminders, not set them:
	// one could set the next, each a model call nobody reads.
	fire := tools.WithCaller(context.Background(), tools.Caller{SessionKey: "websocket:ann", Channel: "websocket", UserID: "ann", Scheduled: true})
	res, err := r.set.Call(fire, "reminders__create", `{"text": "again", "every": "1h"}`, "conv-1/9/call_1")
	if err != nil || !res.IsError || !strings.Contains(res.Text, "scheduled turn") {
		t.Fatalf("a fire's turn set a reminder: %+v, %v", res, err)
	}
	if res, err := r.set.Call(fire, "reminders__list", `{}`, "conv-1/9/call_2"); err != nil || res.IsError {
		t.Fatalf("a fire's turn could not list: %+v, %v", res, err)
	}
	if got, _ := r.m.Reminders().List(ctx, "websocket:ann"); len(got) != 1 {
		t.Fatalf("%d reminders after a fire's turn tried to set one", len(got))
	}
	// A call without the gateway's caller (no turn) acts for nobody.
	res, err = r.set.Call(context.Background(), "reminders__list", `{}`, "k")
	if err != nil || !res.IsError || !strings.Contains(res.Text, "chat turn") {
		t.Fatalf("a call without a caller: %+v, %v", res, err)
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// A reload that turns session.schedules.enabled on or off offers or
// withdraws the reminder tools from the next turn, per channel.
func TestReminderToolsFollowReload(t *testing.T) {
	parse := func(yaml string) *config.Config {
		cfg, err := config.Parse([]byte(yaml), "bot.yaml", func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	lt := newLiveTools(parse("session: {}\n"))
	if got := lt.offered("websocket", "ann"); slices.Contains(got, remindtools.ServerName) {
		t.Fatalf("offered %v with session.schedules off", got)
	}
	lt.follow(parse(reminderYAML))
	if got := lt.offered("websocket", "ann"); !slices.Contains(got, remindtools.ServerName) {
		t.Fatalf("offered %v after a reload turned session.schedules on", got)
	}
	if got := lt.offered("telegram", "7"); slices.Contains(got, remindtools.ServerName) {
		t.Fatalf("telegram offered %v though its session.schedules is off", got)
	}
	if remindtools.ServerName != config.ReminderToolServer {
		t.Fatalf("the reminder tools are served as %q, and config reserves %q", remindtools.ServerName, config.ReminderToolServer)
	}
	_, err := config.Parse([]byte("agent:\n  tools:\n    servers:\n      - {name: reminders, url: http://127.0.0.1:9/mcp}\n"), "bot.yaml",
		func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), "bot.yaml:4: agent.tools.servers[0].name") {
		t.Fatalf("a configured server named reminders: %v", err)
	}
}
