package sessions

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/chatgate/chatgate/agent"
)

// How messages become turns. Submit stores a message and acknowledges it
// at once, under the session key's short state lock; it never waits for a
// turn. The message joins its key's burst: the messages stored here and
// not yet answered. One runner per key and replica starts the next turn
// once the burst's debounce has passed and the turn before it has ended:
// it takes the key's turn lock (and, with several replicas, the key's
// lease), then claims in the ledger every claimable message of the
// conversation, oldest first, up to max_batch — messages stored by
// another replica included — as one turn with one agent call. The busy
// mode only shapes that: queue claims one message a turn, interrupt
// cancels the running turn when a message arrives (its messages are
// claimable again at once and join the next turn). What a turn answers is
// in the rows (every message of a burst names its lead, the newest, whose
// seq the reply answers), so a resend, a restart or another replica finds
// the same turn.

// errNewMessage cancels a turn for a newer message (busy mode interrupt).
var errNewMessage = errors.New(InterruptedByMessage)

// Ticket is a stored message waiting for the turn that answers it.
type Ticket struct {
	m       *Manager
	in      Inbound
	hooks   Hooks
	ref     turnKey
	resend  bool // the message was stored before (Outcome.Duplicate)
	reset   *ResetEvent
	started time.Time  // wall clock: for the turn's duration
	claimed *Batch     // the message was stored claimed, as this turn
	early   *earlyCall // and its agent call started meanwhile; the runner takes it

	once    sync.Once
	delayed atomic.Bool // OnDelay was called
	done    chan struct{}
	out     Outcome
	err     error

	span trace.SpanContext // the message's span: its turn links to it
}

// Done is closed once Wait has its answer.
func (t *Ticket) Done() <-chan struct{} { return t.done }

// Seq is the stored message's seq, and ConversationID its conversation.
func (t *Ticket) Seq() int64             { return t.ref.seq }
func (t *Ticket) ConversationID() string { return t.ref.conv }

// Wait returns the outcome of the turn that answers the message: its
// reply (Outcome.Merged when a later message of the same burst carries
// it), or Pending when another runner holds it. The turn runs to its end
// whether or not anybody waits; ctx bounds only the wait.
func (t *Ticket) Wait(ctx context.Context) (Outcome, error) {
	select {
	case <-t.done:
		return t.out, t.err
	case <-ctx.Done():
		return Outcome{}, ctx.Err()
	}
}

// resolve gives the ticket its answer, once. The drain counts every
// ticket until it is resolved.
func (t *Ticket) resolve(out Outcome, err error) {
	t.once.Do(func() {
		if err == nil {
			out.Reset = t.reset
			out.Duplicate = out.Duplicate || t.resend
		}
		t.out, t.err = out, err
		status := out.Reply.Status
		switch {
		case err != nil:
			status = "error"
		case out.Duplicate && out.Reply.Seq != 0:
			status = "duplicate"
		case out.Merged:
			status = "merged"
		case out.Pending:
			status = "pending"
		}
		t.m.opts.Observer.TurnDone(t.in.Channel, status, time.Since(t.started))
		if out.Turn.Claim == "" {
			t.m.unhold(t.ref) // settled or handed on; else the channel delivers under it
		}
		close(t.done)
		t.m.turns.Done()
	})
}

// burst is a session key's messages stored here and not yet in a turn,
// and its runner. Guarded by Manager.mu.
type burst struct {
	key     string
	policy  BusyPolicy
	waiting []*Ticket
	first   time.Time // the first waiting message arrived (Options.Now)
	last    time.Time // and the newest
	kick    chan struct{}
	stop    bool // Stop came while nothing ran: the next turn is stopped
	// failing: since when starting the next turn has failed (storage),
	// and the pause before the next try.
	failing time.Time
	backoff time.Duration
}

