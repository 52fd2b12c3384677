package sessions

import (
	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// History builds what the agent sees of earlier messages: at most max
// messages, newest last. Failed replies are left out (they were error
// notices, not the assistant speaking), and so are partial replies that a
// later turn answered again (cut by a shutdown or a newer message). The window never starts with a tool
// result whose call was cut off, and never keeps an assistant message with
// tool calls apart from its results, so a model server never sees a broken
// tool-call sequence.
func History(msgs []ledger.Message, max int) []agent.Message {
	return history(pointers(msgs), max, 0)
}

// history and historyFor filter the slice of pointers they are given in
// place: their callers build it for them (pointers, priorOf).

// pointers is a pointer to each of msgs, in order.
func pointers(msgs []ledger.Message) []*ledger.Message {
	out := make([]*ledger.Message, len(msgs))
	for i := range msgs {
		out[i] = &msgs[i]
	}
	return out
}

// historyFor is the history a turn under policy p sends the model. With
// compaction on and a summary stored, it is the newest summary (a system
// message) and then the window of the messages after what the summary
// covers; else the window of the messages. The window holds at most
// p.MaxHistory messages, and at most p.MaxHistoryTokens estimated tokens
// when that is set.
func historyFor(msgs []*ledger.Message, p Policy) []agent.Message {
	summary := newestSummary(msgs)
	if !p.Compaction.Enabled {
		summary = nil
	}
	rest := msgs[:0]
	for _, m := range msgs {
		if m.Role == RoleSummary || (summary != nil && m.Seq <= summary.ReplyTo) {
			continue
		}
		rest = append(rest, m)
	}
	out := history(rest, p.MaxHistory, p.MaxHistoryTokens)
	if summary != nil {
		out = append([]agent.Message{{Role: agent.RoleSystem, Content: SummaryIntro + summary.Content}}, out...)
	}
	return out
}

// newestSummary is the summary row of msgs with the highest seq, or nil.
func newestSummary(msgs []*ledger.Message) *ledger.Message {
	var s *ledger.Message
	for _, m := range msgs {
		if m.Role == RoleSummary && (s == nil || m.Seq > s.Seq) {
			s = m
		}
	}
	return s
}

// eligible are the messages of msgs a history may hold, oldest first.
func eligible(msgs []*ledger.Message) []*ledger.Message {
	return keepEligible(make([]*ledger.Message, 0, len(msgs)), msgs)
}

// keepEligible appends the eligible messages of msgs to out, which may be
// msgs[:0] (history's, filtering in place).
func keepEligible(out, msgs []*ledger.Message) []*ledger.Message {
	for _, m := range msgs {
		switch {
		case m.Role == RoleSummary:
			continue
		case m.Role == agent.RoleAssistant && m.Status == ledger.MsgFailed:
			continue
		case m.Role == agent.RoleAssistant && m.Status == ledger.MsgInterrupted && (m.Error == ledger.InterruptedByShutdown || m.Error == ledger.InterruptedByMessage):
			// Cut short and answered again by a later turn.
			continue
		case m.Role == agent.RoleAssistant && m.Content == "" && m.ToolCalls == "":
			continue
		}
		out = append(out, m)
	}
	return out
}

// estimateTokens estimates what a message costs in a model's context, as
// agent.EstimateTokens counts its text and tool calls.
func estimateTokens(m *ledger.Message) int {
	return agent.EstimateTokens(len(m.Content) + len(m.ToolCalls))
}

// newestWithin is how many of the newest of msgs fit in max messages and,
// when maxTokens > 0, in maxTokens estimated tokens.
func newestWithin(msgs []*ledger.Message, max, maxTokens int) int {
	n, tokens := 0, 0
	for i := len(msgs) - 1; i >= 0 && n < max; i-- {
		tokens += estimateTokens(msgs[i])
		if maxTokens > 0 && tokens > maxTokens {
			break
		}
		n++
	}
	return n
}

func history(msgs []*ledger.Message, max, maxTokens int) []agent.Message {
	if max <= 0 {
		return nil
	}
	eligible := keepEligible(msgs[:0], msgs)
	eligible = eligible[len(eligible)-newestWithin(eligible, max, maxTokens):]
	out := make([]agent.Message, 0, len(eligible))
	for i := 0; i < len(eligible); i++ {
		m := agentMessage(eligible[i])
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
				out = append(out, agentMessage(r))
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
func toolResults(after []*ledger.Message, calls []agent.ToolCall) ([]*ledger.Message, bool) {
	want := make(map[string]bool, len(calls))
	for _, c := range calls {
		want[c.ID] = true
	}
	var results []*ledger.Message
	for _, m := range after {
		if m.Role != agent.RoleTool {
			break
		}
		results = append(results, m)
		delete(want, m.ToolCallID)
	}
	return results, len(want) == 0
}
