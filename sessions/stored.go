package sessions

import (
	"encoding/json"
	"strings"
	"unicode"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// The stored form of what the agent sends and receives.

// agentMessage is a stored message as the agent reads it.
func agentMessage(m *ledger.Message) agent.Message {
	return agent.Message{Role: m.Role, Content: withQuote(m.Quote, m.Content), ToolCallID: m.ToolCallID,
		ToolCalls: decodeToolCalls(m.ToolCalls), Attachments: decodeAttachments(m.Attachments)}
}

// decodeToolCalls is the stored form's tool calls. (Decoding into a field
// of the message being built would move the message to the heap, for
// every message of every history.)
func decodeToolCalls(s string) []agent.ToolCall {
	if s == "" {
		return nil
	}
	var calls []agent.ToolCall
	_ = json.Unmarshal([]byte(s), &calls)
	return calls
}

// encodeAttachments is the stored form of attachments: their metadata,
// without bytes (agent.Attachment's Data is not encoded).
func encodeAttachments(atts []agent.Attachment) string {
	if len(atts) == 0 {
		return ""
	}
	b, _ := json.Marshal(atts)
	return string(b)
}

func decodeAttachments(s string) []agent.Attachment {
	if s == "" {
		return nil
	}
	var atts []agent.Attachment
	_ = json.Unmarshal([]byte(s), &atts)
	return atts
}

func encodeToolCalls(calls []agent.ToolCall) string {
	if len(calls) == 0 {
		return ""
	}
	b, _ := json.Marshal(calls)
	return string(b)
}

// MaxQuoteRunes bounds the quote stored with a message: a reply to a long
// message carries its first MaxQuoteRunes characters, cut with "…".
const MaxQuoteRunes = 1000

// boundQuote is quote as stored: trimmed, and cut to MaxQuoteRunes.
func boundQuote(quote string) string {
	quote = strings.TrimSpace(quote)
	if r := []rune(quote); len(r) > MaxQuoteRunes {
		quote = strings.TrimRightFunc(string(r[:MaxQuoteRunes-1]), unicode.IsSpace) + "…"
	}
	return quote
}

// withQuote is a user message as the model reads it: the text it replies
// to, each line marked "> " as a Markdown quote, a blank line, then the
// message. Without a quote, the message as it is.
func withQuote(quote, text string) string {
	if quote == "" {
		return text
	}
	var b strings.Builder
	for i, line := range strings.Split(quote, "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(strings.TrimRight("> "+line, " "))
	}
	if text != "" {
		b.WriteString("\n\n")
		b.WriteString(text)
	}
	return b.String()
}