// startAt is when the burst's next turn may start.
func (b *burst) startAt() time.Time {
	return minTime(b.last.Add(b.policy.Debounce), b.first.Add(b.policy.DebounceMax))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Submit stores a user message — after the reset policy, deduplication by
// client id, and OnReset — calls OnAck, and returns its Ticket. It does
// not wait for any turn: a message is stored and acknowledged when it
// arrives, whatever runs. A message whose client id is stored already is
// acknowledged again and answered from storage, or by the turn that
// answers it.
func (m *Manager) Submit(ctx context.Context, in Inbound, h Hooks) (*Ticket, error) {
	ctx, end := m.traceMessage(ctx, in)
	t, err := m.submit(ctx, in, h)
	end(t, err)
	return t, err
}

func (m *Manager) submit(ctx context.Context, in Inbound, h Hooks) (*Ticket, error) {
	if err := m.check(in); err != nil {
		return nil, err
	}
	if !m.enter() {
		return nil, ErrShuttingDown
	}
	t := &Ticket{m: m, in: in, hooks: h, started: time.Now(), done: make(chan struct{})}
	t.span = trace.SpanContextFromContext(ctx)
	if err := m.startHeartbeat(); err != nil {
		t.resolve(Outcome{}, err)
		return nil, err
	}
	giveUp := time.Now().Add(10 * time.Second)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := m.accept(ctx, t)
		if errors.Is(err, ErrStale) && time.Now().Before(giveUp) && ctx.Err() == nil {
			// The conversation changed underneath (a sweep archived it, a
			// CLI reset, another replica storing the same user's messages):
			// reload and start over. Each refusal means another writer got
			// through, so this ends; a short, growing pause lets a burst of
			// writers on several replicas pass each other.
			m.hot.Remove(in.SessionKey)
			pause := time.NewTimer(time.Duration(rand.Int64N(int64(wait)) + 1))
			select {
			case <-pause.C:
			case <-ctx.Done():
				pause.Stop()
			}
			continue
		}
		if err != nil {
			t.resolve(Outcome{}, err)
			return nil, err
		}
		return t, nil
	}
}

func (m *Manager) check(in Inbound) error {
	switch {
	case in.Channel == "" || in.SessionKey == "":
		return ErrBadInbound
	case strings.TrimSpace(in.Text) == "" && len(in.Attachments) == 0:
		return ErrEmptyMessage
	case len(in.Text) > m.opts.MaxInputBytes:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLong, len(in.Text), m.opts.MaxInputBytes)
	case !utf8.ValidString(in.Text):
		return ErrBadText
	}
	return nil
}

