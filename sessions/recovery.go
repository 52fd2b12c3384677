package sessions

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/chatgate/chatgate/agent"
)

// recoveryHorizon bounds how far back Recover looks: older unanswered
// messages are neither run nor marked.
const recoveryHorizon = 7 * 24 * time.Hour

// ExpiredText is the reply stored for an unanswered message too old to run.
const ExpiredText = "Sorry, this message arrived while the assistant was restarting and was not answered. Please send it again."

// Recovered tells that a turn left unanswered by a stop or crash has its
// reply now.
type Recovered struct {
	Channel     string
	SessionKey  string
	UserID      string
	ChatID      string
	ClientMsgID string
	UserSeq     int64
	Reply       Reply
}

// OnRecovered registers a listener for replies produced by Recover, so that
// channels can deliver them (Telegram sends them; WebSocket clients that are
// connected get them at once, others on resume).
func (m *Manager) OnRecovered(fn func(Recovered)) {
	m.mu.Lock()
	m.recovered = append(m.recovered, fn)
	m.mu.Unlock()
}

// Recover runs again, once, the turns a stop or a crash left without a
// reply: user messages whose turn was interrupted by a shutdown, or that
// have no reply at all. Those stored more than maxAge ago are not run;
// they get a failed reply asking the user to send again. With several
// replicas on one PostgreSQL database only one runs the pass at a time.
// It returns how many turns it ran and how many it marked expired.
func (m *Manager) Recover(ctx context.Context, maxAge time.Duration) (ran, expired int, err error) {
	now := m.now()
	_, err = m.store.Exclusive(ctx, "recovery", func() error {
		todo, err := m.store.Unanswered(ctx, now.Add(-recoveryHorizon))
		if err != nil {
			return err
		}
		for _, u := range todo {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			stale := u.CreatedAt.Before(now.Add(-maxAge))
			out, err := m.recoverOne(ctx, u, stale)
			if errors.Is(err, ErrShuttingDown) {
				return nil
			}
			if err != nil {
				m.log.Error("recovery failed", slog.String("session_key", u.SessionKey), slog.Int64("seq", u.Seq), slog.String("error", err.Error()))
				continue
			}
			if stale {
				expired++
			} else {
				ran++
			}
			rec := Recovered{Channel: u.Channel, SessionKey: u.SessionKey, UserID: u.UserID, ChatID: u.ChatID, UserSeq: u.Seq, Reply: out.Reply}
			if u.ClientMsgID != nil {
				rec.ClientMsgID = *u.ClientMsgID
			}
			m.mu.Lock()
			ls := m.recovered
			m.mu.Unlock()
			for _, fn := range ls {
				fn(rec)
			}
		}
		return nil
	})
	if ran+expired > 0 {
		m.log.Info("recovered unanswered turns", slog.Int("ran", ran), slog.Int("expired", expired))
	}
	return ran, expired, err
}

func (m *Manager) recoverOne(ctx context.Context, u Unanswered, stale bool) (Outcome, error) {
	release, err := m.acquire(ctx, u.SessionKey)
	if err != nil {
		return Outcome{}, err
	}
	defer release()
	// The conversation may have moved on (or been archived) since: work on
	// a fresh copy, and drop the cached one so the next turn reloads.
	m.hot.Remove(u.SessionKey)
	conv, err := m.store.Conversation(ctx, u.ConversationID)
	if err != nil || conv == nil {
		return Outcome{}, errors.Join(errors.New("conversation vanished"), err)
	}
	policy := m.Policy(u.Channel)
	hc := &hotConv{conv: *conv, cap: windowCap(policy)}
	if stale {
		now := m.now()
		msgs := []Message{{ConversationID: conv.ID, Role: agent.RoleAssistant, Content: ExpiredText,
			ReplyTo: u.Seq, Status: MsgFailed, Error: "not run: older than recovery.max_age", CreatedAt: now}}
		if err := m.appendReply(ctx, hc, msgs, now, 0, 0, ""); err != nil {
			return Outcome{}, err
		}
		return Outcome{ConversationID: conv.ID, UserSeq: u.Seq, Reply: toReply(&msgs[0])}, nil
	}
	before, err := m.store.MessagesAfter(ctx, conv.ID, max(0, u.Seq-int64(hc.cap)), int(hc.cap))
	if err != nil {
		return Outcome{}, err
	}
	hc.window = before
	turnCtx, endTurn := m.startTurn(u.SessionKey)
	defer endTurn()
	in := Inbound{Channel: u.Channel, SessionKey: u.SessionKey, UserID: u.UserID, ChatID: u.ChatID}
	return m.runAgent(turnCtx, hc, u.Message, policy, in, Hooks{}), nil
}
