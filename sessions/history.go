package sessions

import (
	"github.com/chatgate/chatgate/agent"
)

// History builds what the agent sees of earlier messages: at most max
// messages, newest last. Failed replies are left out (they were error
// notices, not the assistant speaking), and so are partial replies that a
// later turn answered again (cut by a shutdown or a newer message). The window never starts with a tool
// result whose call was cut off, and never keeps an assistant message with
// tool calls apart from its results, so a model server never sees a broken
// tool-call sequence.
func History(msgs []Message, max int) []agent.Message {
	if max <= 0 {
		return nil
	}
	eligible := make([]*Message, 0, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		if m.Role == agent.RoleAssistant && m.Status == MsgFailed {
			continue
		}
		if m.Role == agent.RoleAssistant && m.Status == MsgInterrupted && (m.Error == InterruptedByShutdown || m.Error == InterruptedByMessage) {
			// Cut short and answered again by a later turn.
			continue
		}
		if m.Role == agent.RoleAssistant && m.Content == "" && m.ToolCalls == "" {
			continue
		}
		eligible = append(eligible, m)
	}
	if len(eligible) > max {
		eligible = eligible[len(eligible)-max:]
	}
	out := make([]agent.Message, 0, len(eligible))
	for i := 0; i < len(eligible); i++ {
		m := eligible[i].agentMessage()
		switch {
		case m.Role == agent.RoleTool:
			// A tool result here has lost its call: the call was before the
			// window (or dropped below), so the result is an orphan.
			continue
		case m.Role == agent.RoleAssistant && len(m.ToolCalls) > 0:
			results, ok := toolResults(eligible[i+1:], m.ToolCalls)
			if !ok {
				// Some results are missing (an interrupted turn): drop the
				// call and whatever results it has.
				i += len(results)
				continue
			}
			out = append(out, m)
			for _, r := range results {
				out = append(out, r.agentMessage())
			}
			i += len(results)
		default:
			out = append(out, m)
		}
	}
	return out
}

// toolResults returns the tool messages right after an assistant message,
// and whether they answer every one of its calls.
func toolResults(after []*Message, calls []agent.ToolCall) ([]*Message, bool) {
	want := make(map[string]bool, len(calls))
	for _, c := range calls {
		want[c.ID] = true
	}
	var results []*Message
	for _, m := range after {
		if m.Role != agent.RoleTool {
			break
		}
		results = append(results, m)
		delete(want, m.ToolCallID)
	}
	return results, len(want) == 0
}
