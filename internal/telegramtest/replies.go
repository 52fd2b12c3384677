package telegramtest

import (
	"strings"
	"unicode/utf16"
)

// Replies and quotes, as Telegram sends them: a message that replies to
// another carries it whole as reply_to_message (without its own
// reply_to_message), and one that quotes part of it carries quote, a
// TextQuote: the text quoted, its position in UTF-16 code units, and
// is_manual when the user picked it (not the client).

// ReplyTo makes message (DM, Group…) a reply to replied, a message pushed
// before (it carries its message_id), quoting quote of its text unless
// quote is "". A quote that is not in replied's text fails the test, as
// Telegram refuses it.
func (a *Server) ReplyTo(message, replied map[string]any, quote string) map[string]any {
	inner := map[string]any{}
	for k, v := range replied {
		if k != "reply_to_message" && k != "quote" {
			inner[k] = v
		}
	}
	message["reply_to_message"] = inner
	if quote != "" {
		text, _ := inner["text"].(string)
		if text == "" {
			text, _ = inner["caption"].(string)
		}
		i := strings.Index(text, quote)
		if i < 0 {
			a.t.Errorf("quote %q is not in the message replied to, %q", quote, text)
			return message
		}
		message["quote"] = map[string]any{"text": quote, "position": len(utf16.Encode([]rune(text[:i]))), "is_manual": true}
	}
	return message
}

// ReplyToSent makes message a reply to the bot's n-th message sent
// (Messages()[n]) as it stands now, quoting quote of it unless quote is "".
func (a *Server) ReplyToSent(message map[string]any, n int, quote string) map[string]any {
	a.mu.Lock()
	var replied map[string]any
	for k, i := range a.stream.index {
		if i == n {
			replied = botMessage(k.chat, k.id, a.sent[i].Thread, a.sent[i].Text)
		}
	}
	a.mu.Unlock()
	if replied == nil {
		a.t.Errorf("no message %d sent to reply to", n)
		return message
	}
	return a.ReplyTo(message, replied, quote)
}
