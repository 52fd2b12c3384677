package sessions

// One turn, start to end: claim the burst's messages (runBatch), call
// the agent with the history window, store the reply — kept in memory
// and retried while the database does not answer — and hand the outcome
// to the tickets or the channel. The state machine of a turn is here;
// its claims and settling are Manager.claim and Manager.settle, its SQL
// store.DB.ClaimTurn and its kin.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// runBatch claims the claimable turns of conversation conv, oldest first,
// as one turn, runs it and delivers its reply: to the local tickets of its
// messages (the newest one's carries the reply, Outcome.Merged tells the
// others), else through the channel's deliverer. The caller holds the
// key's turn lock. alive is nil on the live path (turns other replicas
// hold are left to them); the rescuer passes the replicas alive, and the
// turns of the others are taken over. A batch whose oldest message is
// older than maxAge (when > 0) is not run: the user is asked to send it
// again. claimed, when set, is the turn its message was stored as
// (nothing to claim), and early its agent call, started while it was
// stored (Manager.startEarly). It reports what it did: running (ran), expired, or
// "" (nothing was claimable).
//
// A turn is four steps, each below: claim (the batch, under the state
// lock), call (the agent, or the stored answer of a turn that is not
// run), store (the reply's append is the turn's transition) and deliver.
func (m *Manager) runBatch(ctx context.Context, in Inbound, conv string, alive []string, maxAge time.Duration, claimed *ledger.Batch, early *earlyCall) (string, *ledger.Batch, error) {
	if early != nil {
		// Ends with the turn whichever way it goes, also when storage
		// fails before the turn starts.
		defer early.stop()
	}
	t, err := m.claimTurn(ctx, in, conv, alive, claimed, early)
	if t == nil || err != nil {
		return "", nil, err
	}
	kind, msgs, reply, state := m.callTurn(ctx, t, maxAge)
	msgs, state, err = m.storeTurn(ctx, t, msgs, reply, state)
	if err != nil {
		return "", t.b, err
	}
	m.deliverOutcome(ctx, t, msgs, state)
	return kind, t.b, nil
}

// turnRun is one turn on its way through runBatch's steps.
type turnRun struct {
	in      Inbound
	conv    string
	policy  Policy
	early   *earlyCall
	now     time.Time
	b       *ledger.Batch
	hc      *hotConv
	hist    []agent.Message  // the history the model sees (nil with an early call, which built its own)
	model   *agent.ModelSpec // the model the turn asks for (nil: the agent's own)
	tickets []*Ticket        // the local tickets of the batch's messages
	lead    *Ticket          // the one that carries the reply, when here
	called  bool             // the agent was called (callTurn): not refused, expired or stopped first
}