// accept stores the ticket's message under the key's state lock and
// hands it to the key's burst.
func (m *Manager) accept(ctx context.Context, t *Ticket) error {
	in := t.in
	release, err := m.lockState(ctx, in.SessionKey, true)
	if err != nil {
		return err
	}
	defer release()
	policy := m.Policy(in.Channel)
	now := m.now()
	hc, err := m.load(ctx, in, policy, now)
	if err != nil {
		return err
	}
	if in.ClientMsgID != "" {
		if um := hc.byClientID(in.ClientMsgID); um != nil {
			return m.resend(ctx, t, um.ConversationID, um.Seq)
		}
	}
	reason, expired := policy.Reset.Expired(&hc.conv, now)
	if in.ClientMsgID != "" && (expired || hc.conv.LastSeq == 0) {
		// A resend of a message stored before a reset or a sweep belongs to
		// its old conversation, not to a new one.
		tr, err := m.store.TurnByClientID(ctx, in.SessionKey, in.ClientMsgID)
		if err != nil {
			return err
		}
		if tr != nil {
			return m.resend(ctx, t, tr.ConversationID, tr.Seq)
		}
	}
	if expired {
		old, oldSeq := hc.conv.ID, hc.conv.LastSeq
		// Conditional on the state judged: if another replica used the
		// conversation since this one cached it, nothing is archived and
		// the message starts over from storage.
		archived, err := m.store.Archive(ctx, old, reason, now, hc.conv.LastSeq)
		if err != nil {
			return err
		}
		if !archived {
			return fmt.Errorf("archive %s: %w", old, ErrStale)
		}
		m.hot.Remove(in.SessionKey)
		if hc, err = m.create(ctx, in, policy, now); err != nil {
			return err
		}
		t.reset = &ResetEvent{Channel: in.Channel, SessionKey: in.SessionKey, OldConversation: old, NewConversation: hc.conv.ID, Reason: reason,
			OldMessages: oldSeq}
		m.log.Info("conversation reset", slog.String("session_key", in.SessionKey), slog.String("reason", reason),
			slog.String("archived", old), slog.String("conversation", hc.conv.ID))
		if t.hooks.OnReset != nil {
			t.hooks.OnReset(*t.reset)
		}
		m.publish(*t.reset)
	} else if err := m.tellEarlierReset(ctx, t, hc, policy); err != nil {
		return err
	}
	// Stored pending, owned by this replica: if it dies before a turn
	// takes the message, the others find it by its owner. When nothing
	// else of the key is waiting or running here, no debounce applies and
	// no other gateway shares the database, the message is stored already
	// claimed, as its own turn: the claim would find it alone anyway.
	um := Message{
		ConversationID: hc.conv.ID, Seq: hc.conv.LastSeq + 1, Role: agent.RoleUser,
		Content: in.Text, Attachments: encodeAttachments(in.Attachments), Status: MsgOK, CreatedAt: now,
		TurnState: TurnPending, TurnOwner: m.opts.ReplicaID,
	}
	solo := policy.Busy.Debounce == 0 && !m.store.Shared() && m.idle(in.SessionKey) && settledTail(hc)
	if solo {
		um.TurnState, um.TurnAttempt, um.TurnLead, um.TurnTrack = TurnRunning, 1, um.Seq, m.tracks(in.Channel)
	}
	if in.ClientMsgID != "" {
		id := in.ClientMsgID
		um.ClientMsgID = &id
	}
	rows := []BatchRow{{Seq: um.Seq, ClientMsgID: in.ClientMsgID, Content: in.Text, Attachments: um.Attachments, CreatedAt: now}}
	var early *earlyCall
	if solo {
		// Its own turn, this replica's before the commit lands: the agent
		// call starts now, from the history before it (early.go).
		live := m.settings() // the turn's settings, as callFor takes them
		early = m.startEarly(in, hc.conv.Channel, live.agent,
			m.request(rows, priorOf(hc.window, map[int64]bool{um.Seq: true}, um.Seq), policy, in, live.instructions))
	}
	batch := []Message{um}
	endStore := m.startSpan(ctx, "store")
	err = m.store.Append(ctx, Append{Conv: &hc.conv, ExpectSeq: hc.conv.LastSeq, RequireActive: true, Messages: batch, At: now})
	endStore(err)
	if err != nil && early != nil {
		// Not stored, not acknowledged: the call is dropped unseen.
		early.abandon(err)
	}
	if errors.Is(err, ErrDuplicate) {
		stored, lerr := m.store.MessageByClientID(ctx, hc.conv.ID, in.ClientMsgID)
		if lerr != nil || stored == nil {
			return errors.Join(err, lerr)
		}
		return m.resend(ctx, t, stored.ConversationID, stored.Seq)
	}
	if err != nil {
		return err
	}
	hc.push(batch[0])
	m.hot.Update(hc.conv.SessionKey, hc)
	t.ref = turnKey{hc.conv.ID, batch[0].Seq}
	if solo {
		t.claimed = &Batch{ConversationID: hc.conv.ID, Attempt: 1, LastSeq: hc.conv.LastSeq, Epoch: hc.conv.Epoch,
			Rows: rows}
		t.early = early
	}
	if t.hooks.OnAck != nil {
		t.hooks.OnAck(Ack{ConversationID: hc.conv.ID, Seq: t.ref.seq})
	}
	if early != nil {
		// Stored and acknowledged: what the model streamed so far, and
		// from now on, may be shown.
		early.release(t.hooks.OnDelta)
	}
	m.enqueue(t)
	return nil
}

