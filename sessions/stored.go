package sessions

import (
	"encoding/json"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// The stored form of what the agent sends and receives.

// agentMessage is a stored message as the agent reads it.
func agentMessage(m *ledger.Message) agent.Message {
	am := agent.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
	if m.ToolCalls != "" {
		_ = json.Unmarshal([]byte(m.ToolCalls), &am.ToolCalls)
	}
	am.Attachments = decodeAttachments(m.Attachments)
	return am
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
