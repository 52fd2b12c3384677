package sessions

// A message's way in: Submit stores it (or finds it stored, for a
// resend) under the key's state lock (lockState), in the key's active
// conversation (load, create), claimed at once when the key's line is
// free (claimIfFree); it acknowledges it and hands it to the key's line
// (Manager.enqueue); its Ticket yields the outcome of the turn that
// answers it. The locks of a session key: the state lock (storing a
// message, starting a turn; acquire) and the turn lock (Manager.lockTurn:
// one turn at a time, here and, through a lease, across replicas).

import (
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
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/google/uuid"
)

// Ticket is a stored message waiting for the turn that answers it.
type Ticket struct {
	m       *Manager
	in      Inbound
	hooks   Hooks
	ref     turnKey
	resend  bool // the message was stored before (Outcome.Duplicate)
	reset   *ResetEvent
	started time.Time     // wall clock: for the turn's duration
	claimed *ledger.Batch // the message was stored claimed, as this turn
	early   *earlyCall    // and its agent call started meanwhile; the runner takes it

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
func (t *Ticket) Seq() int64 { return t.ref.seq }

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
		t.m.life.leave()
	})
}

// Submit stores a user message — after the reset policy, deduplication by
// client id, and OnReset — calls OnAck, and returns its Ticket. It does
// not wait for any turn: a message is stored and acknowledged when it
// arrives, whatever runs. A message whose client id is stored already is
// acknowledged again and answered from storage, or by the turn that
// answers it.
func (m *Manager) Submit(ctx context.Context, in Inbound, h Hooks) (*Ticket, error) {
	ctx, end := m.tr.traceMessage(ctx, in)
	t, err := m.submit(ctx, in, h)
	end(t, err)
	return t, err
}

