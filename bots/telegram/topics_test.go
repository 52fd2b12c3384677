package telegram

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
)

const forum = -100777 // a forum supergroup

// sentTo returns what the bot sent in answer to message id, failing the
// test unless exactly one message (or the first part of one) answers it.
func sentTo(t *testing.T, sent []telegramtest.Sent, id int) telegramtest.Sent {
	t.Helper()
	var out []telegramtest.Sent
	for _, s := range sent {
		if s.ReplyTo == id {
			out = append(out, s)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d messages answer message %d, want 1: %+v", len(out), id, sent)
	}
	return out[0]
}

// TestForumTopicsAreConversations: in a forum supergroup each topic is a
// conversation of its own, with group_scope applied inside it, and every
// reply goes to the topic of the message it answers; the General topic is
// the chat's own conversation, as before topics.
func TestForumTopicsAreConversations(t *testing.T) {
	for _, scope := range []string{"chat", "user"} {
		t.Run(scope, func(t *testing.T) {
			api := telegramtest.New(t)
			h := start(t, api, t.TempDir(), setup{opts: Options{GroupPolicy: "all", GroupScope: scope}})
			// Two topics and General at once: three turns, none merged.
			a12 := api.Push(telegramtest.Topic(forum, 7, 12, "a12"))
			a11 := api.Push(telegramtest.Topic(forum, 7, 11, "a11"))
			g := api.Push(telegramtest.ForumGeneral(forum, 7, "g"))
			sent := api.WaitSent(t, 3)
			for _, want := range []struct {
				id, thread int
				text       string
			}{{a12, 12, "echo: a12 (history: 0)"}, {a11, 11, "echo: a11 (history: 0)"}, {g, 0, "echo: g (history: 0)"}} {
				got := sentTo(t, sent, want.id)
				if got.Text != want.text || got.Thread != want.thread || got.ChatID != forum {
					t.Errorf("answer to %d = %+v, want %q in thread %d", want.id, got, want.text, want.thread)
				}
			}
			// Another member in topic 12: the topic's conversation with
			// group_scope chat, their own with user.
			b12 := api.Push(telegramtest.Topic(forum, 8, 12, "b12"))
			got := sentTo(t, api.WaitSent(t, 4), b12)
			history := map[string]int{"chat": 2, "user": 0}[scope]
			if want := fmt.Sprintf("echo: b12 (history: %d)", history); got.Text != want || got.Thread != 12 {
				t.Fatalf("second member in topic 12 = %+v, want %q in thread 12", got, want)
			}
			keys := map[string]string{
				"chat": "telegram:group:-100777:topic:12",
				"user": "telegram:group:-100777:7:topic:12",
			}
			if rows := transcript(t, h, keys[scope]); len(rows) < 2 || rows[0].Content != "a12" {
				t.Fatalf("conversation %s = %+v, want a12 and its answer first", keys[scope], rows)
			}
			general := sessions.TelegramGroupKey(forum, 7, scope == "user")
			if rows := transcript(t, h, general); len(rows) != 2 || rows[0].Content != "g" {
				t.Fatalf("the General topic's conversation %s = %+v", general, rows)
			}
		})
	}
}

// TestNewInOneTopicLeavesTheOthers: /new starts a new conversation in
// its topic only, and is answered there.
func TestNewInOneTopicLeavesTheOthers(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{opts: Options{GroupPolicy: "all"}})
	api.Push(telegramtest.Topic(forum, 7, 11, "x"))
	api.WaitSent(t, 1)
	api.Push(telegramtest.Topic(forum, 7, 12, "y"))
	api.WaitSent(t, 2)
	reset := api.Push(telegramtest.Topic(forum, 7, 12, "/new"))
	if got := sentTo(t, api.WaitSent(t, 3), reset); got.Text != resetText || got.Thread != 12 {
		t.Fatalf("/new answered %+v, want %q in thread 12", got, resetText)
	}
	x2 := api.Push(telegramtest.Topic(forum, 7, 11, "x2"))
	if got := sentTo(t, api.WaitSent(t, 4), x2); got.Text != "echo: x2 (history: 2)" || got.Thread != 11 {
		t.Fatalf("topic 11 after /new in topic 12: %+v", got)
	}
	y2 := api.Push(telegramtest.Topic(forum, 7, 12, "y2"))
	if got := sentTo(t, api.WaitSent(t, 5), y2); got.Text != "echo: y2 (history: 0)" || got.Thread != 12 {
		t.Fatalf("topic 12 after its /new: %+v", got)
	}
}

