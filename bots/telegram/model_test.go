package telegram

// /model and /status against the fake Bot API, with the real session
// manager and store and the openai backend on a model server that
// records each request's model: the buttons choose, the next turn asks
// for the chosen model, the choice survives /new, a tap on a model taken
// out of agent.models is answered and the list updated, and every
// callback query is answered exactly once.

import (
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

var tgModels = []sessions.Model{
	{Name: "Fast", ID: "fast-1", ContextTokens: 1000, PricePer1KPrompt: 1, PricePer1KCompletion: 2},
	{Name: "Smart", ID: "smart-1", ContextTokens: 8000, PricePer1KPrompt: 10, PricePer1KCompletion: 30},
}

// buttons is a keyboard's labels and data, row by row.
func buttons(kb [][]telegramtest.Button) []string {
	var out []string
	for _, row := range kb {
		for _, b := range row {
			out = append(out, b.Text+"="+b.CallbackData)
		}
	}
	return out
}

// waitButtons waits until message id of chat shows these buttons.
func waitButtons(t *testing.T, api *telegramtest.Server, chat int64, id int, want ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Join(buttons(api.Keyboard(chat, id)), " ") != strings.Join(want, " ") {
		if time.Now().After(deadline) {
			t.Fatalf("message %d shows %q, want %q", id, buttons(api.Keyboard(chat, id)), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lastModel is the model the model server's newest request asked for, and
// its messages' texts.
func lastModel(t *testing.T, llm *llmtest.Server) (string, []string) {
	t.Helper()
	reqs := llm.Received()
	if len(reqs) == 0 {
		t.Fatal("no request reached the model")
	}
	last := reqs[len(reqs)-1]
	var texts []string
	for _, m := range last.Messages {
		texts = append(texts, m.Role+":"+m.Text())
	}
	return last.Model, texts
}

func TestModelButtonsAndStatus(t *testing.T) {
	for _, pg := range []bool{false, true} {
		t.Run(map[bool]string{false: "sqlite", true: "postgres"}[pg], func(t *testing.T) {
			llm, ag := llmtest.AgentWith(t, openai.Config{PricePer1KPrompt: 1, PricePer1KCompletion: 1})
			clock := clocktest.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
			s := setup{agent: ag, opts: Options{Now: clock.Now, Streaming: StreamOff},
				policies: map[string]sessions.Policy{Channel: {MaxHistory: 100, Busy: sessions.BusyPolicy{Mode: sessions.BusyQueue},
					Reset:  sessions.ResetPolicy{Mode: sessions.ResetIdle, IdleFor: time.Hour},
					Budget: sessions.BudgetPolicy{Default: sessions.Budget{TokensPerDay: 1000, CostPerDay: 5}}}},
				manager: func(o *sessions.Options) { o.Now, o.Models = clock.Now, tgModels }}
			if pg {
				s.dsn = pgtest.DSN(t)
			}
			api := telegramtest.New(t)
			h := start(t, api, t.TempDir(), s)

			api.Push(telegramtest.DM(7, "/status"))
			if got := api.WaitSent(t, 1)[0].Text; !strings.Contains(got, "Conversation: none yet") ||
				!strings.Contains(got, "Model: the default, m — /model to change it.") ||
				!strings.Contains(got, "Today: 0 answers, 0 tokens of 1000, cost 0.0000 of 5.00") ||
				!strings.Contains(got, "Resets: after 1 h without a message.") {
				t.Fatalf("/status before any message:\n%s", got)
			}
			for _, c := range []string{"status", "model"} {
				if !strings.Contains(api.Commands(), `"command":"`+c+`"`) {
					t.Fatalf("setMyCommands lacks /%s: %s", c, api.Commands())
				}
			}

			api.Push(telegramtest.DM(7, "hi"))
			api.WaitSent(t, 2)
			if model, _ := lastModel(t, llm); model != "m" {
				t.Fatalf("before a choice the request asks for %q", model)
			}

			// /model: a button per model and one for the default, ticked.
			picker := api.Push(telegramtest.DM(7, "/model"))
			sent := api.WaitSent(t, 3)
			if sent[2].ReplyTo != picker || sent[2].Text != "Model: the default, m. Tap another to answer your next messages with it:" {
				t.Fatalf("/model answered %+v", sent[2])
			}
			id := api.SentIDs()[2]
			waitButtons(t, api, 7, id, "Fast=model:Fast", "Smart=model:Smart", "✓ Default (m)=model:")
			q := api.Tap(t, 7, 7, id, "model:Smart")
			if ans := api.WaitAnswered(t, q); ans.Text != "Now answering with Smart (smart-1)" {
				t.Fatalf("tap answered %+v", ans)
			}
			waitButtons(t, api, 7, id, "Fast=model:Fast", "✓ Smart=model:Smart", "Default (m)=model:")
			if text := api.Text(7, id); text != "Model: Smart (smart-1). Tap another to answer your next messages with it:" {
				t.Fatalf("picker after the tap: %q", text)
			}

			api.Push(telegramtest.DM(7, "hello"))
			api.WaitSent(t, 4)
			if model, _ := lastModel(t, llm); model != "smart-1" {
				t.Fatalf("after choosing Smart the request asks for %q", model)
			}
			// The choice survives /new.
			api.Push(telegramtest.DM(7, "/new"))
			if got := api.WaitSent(t, 5)[4].Text; got != resetText {
				t.Fatalf("/new answered %q", got)
			}
			api.Push(telegramtest.DM(7, "again"))
			api.WaitSent(t, 6)
			if model, msgs := lastModel(t, llm); model != "smart-1" || strings.Join(msgs, "|") != "user:again" {
				t.Fatalf("after /new: model %q, messages %q", model, msgs)
			}

			// By name: chosen before the message after it is stored.
			api.Push(telegramtest.DM(7, "/model fast"))
			api.Push(telegramtest.DM(7, "quick"))
			sent = api.WaitSent(t, 8)
			if sent[6].Text != "Model: Fast (fast-1). Your next messages are answered with it." || sent[7].Text != llmtest.Reply {
				t.Fatalf("/model fast, quick: %q", texts(sent[6:]))
			}
			if model, _ := lastModel(t, llm); model != "fast-1" {
				t.Fatalf("after /model fast the request asks for %q", model)
			}
			api.Push(telegramtest.DM(7, "/model Turbo"))
			if got := api.WaitSent(t, 9)[8].Text; got != `There is no model called "Turbo" here. Send /model to see them.` {
				t.Fatalf("/model Turbo answered %q", got)
			}

			api.Push(telegramtest.DM(7, "/status"))
			status := api.WaitSent(t, 10)[9].Text
			convs, err := h.db.ListConversations(t.Context(), store.ListFilter{SessionKey: "telegram:dm:7"})
			if err != nil {
				t.Fatal(err)
			}
			var active ledger.Conversation
			for _, c := range convs {
				if c.Status == ledger.StatusActive {
					active = c
				}
			}
			// hi 0.002 (the default's prices), hello and again 0.04 each
			// (Smart's), quick 0.003 (Fast's); a token in, a token out each.
			for _, want := range []string{
				"Conversation: 4 messages since Mon 1 Jun 12:00 UTC.",
				"History I read: 4 messages, about 20 tokens — 2.0% of the model's 1000-token context.",
				"Model: Fast (fast-1) — /model to change it.",
				"Today: 4 answers, 8 tokens of 1000, cost 0.0850 of 5.00; the day ends Tue 2 Jun 00:00 UTC.",
				"This month: 4 answers, 8 tokens, cost 0.0850.",
				"Busy mode: queue — each message gets its own answer, one after the other.",
				"Next reset: " + active.LastActivityAt.Add(time.Hour).Format("Mon 2 Jan 15:04 MST") + " (idle), in 1 h.",
			} {
				if !strings.Contains(status, want) {
					t.Fatalf("/status lacks %q:\n%s", want, status)
				}
			}

			// Fast is taken out of agent.models: a tap on it is answered, and
			// the list shows what is offered now; turns use the default.
			h.mgr.Reconfigure(sessions.Settings{Policies: s.policies, Agent: ag, Models: tgModels[1:]})
			stale := api.TapStale(7, 7, id, "model:Fast")
			if ans := api.WaitAnswered(t, stale); ans.Text != "Fast is no longer offered; the list is updated" {
				t.Fatalf("tap on a model taken out answered %+v", ans)
			}
			waitButtons(t, api, 7, id, "Smart=model:Smart", "✓ Default (m)=model:")
			if text := api.Text(7, id); !strings.Contains(text, "Model: the default, m.") || !strings.Contains(text, "(Fast, which you chose, is no longer offered.)") {
				t.Fatalf("picker after the stale tap: %q", text)
			}
			api.Push(telegramtest.DM(7, "last"))
			api.WaitSent(t, 11)
			if model, _ := lastModel(t, llm); model != "m" {
				t.Fatalf("with the chosen model gone the request asks for %q", model)
			}
			// The default button goes back to it.
			q = api.Tap(t, 7, 7, id, "model:")
			if ans := api.WaitAnswered(t, q); ans.Text != "Now answering with the default, m" {
				t.Fatalf("default tap answered %+v", ans)
			}
			api.CheckAnswers(t)
		})
	}
}

// Without agent.models: no /model in the menu or the help, /model is an
// unknown command, a crafted tap is answered, and /status still serves.
func TestNoModelsNoModelCommand(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{policies: queued})
	api.Push(telegramtest.DM(7, "/model"))
	if got := api.WaitSent(t, 1)[0].Text; got != helpText || strings.Contains(got, "/model") {
		t.Fatalf("/model without models answered %q", got)
	}
	if strings.Contains(api.Commands(), `"command":"model"`) || !strings.Contains(api.Commands(), `"command":"status"`) {
		t.Fatalf("setMyCommands: %s", api.Commands())
	}
	q := api.TapStale(7, 7, api.SentIDs()[0], "model:Smart")
	if ans := api.WaitAnswered(t, q); ans.Text != tapModelsOffText {
		t.Fatalf("tap answered %+v", ans)
	}
	api.Push(telegramtest.DM(7, "hi"))
	api.WaitSent(t, 2)
	api.Push(telegramtest.DM(7, "/status"))
	got := api.WaitSent(t, 3)[2].Text
	for _, want := range []string{"Conversation: 2 messages", "Model: the default, echo.", "History I read: 2 messages",
		"the model's context size is unknown", "Resets: only when you send /new."} {
		if !strings.Contains(got, want) {
			t.Fatalf("/status lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "/model") {
		t.Fatalf("/status offers /model without models:\n%s", got)
	}
	api.CheckAnswers(t)
}
