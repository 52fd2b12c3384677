package sessions

// Compaction. When a conversation outgrows its history window
// (max_history messages, or max_history_tokens), the part that falls out
// is summarised by a model call — after the turn's reply is stored, off
// the path to the user's next reply — and stored as a row of its own:
// role summary, covering seq 1..reply_to. The messages stay where they
// are. A turn then sends the model the newest summary (a system message)
// and the messages after what it covers (historyFor). A summary that
// fails leaves plain trimming, and the next turn tries again.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// SummaryIntro comes before a summary in the history a model gets.
const SummaryIntro = "Summary of the earlier part of this conversation (its messages are no longer shown):\n\n"

// DefaultCompactionPrompt is session.compaction.prompt's default: the
// instructions of the summary's model call.
const DefaultCompactionPrompt = `You keep the memory of a long conversation between a user and an assistant. ` +
	`From the summary so far (if any) and the messages given, write the updated summary of the whole conversation. ` +
	`Keep what the assistant needs to go on: who the user is (name, role, preferences), their projects and goals, ` +
	`facts, names and numbers they gave, what was decided or agreed, open questions and promised follow-ups. ` +
	`Leave out greetings and small talk. Write in the language of the conversation, in short plain sentences or bullet points, at most 300 words. ` +
	`Answer with the summary only.`

// ErrCompactionOff is Compact's answer when the channel's policy has
// compaction off.
var ErrCompactionOff = errors.New("compaction is off for this channel")

// CompactionPolicy is a channel's compaction.
type CompactionPolicy struct {
	Enabled bool
	// KeepLast is how many of the newest messages stay as they are when a
	// summary is made (0, or more than MaxHistory: MaxHistory). Fewer
	// means fewer summaries: one every (MaxHistory-KeepLast)/2 turns.
	KeepLast int
	// Prompt instructs the summary's model call (default
	// DefaultCompactionPrompt).
	Prompt string
}

// keepLast is the number of newest messages a summary leaves out.
func (p Policy) keepLast() int {
	if k := p.Compaction.KeepLast; k > 0 && k < p.MaxHistory {
		return k
	}
	return p.MaxHistory
}

const (
	// compactTimeout bounds a summary's model call.
	compactTimeout = 2 * time.Minute
	// compactRows bounds the messages one summary reads from storage when
	// the cached window does not reach back to the last summary.
	compactRows = 10_000
)

