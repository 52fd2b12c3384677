package sessions

// A turn's reply stored (runBatch's third step): storeTurn appends the
// call's messages, kept in memory and retried while the database does not
// answer (appendReply), and tells a user whose message waits on storage
// (noticeDelay, delayOver).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// noticeDelay tells the users of tickets whose turn has waited on the
// database since since, when that is longer than Options.DelayNotice:
// once per session key until a turn of the key is stored again (a user
// with a burst of waiting messages is told once), through the first of
// the key's tickets that has an OnDelay hook.
func (m *Manager) noticeDelay(tickets []*Ticket, since time.Time) {
	if d := m.health.DelayNotice(); d <= 0 || m.now().Sub(since) < d {
		return
	}
	for _, t := range tickets {
		if t.hooks.OnDelay == nil || t.delayed.Load() {
			continue
		}
		key := t.in.SessionKey
		told := m.health.tell(key)
		t.delayed.Store(true)
		if !told {
			t.hooks.OnDelay(Delay{ConversationID: t.ref.conv, Seq: t.ref.seq, Since: since})
		}
	}
}

// delayOver: a turn of key was stored; a later delay is told again.
func (m *Manager) delayOver(key string) {
	m.health.untell(key)
}

// storeTurn is the store: the reply's append is the transition — it lands
// only while no claim moved the conversation's epoch. An interrupted turn
// is handed back with its partial reply, due at once; a tracked channel's
// delivery stays claimed: the channel sends, then marks it. A reply the
// database rejects for good (ledger.ErrRejected) is replaced by a failure
// notice, RejectedText, and the turn settles failed with it (an
// interrupted one is handed back without its partial text). A reply that
// could not be stored fails the batch's tickets, and the turn is handed
// back (or left to the runner that took it over). It returns what was
// stored and the state the turn settled in.
func (m *Manager) storeTurn(ctx context.Context, t *turnRun, msgs []ledger.Message, reply agent.Reply, state string) ([]ledger.Message, string, error) {
	key, b := t.in.SessionKey, t.b
	endStore := m.tr.startSpan(ctx, "store reply")
	waiting := func(since time.Time) { m.noticeDelay(t.tickets, since) }
	fire := fireOf(b)
	if fire != "" {
		markLate(msgs, b.Rows[0])
	}
	err := m.appendReply(ctx, t.hc, msgs, t.now, reply.Usage, reply.Cost, modelOf(reply), b.Seqs(), b.Attempt, state, fire, waiting)
	if errors.Is(err, ledger.ErrRejected) {
		m.log.ErrorContext(ctx, "the reply was rejected by the database; the turn fails", slog.String("session_key", key),
			slog.String("conversation", t.conv), slog.Int64("seq", b.Lead()), slog.String("error", err.Error()))
		msgs, state = rejectedReply(msgs, state, err)
		err = m.appendReply(ctx, t.hc, msgs, t.now, agent.Usage{}, 0, models{}, b.Seqs(), b.Attempt, state, fire, waiting)
	}
	endStore(err)
	if err == nil {
		m.delayOver(key)
		if state != ledger.TurnInterrupted && t.called {
			// Only a turn that called the model grows what a summary
			// folds; one refused (budget), expired or stopped before it
			// ran causes no model call, a summary's included.
			m.compaction.later(t.in, t.conv)
		}
		return msgs, state, nil
	}
	m.hot.Remove(key)
	lost := errors.Is(err, ledger.ErrLostClaim)
	if lost {
		m.log.WarnContext(ctx, "turn was taken over by another runner; this reply is dropped", slog.String("session_key", key),
			slog.String("conversation", t.conv), slog.Int64("seq", b.Lead()))
	} else {
		m.log.ErrorContext(ctx, "storing reply failed; the turn is handed back to run again", slog.String("session_key", key),
			slog.String("conversation", t.conv), slog.String("error", err.Error()))
	}
	err = fmt.Errorf("%w: %w", ErrReplyNotStored, err)
	for _, tk := range t.tickets {
		tk.resolve(Outcome{ConversationID: t.conv, UserSeq: tk.ref.seq}, err)
	}
	if lost {
		m.unholdBatch(b)
	} else {
		m.handBack(b) // under the turn lock still: no claim of this replica comes between
	}
	return msgs, state, err
}