// TestPrivateChatTopics: a private chat with topics has a conversation
// per topic; drafts, typing and the reply go to the topic.
func TestPrivateChatTopics(t *testing.T) {
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), setup{})
	a := api.Push(telegramtest.PrivateTopic(7, 3, "a"))
	b := api.Push(telegramtest.PrivateTopic(7, 4, "b"))
	c := api.Push(telegramtest.DM(7, "c"))
	sent := api.WaitSent(t, 3)
	for _, want := range []struct{ id, thread int }{{a, 3}, {b, 4}, {c, 0}} {
		if got := sentTo(t, sent, want.id); got.Thread != want.thread || !strings.HasSuffix(got.Text, "(history: 0)") {
			t.Errorf("answer to %d = %+v, want a new conversation's in thread %d", want.id, got, want.thread)
		}
	}
	a2 := api.Push(telegramtest.PrivateTopic(7, 3, "a2"))
	if got := sentTo(t, api.WaitSent(t, 4), a2); got.Text != "echo: a2 (history: 2)" || got.Thread != 3 {
		t.Fatalf("topic 3 goes on: %+v", got)
	}
	if rows := transcript(t, h, "telegram:dm:7:topic:3"); len(rows) != 4 {
		t.Fatalf("topic 3's conversation has %d rows, want 4", len(rows))
	}
	drafts := api.Calls("sendMessageDraft")
	if len(drafts) == 0 {
		t.Fatal("no draft was shown")
	}
	for _, method := range []string{"sendMessageDraft", "sendChatAction"} {
		for _, c := range api.Calls(method) {
			if th := c.Params.Get("message_thread_id"); th != "3" && th != "4" && th != "" {
				t.Errorf("%s in thread %q", method, th)
			}
		}
	}
	threads := map[string]bool{}
	for _, c := range api.Calls("sendChatAction") {
		threads[c.Params.Get("message_thread_id")] = true
	}
	if !threads["3"] || !threads["4"] || !threads[""] {
		t.Errorf("typing shown in threads %v, want 3, 4 and the chat", threads)
	}
}

// TestTopicNoticesStayInTheTopic: the bot's own texts about a topic's
// message — a command's answer, a reset notice, the slow-down reply, and
// every part of a long reply — go to that topic.
func TestTopicNoticesStayInTheTopic(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	long := strings.Repeat("All of this is one long answer. ", 300) // two parts
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{now: clock, agent: topicAgent{long: long}, opts: Options{
		GroupPolicy: "all", Format: FormatPlain, RatePerSecond: 1.0 / 3600, RateBurst: 3, Now: clock,
	}, policies: map[string]sessions.Policy{
		Channel: {MaxHistory: 100, Reset: sessions.ResetPolicy{Mode: sessions.ResetIdle, IdleFor: 30 * time.Minute}},
	}})
	api.Push(telegramtest.Topic(forum, 7, 12, "hello"))
	api.WaitSent(t, 1)
	help := api.Push(telegramtest.Topic(forum, 7, 12, "/help"))
	if got := sentTo(t, api.WaitSent(t, 2), help); got.Text != helpText {
		t.Fatalf("/help answered %+v", got)
	}
	mu.Lock()
	now = now.Add(31 * time.Minute)
	mu.Unlock()
	api.Push(telegramtest.Topic(forum, 7, 12, "long please"))
	sent := api.WaitSent(t, 6) // the reset notice, then three parts
	if !strings.HasPrefix(sent[2].Text, "(A new conversation started") || sent[3].Text+sent[4].Text+sent[5].Text == "" {
		t.Fatalf("after the idle time: %q", texts(sent))
	}
	refused := api.Push(telegramtest.Topic(forum, 7, 12, "one more")) // the fourth of a burst of three
	sent = api.WaitSent(t, 7)
	if got := sentTo(t, sent, refused); got.Text != slowDownText {
		t.Fatalf("over the rate limit: %+v", got)
	}
	for _, s := range sent {
		if s.Thread != 12 {
			t.Errorf("%.40q went to thread %d, want 12", s.Text, s.Thread)
		}
	}
}

// topicAgent answers "long please" with long, anything else as Echo.
type topicAgent struct{ long string }

func (a topicAgent) Name() string  { return "topic" }
func (a topicAgent) Model() string { return "topic" }
func (a topicAgent) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	if req.Input == "long please" {
		return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, Content: a.long}}}, nil
	}
	return agent.Echo{}.Reply(ctx, req, onDelta)
}