func (m *Manager) submit(ctx context.Context, in Inbound, h Hooks) (*Ticket, error) {
	if err := m.check(in); err != nil {
		return nil, err
	}
	if !m.life.enter() {
		return nil, ErrShuttingDown
	}
	t := &Ticket{m: m, in: in, hooks: h, started: time.Now(), done: make(chan struct{})}
	t.span = trace.SpanContextFromContext(ctx)
	if err := m.hb.ensure(); err != nil {
		t.resolve(Outcome{}, err)
		return nil, err
	}
	giveUp := time.Now().Add(10 * time.Second)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := m.accept(ctx, t)
		if errors.Is(err, ledger.ErrStale) && time.Now().Before(giveUp) && ctx.Err() == nil {
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
	case ledger.IsFireMsgID(in.ClientMsgID) != in.Scheduled:
		return ErrFireID
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
	if in.ClientMsgID != "" && (expired || hc.conv.LastSeq == 0 || in.Scheduled) {
		// A resend of a message stored before a reset or a sweep belongs to
		// its old conversation, not to a new one. A fire's message is
		// looked for in every conversation of the key: a fire claimed
		// again after a crash finds its message even when the user reset
		// the conversation meanwhile.
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
			return fmt.Errorf("archive %s: %w", old, ledger.ErrStale)
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
		m.relay.publish(*t.reset)
	} else if err := m.convs.tellEarlierReset(ctx, t, hc, policy); err != nil {
		return err
	}
	// Stored pending, owned by this replica: if it dies before a turn
	// takes the message, the others find it by its owner. When nothing
	// else of the key is waiting or running here, no debounce applies,
	// every message of the conversation has its answer and the early
	// call took the key's turn lock and lease, the message is stored
	// already claimed, as its own turn: the claim would find it alone
	// anyway. The append is conditional on the conversation being as
	// cached, so on a shared database too no message of another
	// replica's can be stored between them unseen. Without the lease it
	// is stored pending: another replica may hold the lease and store
	// the user's next message, and its claim, which never takes a turn
	// another live replica holds, would answer that one first.
	um := ledger.Message{
		ConversationID: hc.conv.ID, Seq: hc.conv.LastSeq + 1, Role: agent.RoleUser,
		Content: in.Text, Attachments: encodeAttachments(in.Attachments), Quote: boundQuote(in.Quote), Status: ledger.MsgOK, CreatedAt: now,
		TurnState: ledger.TurnPending, TurnOwner: m.opts.ReplicaID,
	}
	// A user with a budget is not called early: their tally is read
	// first, when the turn runs (Standing.overBudget).
	// A fire's message is stored before its model call starts, as the
	// scheduler's crash table says: no early call for it.
	solo := policy.Busy.Debounce == 0 && m.idle(in.SessionKey) && settledTail(hc) && !policy.Budget.For(ledger.UsageUser(in.SessionKey)).Any() &&
		!in.Scheduled
	if in.ClientMsgID != "" {
		id := in.ClientMsgID
		um.ClientMsgID = &id
	}
	rows := []ledger.BatchRow{ledger.RowOf(&um)}
	var early *earlyCall
	var gate *notesGate
	if solo {
		// Its own turn, this replica's before the commit lands: the agent
		// call starts now, from the history before it (Manager.startEarly), on the
		// key's model.
		model, err := m.standing.modelSpec(ctx, in.SessionKey)
		if err != nil {
			return err
		}
		live := m.settings() // the turn's settings, as callFor takes them
		gate = m.memory.gate(in)
		early = m.startEarly(in, hc.conv.Channel, live.agent, gate,
			m.request(rows, historyFor(priorOf(hc.window, seqSet{um.Seq}, um.Seq), policy), in, live.instructions, model))
	}
	if early != nil {
		ledger.ClaimAtStore(&um, m.routes.tracks(in.Channel))
	}
	batch := []ledger.Message{um}
	app := ledger.Append{Conv: &hc.conv, ExpectSeq: hc.conv.LastSeq, RequireActive: true, Messages: batch, At: now,
		KeepActivity: in.Scheduled}
	if early != nil && gate != nil {
		// The commit reads the version of the user's notes the early
		// call's request takes (notesGate).
		app.NotesOf, app.NotesRead = gate.user, gate.open
	}
	endStore := m.tr.startSpan(ctx, "store")
	err = m.store.Append(ctx, app)
	endStore(err)
	if err == nil && early != nil && gate != nil {
		gate.open(-1) // a store that read no version: it is read apart
	}
	if err != nil && early != nil {
		// Not stored, not acknowledged: the call is dropped unseen.
		early.abandon(err)
	}
	if errors.Is(err, ledger.ErrDuplicate) {
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
	if early != nil {
		t.claimed = ledger.StoredClaim(&hc.conv, &batch[0])
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
	if tr.Settled() {
		out, err := m.storedOutcome(ctx, tr)
		if err != nil {
			return err
		}
		if tr.Track && tr.State != ledger.TurnDelivered {
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
		t.resolve(Outcome{ConversationID: convID, UserSeq: seq, Pending: true, Turn: ledger.TurnRef{ConversationID: convID, Seq: seq}}, nil)
		return nil
	}
	m.enqueue(t)
	return nil
}

// storedOutcome is the outcome of a settled turn, from storage.
func (m *Manager) storedOutcome(ctx context.Context, tr *ledger.Turn) (Outcome, error) {
	out := Outcome{ConversationID: tr.ConversationID, UserSeq: tr.Seq, Duplicate: true,
		Turn: ledger.TurnRef{ConversationID: tr.ConversationID, Seq: tr.Lead}}
	reply, err := m.store.Message(ctx, tr.ConversationID, tr.ReplySeq)
	if err != nil {
		return Outcome{}, err
	}
	if reply != nil {
		out.Reply = toReply(reply)
		if m.opts.Tools != nil && ledger.SettlesTurn(reply) {
			if out.Reply.Media, err = m.media.ofTurn(ctx, tr.ConversationID, tr.Lead); err != nil {
				return Outcome{}, err
			}
		}
	}
	covers, err := m.store.Covers(ctx, tr.ConversationID, tr.Lead)
	if err != nil {
		return Outcome{}, err
	}
	out.Reply.Covers = clientIDs(covers)
	return out, nil
}

func clientIDs(rows []ledger.BatchRow) []string {
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
	// The turns answered, sorted: on the stack for a window of the
	// usual size (every message checks this).
	var buf [64]int64
	answered := buf[:0]
	for i := range hc.window {
		if m := &hc.window[i]; ledger.SettlesTurn(m) {
			answered = append(answered, m.ReplyTo)
		}
	}
	slices.Sort(answered)
	for i := range hc.window {
		m := &hc.window[i]
		if m.Role != agent.RoleUser {
			continue
		}
		lead := m.TurnLead
		if lead == 0 {
			lead = m.Seq
		}
		if _, ok := slices.BinarySearch(answered, lead); !ok {
			return false
		}
	}
	return true
}

// Handle runs one message to its outcome: Submit, then Wait. ctx bounds
// only the wait for the key's state lock and the storing of the message;
// once stored, its turn runs to its end even if the caller goes away (a
// WebSocket client that disconnects gets the reply on resume). Stop and
// Shutdown cancel a running turn; its partial reply is stored as
// interrupted. An agent failure is not an error: the outcome's reply has
// status failed and a plain text for the user, and the user message stays.
func (m *Manager) Handle(ctx context.Context, in Inbound, h Hooks) (Outcome, error) {
	t, err := m.Submit(ctx, in, h)
	if err != nil {
		return Outcome{}, err
	}
	return t.Wait(context.Background())
}

// load returns the session key's active conversation, creating one if none.
func (m *Manager) load(ctx context.Context, in Inbound, policy Policy, now time.Time) (*hotConv, error) {
	if hc, ok := m.hot.Get(in.SessionKey); ok && hc.conv.Status == ledger.StatusActive {
		return hc, nil
	}
	conv, err := m.store.ActiveConversation(ctx, in.SessionKey)
	if err != nil {
		return nil, err
	}
	if conv == nil {
		return m.create(ctx, in, policy, now)
	}
	hc := &hotConv{conv: *conv, cap: windowCap(policy)}
	if hc.window, err = m.store.RecentMessages(ctx, conv.ID, hc.cap); err != nil {
		return nil, err
	}
	m.hot.Add(in.SessionKey, hc)
	return hc, nil
}

func (m *Manager) create(ctx context.Context, in Inbound, policy Policy, now time.Time) (*hotConv, error) {
	ag := m.settings().agent
	conv := ledger.Conversation{
		ID: uuid.NewString(), SessionKey: in.SessionKey, Channel: in.Channel, Status: ledger.StatusActive,
		StartedAt: now, LastActivityAt: now, AgentName: ag.Name(), Model: ag.Model(),
		UserID: in.UserID, ChatID: in.ChatID,
	}
	if err := m.store.CreateConversation(ctx, &conv); err != nil {
		if errors.Is(err, ledger.ErrStale) {
			// Another process opened one first: use theirs.
			m.hot.Remove(in.SessionKey)
			existing, lerr := m.store.ActiveConversation(ctx, in.SessionKey)
			if lerr != nil || existing == nil {
				return nil, errors.Join(err, lerr)
			}
			hc := &hotConv{conv: *existing, cap: windowCap(policy)}
			hc.window, lerr = m.store.RecentMessages(ctx, existing.ID, hc.cap)
			if lerr != nil {
				return nil, lerr
			}
			m.hot.Add(in.SessionKey, hc)
			return hc, nil
		}
		return nil, err
	}
	hc := &hotConv{conv: conv, cap: windowCap(policy)}
	m.hot.Add(in.SessionKey, hc)
	return hc, nil
}

// claimIfFree claims a turn a resend found, unless a live runner holds
// it: it is due, or its owner is gone (another replica that stopped
// heartbeating, or this one's own turn that no run holds any more).
func (m *Manager) claimIfFree(ctx context.Context, t *ledger.Turn) (*ledger.Claimed, error) {
	now := m.now()
	switch {
	case t.DueAt != nil && !t.DueAt.After(now):
	case t.Owned() && t.Owner == m.opts.ReplicaID:
		if m.holding(turnKey{t.ConversationID, t.Seq}) {
			return nil, nil
		}
	case t.Owned():
		_, alive, err := m.health.replicas(ctx)
		if err != nil || slices.Contains(alive, t.Owner) {
			return nil, err
		}
	default:
		return nil, nil
	}
	return m.claim(ctx, t.ConversationID, t.Seq, t.Owner, t.Attempts)
}

// acquire counts work for the drain and takes the session key's state
// lock; the returned func gives both back.
func (m *Manager) acquire(ctx context.Context, key string) (func(), error) {
	if !m.life.enter() {
		return nil, ErrShuttingDown
	}
	if err := m.hb.ensure(); err != nil {
		m.life.leave()
		return nil, err
	}
	release, err := m.lockState(ctx, key, true)
	if err != nil {
		m.life.leave()
		return nil, err
	}
	return func() { release(); m.life.leave() }, nil
}

// lockState takes the session key's state lock, which guards its cached
// conversation and every store of a message to it. It is held for
// moments (never across an agent call); waiting ends when ctx does and,
// with drainEnds (new work), when a shutdown starts.
func (m *Manager) lockState(ctx context.Context, key string, drainEnds bool) (func(), error) {
	if ctx.Err() == nil && (!drainEnds || m.life.draining.Err() == nil) {
		// Free, and nobody waits for it: taken at once, with no
		// cancellable wait to set up (most locks, on every turn).
		if release, ok := m.locks.TryAcquire(key); ok {
			return release, nil
		}
	}
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if drainEnds {
		stop := context.AfterFunc(m.life.draining, cancel)
		defer stop()
	}
	release, err := m.locks.Acquire(waitCtx, key)
	if err != nil {
		if ctx.Err() == nil {
			return nil, ErrShuttingDown
		}
		return nil, err
	}
	return release, nil
}