// appendReply stores agent output after the conversation's last message,
// as the runner of the turn of user messages answers (oldest first, the
// last the lead, userSeq) under claim attempt;
// state interrupted hands the turn back in the same transaction. It does
// not require the conversation to be active: a sweep may archive it while
// the agent works, and the reply still belongs there. A storage failure
// is retried, with backoff, until storage answers: the reply the model
// wrote is kept in memory (up to maxUnstored replies at once; past that,
// for as long as the turn's lease would last, and the turn is handed
// back), so the model is not paid twice for it; one the database rejects
// for good (ledger.ErrRejected) is not retried. The claim is this
// replica's unless somebody took it over — another replica that saw this
// one's heartbeat stop — which moves the conversation's epoch: the append
// then fails, and nothing is stored twice (ErrLostClaim). It gives up
// when the drain's deadline has passed (the process ends; the others, or
// its next start, run the turn). waiting is told, after each failure,
// since when the reply has waited.
//
// fire is the subject of the fire whose turn this is ("" for the user's
// turns): its reply is not the user's activity, and its spend is tallied
// under the subject too.
func (m *Manager) appendReply(turnCtx context.Context, hc *hotConv, msgs []ledger.Message, now time.Time, usage agent.Usage, cost float64, model models, answers []int64, attempt int, state, fire string, waiting func(since time.Time)) error {
	userSeq := answers[len(answers)-1]
	ctx := context.WithoutCancel(turnCtx)
	var release *ledger.Settle
	if state == ledger.TurnInterrupted {
		due := now // (a copy: taking now's address would move it to the heap on every call)
		release = &ledger.Settle{Owner: m.opts.ReplicaID, Attempt: attempt, DueAt: &due}
	}
	kept, unstored := m.health.keepUnstored()
	defer unstored()
	giveUp := time.Now().Add(m.opts.LeaseTTL)
	expired := func() bool { return !kept && time.Now().After(giveUp) }
	wait := min(50*time.Millisecond, m.opts.RetryPause)
	var failing time.Time
	var failed error // the last try's storage error: it may have landed
	for {
		// Each try under the key's state lock, which guards hc; not held
		// while waiting, so that the user's next messages are stored
		// meanwhile whenever storage takes them.
		unlock, _ := m.lockState(ctx, hc.conv.SessionKey, false) // (ctx is never cancelled)
		done, err := m.tryAppendReply(ctx, hc, msgs, now, usage, cost, model, answers, attempt, state, fire, release, expired, failed)
		unlock()
		if done {
			return err
		}
		failed = err
		if errors.Is(err, ledger.ErrClosed) || expired() || m.life.base.Err() != nil {
			return err
		}
		if failing.IsZero() {
			failing = m.now()
			m.log.WarnContext(turnCtx, "storing reply failed; kept and retried until storage answers", slog.String("conversation", hc.conv.ID),
				slog.Int64("seq", userSeq), slog.String("error", err.Error()))
		}
		if waiting != nil {
			waiting(failing)
		}
		// The next try first asks whether this one landed after all: the
		// cached conversation may have been refreshed meanwhile (by the
		// user's next message, or another turn), so the same append again
		// need not find the conversation moved.
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-m.life.base.Done():
			t.Stop()
		}
		wait = min(wait*2, 4*m.opts.RetryPause)
	}
}

