package sessions

// One turn, start to end: claim the burst's messages (runBatch), call
// the agent with the history window, store the reply — kept in memory
// and retried while the database does not answer — and hand the outcome
// to the tickets or the channel. The state machine of a turn is here;
// its claims and settling are in settle.go, its SQL in ledger.go.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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
// stored (early.go). It reports what it did: running (ran), expired, or
// "" (nothing was claimable).
func (m *Manager) runBatch(ctx context.Context, in Inbound, conv string, alive []string, maxAge time.Duration, claimed *ledger.Batch, early *earlyCall) (string, *ledger.Batch, error) {
	if early != nil {
		// Ends with the turn whichever way it goes, also when storage
		// fails before the turn starts.
		defer early.stop()
	}
	key := in.SessionKey
	policy := m.Policy(in.Channel)
	busy := policy.Busy.withDefaults()
	release, err := m.lockState(ctx, key, false)
	if err != nil {
		return "", nil, err
	}
	hc, err := m.hotFor(ctx, in, conv)
	if err != nil {
		release()
		return "", nil, err
	}
	now := m.now()
	b := claimed
	if b == nil {
		b, err = m.store.ClaimBatch(ctx, ledger.Claim{ConversationID: conv, Owner: m.opts.ReplicaID, Held: m.heldSeqs(key, conv),
			TakeOver: alive != nil, Alive: alive, Now: now, Limit: busy.MaxBatch, Track: m.tracks(in.Channel)})
	} else {
		b.LastSeq, b.Epoch = hc.conv.LastSeq, hc.conv.Epoch // stored by this process, under this lock
	}
	if err != nil {
		release()
		return "", nil, err
	}
	if b == nil {
		release()
		m.traceStatus(ctx, "none")
		// Nothing to run: another runner took this conversation's
		// waiting messages (it delivers their replies), or they are
		// answered. A message stored as its own turn is not among them:
		// no claim takes it, and its ticket runs it.
		for _, t := range m.takeTickets(key, conv, func(t *Ticket) bool { return t.claimed == nil }) {
			t.resolve(Outcome{ConversationID: t.ref.conv, UserSeq: t.ref.seq, Pending: true, Turn: ledger.TurnRef{ConversationID: t.ref.conv, Seq: t.ref.seq}}, nil)
		}
		return "", nil, nil
	}
	lead := b.Lead()
	for _, r := range b.Rows {
		m.hold(turnKey{conv, r.Seq})
	}
	if b.Foreign {
		// Another replica lives (it stored one of these messages): it
		// hears of the reply, for the clients it serves.
		m.setPeers(true)
	}
	if b.LastSeq != hc.conv.LastSeq || b.Epoch != hc.conv.Epoch {
		// Another replica wrote to the conversation since it was cached:
		// the turn sees what it wrote.
		if hc, err = m.reload(ctx, in, conv); err != nil {
			release()
			m.handBack(b)
			return "", nil, err
		}
	}
	members := map[int64]bool{}
	for _, r := range b.Rows {
		members[r.Seq] = true
	}
	// The history the model sees, taken from the window under the lock
	// (an early call built its own from the same window when its message
	// was stored).
	var hist []agent.Message
	if early == nil {
		hist = historyFor(priorOf(hc.window, members, lead), policy)
	}
	release()

	tickets := m.takeTickets(key, conv, func(t *Ticket) bool { return members[t.ref.seq] })
	var leadTicket *Ticket
	for _, t := range tickets {
		if t.ref.seq == lead && !t.resend {
			leadTicket = t
		}
	}
	if leadTicket == nil {
		for _, t := range tickets {
			if t.ref.seq == lead {
				leadTicket = t
			}
		}
	}
	m.opts.Observer.TurnStarted(in.Channel, len(b.Rows), max(0, now.Sub(b.Rows[0].CreatedAt)))
	m.traceClaim(ctx, b, tickets)
	if in.UserID == "" {
		in.UserID, in.ChatID = hc.conv.UserID, hc.conv.ChatID
	}

	var msgs []ledger.Message
	var reply agent.Reply
	kind := ledger.TurnRunning
	state := ledger.TurnAnswered
	switch {
	case maxAge > 0 && b.Rows[0].CreatedAt.Before(now.Add(-maxAge)):
		kind, state = ledger.TurnExpired, ledger.TurnExpired
		msgs = []ledger.Message{{ConversationID: conv, Role: agent.RoleAssistant, Content: ExpiredText,
			ReplyTo: lead, Status: ledger.MsgFailed, Error: ledger.NotRunPrefix + " older than recovery.max_age", CreatedAt: now}}
	case early == nil && m.takeStop(key):
		// (A Stop reaches an early call through its running context.)
		// Stopped while it waited: settled as stopped, the agent not called.
		msgs = []ledger.Message{{ConversationID: conv, Role: agent.RoleAssistant, ReplyTo: lead, Status: ledger.MsgInterrupted,
			Error: ledger.InterruptedByUser, CreatedAt: now}}
	default:
		var hooks Hooks
		if leadTicket != nil {
			hooks = leadTicket.hooks
		}
		var turnCtx context.Context
		var endTurn func()
		if early != nil {
			turnCtx, endTurn = early.ctx, early.stop
		} else {
			turnCtx, endTurn = m.startTurn(key)
		}
		turnCtx = withTurn(ctx, turnCtx)
		msgs, reply, state = m.callFor(turnCtx, hc, b, hist, in, hooks, early)
		endTurn()
	}
	// The reply's append is the transition: it lands only while no claim
	// moved the conversation's epoch. An interrupted turn is handed back
	// with its partial reply, due at once; a tracked channel's delivery
	// stays claimed: the channel sends, then marks it.
	endStore := m.startSpan(ctx, "store reply")
	err = m.appendReply(ctx, hc, msgs, now, reply.Usage.TotalTokens, reply.Cost, reply.Model, b.Seqs(), b.Attempt, state,
		func(since time.Time) { m.noticeDelay(tickets, since) })
	endStore(err)
	if err != nil {
		m.hot.Remove(key)
		lost := errors.Is(err, ledger.ErrLostClaim)
		if lost {
			m.log.WarnContext(ctx, "turn was taken over by another runner; this reply is dropped", slog.String("session_key", key),
				slog.String("conversation", conv), slog.Int64("seq", lead))
		} else {
			m.log.ErrorContext(ctx, "storing reply failed; the turn is handed back to run again", slog.String("session_key", key),
				slog.String("conversation", conv), slog.String("error", err.Error()))
		}
		err = fmt.Errorf("%w: %w", ErrReplyNotStored, err)
		for _, t := range tickets {
			t.resolve(Outcome{ConversationID: conv, UserSeq: t.ref.seq}, err)
		}
		if lost {
			m.unholdBatch(b)
		} else {
			m.handBack(b) // under the turn lock still: no claim of this replica comes between
		}
		return "", b, err
	}
	m.delayOver(key)
	if state != ledger.TurnInterrupted {
		m.compactLater(in, conv)
	}
	final := toReply(&msgs[len(msgs)-1])
	final.Covers = clientIDs(b.Rows)
	out := Outcome{ConversationID: conv, UserSeq: lead, Reply: final, Turn: ledger.TurnRef{ConversationID: conv, Seq: lead}}
	out.Trace = trace.SpanContextFromContext(ctx)
	m.traceStatus(ctx, final.Status)
	if state != ledger.TurnInterrupted && m.tracks(in.Channel) {
		out.Turn = b.Ref()
	}
	for _, t := range tickets {
		switch {
		case t == leadTicket:
		default:
			t.resolve(Outcome{ConversationID: conv, UserSeq: t.ref.seq, Reply: final, Merged: true,
				Turn: ledger.TurnRef{ConversationID: conv, Seq: lead}}, nil)
		}
	}
	for _, r := range b.Rows {
		if r.Seq != lead || out.Turn.Claim == "" {
			m.unhold(turnKey{conv, r.Seq})
		}
	}
	switch {
	case leadTicket != nil:
		leadTicket.resolve(out, nil)
	case state == ledger.TurnInterrupted:
		// Claimable again; whoever runs it delivers.
	default:
		// Nobody here waits for this turn's reply (its newest message came
		// to another replica, or to an earlier process): the channel
		// delivers it.
		last := b.Rows[len(b.Rows)-1]
		m.deliverTurn(ctx, Delivery{Channel: in.Channel, SessionKey: key, UserID: in.UserID, ChatID: in.ChatID,
			ClientMsgID: last.ClientMsgID, UserSeq: lead, Reply: final, Turn: out.Turn})
	}
	return kind, b, nil
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

// callFor calls the agent for a batch — the history before its lead
// without the batch's own messages, then each of them as a user message
// — and returns what to store: the reply, a failure notice, or the
// partial reply of an interrupted turn, and the turn's state after it.
// With early, the call was made already (its deltas went to the lead's
// hooks since its ack): its answer is taken instead.
func (m *Manager) callFor(turnCtx context.Context, hc *hotConv, b *ledger.Batch, hist []agent.Message, in Inbound, h Hooks, early *earlyCall) ([]ledger.Message, agent.Reply, string) {
	lead := b.Lead()
	var partial strings.Builder
	var reply agent.Reply
	var err error
	if early != nil {
		var text string
		reply, err, text = early.result()
		partial.WriteString(text)
	} else {
		// The turn runs with the settings of its start: a reload
		// meanwhile applies to the next one.
		live := m.settings()
		req := m.request(b.Rows, hist, in, live.instructions)
		m.fetchImages(turnCtx, live.agent, hc.conv.Channel, &req)
		reply, err = m.callAgent(turnCtx, live.agent, req, func(d string) {
			partial.WriteString(d)
			if h.OnDelta != nil {
				h.OnDelta(d)
			}
		})
	}
	now := m.now()
	conv := hc.conv.ID
	failed := func(text, why string) ([]ledger.Message, agent.Reply, string) {
		return []ledger.Message{{ConversationID: conv, Role: agent.RoleAssistant, Content: text,
			ReplyTo: lead, Status: ledger.MsgFailed, Error: why, CreatedAt: now}}, agent.Reply{}, ledger.TurnFailed
	}
	switch {
	case err == nil && len(reply.Messages) > 0 && len(reply.Messages[len(reply.Messages)-1].ToolCalls) > 0:
		// The gateway offers the model no tools; a turn that ends asking
		// for one cannot be answered, and running it again would not help.
		var names []string
		for _, tc := range reply.Messages[len(reply.Messages)-1].ToolCalls {
			names = append(names, tc.Name)
		}
		m.log.WarnContext(turnCtx, "model asked for tools the gateway does not offer", slog.String("session_key", in.SessionKey),
			slog.String("tools", strings.Join(names, ",")))
		return failed(ToolCallsText, "model returned tool calls: "+strings.Join(names, ", "))
	case err == nil && len(reply.Messages) > 0:
		var msgs []ledger.Message
		for _, am := range reply.Messages {
			msgs = append(msgs, ledger.Message{
				ConversationID: conv, Role: am.Role, Content: am.Content,
				ToolCalls: encodeToolCalls(am.ToolCalls), ToolCallID: am.ToolCallID,
				ReplyTo: lead, Status: ledger.MsgOK, CreatedAt: now,
			})
		}
		last := &msgs[len(msgs)-1]
		last.PromptTokens, last.CompletionTkns, last.Cost = reply.Usage.PromptTokens, reply.Usage.CompletionTokens, reply.Cost
		return msgs, reply, ledger.TurnAnswered
	case turnCtx.Err() != nil:
		why, state := ledger.InterruptedByShutdown, ledger.TurnAnswered
		switch cause := context.Cause(turnCtx); {
		case errors.Is(cause, errStoppedByUser):
			why = ledger.InterruptedByUser
		case errors.Is(cause, errNewMessage):
			// Claimable again at once: the next turn answers these
			// messages with the newer ones.
			why, state = ledger.InterruptedByMessage, ledger.TurnInterrupted
		case m.opts.NoRerun:
			why = ledger.InterruptedByShutdownFinal
		default:
			// Claimable again at once: by this replica's next start or by
			// any live replica now.
			state = ledger.TurnInterrupted
		}
		return []ledger.Message{{ConversationID: conv, Role: agent.RoleAssistant, Content: partial.String(),
			ReplyTo: lead, Status: ledger.MsgInterrupted, Error: why, CreatedAt: now}}, agent.Reply{}, state
	default:
		if err == nil {
			err = errors.New("agent returned no message")
		}
		m.log.WarnContext(turnCtx, "agent call failed", slog.String("session_key", in.SessionKey), slog.String("conversation", conv),
			slog.Int64("seq", lead), slog.String("error", err.Error()))
		return failed(m.opts.FailureText, err.Error())
	}
}

// request is the agent request of a turn answering rows after hist — the
// history before its lead without its own messages (historyFor of
// priorOf), then each of them as a user message.
// Its pictures are not fetched yet (fetchImages does that, outside any
// lock).
func (m *Manager) request(rows []ledger.BatchRow, hist []agent.Message, in Inbound, instructions string) agent.Request {
	texts := make([]string, len(rows))
	atts := make([][]agent.Attachment, len(rows))
	for i, r := range rows {
		texts[i] = r.Content
		atts[i] = decodeAttachments(r.Attachments)
	}
	return agent.Request{
		SessionKey:       in.SessionKey,
		Instructions:     instructions,
		History:          hist,
		Earlier:          texts[:len(texts)-1],
		Input:            texts[len(texts)-1],
		InputAttachments: atts,
	}
}

// priorOf is the history a turn with lead and members sees: every stored
// message but the turn's own and the user messages stored after it, in
// turn order — each reply right after the message it answers, even when
// later messages were stored before it (they arrived while it ran). The
// messages are the window's own, not copies: use them under the key's
// state lock, which alone changes the window.
func priorOf(window []ledger.Message, members map[int64]bool, lead int64) []*ledger.Message {
	prior := make([]*ledger.Message, 0, len(window))
	for i := range window {
		msg := &window[i]
		if members[msg.Seq] || members[msg.ReplyTo] || (msg.Role == agent.RoleUser && msg.Seq > lead) {
			continue // the turn's own, or what an earlier run of it left
		}
		prior = append(prior, msg)
	}
	at := func(msg *ledger.Message) int64 {
		if msg.Role == agent.RoleUser {
			return msg.Seq
		}
		return msg.ReplyTo
	}
	order := func(a, b *ledger.Message) int {
		if c := cmp.Compare(at(a), at(b)); c != 0 {
			return c
		}
		// A message before the replies to it.
		return cmp.Compare(boolInt(a.Role != agent.RoleUser), boolInt(b.Role != agent.RoleUser))
	}
	// Stored order is turn order unless a message arrived while a turn
	// ran; only then is there anything to sort.
	if !slices.IsSortedFunc(prior, order) {
		slices.SortStableFunc(prior, order)
	}
	return prior
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func toReply(msg *ledger.Message) Reply {
	return Reply{Seq: msg.Seq, Text: msg.Content, Status: msg.Status, Error: msg.Error}
}

// callAgent calls the agent; a panicking backend fails the turn (the user
// message stays, the user is told) instead of taking the gateway down.
func (m *Manager) callAgent(ctx context.Context, ag agent.Agent, req agent.Request, onDelta func(string)) (reply agent.Reply, err error) {
	ctx, call := m.startAgentCall(ctx, ag)
	if call != nil {
		defer func() { call.end(ctx, &agentReplyInfo{tokens: reply.Usage.TotalTokens}, err) }()
		next := onDelta
		onDelta = func(d string) {
			call.delta()
			if next != nil {
				next(d)
			}
		}
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("agent %s panicked: %v", ag.Name(), p)
		}
	}()
	return ag.Reply(ctx, req, onDelta)
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
// back), so the model is not paid twice for it. The claim is this
// replica's unless somebody took it over — another replica that saw this
// one's heartbeat stop — which moves the conversation's epoch: the append
// then fails, and nothing is stored twice (ErrLostClaim). It gives up
// when the drain's deadline has passed (the process ends; the others, or
// its next start, run the turn). waiting is told, after each failure,
// since when the reply has waited.
func (m *Manager) appendReply(turnCtx context.Context, hc *hotConv, msgs []ledger.Message, now time.Time, tokens int64, cost float64, model string, answers []int64, attempt int, state string, waiting func(since time.Time)) error {
	userSeq := answers[len(answers)-1]
	ctx := context.WithoutCancel(turnCtx)
	var release *ledger.Settle
	if state == ledger.TurnInterrupted {
		release = &ledger.Settle{Owner: m.opts.ReplicaID, Attempt: attempt, DueAt: &now}
	}
	kept := m.unstored.Add(1) <= maxUnstored
	defer m.unstored.Add(-1)
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
		done, err := m.tryAppendReply(ctx, hc, msgs, now, tokens, cost, model, answers, attempt, state, release, expired, failed)
		unlock()
		if done {
			return err
		}
		failed = err
		if errors.Is(err, ledger.ErrClosed) || expired() || m.base.Err() != nil {
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
		case <-m.base.Done():
			t.Stop()
		}
		wait = min(wait*2, 4*m.opts.RetryPause)
	}
}

// tryAppendReply is one try of appendReply, under the key's state lock:
// done with the outcome, or not done with the storage error to wait on.
// After a try that failed (failed: its error), the turn is read first:
// that try may have landed.
func (m *Manager) tryAppendReply(ctx context.Context, hc *hotConv, msgs []ledger.Message, now time.Time, tokens int64, cost float64, model string, answers []int64, attempt int, state string, release *ledger.Settle, expired func() bool, failed error) (bool, error) {
	userSeq := answers[len(answers)-1]
	err := failed
	for {
		if err == nil {
			for i := range msgs {
				msgs[i].Seq = hc.conv.LastSeq + int64(i) + 1
			}
			err = m.store.Append(ctx, ledger.Append{Conv: &hc.conv, ExpectSeq: hc.conv.LastSeq, Messages: msgs, At: now, Tokens: tokens, Cost: cost, Model: model,
				TurnSeq: userSeq, Answers: answers, Settle: release})
			if err == nil {
				hc.push(msgs...)
				m.hot.Update(hc.conv.SessionKey, hc)
				m.announceReply(&hc.conv, userSeq, msgs[len(msgs)-1].Seq, state)
				return true, nil
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
			m.announceReply(&hc.conv, userSeq, msgs[len(msgs)-1].Seq, state)
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
		hc.conv, hc.window = *fresh, window
		err = nil
	}
}
