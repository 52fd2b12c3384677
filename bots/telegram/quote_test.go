package telegram

// Replies and quotes: the text a message answers reaches the model with
// it (message.quoted).

import (
	"strings"
	"testing"

	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
)

// A reply to the bot's message reaches the model with that message's text
// quoted before it; a quote of part of a message, with that part; and a
// later turn's history shows both as they were sent.
func TestRepliesAndQuotesReachTheModel(t *testing.T) {
	api := telegramtest.New(t)
	llm, ag := llmtest.AgentWith(t, openai.Config{})
	start(t, api, t.TempDir(), setup{agent: ag, policies: queued})
	first := telegramtest.DM(7, "tell me two things: one thing and another")
	api.Push(first)
	api.WaitSent(t, 1)

	api.Push(api.ReplyToSent(telegramtest.DM(7, "what did you mean?"), 0, ""))
	api.WaitSent(t, 2)
	api.Push(api.ReplyTo(telegramtest.DM(7, "why that one?"), first, "another"))
	api.WaitSent(t, 3)
	api.Push(telegramtest.DM(7, "thanks"))
	api.WaitSent(t, 4)

	reqs := llm.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d model requests, want 4", len(reqs))
	}
	reply := "> " + llmtest.Reply + "\n\nwhat did you mean?"
	quote := "> another\n\nwhy that one?"
	if got := lastUser(reqs[1]).Text(); got != reply {
		t.Errorf("a reply to the bot reached the model as %q, want %q", got, reply)
	}
	if got := lastUser(reqs[2]).Text(); got != quote {
		t.Errorf("a quote reached the model as %q, want %q", got, quote)
	}
	var users []string
	for _, m := range reqs[3] {
		if m.Role == "user" {
			users = append(users, m.Text())
		}
	}
	if len(users) != 4 || users[1] != reply || users[2] != quote || users[3] != "thanks" {
		t.Errorf("the next turn's user messages = %q", users)
	}
	// /history shows what each message replied to.
	api.Push(telegramtest.DM(7, "/history"))
	hist := api.WaitSent(t, 5)[4].Text
	for _, want := range []string{"You, replying to \u201c" + llmtest.Reply + "\u201d: what did you mean?", "You, replying to \u201canother\u201d: why that one?", "You: thanks"} {
		if !strings.Contains(hist, want) {
			t.Errorf("/history lacks %q:\n%s", want, hist)
		}
	}
}

// In a group, a reply to the bot addresses it (no mention needed), and
// brings the bot's words along.
func TestAGroupReplyToTheBotCarriesItsText(t *testing.T) {
	api := telegramtest.New(t)
	llm, ag := llmtest.AgentWith(t, openai.Config{})
	start(t, api, t.TempDir(), setup{agent: ag, policies: queued})
	api.Push(telegramtest.Group(-100, 7, "@"+telegramtest.BotName+" hello"))
	api.WaitSent(t, 1)
	api.Push(api.ReplyToSent(telegramtest.Group(-100, 7, "more please"), 0, llmtest.Reply))
	api.WaitSent(t, 2)
	reqs := llm.Requests()
	if got, want := lastUser(reqs[1]).Text(), "> "+llmtest.Reply+"\n\nmore please"; got != want {
		t.Fatalf("the group reply reached the model as %q, want %q", got, want)
	}
}