// tryAppendReply is one try of appendReply, under the key's state lock:
// done with the outcome, or not done with the storage error to wait on.
// After a try that failed (failed: its error), the turn is read first:
// that try may have landed.
func (m *Manager) tryAppendReply(ctx context.Context, hc *hotConv, msgs []ledger.Message, now time.Time, usage agent.Usage, cost float64, model models, answers []int64, attempt int, state, fire string, release *ledger.Settle, expired func() bool, failed error) (bool, error) {
	userSeq := answers[len(answers)-1]
	err := failed
	for {
		if err == nil {
			for i := range msgs {
				msgs[i].Seq = hc.conv.LastSeq + int64(i) + 1
			}
			var turns int64
			if release == nil && msgs[len(msgs)-1].Status == ledger.MsgOK {
				turns = 1
			}
			tally := m.standing.usageFor(&hc.conv, msgs, model.name, now, turns, usage.Estimated)
			if tally != nil {
				tally.Schedule = fire
			}
			err = m.store.Append(ctx, ledger.Append{Conv: &hc.conv, ExpectSeq: hc.conv.LastSeq, Messages: msgs, At: now, KeepActivity: fire != "",
				Tokens: usage.TotalTokens, Cost: cost, Model: model.recorded(), TurnSeq: userSeq, Answers: answers, Settle: release, Usage: tally})
			if err == nil {
				hc.push(msgs...)
				m.hot.Update(hc.conv.SessionKey, hc)
				if !quietFire(fire, msgs) {
					m.relay.announceReply(&hc.conv, userSeq, msgs[len(msgs)-1].Seq, state)
				}
				return true, nil
			}
			if errors.Is(err, ledger.ErrRejected) {
				return true, err // refused, not lost: it did not land, and never will
			}
			if !errors.Is(err, ledger.ErrStale) && !errors.Is(err, ledger.ErrLostClaim) {
				return false, err
			}
		}
		// The conversation moved on — another append, or a claim moved
		// its epoch — or the hand-back found the claim gone, or the last
		// try failed unseen: is the turn still this runner's?
		t, lerr := m.store.TurnAt(ctx, hc.conv.ID, userSeq)
		switch {
		case lerr != nil:
			return false, lerr // storage again: wait, and ask again
		case t == nil:
			return true, fmt.Errorf("%w: the message vanished", err)
		case t.Attempts == attempt && ((release == nil && t.Owner == m.opts.ReplicaID && t.ReplySeq > 0) ||
			(release != nil && t.Owner == "" && t.State == ledger.TurnInterrupted)):
			// An earlier try landed after all (its commit's answer was
			// lost): only the holder of the claim appends replies.
			if t.ReplySeq > 0 {
				for i := range msgs {
					msgs[i].Seq = t.ReplySeq - int64(len(msgs)-1-i)
				}
			}
			m.hot.Remove(hc.conv.SessionKey)
			if !quietFire(fire, msgs) {
				m.relay.announceReply(&hc.conv, userSeq, msgs[len(msgs)-1].Seq, state)
			}
			return true, nil
		case t.Owner != m.opts.ReplicaID || t.Attempts != attempt:
			return true, fmt.Errorf("%w (%v)", ledger.ErrLostClaim, err)
		case expired():
			return true, err
		}
		// Still this runner's: others stored messages meanwhile (the user
		// writing on, here or on another replica). Append after them.
		fresh, lerr := m.store.Conversation(ctx, hc.conv.ID)
		if lerr == nil && fresh == nil {
			return true, fmt.Errorf("%w: the conversation vanished", err)
		}
		var window []ledger.Message
		if lerr == nil {
			// The tail moved: the window follows, so the next turn's
			// history has what was stored meanwhile.
			window, lerr = m.store.RecentMessages(ctx, fresh.ID, hc.cap)
		}
		if lerr != nil {
			return false, lerr
		}
		hc.reset(*fresh, window)
		err = nil
	}
}

// fireOf is the subject of the fire whose turn batch b is, or "": a
// fire's message is claimed alone (ledger's ClaimBatch), and its client
// id names the fire.
func fireOf(b *ledger.Batch) string {
	if len(b.Rows) != 1 {
		return ""
	}
	subject, _, ok := ledger.ParseFireMsgID(b.Rows[0].ClientMsgID)
	if !ok {
		return ""
	}
	return subject
}

// quietFire reports whether msgs, stored for a turn, are a fire's reply
// that has nothing to report (schedules.IsQuiet): stored, and sent to
// nobody — not by the channel (Routes.deliver), not to the clients of
// other replicas (no reply event).
func quietFire(fire string, msgs []ledger.Message) bool {
	return fire != "" && len(msgs) > 0 && msgs[len(msgs)-1].Status == ledger.MsgOK && schedules.IsQuiet(msgs[len(msgs)-1].Content)
}

// markLate starts a late fire's reply with a line that says so: a fire
// that runs late (its message stored more than schedules.OnTime after
// its due time, because no gateway ran then) tells the user it is late,
// whatever the model wrote. A reply with nothing to report stays quiet.
func markLate(msgs []ledger.Message, row ledger.BatchRow) {
	_, due, ok := ledger.ParseFireMsgID(row.ClientMsgID)
	last := &msgs[len(msgs)-1]
	if !ok || last.Status != ledger.MsgOK || schedules.IsQuiet(last.Content) {
		return
	}
	if late := row.CreatedAt.Sub(due); late > schedules.OnTime {
		last.Content = LateNotice(late) + "\n\n" + last.Content
	}
}

// LateNotice is the line a late fire's reply starts with.
func LateNotice(late time.Duration) string {
	late = late.Round(time.Minute)
	text := fmt.Sprintf("%d min", int(late.Minutes()))
	if late >= time.Hour {
		text = fmt.Sprintf("%d h %d min", int(late.Hours()), int(late.Minutes())%60)
	}
	return "⏰ This comes " + text + " late: the bot was not running when it was due."
}
