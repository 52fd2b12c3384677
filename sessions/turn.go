package sessions

// One turn, start to end. A message arrives and is stored (Manager.Submit,
// Manager.accept), its model call perhaps begun early
// (Manager.startEarly); it waits in its key's line (Manager.enqueue,
// Manager.runNext); then runBatch runs the turn in four steps, each in
// the file after this one: claim the burst's messages (claimTurn, here,
// with the holds and hand-backs of claims), call the agent
// (Manager.callTurn), store the reply — kept in memory and retried while
// the database does not answer (Manager.storeTurn) — and deliver the
// outcome to the tickets or the channel (Manager.deliverOutcome). Its SQL
// is store.DB.ClaimTurn and its kin.
//
// Which turns a runner of this process holds (hold, heldSeqs), and
// settling — hand-backs and delivery marks retried until they land, the
// turn held meanwhile — are here too: with owedSet and watcher they keep
// the invariant that a turn not settled is held by a runner here, or due.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// turnKey names a turn in memory.
type turnKey struct {
	conv string
	seq  int64
}

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
		t.in.anySender = true // the conversation's first sender, not this message's
	}
	if !t.in.anySender && !oneSender(b, t.tickets, t.in.UserID) {
		t.in.anySender = true
	}
	return t, nil
}

// oneSender reports whether every message of the batch was sent here by
// user: each has its ticket (the rescuer's turns have none), and each
// ticket's sender is user.
func oneSender(b *ledger.Batch, tickets []*Ticket, user string) bool {
	if len(tickets) < len(b.Rows) {
		return false
	}
	for _, tk := range tickets {
		if tk.in.UserID != user {
			return false
		}
	}
	return true
}

// RejectedText is the reply of a turn whose reply the database rejected
// for good (ledger.ErrRejected): what the turn produced cannot be kept.
const RejectedText = "Sorry — I couldn't save this answer, so it was dropped. Please try again, or ask differently."

// RejectedPrefix starts the stored error of a turn settled failed because
// the database rejected what it was to store.
const RejectedPrefix = "storage rejected the turn's data: "

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

// claim claims a turn as seen (owner, attempt) for this replica; nil when
// it moved on meanwhile. A won claim is held until unhold.
func (m *Manager) claim(ctx context.Context, convID string, seq int64, seenOwner string, seenAttempt int) (*ledger.Claimed, error) {
	ref := turnKey{convID, seq}
	m.hold(ref)
	c, err := m.store.ClaimTurn(ctx, convID, seq, seenOwner, seenAttempt, m.opts.ReplicaID, m.now())
	if err != nil || c == nil {
		m.unhold(ref)
	}
	return c, err
}

// settle makes a claim-guarded write that gives up a turn this replica
// holds (a delivery mark, a hand-back). If it fails for any reason but
// the claim being gone, the turn stays held and the write is retried in
// the background, with backoff, until it lands, the claim turns out taken
// over, or the gateway stops (its heartbeat then stops too, and the
// others take the turn over): a turn is never left owned with nobody
// holding it. The first attempt's error is returned.
//
// The first attempt is not cut at once by the drain deadline, which
// cancels the turns still running (lifecycle.base): what it records — a
// reply a channel already sent, a turn handed back — is no running work,
// and a mark lost there has the replica that takes this one's turns over
// send the reply again. It gets Options.InterruptGrace past the deadline,
// as an interrupted turn's partial reply does; the retries
// (Rescuer.keepTrying) stop with the gateway.
func (m *Manager) settle(unhold func(), write func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancel(context.WithoutCancel(m.life.base))
	defer cancel()
	stop := context.AfterFunc(m.life.base, func() { time.AfterFunc(m.opts.InterruptGrace, cancel) })
	err := write(ctx)
	stop()
	if err == nil || definite(err) {
		unhold()
		m.rescue.Wake()
		return err
	}
	m.rescue.keepTrying(unhold, write)
	return fmt.Errorf("%w (kept, and retried until storage answers)", err)
}

// handBack gives a batch this replica claimed and could not finish (its
// reply could not be stored) back to the ledger, due at once, so that the
// rescuer — here or on another replica — runs it again; see settle. Its
// messages stay held until the hand-back lands.
func (m *Manager) handBack(b *ledger.Batch) {
	for _, r := range b.Rows {
		m.hold(turnKey{b.ConversationID, r.Seq})
	}
	m.settle(func() { m.unholdBatch(b) }, func(ctx context.Context) error {
		return m.store.ReleaseTurn(ctx, b.ConversationID, b.Lead(), m.opts.ReplicaID, b.Attempt, m.now(), "reply could not be stored")
	})
}

// hold notes that a run of this replica holds a turn now, so that a
// resend arriving meanwhile does not take it for abandoned, and no claim
// of this replica takes it again (heldSeqs).
func (m *Manager) hold(k turnKey) {
	m.mu.Lock()
	if seqs := m.claims[k.conv]; !slices.Contains(seqs, k.seq) {
		m.claims[k.conv] = append(seqs, k.seq)
	}
	m.mu.Unlock()
}

// unhold: the turn is settled or handed on.
func (m *Manager) unhold(k turnKey) {
	m.mu.Lock()
	seqs := m.claims[k.conv]
	if i := slices.Index(seqs, k.seq); i >= 0 {
		seqs[i] = seqs[len(seqs)-1]
		if seqs = seqs[:len(seqs)-1]; len(seqs) == 0 {
			delete(m.claims, k.conv)
		} else {
			m.claims[k.conv] = seqs
		}
	}
	m.mu.Unlock()
}

func (m *Manager) holding(k turnKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Contains(m.claims[k.conv], k.seq)
}

// heldSeqs are the messages of conversation conv that a runner of this
// replica holds: turns running or delivering, and messages stored as
// their own turn whose runner has not taken them yet. A message waiting
// in the key's burst to be claimed is not among them — its runner claims
// it, whatever state an earlier, failed claim left it in. Every other
// turn this replica owns in conv is nobody's here, and its claims take
// it again. Called under the key's state lock.
func (m *Manager) heldSeqs(key, conv string) []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	seqs := m.claims[conv]
	if len(seqs) == 0 {
		return nil
	}
	waiting := map[int64]bool{}
	if b := m.bursts[key]; b != nil {
		for _, t := range b.waiting {
			if t.ref.conv == conv && t.claimed == nil {
				waiting[t.ref.seq] = true
			}
		}
	}
	out := make([]int64, 0, len(seqs))
	for _, seq := range seqs {
		if !waiting[seq] {
			out = append(out, seq)
		}
	}
	return out
}

// takeTickets removes from the key's burst the tickets of conversation
// conv that pick chooses and returns them. A ticket leaves the burst only
// for the batch that holds its message, or for a claim that found its
// message taken: never on the guess that another runner has it.
func (m *Manager) takeTickets(key, conv string, pick func(*Ticket) bool) []*Ticket {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.bursts[key]
	if b == nil {
		return nil
	}
	var took []*Ticket
	kept := b.waiting[:0]
	for _, t := range b.waiting {
		if t.ref.conv == conv && pick(t) {
			took = append(took, t)
		} else {
			kept = append(kept, t)
		}
	}
	clear(b.waiting[len(kept):])
	b.waiting = kept
	return took
}
