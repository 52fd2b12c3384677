package sessions

// Recovery: the passes the Rescuer runs every RescueEvery (and whenever
// woken) that run what nobody runs — this replica's owed conversations
// first, then turns that are due, then the turns of replicas whose
// heartbeat stopped — each through the same conditional claim as every
// other runner.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// ExpiredText is the reply stored for an unanswered message too old to run.
const ExpiredText = "Sorry, this message arrived while the assistant was restarting and was not answered. Please send it again."

// ErrUndeliverable marks a delivery the channel refused for good (the user
// blocked the bot, the chat is gone): the turn is closed with the error.
var ErrUndeliverable = errors.New("undeliverable")

// recoveryPage is how many turns one scan of the rescuer reads.
const recoveryPage = 256

// Recover claims every turn that is claimable now and runs or delivers
// it: turns a shutdown interrupted, turns held by replicas that are gone
// (including this one's earlier processes), stored messages nobody runs,
// and answered turns whose delivery never completed. Claims are
// conditional, so Recover is safe at any moment, on any replica, beside
// live traffic: a turn runs once. Turns whose message is older than maxAge
// are not run; the user is asked to send again. Up to RecoveryConcurrency
// turns run at once, each user's in order. It returns how many turns it
// ran and how many it marked expired.
func (r *Rescuer) Recover(ctx context.Context, maxAge time.Duration) (int, int, error) {
	return r.rescuePass(ctx, maxAge, true)
}

// rescuePass claims the due turns and, when a replica is gone (or, with
// full, over the whole recovery horizon), the turns nobody alive holds. A
// pass that had to leave turns alone (no channel here to deliver them
// yet, or a failure) makes the next one full again.
func (r *Rescuer) rescuePass(ctx context.Context, maxAge time.Duration, full bool) (int, int, error) {
	full = r.rescanAll.Swap(false) || full
	// This replica's own turns that nobody here holds first: they wait on
	// nothing but this pass.
	owedRan := r.rescueOwed(ctx, maxAge)
	p := &pass{r: r, ctx: ctx, maxAge: maxAge, seen: map[turnKey]bool{}, sem: make(chan struct{}, r.cfg.concurrency)}
	err := p.drain(false, func() ([]ledger.DueTurn, error) { return r.store.DueTurns(ctx, r.now(), recoveryPage) })
	if err == nil {
		gone, alive, rerr := r.health.replicas(ctx)
		err = rerr
		if rerr == nil && len(alive) > 1 {
			r.hb.setPeers(true)
		}
		since := r.now().Add(-ledger.RecoveryHorizon)
		if !full {
			for i, g := range gone {
				if i == 0 || g.StartedAt.Before(since) {
					since = g.StartedAt
				}
			}
		}
		if err == nil && (full || len(gone) > 0) {
			err = p.drain(true, func() ([]ledger.DueTurn, error) { return r.store.OrphanTurns(ctx, since, alive, recoveryPage) })
			p.wg.Wait()
			for _, g := range gone {
				if err == nil && p.failed == 0 && p.skipped == 0 {
					err = r.store.ForgetReplica(ctx, g.ID, g.HeartbeatAt)
				}
			}
		}
	}
	p.wg.Wait()
	if full && (err != nil || p.failed > 0 || p.skipped > 0) {
		r.rescanAll.Store(true)
	}
	p.ran += owedRan
	r.observer.RecoveryPass(p.ran, p.expired)
	if p.ran+p.expired > 0 {
		r.cfg.log.Info("recovered turns", slog.Int("ran", p.ran), slog.Int("expired", p.expired))
	}
	if err == nil {
		err = ctx.Err()
	}
	return p.ran, p.expired, err
}

// pass is one rescuer pass: the turns it dispatched and what came of them.
type pass struct {
	r      *Rescuer
	ctx    context.Context
	maxAge time.Duration
	seen   map[turnKey]bool
	sem    chan struct{}
	wg     sync.WaitGroup

	mu                   sync.Mutex
	ran, expired, failed int
	skipped              int // orphans of channels this replica cannot deliver (yet)
}