// claimTurn is the claim: under the key's state lock, the batch of
// claimable messages (or the one stored claimed), the conversation as the
// turn sees it, and the history window; then the tickets waiting here for
// the batch's messages. It returns nil when nothing was claimable.
func (m *Manager) claimTurn(ctx context.Context, in Inbound, conv string, alive []string, claimed *ledger.Batch, early *earlyCall) (*turnRun, error) {
	key := in.SessionKey
	t := &turnRun{in: in, conv: conv, policy: m.Policy(in.Channel), early: early}
	busy := t.policy.Busy.withDefaults()
	release, err := m.lockState(ctx, key, false)
	if err != nil {
		return nil, err
	}
	hc, err := m.hotFor(ctx, in, conv)
	if err != nil {
		release()
		return nil, err
	}
	if early != nil {
		t.model = early.model
	} else if t.model, err = m.standing.modelSpec(ctx, key); err != nil {
		release()
		return nil, err
	}
	t.now = m.now()
	b := claimed
	if b == nil {
		b, err = m.store.ClaimBatch(ctx, ledger.Claim{ConversationID: conv, Owner: m.opts.ReplicaID, Held: m.heldSeqs(key, conv),
			TakeOver: alive != nil, Alive: alive, Now: t.now, Limit: busy.MaxBatch, Track: m.routes.tracks(in.Channel)})
	} else {
		b.LastSeq, b.Epoch = hc.conv.LastSeq, hc.conv.Epoch // stored by this process, under this lock
	}
	if err != nil {
		release()
		return nil, err
	}
	if b == nil {
		release()
		m.tr.traceStatus(ctx, "none")
		// Nothing to run: another runner took this conversation's
		// waiting messages (it delivers their replies), or they are
		// answered. A message stored as its own turn is not among them:
		// no claim takes it, and its ticket runs it.
		for _, tk := range m.takeTickets(key, conv, func(tk *Ticket) bool { return tk.claimed == nil }) {
			tk.resolve(Outcome{ConversationID: tk.ref.conv, UserSeq: tk.ref.seq, Pending: true, Turn: ledger.TurnRef{ConversationID: tk.ref.conv, Seq: tk.ref.seq}}, nil)
		}
		return nil, nil
	}
	lead := b.Lead()
	for _, r := range b.Rows {
		m.hold(turnKey{conv, r.Seq})
	}
	if b.Foreign {
		// Another replica lives (it stored one of these messages): it
		// hears of the reply, for the clients it serves.
		m.hb.setPeers(true)
	}
	if b.LastSeq != hc.conv.LastSeq || b.Epoch != hc.conv.Epoch {
		// Another replica wrote to the conversation since it was cached:
		// the turn sees what it wrote.
		if hc, err = m.reload(ctx, in, conv); err != nil {
			release()
			m.handBack(b)
			return nil, err
		}
	}
	var buf [32]int64
	members := seqSet(buf[:0])
	for _, r := range b.Rows {
		members = append(members, r.Seq)
	}
	// The history the model sees, taken from the window under the lock
	// (an early call built its own from the same window when its message
	// was stored).
	if early == nil {
		t.hist = historyFor(priorOf(hc.window, members, lead), t.policy)
	}
	release()
	t.b, t.hc = b, hc

	t.tickets = m.takeTickets(key, conv, func(tk *Ticket) bool { return members.has(tk.ref.seq) })
	for _, tk := range t.tickets {
		if tk.ref.seq == lead && !tk.resend {
			t.lead = tk
		}
	}
	if t.lead == nil {
		for _, tk := range t.tickets {
			if tk.ref.seq == lead {
				t.lead = tk
			}
		}
	}
	m.opts.Observer.TurnStarted(in.Channel, len(b.Rows), max(0, t.now.Sub(b.Rows[0].CreatedAt)))
	m.tr.traceClaim(ctx, b, t.tickets)
	if t.in.UserID == "" {
		t.in.UserID, t.in.ChatID = hc.conv.UserID, hc.conv.ChatID
	}
	return t, nil
}

// callTurn is the call: the agent's answer to the batch, or the stored
// answer of a turn that is not run — too old to run (expired), or stopped
// while it waited. It returns the turn's kind, the messages to store, the
// agent's reply and the state the turn settles in.
func (m *Manager) callTurn(ctx context.Context, t *turnRun, maxAge time.Duration) (string, []ledger.Message, agent.Reply, string) {
	b, lead := t.b, t.b.Lead()
	switch {
	case maxAge > 0 && b.Rows[0].CreatedAt.Before(t.now.Add(-maxAge)):
		return ledger.TurnExpired, []ledger.Message{{ConversationID: t.conv, Role: agent.RoleAssistant, Content: ExpiredText,
			ReplyTo: lead, Status: ledger.MsgFailed, Error: ledger.NotRunPrefix + " older than recovery.max_age", CreatedAt: t.now}}, agent.Reply{}, ledger.TurnExpired
	case t.early == nil && m.takeStop(t.in.SessionKey):
		// (A Stop reaches an early call through its running context.)
		// Stopped while it waited: settled as stopped, the agent not called.
		return ledger.TurnRunning, []ledger.Message{{ConversationID: t.conv, Role: agent.RoleAssistant, ReplyTo: lead, Status: ledger.MsgInterrupted,
			Error: ledger.InterruptedByUser, CreatedAt: t.now}}, agent.Reply{}, ledger.TurnAnswered
	}
	if t.early == nil {
		// (A turn started early had no budget to check: Manager.Submit.)
		if s := m.standing.overBudget(ctx, t.in, t.policy); s != nil {
			m.opts.Observer.BudgetRefused(t.in.Channel, s.Over())
			return ledger.TurnRunning, []ledger.Message{{ConversationID: t.conv, Role: agent.RoleAssistant, Content: BudgetText(*s, t.now),
				ReplyTo: lead, Status: ledger.MsgFailed, Error: OverBudgetPrefix + s.Over(), CreatedAt: t.now}}, agent.Reply{}, ledger.TurnFailed
		}
	}
	var hooks Hooks
	if t.lead != nil {
		hooks = t.lead.hooks
	}
	var turnCtx context.Context
	var endTurn func()
	if t.early != nil {
		turnCtx, endTurn = t.early.ctx, t.early.stop
	} else {
		turnCtx, endTurn = m.life.startTurn(t.in.SessionKey)
	}
	turnCtx = m.tr.withTurn(ctx, turnCtx)
	t.called = true
	msgs, reply, state := m.callFor(turnCtx, t.hc, b, t.hist, t.model, t.in, hooks, t.early)
	endTurn()
	return ledger.TurnRunning, msgs, reply, state
}