// heldAgent answers like Echo once release is closed; started is told of
// each call.
type heldAgent struct {
	started chan string
	release chan struct{}
}

func (a heldAgent) Name() string  { return "held" }
func (a heldAgent) Model() string { return "held" }
func (a heldAgent) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	a.started <- req.Input
	select {
	case <-a.release:
	case <-ctx.Done():
		return agent.Reply{}, ctx.Err()
	}
	return agent.Echo{}.Reply(ctx, req, onDelta)
}

// TestClosedOrDeletedTopicGetsTheReplyInGeneral: a topic closed, or
// deleted, while its message is answered gets the reply in the General
// topic; the reply is not lost, and is marked delivered.
func TestClosedOrDeletedTopicGetsTheReplyInGeneral(t *testing.T) {
	for _, gone := range []string{"closed", "deleted"} {
		t.Run(gone, func(t *testing.T) {
			api := telegramtest.New(t)
			ag := heldAgent{started: make(chan string, 1), release: make(chan struct{})}
			deliveries := make(chan string, 4)
			h := start(t, api, t.TempDir(), setup{agent: ag, opts: Options{GroupPolicy: "all"}, sess: func(m *sessions.Manager) Sessions {
				return allDoors(deliveryNotes{Manager: m, ch: deliveries})
			}})
			id := api.Push(telegramtest.Topic(forum, 7, 12, "question"))
			<-ag.started
			if gone == "closed" {
				api.CloseTopic(forum, 12)
			} else {
				api.DeleteTopic(forum, 12)
			}
			close(ag.release)
			got := sentTo(t, api.WaitSent(t, 1), id)
			if got.Text != "echo: question (history: 0)" || got.Thread != 0 || got.ChatID != forum {
				t.Fatalf("reply for a %s topic = %+v, want it in General", gone, got)
			}
			select {
			case <-deliveries:
			case <-time.After(10 * time.Second):
				t.Fatal("no delivery recorded")
			}
			key := sessions.TelegramTopicKey(sessions.TelegramGroupKey(forum, 7, true), 12)
			if _, ref := stored(t, h, key); ref == "" {
				t.Fatalf("the reply's delivery names no message")
			}
		})
	}
}

// TestUpdateKeepsItsTopic: an update read from Telegram's JSON has its
// topic, and keeps it through the JSON a held update is stored as; a
// thread of replies in a group without topics is no topic.
func TestUpdateKeepsItsTopic(t *testing.T) {
	topic := telegramtest.Topic(forum, 7, 12, "hi")
	replies := telegramtest.Group(-5, 7, "hi")
	replies["message_thread_id"] = 40 // a thread of replies, not a topic
	for _, c := range []struct {
		message map[string]any
		thread  int
	}{{topic, 12}, {replies, 0}, {telegramtest.PrivateTopic(7, 3, "hi"), 3}, {telegramtest.DM(7, "hi"), 0}} {
		c.message["message_id"], c.message["date"] = 1, 1
		data, _ := json.Marshal(map[string]any{"update_id": 9, "message": c.message})
		var u update
		if err := json.Unmarshal(data, &u); err != nil {
			t.Fatal(err)
		}
		var held heldUpdate
		stored, _ := json.Marshal(heldUpdate{Update: u})
		if err := json.Unmarshal(stored, &held); err != nil {
			t.Fatal(err)
		}
		for _, got := range []update{u, held.Update} {
			if m := got.message(); got.UpdateID != 9 || m == nil || m.Text != "hi" || m.to() != (place{chat: m.Chat.ID, thread: c.thread}) {
				t.Errorf("update %s read as %+v, want thread %d", data, got.message(), c.thread)
			}
		}
	}
}

func TestPlaceRoundTrip(t *testing.T) {
	for _, p := range []place{{chat: 7}, {chat: -100777, thread: 12}} {
		if got, err := parsePlace(p.String()); err != nil || got != p {
			t.Errorf("parsePlace(%q) = %+v, %v", p.String(), got, err)
		}
	}
	for _, bad := range []string{"", "x", "7/", "7/0", "7/x"} {
		if _, err := parsePlace(bad); err == nil {
			t.Errorf("parsePlace(%q) succeeded", bad)
		}
	}
	for key, want := range map[string]place{
		"telegram:dm:7":             {chat: 7},
		"telegram:dm:7:topic:3":     {chat: 7, thread: 3},
		"telegram:group:-5:7":       {},
		"telegram:dm:7:topic:x":     {},
		"telegram:group:-5:topic:2": {},
	} {
		got, ok := privateChat(key)
		if ok != (want.chat != 0) || got != want {
			t.Errorf("privateChat(%q) = %+v, %v", key, got, ok)
		}
	}
}