// resend answers a message whose client id is already stored, through
// the ledger: from the stored reply when its turn has one; when a run of
// this replica holds it, by acknowledging it and leaving the reply to
// that run (Pending); otherwise by handing it to the key's burst, whose
// runner claims it if nobody alive holds it (its replica stopped or died
// before answering: a first run, not a second).
func (m *Manager) resend(ctx context.Context, t *Ticket, convID string, seq int64) error {
	t.resend = true
	t.ref = turnKey{convID, seq}
	tr, err := m.store.TurnAt(ctx, convID, seq)
	if err != nil {
		return err
	}
	if tr == nil {
		return fmt.Errorf("message %s/%d vanished", convID, seq)
	}
	if tr.settled() {
		out, err := m.storedOutcome(ctx, tr)
		if err != nil {
			return err
		}
		if tr.Track && tr.State != TurnDelivered {
			// Its delivery never completed: whoever claims it delivers.
			if c, err := m.claimIfFree(ctx, tr); err != nil {
				return err
			} else if c != nil {
				out.Turn = c.Ref()
			}
		}
		if t.hooks.OnAck != nil {
			t.hooks.OnAck(Ack{ConversationID: convID, Seq: seq})
		}
		t.resolve(out, nil)
		return nil
	}
	if t.hooks.OnAck != nil {
		t.hooks.OnAck(Ack{ConversationID: convID, Seq: seq})
	}
	if m.holding(t.ref) {
		t.resolve(Outcome{ConversationID: convID, UserSeq: seq, Pending: true, Turn: TurnRef{ConversationID: convID, Seq: seq}}, nil)
		return nil
	}
	m.enqueue(t)
	return nil
}

// storedOutcome is the outcome of a settled turn, from storage.
func (m *Manager) storedOutcome(ctx context.Context, tr *Turn) (Outcome, error) {
	out := Outcome{ConversationID: tr.ConversationID, UserSeq: tr.Seq, Duplicate: true,
		Turn: TurnRef{ConversationID: tr.ConversationID, Seq: tr.Lead}}
	reply, err := m.store.Message(ctx, tr.ConversationID, tr.ReplySeq)
	if err != nil {
		return Outcome{}, err
	}
	if reply != nil {
		out.Reply = toReply(reply)
	}
	covers, err := m.store.Covers(ctx, tr.ConversationID, tr.Lead)
	if err != nil {
		return Outcome{}, err
	}
	out.Reply.Covers = clientIDs(covers)
	return out, nil
}

func clientIDs(rows []BatchRow) []string {
	var ids []string
	for _, r := range rows {
		if r.ClientMsgID != "" {
			ids = append(ids, r.ClientMsgID)
		}
	}
	return ids
}

// settledTail reports whether every user message in the cached window
// has its final reply (or there is none): then no earlier message waits
// for a turn, and a new one can be stored as its own. (A message may be
// stored with its answer lost, and a reply stored after it: the newest
// message being a reply proves nothing.)
func settledTail(hc *hotConv) bool {
	if hc.conv.LastSeq == 0 {
		return true
	}
	if len(hc.window) == 0 || hc.window[len(hc.window)-1].Seq != hc.conv.LastSeq {
		return false
	}
	answered := map[int64]bool{}
	for i := range hc.window {
		if m := &hc.window[i]; m.isFinalReply() &&
			!(m.Status == MsgInterrupted && (m.Error == InterruptedByShutdown || m.Error == InterruptedByMessage)) {
			answered[m.ReplyTo] = true
		}
	}
	for i := range hc.window {
		m := &hc.window[i]
		if m.Role != agent.RoleUser {
			continue
		}
		lead := m.TurnLead
		if lead == 0 {
			lead = m.Seq
		}
		if !answered[lead] {
			return false
		}
	}
	return true
}

// idle reports whether nothing of the key waits or runs here.
func (m *Manager) idle(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, running := m.running[key]
	b := m.bursts[key]
	return !running && (b == nil || len(b.waiting) == 0)
}

