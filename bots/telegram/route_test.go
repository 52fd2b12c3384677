package telegram

// Tests of where updates go: which group messages are for the bot, and
// the session keys of group_policy all and group_scope chat.

import (
	"testing"

	"github.com/chatgate/chatgate/internal/telegramtest"
)

func TestGroupRules(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{})
	const chat = -1001
	api.Push(telegramtest.Group(chat, 7, "just chatting"))
	api.Push(telegramtest.Group(chat, 7, "/help@other_bot"))
	m := api.Push(telegramtest.Group(chat, 7, "@"+telegramtest.BotName+" what time is it"))
	sent := api.WaitSent(t, 1)
	if sent[0].Text != "echo: what time is it (history: 0)" || sent[0].ReplyTo != m || sent[0].ChatID != chat {
		t.Fatalf("mention answer = %+v", sent[0])
	}
	reply := telegramtest.Group(chat, 7, "and tomorrow?")
	reply["reply_to_message"] = map[string]any{"message_id": 1, "date": 1, "chat": map[string]any{"id": chat, "type": "supergroup"},
		"from": map[string]any{"id": telegramtest.BotID, "is_bot": true, "first_name": "Gate"}, "text": "earlier"}
	api.Push(reply)
	// The echo agent echoes the quoted text too
	// (TestRepliesAndQuotesReachTheModel).
	if got := api.WaitSent(t, 2)[1].Text; got != "echo: &gt; earlier\n\nand tomorrow? (history: 2)" {
		t.Fatalf("reply-to-bot answer = %q", got)
	}
	api.Push(telegramtest.Group(chat, 7, "/help@"+telegramtest.BotName))
	if got := api.WaitSent(t, 3)[2].Text; got != helpText {
		t.Fatalf("/help@bot answer = %q", got)
	}
	// Per-user scope: another member has a conversation of their own.
	api.Push(telegramtest.Group(chat, 8, "@"+telegramtest.BotName+" hello"))
	if got := api.WaitSent(t, 4)[3].Text; got != "echo: hello (history: 0)" {
		t.Fatalf("second member = %q", got)
	}
	api.WaitConfirmed(t, api.LastUpdateID())
	if n := len(api.Messages()); n != 4 {
		t.Fatalf("%d messages sent; unaddressed group messages were answered", n)
	}
}

func TestGroupPolicyAllAndChatScope(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{opts: Options{GroupPolicy: "all", GroupScope: "chat"}})
	api.Push(telegramtest.Group(-5, 7, "first"))
	api.WaitSent(t, 1)
	api.Push(telegramtest.Group(-5, 8, "second"))
	if got := api.WaitSent(t, 2)[1].Text; got != "echo: second (history: 2)" {
		t.Fatalf("shared group conversation = %q", got)
	}
}