// RejectedText is the reply of a turn whose reply the database rejected
// for good (ledger.ErrRejected): what the turn produced cannot be kept.
const RejectedText = "Sorry — I couldn't save this answer, so it was dropped. Please try again, or ask differently."

// RejectedPrefix starts the stored error of a turn settled failed because
// the database rejected what it was to store.
const RejectedPrefix = "storage rejected the turn's data: "

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
	err := m.appendReply(ctx, t.hc, msgs, t.now, reply.Usage, reply.Cost, reply.Model, b.Seqs(), b.Attempt, state, waiting)
	if errors.Is(err, ledger.ErrRejected) {
		m.log.ErrorContext(ctx, "the reply was rejected by the database; the turn fails", slog.String("session_key", key),
			slog.String("conversation", t.conv), slog.Int64("seq", b.Lead()), slog.String("error", err.Error()))
		msgs, state = rejectedReply(msgs, state, err)
		err = m.appendReply(ctx, t.hc, msgs, t.now, agent.Usage{}, 0, "", b.Seqs(), b.Attempt, state, waiting)
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

// rejectedReply is what a turn stores in place of msgs, which the
// database rejected (err): a failure notice that settles it failed; or,
// for a turn handed back (interrupted), its hand-back without the
// partial text.
func rejectedReply(msgs []ledger.Message, state string, err error) ([]ledger.Message, string) {
	last := msgs[len(msgs)-1]
	notice := ledger.Message{ConversationID: last.ConversationID, Role: agent.RoleAssistant, ReplyTo: last.ReplyTo, CreatedAt: last.CreatedAt}
	if state == ledger.TurnInterrupted {
		notice.Status, notice.Error = ledger.MsgInterrupted, last.Error
		return []ledger.Message{notice}, state
	}
	notice.Content, notice.Status, notice.Error = RejectedText, ledger.MsgFailed, RejectedPrefix+err.Error()
	return []ledger.Message{notice}, ledger.TurnFailed
}

// deliverOutcome is the delivery: the stored reply goes to the lead's
// ticket, the merged messages' tickets learn they were answered with it,
// and a reply nobody here waits for goes out through the channel.
func (m *Manager) deliverOutcome(ctx context.Context, t *turnRun, msgs []ledger.Message, state string) {
	b, conv, lead := t.b, t.conv, t.b.Lead()
	final := toReply(&msgs[len(msgs)-1])
	final.Covers = clientIDs(b.Rows)
	out := Outcome{ConversationID: conv, UserSeq: lead, Reply: final, Turn: ledger.TurnRef{ConversationID: conv, Seq: lead}}
	if m.tr.tracer != nil {
		out.Trace = trace.SpanContextFromContext(ctx)
	}
	m.tr.traceStatus(ctx, final.Status)
	if state != ledger.TurnInterrupted && m.routes.tracks(t.in.Channel) {
		out.Turn = b.Ref()
	}
	for _, tk := range t.tickets {
		if tk != t.lead {
			tk.resolve(Outcome{ConversationID: conv, UserSeq: tk.ref.seq, Reply: final, Merged: true,
				Turn: ledger.TurnRef{ConversationID: conv, Seq: lead}}, nil)
		}
	}
	for _, r := range b.Rows {
		if r.Seq != lead || out.Turn.Claim == "" {
			m.unhold(turnKey{conv, r.Seq})
		}
	}
	switch {
	case t.lead != nil:
		t.lead.resolve(out, nil)
	case state == ledger.TurnInterrupted:
		// Claimable again; whoever runs it delivers.
	default:
		// Nobody here waits for this turn's reply (its newest message came
		// to another replica, or to an earlier process): the channel
		// delivers it.
		last := b.Rows[len(b.Rows)-1]
		m.routes.deliver(ctx, Delivery{Channel: t.in.Channel, SessionKey: t.in.SessionKey, UserID: t.in.UserID, ChatID: t.in.ChatID,
			ClientMsgID: last.ClientMsgID, UserSeq: lead, Reply: final, Turn: out.Turn})
	}
}

func (m *Manager) unholdBatch(b *ledger.Batch) {
	for _, r := range b.Rows {
		m.unhold(turnKey{b.ConversationID, r.Seq})
	}
}

// reload replaces the cached copy of conversation conv with a fresh one.
// Called under the state lock.
func (m *Manager) reload(ctx context.Context, in Inbound, conv string) (*hotConv, error) {
	if hc, ok := m.hot.Get(in.SessionKey); ok && hc.conv.ID == conv {
		m.hot.Remove(in.SessionKey)
	}
	return m.hotFor(ctx, in, conv)
}

// hotFor returns the cached copy of the key's conversation conv, or a
// fresh one when conv is not the cached active one (an earlier
// conversation, or the cache is cold). Called under the state lock.
func (m *Manager) hotFor(ctx context.Context, in Inbound, conv string) (*hotConv, error) {
	if hc, ok := m.hot.Get(in.SessionKey); ok && hc.conv.ID == conv {
		return hc, nil
	}
	c, err := m.store.Conversation(ctx, conv)
	if err != nil || c == nil {
		return nil, errors.Join(fmt.Errorf("conversation %s vanished", conv), err)
	}
	hc := &hotConv{conv: *c, cap: windowCap(m.Policy(in.Channel))}
	if hc.window, err = m.store.RecentMessages(ctx, c.ID, hc.cap); err != nil {
		return nil, err
	}
	if c.Status == ledger.StatusActive {
		m.hot.Add(in.SessionKey, hc)
	}
	return hc, nil
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
func (m *Manager) appendReply(turnCtx context.Context, hc *hotConv, msgs []ledger.Message, now time.Time, usage agent.Usage, cost float64, model string, answers []int64, attempt int, state string, waiting func(since time.Time)) error {
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
		done, err := m.tryAppendReply(ctx, hc, msgs, now, usage, cost, model, answers, attempt, state, release, expired, failed)
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
func (m *Manager) tryAppendReply(ctx context.Context, hc *hotConv, msgs []ledger.Message, now time.Time, usage agent.Usage, cost float64, model string, answers []int64, attempt int, state string, release *ledger.Settle, expired func() bool, failed error) (bool, error) {
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
			err = m.store.Append(ctx, ledger.Append{Conv: &hc.conv, ExpectSeq: hc.conv.LastSeq, Messages: msgs, At: now, Tokens: usage.TotalTokens, Cost: cost, Model: model,
				TurnSeq: userSeq, Answers: answers, Settle: release, Usage: m.standing.usageFor(&hc.conv, msgs, model, now, turns, usage.Estimated)})
			if err == nil {
				hc.push(msgs...)
				m.hot.Update(hc.conv.SessionKey, hc)
				m.relay.announceReply(&hc.conv, userSeq, msgs[len(msgs)-1].Seq, state)
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
			m.relay.announceReply(&hc.conv, userSeq, msgs[len(msgs)-1].Seq, state)
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