// enqueue adds a stored message to its key's burst and makes sure a
// runner serves the burst. Called under the key's state lock, so a
// burst's tickets are in seq order.
func (m *Manager) enqueue(t *Ticket) {
	m.hold(t.ref)
	key := t.in.SessionKey
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.bursts[key]
	if b == nil {
		b = &burst{key: key, kick: make(chan struct{}, 1)}
		m.bursts[key] = b
		m.turns.Add(1) // the runner
		go m.runBurst(b)
	}
	b.policy = m.Policy(t.in.Channel).Busy.withDefaults()
	if len(b.waiting) == 0 {
		b.first = now
	}
	b.last = now
	b.waiting = append(b.waiting, t)
	if b.policy.Mode == BusyInterrupt && !t.resend && t.claimed == nil {
		// (A message stored claimed interrupts nothing: nothing of the key
		// ran; what runs is its own early call.)
		if cancel, ok := m.running[key]; ok {
			cancel(errNewMessage)
		}
	}
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// runBurst runs a key's turns while its burst has messages: each turn
// starts once the debounce has passed (at once while draining), takes
// the key's turn lock, and claims what it answers.
func (m *Manager) runBurst(b *burst) {
	defer m.turns.Done()
	for {
		m.mu.Lock()
		if len(b.waiting) == 0 {
			delete(m.bursts, b.key)
			m.mu.Unlock()
			return
		}
		at, stop := b.startAt(), b.stop
		m.mu.Unlock()
		if wait := at.Sub(m.now()); wait > 0 && !stop && m.draining.Err() == nil {
			select {
			case <-m.opts.After(wait):
			case <-b.kick:
				continue // a new message: the wait starts again
			case <-m.draining.Done():
			}
		}
		err := m.runNext(b)
		if err == nil {
			m.mu.Lock()
			b.failing, b.backoff = time.Time{}, 0
			m.mu.Unlock()
			continue
		}
		// Storage failing: the messages stay stored and waiting, held by
		// this runner, which tries again with backoff; their users are
		// told once when it lasts (Options.DelayNotice).
		now := m.now()
		m.mu.Lock()
		first := b.failing.IsZero()
		if first {
			b.failing = now
		}
		since := b.failing
		b.backoff = min(max(2*b.backoff, m.opts.RetryPause), 8*m.opts.RetryPause)
		wait := b.backoff
		waiting := slices.Clone(b.waiting)
		m.mu.Unlock()
		if first {
			m.log.Error("starting a turn failed; retrying until storage answers", slog.String("session_key", b.key), slog.String("error", err.Error()))
		}
		m.noticeDelay(waiting, since)
		backoff := time.NewTimer(wait)
		select {
		case <-backoff.C:
		case <-m.base.Done():
			backoff.Stop()
		}
	}
}

// noticeDelay tells the users of tickets whose turn has waited on the
// database since since, when that is longer than Options.DelayNotice:
// once per session key until a turn of the key is stored again (a user
// with a burst of waiting messages is told once), through the first of
// the key's tickets that has an OnDelay hook.
func (m *Manager) noticeDelay(tickets []*Ticket, since time.Time) {
	if d := m.DelayNotice(); d <= 0 || m.now().Sub(since) < d {
		return
	}
	for _, t := range tickets {
		if t.hooks.OnDelay == nil || t.delayed.Load() {
			continue
		}
		key := t.in.SessionKey
		m.mu.Lock()
		told := m.told[key]
		m.told[key] = true
		m.mu.Unlock()
		t.delayed.Store(true)
		if !told {
			t.hooks.OnDelay(Delay{ConversationID: t.ref.conv, Seq: t.ref.seq, Since: since})
		}
	}
}

// delayOver: a turn of key was stored; a later delay is told again.
func (m *Manager) delayOver(key string) {
	m.mu.Lock()
	delete(m.told, key)
	m.mu.Unlock()
}

// runNext runs the turn of the burst's oldest message. An error means
// nothing was claimed (storage failed) and the burst waits as it was.
func (m *Manager) runNext(b *burst) error {
	m.mu.Lock()
	if len(b.waiting) == 0 {
		// Another runner here (the rescuer) took them meanwhile.
		m.mu.Unlock()
		return nil
	}
	head := b.waiting[0]
	m.mu.Unlock()
	in := head.in
	early := head.early
	head.early = nil // taken once: a retry after a storage failure runs as any turn
	var ctx context.Context
	var endTurn func(error)
	if early != nil {
		ctx, endTurn = early.trace, early.endTrace // begun with its call
	} else {
		ctx, endTurn = m.traceTurn(m.base, in)
	}
	endLock := m.startSpan(ctx, "lock wait")
	var release func()
	var err error
	if early != nil {
		release = early.unlock // taken with the call, before the commit
	} else {
		release, err = m.lockTurn(m.base, in.SessionKey)
	}
	endLock(err)
	defer func() { endTurn(err) }()
	if err != nil && !errors.Is(err, ErrShuttingDown) {
		return err // storage: the burst waits as it is, and runBurst retries
	}
	if err != nil {
		// The gateway is stopping: the messages stay stored and pending;
		// the next start (or another replica) answers them.
		m.mu.Lock()
		waiting := b.waiting
		b.waiting = nil
		m.mu.Unlock()
		for _, t := range waiting {
			t.resolve(Outcome{}, ErrShuttingDown)
		}
		return nil
	}
	defer release()
	if early != nil {
		// The turn has started: like a turn whose call started here, it
		// stores its reply (a partial one, interrupted, if Shutdown cancels
		// the call) whenever Shutdown comes.
		ctx = context.WithoutCancel(ctx)
	}
	_, b2, err := m.runBatch(ctx, in, head.ref.conv, nil, 0, head.claimed, early)
	if err != nil && b2 != nil {
		return nil // claimed, and the claim's tickets have their error
	}
	return err
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

// takeStop consumes a Stop that came while the key's burst waited.
func (m *Manager) takeStop(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b := m.bursts[key]; b != nil && b.stop {
		b.stop = false
		return true
	}
	return false
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
// stored (early.go). It reports what it did: running (ran), expired, or
// "" (nothing was claimable).
func (m *Manager) runBatch(ctx context.Context, in Inbound, conv string, alive []string, maxAge time.Duration, claimed *Batch, early *earlyCall) (string, *Batch, error) {
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
		b, err = m.store.ClaimBatch(ctx, Claim{ConversationID: conv, Owner: m.opts.ReplicaID, Held: m.heldSeqs(key, conv),
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
			t.resolve(Outcome{ConversationID: t.ref.conv, UserSeq: t.ref.seq, Pending: true, Turn: TurnRef{ConversationID: t.ref.conv, Seq: t.ref.seq}}, nil)
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
		m.peers.Store(true)
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
	prior := priorOf(hc.window, members, lead)
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

	var msgs []Message
	var reply agent.Reply
	kind := TurnRunning
	state := TurnAnswered
	switch {
	case maxAge > 0 && b.Rows[0].CreatedAt.Before(now.Add(-maxAge)):
		kind, state = TurnExpired, TurnExpired
		msgs = []Message{{ConversationID: conv, Role: agent.RoleAssistant, Content: ExpiredText,
			ReplyTo: lead, Status: MsgFailed, Error: notRunPrefix + " older than recovery.max_age", CreatedAt: now}}
	case early == nil && m.takeStop(key):
		// (A Stop reaches an early call through its running context.)
		// Stopped while it waited: settled as stopped, the agent not called.
		msgs = []Message{{ConversationID: conv, Role: agent.RoleAssistant, ReplyTo: lead, Status: MsgInterrupted,
			Error: InterruptedByUser, CreatedAt: now}}
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
		msgs, reply, state = m.callFor(turnCtx, hc, b, prior, policy, in, hooks, early)
		endTurn()
	}
	// The reply's append is the transition: it lands only while no claim
	// moved the conversation's epoch. An interrupted turn is handed back
	// with its partial reply, due at once; a tracked channel's delivery
	// stays claimed: the channel sends, then marks it.
	endStore := m.startSpan(ctx, "store reply")
	err = m.appendReply(ctx, hc, msgs, now, reply.Usage.TotalTokens, reply.Cost, reply.Model, lead, b.Attempt, state,
		func(since time.Time) { m.noticeDelay(tickets, since) })
	endStore(err)
	if err != nil {
		m.hot.Remove(key)
		lost := errors.Is(err, ErrLostClaim)
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
	final := toReply(&msgs[len(msgs)-1])
	final.Covers = clientIDs(b.Rows)
	out := Outcome{ConversationID: conv, UserSeq: lead, Reply: final, Turn: TurnRef{ConversationID: conv, Seq: lead}}
	out.Trace = trace.SpanContextFromContext(ctx)
	m.traceStatus(ctx, final.Status)
	if state != TurnInterrupted && m.tracks(in.Channel) {
		out.Turn = b.Ref()
	}
	for _, t := range tickets {
		switch {
		case t == leadTicket:
		default:
			t.resolve(Outcome{ConversationID: conv, UserSeq: t.ref.seq, Reply: final, Merged: true,
				Turn: TurnRef{ConversationID: conv, Seq: lead}}, nil)
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
	case state == TurnInterrupted:
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

func (m *Manager) unholdBatch(b *Batch) {
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
	if c.Status == StatusActive {
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
func (m *Manager) callFor(turnCtx context.Context, hc *hotConv, b *Batch, prior []Message, policy Policy, in Inbound, h Hooks, early *earlyCall) ([]Message, agent.Reply, string) {
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
		req := m.request(b.Rows, prior, policy, in, live.instructions)
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
	failed := func(text, why string) ([]Message, agent.Reply, string) {
		return []Message{{ConversationID: conv, Role: agent.RoleAssistant, Content: text,
			ReplyTo: lead, Status: MsgFailed, Error: why, CreatedAt: now}}, agent.Reply{}, TurnFailed
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
		var msgs []Message
		for _, am := range reply.Messages {
			msgs = append(msgs, Message{
				ConversationID: conv, Role: am.Role, Content: am.Content,
				ToolCalls: encodeToolCalls(am.ToolCalls), ToolCallID: am.ToolCallID,
				ReplyTo: lead, Status: MsgOK, CreatedAt: now,
			})
		}
		last := &msgs[len(msgs)-1]
		last.PromptTokens, last.CompletionTkns, last.Cost = reply.Usage.PromptTokens, reply.Usage.CompletionTokens, reply.Cost
		return msgs, reply, TurnAnswered
	case turnCtx.Err() != nil:
		why, state := InterruptedByShutdown, TurnAnswered
		switch cause := context.Cause(turnCtx); {
		case errors.Is(cause, errStoppedByUser):
			why = InterruptedByUser
		case errors.Is(cause, errNewMessage):
			// Claimable again at once: the next turn answers these
			// messages with the newer ones.
			why, state = InterruptedByMessage, TurnInterrupted
		case m.opts.NoRerun:
			why = InterruptedByShutdownFinal
		default:
			// Claimable again at once: by this replica's next start or by
			// any live replica now.
			state = TurnInterrupted
		}
		return []Message{{ConversationID: conv, Role: agent.RoleAssistant, Content: partial.String(),
			ReplyTo: lead, Status: MsgInterrupted, Error: why, CreatedAt: now}}, agent.Reply{}, state
	default:
		if err == nil {
			err = errors.New("agent returned no message")
		}
		m.log.WarnContext(turnCtx, "agent call failed", slog.String("session_key", in.SessionKey), slog.String("conversation", conv),
			slog.Int64("seq", lead), slog.String("error", err.Error()))
		return failed(m.opts.FailureText, err.Error())
	}
}

// request is the agent request of a turn answering rows after prior —
// the history before its lead without its own messages, then each of them
// as a user message.
// Its pictures are not fetched yet (fetchImages does that, outside any
// lock).
func (m *Manager) request(rows []BatchRow, prior []Message, policy Policy, in Inbound, instructions string) agent.Request {
	texts := make([]string, len(rows))
	atts := make([][]agent.Attachment, len(rows))
	for i, r := range rows {
		texts[i] = r.Content
		atts[i] = decodeAttachments(r.Attachments)
	}
	return agent.Request{
		SessionKey:       in.SessionKey,
		Instructions:     instructions,
		History:          History(prior, policy.MaxHistory),
		Earlier:          texts[:len(texts)-1],
		Input:            texts[len(texts)-1],
		InputAttachments: atts,
	}
}

// priorOf is the history a turn with lead and members sees: every stored
// message but the turn's own and the user messages stored after it, in
// turn order — each reply right after the message it answers, even when
// later messages were stored before it (they arrived while it ran).
func priorOf(window []Message, members map[int64]bool, lead int64) []Message {
	prior := make([]Message, 0, len(window))
	for _, msg := range window {
		if members[msg.Seq] || members[msg.ReplyTo] || (msg.Role == agent.RoleUser && msg.Seq > lead) {
			continue // the turn's own, or what an earlier run of it left
		}
		prior = append(prior, msg)
	}
	at := func(msg *Message) int64 {
		if msg.Role == agent.RoleUser {
			return msg.Seq
		}
		return msg.ReplyTo
	}
	slices.SortStableFunc(prior, func(a, b Message) int {
		if c := cmp.Compare(at(&a), at(&b)); c != 0 {
			return c
		}
		// A message before the replies to it.
		return cmp.Compare(boolInt(a.Role != agent.RoleUser), boolInt(b.Role != agent.RoleUser))
	})
	return prior
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