// drain reads pages of turns and dispatches each turn once, one goroutine
// per session key (its turns in order, so a user's turns are answered in
// the order they were sent), at most RecoveryConcurrency at a time, until
// a page brings nothing new.
func (p *pass) drain(orphans bool, page func() ([]ledger.DueTurn, error)) error {
	for p.ctx.Err() == nil {
		due, err := page()
		if err != nil {
			return err
		}
		var keys []string
		byKey := map[string][]ledger.DueTurn{}
		fresh := 0
		for _, d := range due {
			k := turnKey{d.ConversationID, d.Seq}
			if p.seen[k] {
				continue
			}
			p.seen[k] = true
			if !p.r.routes.delivering(d.Channel) {
				// No channel here to deliver it (yet): left to a replica that
				// has one, or to a later pass. Due turns are read by every
				// pass; orphans only by a full one, so one comes again.
				if orphans {
					p.skipped++
				}
				continue
			}
			fresh++
			if byKey[d.SessionKey] == nil {
				keys = append(keys, d.SessionKey)
			}
			byKey[d.SessionKey] = append(byKey[d.SessionKey], d)
		}
		for _, key := range keys {
			select {
			case p.sem <- struct{}{}:
			case <-p.ctx.Done():
				return nil
			}
			p.wg.Add(1)
			go func(turns []ledger.DueTurn) {
				defer p.wg.Done()
				defer func() { <-p.sem }()
				for _, d := range turns {
					kind, err := p.r.rescueTurn(p.ctx, d, p.maxAge, false)
					p.mu.Lock()
					switch {
					case err != nil:
						p.failed++
					case kind == ledger.TurnExpired:
						p.expired++
					case kind == ledger.TurnRunning:
						p.ran++
					}
					p.mu.Unlock()
					if err != nil && !errors.Is(err, ErrShuttingDown) && p.ctx.Err() == nil {
						p.r.cfg.log.Error("recovering a turn failed", slog.String("session_key", d.SessionKey), slog.Int64("seq", d.Seq), slog.String("error", err.Error()))
					}
				}
			}(byKey[key])
		}
		if fresh == 0 || len(due) < recoveryPage {
			return nil
		}
	}
	return nil
}

// rescueTurn takes a claimable turn over, under its session key's turn
// lock: an unanswered one is run, with every other claimable message of
// its conversation (one turn, as live bursts are), or marked expired; an
// answered one whose delivery never completed is delivered. It reports
// what it did: running (ran it), expired, answered (delivered only), or
// "" (someone else had it). With try, a turn lock that is busy is not
// waited for (errBusy).
func (r *Rescuer) rescueTurn(ctx context.Context, d ledger.DueTurn, maxAge time.Duration, try bool) (string, error) {
	if !r.life.enter() {
		return "", ErrShuttingDown
	}
	defer r.life.leave()
	if err := r.hb.ensure(); err != nil {
		return "", err
	}
	var release func()
	var err error
	if try {
		release, err = r.turns.lockTurn(ctx, d.SessionKey, time.Second)
	} else {
		release, err = r.turns.lockTurn(ctx, d.SessionKey, 0)
	}
	if err != nil {
		return "", err
	}
	defer release()
	in := Inbound{Channel: d.Channel, SessionKey: d.SessionKey, UserID: d.UserID, ChatID: d.ChatID}
	t, err := r.store.TurnAt(ctx, d.ConversationID, d.Seq)
	if err != nil || t == nil {
		return "", errors.Join(errors.New("turn vanished"), err)
	}
	if !t.Settled() {
		_, alive, err := r.health.replicas(ctx)
		if err != nil {
			return "", err
		}
		// The conversation may have moved on (or been archived) since: the
		// batch works on a fresh copy when it is not the cached one.
		// A claim takes the oldest claimable messages first (one, in busy
		// mode queue): run turns until this one's is done.
		ran := ""
		for {
			tctx, endTurn := r.tr.traceTurn(ctx, in)
			kind, _, err := r.turns.runBatch(tctx, in, d.ConversationID, alive, maxAge, nil, nil)
			endTurn(err)
			if kind != "" && ran != ledger.TurnRunning {
				ran = kind
			}
			if err != nil || kind == "" {
				return ran, err
			}
			if t, err := r.store.TurnAt(ctx, d.ConversationID, d.Seq); err != nil || t == nil || t.Settled() {
				return ran, err
			}
		}
	}
	if !t.Track || t.State == ledger.TurnDelivered || t.Lead != t.Seq || r.turns.holding(turnKey{t.ConversationID, t.Seq}) {
		return "", nil // (a delivery of this replica's in progress, or its mark)
	}
	// Answered before; only its delivery is due.
	c, err := r.turns.claim(ctx, d.ConversationID, d.Seq, d.Owner, d.Attempt)
	if err != nil || c == nil {
		return "", err
	}
	out, err := r.turns.storedOutcome(ctx, t)
	if err != nil {
		r.turns.unhold(turnKey{c.ConversationID, c.Seq})
		return "", err
	}
	clientID := ""
	if t.ClientMsgID != nil {
		clientID = *t.ClientMsgID
	}
	r.routes.deliver(ctx, Delivery{Channel: d.Channel, SessionKey: d.SessionKey, UserID: d.UserID, ChatID: d.ChatID,
		ClientMsgID: clientID, UserSeq: t.Seq, Reply: out.Reply, Turn: c.Ref()})
	return ledger.TurnAnswered, nil
}