// TestTopicRepliesStreamInTheTopic: the preview of a reply in a forum
// topic (a message edited as the text grows) and the drafts of a reply in
// a private chat's topic are shown in that topic, and the reply ends
// there.
func TestTopicRepliesStreamInTheTopic(t *testing.T) {
	for _, c := range []struct {
		name, mode string
		chat       int64
		message    map[string]any
		key        string
	}{
		{"forum edits", StreamAuto, forum, telegramtest.Topic(forum, 7, 12, "@"+telegramtest.BotName+" write"),
			sessions.TelegramTopicKey(sessions.TelegramGroupKey(forum, 7, true), 12)},
		{"private drafts", StreamDraft, 7, telegramtest.PrivateTopic(7, 12, "write"), "telegram:dm:7:topic:12"},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := telegramtest.New(t)
			api.ReopenTopic(c.chat, 12) // the topic exists (its update comes by webhook, not Push)
			ag := &streamAgent{chunks: chunks(16, 30), step: 250 * time.Millisecond, lockstep: true}
			s := startStreaming(t, api, t.TempDir(), c.mode, ag)
			s.post(t, 500, c.message)
			reply, _ := s.delivered(t, c.key)
			ag.check(t)
			sent := api.Messages()
			if len(sent) != 1 || sent[0].Thread != 12 || sent[0].Text != reply {
				t.Fatalf("sent %+v, want one message in thread 12 ending as the reply", sent)
			}
			previews := len(api.Calls("editMessageText"))
			if c.mode == StreamDraft {
				previews = len(api.Drafts())
			}
			if previews < 2 {
				t.Fatalf("%d previews of a 4 s reply", previews)
			}
			for _, d := range api.Drafts() {
				if d.Thread != 12 {
					t.Errorf("draft %.30q in thread %d", d.Text, d.Thread)
				}
			}
		})
	}
}

// TestCompactCommand: /compact sums the conversation up at once, after
// the replies before it; the next turn goes on from the summary and the
// last exchange. With compaction off it says so.
func TestCompactCommand(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{policies: map[string]sessions.Policy{
		Channel: {MaxHistory: 100, Busy: sessions.BusyPolicy{Mode: sessions.BusyQueue}, Compaction: sessions.CompactionPolicy{Enabled: true}},
	}})
	for i := 1; i <= 3; i++ {
		api.Push(telegramtest.DM(7, fmt.Sprintf("m%d", i)))
	}
	api.WaitSent(t, 3)
	c := api.Push(telegramtest.DM(7, "/compact"))
	if got := sentTo(t, api.WaitSent(t, 4), c); got.Text != fmt.Sprintf(compactedText, 4) {
		t.Fatalf("/compact answered %q", got.Text)
	}
	next := api.Push(telegramtest.DM(7, "go on"))
	if got := sentTo(t, api.WaitSent(t, 5), next); got.Text != "echo: go on (history: 3)" {
		t.Fatalf("after /compact: %q, want the summary and the last exchange as history", got.Text)
	}

	off := telegramtest.New(t)
	start(t, off, t.TempDir(), setup{})
	c = off.Push(telegramtest.DM(7, "/compact"))
	if got := sentTo(t, off.WaitSent(t, 1), c); got.Text != compactOffText {
		t.Fatalf("/compact with compaction off: %q", got.Text)
	}
}

// TestEditInATopic: an edit after the reply is answered in the topic of
// the edited message, in the topic's conversation.
func TestEditInATopic(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{opts: Options{GroupPolicy: "all"}})
	first := telegramtest.Topic(forum, 7, 12, "helo")
	id := api.Push(first)
	api.WaitSent(t, 1)
	api.PushEdit(first, 100, "hello")
	got := api.WaitSent(t, 2)[1]
	want := fmt.Sprintf("echo: %s (history: 2)", sessions.EditedText("helo", "hello"))
	if got.Text != want || got.Thread != 12 || got.ReplyTo != id {
		t.Fatalf("answer to the edit = %+v, want %q in thread 12 answering %d", got, want, id)
	}
}
