package telegram

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
)

// Telegram's default debounce: the bursts below arrive well within it.
const tgDebounce = 1500 * time.Millisecond

// busy is the Telegram policy with a busy mode.
func busy(p sessions.BusyPolicy) map[string]sessions.Policy {
	return map[string]sessions.Policy{Channel: {MaxHistory: 100, Busy: p}}
}

// calls is an echo agent that records the user messages of each call
// (agent.Request.Earlier, then Input) and the session key.
type calls struct {
	mu   sync.Mutex
	keys []string
	got  [][]string
}

func (c *calls) Name() string  { return "calls" }
func (c *calls) Model() string { return "echo" }
func (c *calls) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	c.mu.Lock()
	c.keys = append(c.keys, req.SessionKey)
	c.got = append(c.got, req.Inputs())
	c.mu.Unlock()
	return agent.Echo{}.Reply(ctx, req, onDelta)
}

// byKey returns each call's messages by session key, in call order.
func (c *calls) byKey() map[string][][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][][]string{}
	for i, k := range c.keys {
		out[k] = append(out[k], c.got[i])
	}
	return out
}

func (c *calls) count() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.got) }

// transcript is the stored conversation of key, oldest first.
func transcript(t *testing.T, h *harness, key string) []sessions.Message {
	t.Helper()
	ctx := context.Background()
	conv, err := h.db.ActiveConversation(ctx, key)
	if err != nil || conv == nil {
		t.Fatalf("conversation of %s: %v %v", key, conv, err)
	}
	rows, err := h.db.MessagesAfter(ctx, conv.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// checkBurst checks that rows begin with the burst's texts as user
// messages (their message ids msgs) and one reply to the last of them,
// delivered, followed by one more message and its reply.
func checkBurst(t *testing.T, h *harness, rows []sessions.Message, chat int64, texts []string, msgs []int) {
	t.Helper()
	if len(rows) != len(texts)+3 {
		t.Fatalf("stored %d rows, want %d user messages and one reply, then the next message and its reply: %+v", len(rows), len(texts), rows)
	}
	for i, text := range texts {
		r := rows[i]
		if r.Role != agent.RoleUser || r.Content != text || r.ClientMsgID == nil || *r.ClientMsgID != clientMsgID(chat, msgs[i]) {
			t.Fatalf("row %d = %+v, want the user message %q", i, r, text)
		}
	}
	reply := rows[len(texts)]
	if reply.Role != agent.RoleAssistant || reply.ReplyTo != rows[len(texts)-1].Seq || reply.Status != sessions.MsgOK {
		t.Fatalf("reply row = %+v, want an answer to seq %d", reply, rows[len(texts)-1].Seq)
	}
	turn, err := h.db.TurnAt(context.Background(), reply.ConversationID, reply.ReplyTo)
	if err != nil || turn == nil || turn.State != sessions.TurnDelivered || turn.DeliveryRef == "" {
		t.Fatalf("the burst's turn = %+v (%v), want delivered with the sent message's id", turn, err)
	}
}

// TestBurstIsOneTurn: four private messages within the debounce — in one
// getUpdates answer, or each in a poll of its own — are one agent call
// that sees all four, and one reply to the last of them. The user's next
// message is answered after it: nothing more came for the burst.
func TestBurstIsOneTurn(t *testing.T) {
	words := []string{"so", "about", "my", "order"}
	for _, tc := range []struct {
		name   string
		spread bool // each message in a poll of its own
	}{{"one poll", false}, {"several polls", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := telegramtest.New(t)
			ag := &calls{}
			s := setup{agent: ag, policies: busy(sessions.BusyPolicy{Debounce: tgDebounce})}
			var ids []int
			var h *harness
			if tc.spread {
				h = start(t, api, t.TempDir(), s)
				for _, w := range words {
					ids = append(ids, api.Push(telegramtest.DM(7, w)))
					api.WaitConfirmed(t, api.LastUpdateID()) // the next comes in another getUpdates answer
				}
			} else {
				for _, w := range words {
					ids = append(ids, api.Push(telegramtest.DM(7, w)))
				}
				h = start(t, api, t.TempDir(), s)
			}
			sent := api.WaitSent(t, 1)
			if want := (telegramtest.Sent{ChatID: 7, Text: "echo: so\nabout\nmy\norder (history: 0)", ReplyTo: ids[3]}); sent[0] != want {
				t.Fatalf("sent %+v, want %+v", sent[0], want)
			}
			after := api.Push(telegramtest.DM(7, "thanks"))
			sent = api.WaitSent(t, 2)
			if want := (telegramtest.Sent{ChatID: 7, Text: "echo: thanks (history: 5)", ReplyTo: after}); len(sent) != 2 || sent[1] != want {
				t.Fatalf("sent %+v, want the burst's reply, then %+v", sent, want)
			}
			if got := ag.byKey()[sessions.TelegramDMKey(7)]; len(got) != 2 || !slices.Equal(got[0], words) {
				t.Fatalf("agent calls %q, want one with the four messages, then the next", got)
			}
			checkBurst(t, h, transcript(t, h, sessions.TelegramDMKey(7)), 7, words, ids)
			if n := len(api.Calls("sendMessage")); n != 2 {
				t.Fatalf("%d sendMessage calls, want 2", n)
			}
		})
	}
}

// TestGroupBurstsPerUser: with group_scope user each member of a group
// has a conversation of their own, so two members' interleaved bursts are
// two turns: one reply each, to that member's last message.
func TestGroupBurstsPerUser(t *testing.T) {
	const chat = -1001
	api := telegramtest.New(t)
	ag := &calls{}
	msgs := map[int64][]int{}
	words := map[int64][]string{7: {"a1", "a2", "a3", "a4"}, 8: {"b1", "b2", "b3", "b4"}}
	for i := range 4 {
		for _, user := range []int64{7, 8} {
			msgs[user] = append(msgs[user], api.Push(telegramtest.Group(chat, user, words[user][i])))
		}
	}
	h := start(t, api, t.TempDir(), setup{agent: ag, opts: Options{GroupPolicy: "all", GroupScope: "user"},
		policies: busy(sessions.BusyPolicy{Debounce: tgDebounce})})
	api.WaitSent(t, 2)
	// Each member's next message is answered after their burst.
	next := map[int64]int{7: api.Push(telegramtest.Group(chat, 7, "a5")), 8: api.Push(telegramtest.Group(chat, 8, "b5"))}
	sent := api.WaitSent(t, 4)
	answers := answersByMessage(sent)
	byKey := ag.byKey()
	for _, user := range []int64{7, 8} {
		w := words[user]
		want := fmt.Sprintf("echo: %s (history: 0)", strings.Join(w, "\n"))
		if got := answers[msgs[user][3]]; len(got) != 1 || got[0] != want {
			t.Errorf("member %d's last message answered %q, want [%q]", user, got, want)
		}
		for _, id := range msgs[user][:3] {
			if got := answers[id]; len(got) != 0 {
				t.Errorf("member %d's message %d answered on its own: %q", user, id, got)
			}
		}
		if got := answers[next[user]]; len(got) != 1 {
			t.Errorf("member %d's next message answered %q", user, got)
		}
		key := sessions.TelegramGroupKey(chat, user, true)
		if got := byKey[key]; len(got) != 2 || !slices.Equal(got[0], w) {
			t.Errorf("agent calls for %s: %q, want the burst in one, then the next message", key, got)
		}
		checkBurst(t, h, transcript(t, h, key), chat, w, msgs[user])
	}
	for _, m := range sent {
		if m.ChatID != chat {
			t.Fatalf("a reply went to chat %d: %+v", m.ChatID, m)
		}
	}
	if len(sent) != 4 || ag.count() != 4 {
		t.Fatalf("%d messages sent and %d agent calls, want 4 and 4: %q", len(sent), ag.count(), texts(sent))
	}
}

// TestQueueAnswersEachMessage: in busy mode queue without a debounce each
// message is its own turn, answered in order.
func TestQueueAnswersEachMessage(t *testing.T) {
	api := telegramtest.New(t)
	ag := &calls{}
	var ids []int
	for i := range 4 {
		ids = append(ids, api.Push(telegramtest.DM(7, fmt.Sprintf("m%d", i+1))))
	}
	start(t, api, t.TempDir(), setup{agent: ag, policies: busy(sessions.BusyPolicy{Mode: sessions.BusyQueue})})
	api.WaitSent(t, 4)
	ids = append(ids, api.Push(telegramtest.DM(7, "m5")))
	sent := api.WaitSent(t, 5)
	if len(sent) != 5 {
		t.Fatalf("sent %q, want five replies", texts(sent))
	}
	for i, m := range sent {
		want := telegramtest.Sent{ChatID: 7, Text: fmt.Sprintf("echo: m%d (history: %d)", i+1, 2*i), ReplyTo: ids[i]}
		if m != want {
			t.Errorf("reply %d = %+v, want %+v", i+1, m, want)
		}
	}
	if got := ag.byKey()[sessions.TelegramDMKey(7)]; len(got) != 5 || len(got[0]) != 1 {
		t.Fatalf("agent calls %q, want one per message", got)
	}
}

// TestRepeatedUpdateOfABurstSendsNothing: Telegram repeats a webhook
// delivery whose answer it did not get. After the burst is answered and
// the gateway restarted (its memory of taken updates is gone), repeats of
// a merged message and of the burst's last one are recognised by the
// ledger and send nothing; the user's next message is answered once.
func TestRepeatedUpdateOfABurstSendsNothing(t *testing.T) {
	api := telegramtest.New(t)
	dir := t.TempDir()
	opts := Options{Mode: "webhook", WebhookURL: "https://bot.example.com/hook", WebhookSecret: "s"}
	ag := &calls{}
	policies := busy(sessions.BusyPolicy{Debounce: tgDebounce})
	post := func(h *harness, update, message int, text string) {
		t.Helper()
		srv := httptest.NewServer(h.bot.WebhookHandler())
		defer srv.Close()
		body := fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"date":1,"from":{"id":7,"is_bot":false,"first_name":"U"},"chat":{"id":7,"type":"private"},"text":%q}}`,
			update, message, text)
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", "s")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("update %d answered %d", update, resp.StatusCode)
		}
	}
	h := start(t, api, dir, setup{opts: opts, agent: ag, policies: policies})
	<-h.done
	words := []string{"one", "two", "three", "four"}
	for i, w := range words {
		post(h, 10+i, 100+i, w)
	}
	if sent := api.WaitSent(t, 1); sent[0].ReplyTo != 103 || sent[0].Text != "echo: one\ntwo\nthree\nfour (history: 0)" {
		t.Fatalf("burst reply = %+v", sent[0])
	}
	post(h, 11, 101, "two") // a repeat this process remembers
	h.shutdown(time.Second)

	h2 := start(t, api, dir, setup{opts: opts, agent: ag, policies: policies})
	<-h2.done
	post(h2, 11, 101, "two")  // merged into the burst
	post(h2, 13, 103, "four") // the burst's last
	post(h2, 14, 104, "five")
	sent := api.WaitSent(t, 2)
	if want := (telegramtest.Sent{ChatID: 7, Text: "echo: five (history: 5)", ReplyTo: 104}); len(sent) != 2 || sent[1] != want {
		t.Fatalf("sent %+v, want the burst's reply, then %+v", sent, want)
	}
	if n := len(api.Calls("sendMessage")); n != 2 || ag.count() != 2 {
		t.Fatalf("%d sendMessage calls and %d agent calls, want 2 and 2", n, ag.count())
	}
	if rows := transcript(t, h2, sessions.TelegramDMKey(7)); len(rows) != 7 {
		t.Fatalf("stored %d rows, want 5 user messages and 2 replies", len(rows))
	}
}

// TestStopDuringDebounce: /stop while a burst waits out its debounce
// stops it: the answer is the stopped text, the agent is never called,
// and nothing else is sent for the burst — the answer to a later /help,
// sent after whatever the burst's messages get, proves it.
func TestStopDuringDebounce(t *testing.T) {
	api := telegramtest.New(t)
	ag := &calls{}
	stored := make(chan string, 16)
	h := start(t, api, t.TempDir(), setup{agent: ag, sess: noteStored(stored),
		policies: busy(sessions.BusyPolicy{Debounce: time.Hour, DebounceMax: time.Hour})})
	ids := []int{api.Push(telegramtest.DM(7, "wait")), api.Push(telegramtest.DM(7, "never mind"))}
	waitStored(t, stored, "wait", "never mind")
	stop := api.Push(telegramtest.DM(7, "/stop"))
	if sent := api.WaitSent(t, 1); sent[0] != (telegramtest.Sent{ChatID: 7, Text: stoppedText, ReplyTo: stop}) {
		t.Fatalf("answer to /stop = %+v", sent[0])
	}
	help := api.Push(telegramtest.DM(7, "/help"))
	sent := api.WaitSent(t, 2)
	if want := (telegramtest.Sent{ChatID: 7, Text: helpText, ReplyTo: help}); len(sent) != 2 || sent[1] != want {
		t.Fatalf("sent %+v, want the answer to /stop, then %+v", sent, want)
	}
	if n := ag.count(); n != 0 {
		t.Fatalf("%d agent calls for a stopped burst", n)
	}
	rows := transcript(t, h, sessions.TelegramDMKey(7))
	if len(rows) != 3 || rows[2].Status != sessions.MsgInterrupted || rows[2].Error != sessions.InterruptedByUser || rows[2].ReplyTo != rows[1].Seq {
		t.Fatalf("stored %+v, want both messages and a stopped reply to the last", rows)
	}
	if *rows[1].ClientMsgID != "7:"+strconv.Itoa(ids[1]) {
		t.Fatalf("the stopped reply answers %s", *rows[1].ClientMsgID)
	}
	turn, err := h.db.TurnAt(context.Background(), rows[1].ConversationID, rows[1].Seq)
	if err != nil || turn == nil || turn.State != sessions.TurnDelivered {
		t.Fatalf("the stopped turn = %+v (%v), want settled as delivered", turn, err)
	}
}

// cutFirst is an echo agent whose first call waits until its turn is
// cancelled; it records every call's messages.
type cutFirst struct {
	calls
	started chan struct{}
}

func (c *cutFirst) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	if c.count() == 0 {
		c.calls.Reply(ctx, req, onDelta)
		close(c.started)
		<-ctx.Done()
		return agent.Reply{}, ctx.Err()
	}
	return c.calls.Reply(ctx, req, onDelta)
}

// TestInterruptAnswersBothOnce: in busy mode interrupt a message sent
// while its chat's turn runs cuts that turn, which sends nothing; the next
// turn answers both messages with one reply to the newer.
func TestInterruptAnswersBothOnce(t *testing.T) {
	api := telegramtest.New(t)
	ag := &cutFirst{started: make(chan struct{})}
	start(t, api, t.TempDir(), setup{agent: ag, policies: busy(sessions.BusyPolicy{Mode: sessions.BusyInterrupt})})
	api.Push(telegramtest.DM(7, "tell me a long story"))
	<-ag.started
	short := api.Push(telegramtest.DM(7, "actually, a short one"))
	sent := api.WaitSent(t, 1)
	if want := (telegramtest.Sent{ChatID: 7, Text: "echo: tell me a long story\nactually, a short one (history: 0)", ReplyTo: short}); sent[0] != want {
		t.Fatalf("sent %+v, want %+v", sent[0], want)
	}
	after := api.Push(telegramtest.DM(7, "thanks"))
	sent = api.WaitSent(t, 2)
	if len(sent) != 2 || sent[1].ReplyTo != after {
		t.Fatalf("sent %+v: something was sent for the cut turn", sent)
	}
	if got := ag.byKey()[sessions.TelegramDMKey(7)]; len(got) != 3 || len(got[1]) != 2 {
		t.Fatalf("agent calls %q, want the cut one, both messages in one, then the next", got)
	}
}