// compactLater makes the summary conversation conv needs, if it needs
// one, in the background: called once a turn's reply is stored. One
// summary at a time per conversation; a call while one is made makes it
// look again when done. The drain waits for it.
func (m *Manager) compactLater(in Inbound, conv string) {
	if !m.Policy(in.Channel).Compaction.Enabled {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if again, busy := m.compacting[conv]; busy || !m.life.enterSweep() {
		if busy && !again {
			m.compacting[conv] = true
		}
		return
	}
	m.compacting[conv] = false
	go func() {
		defer m.life.leaveSweep()
		for {
			if _, err := m.compact(m.life.base, in, conv, false); errors.Is(err, ErrOverBudget) {
				m.log.Debug("compaction waits: the user is over their budget", slog.String("session_key", in.SessionKey),
					slog.String("conversation", conv))
			} else if err != nil {
				m.log.Warn("compaction failed; the history is trimmed and the next turn tries again",
					slog.String("session_key", in.SessionKey), slog.String("conversation", conv), slog.String("error", err.Error()))
			}
			m.mu.Lock()
			again := m.compacting[conv] && !m.life.closed()
			if !again {
				delete(m.compacting, conv)
			} else {
				m.compacting[conv] = false
			}
			m.mu.Unlock()
			if !again {
				return
			}
		}
	}()
}

// Compact summarises the key's active conversation now — everything but
// its last exchange that no summary covers yet — and reports how many
// messages the new summary took in (0: nothing to summarise). The
// channel's policy must have compaction on (else ErrCompactionOff), and
// the user must be within their budget (else an OverBudgetError).
func (m *Manager) Compact(ctx context.Context, in Inbound) (int, error) {
	if !m.Policy(in.Channel).Compaction.Enabled {
		return 0, ErrCompactionOff
	}
	c, err := m.store.ActiveConversation(ctx, in.SessionKey)
	if err != nil || c == nil {
		return 0, err
	}
	return m.compact(ctx, in, c.ID, true)
}

// compact summarises what of conversation conv falls out of the history
// window — with now, everything but the last exchange — and stores the
// summary. It reports how many messages the summary took in.
func (m *Manager) compact(ctx context.Context, in Inbound, conv string, now bool) (int, error) {
	p := m.Policy(in.Channel)
	rows, active, err := m.cachedRows(ctx, in, conv)
	if err != nil || !active {
		return 0, err
	}
	var from int64 // the last seq the newest summary covers
	var earlier string
	if s := newestSummary(pointers(rows)); s != nil {
		from, earlier = s.ReplyTo, s.Content
	}
	if len(rows) == 0 || rows[0].Seq > from+1 {
		// The window does not reach back to the summary: read the rest.
		if rows, err = m.store.MessagesAfter(ctx, conv, from, compactRows); err != nil {
			return 0, err
		}
	}
	var after []*ledger.Message
	for i := range rows {
		if rows[i].Seq > from {
			after = append(after, &rows[i])
		}
	}
	el := eligible(after)
	keep := newestWithin(el, p.keepLast(), p.MaxHistoryTokens)
	switch {
	case now:
		keep = min(len(el), 2)
	case newestWithin(el, p.MaxHistory, p.MaxHistoryTokens) == len(el):
		return 0, nil // it all fits
	}
	fold := el[:len(el)-keep]
	// Never a message still waiting for its answer: replies come oldest
	// message first (a burst's reply answers all of it), so a message
	// after the newest one answered waits.
	var answered int64
	for _, r := range after {
		if ledger.SettlesTurn(r) {
			answered = max(answered, r.ReplyTo)
		}
	}
	for i, r := range fold {
		if r.Role == agent.RoleUser && r.Seq > answered {
			fold = fold[:i]
			break
		}
	}
	fold = withResults(el, fold)
	if len(fold) == 0 {
		return 0, nil
	}
	upTo := fold[len(fold)-1].Seq
	// A summary is a model call the user causes: tallied as theirs, and
	// not made while they are over their budget. The turn that crossed
	// it is their last model call until the budget frees up.
	if s := m.overBudget(ctx, in, p); s != nil {
		return 0, &OverBudgetError{Standing: *s}
	}

	live := m.settings()
	ag := live.compactor
	if ag == nil {
		ag = live.agent
	}
	prompt := p.Compaction.Prompt
	if prompt == "" {
		prompt = DefaultCompactionPrompt
	}
	cctx, cancel := context.WithTimeout(ctx, compactTimeout)
	defer cancel()
	cctx, end := m.tr.startSpanCtx(cctx, "compaction")
	reply, err := ag.Reply(cctx, agent.Request{SessionKey: in.SessionKey, Instructions: prompt, Input: compactionInput(earlier, fold), Unstreamed: true}, nil)
	end(err)
	if err != nil {
		return 0, fmt.Errorf("summary call: %w", err)
	}
	var text string
	if n := len(reply.Messages); n > 0 {
		text = strings.TrimSpace(reply.Messages[n-1].Content)
	}
	if text == "" {
		return 0, errors.New("summary call: the model wrote nothing")
	}
	row := ledger.Message{ConversationID: conv, Role: RoleSummary, Content: text, ReplyTo: upTo, Status: ledger.MsgOK, CreatedAt: m.now(),
		PromptTokens: reply.Usage.PromptTokens, CompletionTkns: reply.Usage.CompletionTokens, Cost: reply.Cost}
	if err := m.storeSummary(ctx, in, conv, row, reply.Usage.TotalTokens, reply.Model); err != nil {
		return 0, err
	}
	return len(fold), nil
}

// cachedRows returns a copy of the cached window of conversation conv,
// and whether the conversation is active.
func (m *Manager) cachedRows(ctx context.Context, in Inbound, conv string) ([]ledger.Message, bool, error) {
	release, err := m.lockState(ctx, in.SessionKey, false)
	if err != nil {
		return nil, false, err
	}
	defer release()
	hc, err := m.hotFor(ctx, in, conv)
	if err != nil {
		return nil, false, err
	}
	return slices.Clone(hc.window), hc.conv.Status == ledger.StatusActive, nil
}

// storeSummary appends the summary row to conversation conv, after
// whatever was stored meanwhile, unless the conversation was archived or
// a summary covering as much is there already (another replica's). The
// append leaves the conversation's activity time as it was: a summary is
// no activity of the user's.
func (m *Manager) storeSummary(ctx context.Context, in Inbound, conv string, row ledger.Message, tokens int64, model string) error {
	key := in.SessionKey
	for range 3 {
		release, err := m.lockState(ctx, key, false)
		if err != nil {
			return err
		}
		hc, err := m.hotFor(ctx, in, conv)
		if err != nil {
			release()
			return err
		}
		if s := newestSummary(pointers(hc.window)); hc.conv.Status != ledger.StatusActive || (s != nil && s.ReplyTo >= row.ReplyTo) {
			release()
			return nil
		}
		row.Seq = hc.conv.LastSeq + 1
		err = m.store.Append(ctx, ledger.Append{Conv: &hc.conv, ExpectSeq: hc.conv.LastSeq, RequireActive: true,
			Messages: []ledger.Message{row}, At: hc.conv.LastActivityAt, Tokens: tokens, Cost: row.Cost,
			Usage: m.usageFor(&hc.conv, []ledger.Message{row}, model, m.now(), 0, false)})
		if err == nil {
			hc.push(row)
			m.hot.Update(key, hc)
		} else {
			m.hot.Remove(key) // read afresh: the try may have landed
		}
		release()
		if !errors.Is(err, ledger.ErrStale) {
			return err
		}
	}
	return errors.New("the conversation kept moving; the summary waits for the next turn")
}

// compactionInput is what the summary's model call is asked: the summary
// so far and the messages to fold into it.
func compactionInput(earlier string, fold []*ledger.Message) string {
	var b strings.Builder
	if earlier != "" {
		b.WriteString("The summary so far:\n\n")
		b.WriteString(earlier)
		b.WriteString("\n\n")
	}
	b.WriteString("The messages to add to it, oldest first:\n\n")
	for _, m := range fold {
		if m.Content != "" {
			fmt.Fprintf(&b, "%s: %s\n\n", m.Role, withQuote(m.Quote, m.Content))
		}
		for _, c := range agentMessage(m).ToolCalls {
			fmt.Fprintf(&b, "assistant called the tool %s with %s\n\n", c.Name, c.Arguments)
		}
	}
	b.WriteString("Write the updated summary.")
	return b.String()
}

// withResults is fold (a prefix of el) grown over the tool results that
// follow its last message, so that a tool call is never summed up apart
// from its results: the window after the summary starts after them.
func withResults(el, fold []*ledger.Message) []*ledger.Message {
	n := len(fold)
	if n == 0 {
		return fold
	}
	for n < len(el) && el[n].Role == agent.RoleTool {
		n++
	}
	return el[:n]
}
