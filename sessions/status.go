package sessions

// Status: what /status (Telegram) and the status frame (WebSocket) tell a
// user of their session — the conversation, how much of the model's
// context its history window takes, the summary compaction made, the
// user's spend against their budget, the model, the busy mode and when
// the conversation resets next.

import (
	"context"
	"math"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// Status is a session key's standing.
type Status struct {
	// Conversation is the active conversation ("" when the key has none
	// yet: its next message opens one), with its start and last activity.
	Conversation   string
	StartedAt      time.Time
	LastActivityAt time.Time
	// Messages counts its lines: the user's messages and the answers.
	Messages int64
	// HistoryMessages is how many messages the next turn's history
	// holds, and HistoryTokens the tokens that history and the system
	// prompt take, estimated as max_history_tokens counts them (4 bytes
	// of text a token, 4 more a message).
	HistoryMessages int
	HistoryTokens   int
	// Summary is the summary compaction made of the messages before the
	// window, nil when there is none (or compaction is off).
	Summary *Summary
	// Model is what the key runs on: Model.Current's ContextTokens is the
	// context the history fills (0: unknown).
	Model ModelState
	Busy  BusyMode
	Reset ResetPolicy
	// NextReset is when the conversation resets by itself (zero: never,
	// or no conversation yet), and NextResetReason why (idle or daily).
	// A NextReset not after now is due: the next message opens a new
	// conversation.
	NextReset       time.Time
	NextResetReason string
	// Usage is the user's spend today and this month against their
	// budget.
	Usage UsageStanding
	// Scheduled is what the session has on the clock: its reminders and
	// the operator's schedules it gets; nil when the gateway keeps no
	// timetable (Standing.UseTimetable).
	Scheduled *Scheduled
}

// Summary is a stored summary of a conversation's earlier messages.
type Summary struct {
	Text string
	// Through is the seq of the last message it covers (it covers 1 to
	// Through); At is when it was made.
	Through int64
	At      time.Time
}

// ContextPercent is the share of the model's context the history takes,
// in percent, and false when the context size is unknown.
func (s Status) ContextPercent() (float64, bool) {
	n := s.Model.Current.ContextTokens
	if n <= 0 {
		return 0, false
	}
	return math.Round(float64(s.HistoryTokens)*1000/float64(n)) / 10, true
}

// Next is when c resets by itself under p, and why (idle or daily): the
// zero time for mode none. Expired says the same of a given instant.
func (p ResetPolicy) Next(c *ledger.Conversation) (time.Time, string) {
	var at time.Time
	reason := ""
	if p.idle() {
		at, reason = c.LastActivityAt.Add(p.IdleFor), ledger.ReasonIdle
	}
	if p.daily() {
		if d := p.NextBoundary(c.StartedAt); at.IsZero() || d.Before(at) {
			at, reason = d, ledger.ReasonDaily
		}
	}
	return at, reason
}

// TimeZone is the time zone of the daily reset (UTC when unset).
func (p ResetPolicy) TimeZone() *time.Location { return p.location() }

// Status reports the key's standing. It opens no conversation.
func (s *Standing) Status(ctx context.Context, in Inbound) (Status, error) {
	if in.Channel == "" || in.SessionKey == "" {
		return Status{}, ErrBadInbound
	}
	release, err := s.turns.acquire(ctx, in.SessionKey)
	if err != nil {
		return Status{}, err
	}
	defer release()
	policy, live := s.turns.Policy(in.Channel), s.turns.settings()
	st := Status{Busy: policy.Busy.withDefaults().Mode, Reset: policy.Reset}
	chosen, err := s.chosenModel(ctx, in.SessionKey, live)
	if err != nil {
		return Status{}, err
	}
	st.Model = live.stateOf(chosen)
	if st.Usage, err = s.standing(ctx, policy, in.SessionKey); err != nil {
		return Status{}, err
	}
	if tt := s.timetable.Load(); tt != nil {
		sc, err := tt.Scheduled(ctx, in.Channel, in.SessionKey)
		if err != nil {
			return Status{}, err
		}
		st.Scheduled = &sc
	}
	hc, err := s.peek(ctx, in, policy)
	if err != nil || hc == nil {
		return st, err
	}
	c := &hc.conv
	st.Conversation, st.StartedAt, st.LastActivityAt = c.ID, c.StartedAt, c.LastActivityAt
	st.NextReset, st.NextResetReason = policy.Reset.Next(c)
	if st.Messages, err = s.store.MessageCount(ctx, c.ID); err != nil {
		return Status{}, err
	}
	window := priorOf(hc.window, nil, c.LastSeq)
	hist := historyFor(window, policy)
	st.HistoryMessages, st.HistoryTokens = len(hist), estimateRequest(live.instructions, hist)
	if sum := newestSummary(window); sum != nil && policy.Compaction.Enabled {
		st.HistoryMessages-- // the summary is not a message
		st.Summary = &Summary{Text: sum.Content, Through: sum.ReplyTo, At: sum.CreatedAt}
	}
	return st, nil
}

// peek is the key's active conversation, cached, or nil when it has none.
// Called under the key's state lock.
func (s *Standing) peek(ctx context.Context, in Inbound, policy Policy) (*hotConv, error) {
	if hc, ok := s.hot.Get(in.SessionKey); ok && hc.conv.Status == ledger.StatusActive {
		return hc, nil
	}
	conv, err := s.store.ActiveConversation(ctx, in.SessionKey)
	if err != nil || conv == nil {
		return nil, err
	}
	hc := &hotConv{conv: *conv, cap: windowCap(policy)}
	if hc.window, err = s.store.RecentMessages(ctx, conv.ID, hc.cap); err != nil {
		return nil, err
	}
	s.hot.Add(in.SessionKey, hc)
	return hc, nil
}

// estimateRequest estimates the tokens of a request's system prompt and
// history, as estimateTokens counts a stored message.
func estimateRequest(instructions string, hist []agent.Message) int {
	return agent.EstimateMessages(instructions, hist)
}
