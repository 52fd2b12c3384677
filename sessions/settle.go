package sessions

// The domain side of the turn ledger (its SQL is store.DB's:
// ClaimTurn, MarkDelivered): which turns a runner of this process holds
// (hold, heldSeqs), claims of one turn, and settling — delivery marks
// and hand-backs retried until they land, the turn held meanwhile. With
// owedSet and watcher this keeps the invariant: a turn that is not
// settled is held by a runner here, or due.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

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

// Delivered records the outcome of delivering a turn's reply under the
// claim the caller holds (Outcome.Turn): nil closes the turn as delivered
// with ref; an error wrapping ErrUndeliverable closes it with the error;
// any other error gives the claim back, and the rescuer delivers again a
// minute later. When storage fails, the record is kept in memory and
// retried until it lands — the turn stays held meanwhile, so that nobody
// delivers it again — and the error says so.
func (m *Manager) Delivered(ctx context.Context, t ledger.TurnRef, ref string, err error) error {
	if t.Claim == "" {
		return nil
	}
	k := turnKey{t.ConversationID, t.Seq}
	attempt, perr := strconv.Atoi(t.Claim)
	if perr != nil {
		m.unhold(k)
		return fmt.Errorf("delivered: bad claim %q", t.Claim)
	}
	now := m.now()
	var record func(ctx context.Context) error
	switch {
	case err == nil:
		record = func(ctx context.Context) error {
			return m.store.MarkDelivered(ctx, t.ConversationID, t.Seq, m.opts.ReplicaID, attempt, ref, "", now)
		}
	case errors.Is(err, ErrUndeliverable):
		record = func(ctx context.Context) error {
			return m.store.MarkDelivered(ctx, t.ConversationID, t.Seq, m.opts.ReplicaID, attempt, ref, err.Error(), now)
		}
	default:
		why := "delivery failed: " + err.Error()
		record = func(ctx context.Context) error {
			return m.store.ReleaseTurn(ctx, t.ConversationID, t.Seq, m.opts.ReplicaID, attempt, m.now().Add(time.Minute), why)
		}
	}
	return m.settle(func() { m.unhold(k) }, record)
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

// turnKey names a turn in memory.
type turnKey struct {
	conv string
	seq  int64
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
