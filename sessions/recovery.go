package sessions

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/chatgate/chatgate/agent"
)

// ExpiredText is the reply stored for an unanswered message too old to run.
const ExpiredText = "Sorry, this message arrived while the assistant was restarting and was not answered. Please send it again."

// Delivery is a stored reply that a channel delivers outside a live turn:
// one the rescuer produced (after a restart, or for a replica that died),
// or one whose earlier delivery never completed.
type Delivery struct {
	Channel     string
	SessionKey  string
	UserID      string
	ChatID      string
	ClientMsgID string
	UserSeq     int64
	Reply       Reply
	Turn        TurnRef
}

// DeliverFunc delivers a reply. A channel that confirms delivery returns
// its reference to what it sent (such as Telegram message ids), or an
// error; one wrapping ErrUndeliverable means the channel refused it for
// good, any other is retried later.
type DeliverFunc func(ctx context.Context, d Delivery) (ref string, err error)

// ErrUndeliverable marks a delivery the channel refused for good (the user
// blocked the bot, the chat is gone): the turn is closed with the error.
var ErrUndeliverable = errors.New("undeliverable")

type deliverer struct {
	fn    DeliverFunc
	track bool
}

// OnDeliver registers how a channel delivers replies outside a live turn.
// With track, the channel confirms delivery: its turns stay open after
// they are answered until Delivered is called, and a delivery that did not
// complete (the process died) is claimed and made again — at most one
// duplicate, in the window between a send and its mark. Register before
// turns run.
func (m *Manager) OnDeliver(channel string, track bool, fn DeliverFunc) {
	m.mu.Lock()
	m.delivery[channel] = deliverer{fn: fn, track: track}
	m.mu.Unlock()
}

func (m *Manager) deliverer(channel string) (deliverer, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.delivery[channel]
	return d, ok
}

// tracks reports whether the channel confirms delivery.
func (m *Manager) tracks(channel string) bool {
	d, ok := m.deliverer(channel)
	return ok && d.track
}

// Delivered records the outcome of delivering a turn's reply under the
// claim the caller holds (Outcome.Turn): nil closes the turn as delivered
// with ref; an error wrapping ErrUndeliverable closes it with the error;
// any other error gives the claim back, and the rescuer delivers again a
// minute later.
func (m *Manager) Delivered(ctx context.Context, t TurnRef, ref string, err error) error {
	defer m.unhold(t.Claim)
	ctx = context.WithoutCancel(ctx)
	now := m.now()
	switch {
	case t.Claim == "":
		return nil
	case err == nil:
		return m.store.MarkDelivered(ctx, t.ConversationID, t.Seq, t.Claim, ref, "", now)
	case errors.Is(err, ErrUndeliverable):
		return m.store.MarkDelivered(ctx, t.ConversationID, t.Seq, t.Claim, ref, err.Error(), now)
	default:
		return m.store.ReleaseTurn(ctx, t.ConversationID, t.Seq, t.Claim, now.Add(time.Minute), "delivery failed: "+err.Error())
	}
}

// hold adds a claim to the ones this replica renews.
func (m *Manager) hold(claim string) {
	m.mu.Lock()
	m.claims[claim] = struct{}{}
	m.mu.Unlock()
}

// unhold stops renewing a claim: its turn is settled or handed on.
func (m *Manager) unhold(claim string) {
	if claim == "" {
		return
	}
	m.mu.Lock()
	delete(m.claims, claim)
	m.mu.Unlock()
}

// renew moves the lease of every claim this replica holds, in one
// statement.
func (m *Manager) renew(ctx context.Context) {
	m.mu.Lock()
	held := make([]string, 0, len(m.claims))
	for c := range m.claims {
		held = append(held, c)
	}
	m.mu.Unlock()
	if err := m.store.RenewClaims(ctx, held, m.now().Add(m.opts.LeaseTTL)); err != nil {
		m.log.Warn("renewing turn claims failed", slog.Int("claims", len(held)), slog.String("error", err.Error()))
	}
}

// Wake makes the rescuer look for claimable turns now (another replica
// released some, or a notification says so).
func (m *Manager) Wake() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// StartRescuer runs, until Shutdown, the renewal of this replica's claims
// (every third of the lease) and the rescuer: a pass of Recover at once,
// then every RescueEvery and whenever woken. It first subscribes to the
// other replicas' events (PostgreSQL), which wake the rescuer and reach
// OnReply and OnReset listeners. Register the channels' deliverers and
// listeners first.
func (m *Manager) StartRescuer() {
	m.listenEvents()
	m.loops.Add(2)
	go func() {
		defer m.loops.Done()
		t := time.NewTicker(m.opts.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-m.stopLoops:
				return
			case <-t.C:
				m.renew(m.base)
			}
		}
	}()
	go func() {
		defer m.loops.Done()
		t := time.NewTicker(m.opts.RescueEvery)
		defer t.Stop()
		for {
			if _, _, err := m.Recover(m.draining, m.opts.RecoveryMaxAge); err != nil && m.draining.Err() == nil {
				m.log.Error("recovery pass failed", slog.String("error", err.Error()))
			}
			select {
			case <-m.stopLoops:
				return
			case <-m.draining.Done():
				return
			case <-t.C:
			case <-m.wake:
			}
		}
	}()
}

// stopRescuer ends the loops; the renewer last, once no turn is held.
func (m *Manager) stopRescuer() {
	m.stopOnce.Do(func() { close(m.stopLoops) })
	m.loops.Wait()
}

// recoveryPage is how many due turns one scan of the rescuer reads.
const recoveryPage = 256

// Recover claims every turn that is claimable now and runs or delivers
// it: turns a shutdown interrupted, turns of a replica that died (their
// lease ran out), stored messages nobody runs, and answered turns whose
// delivery never completed. Claims are conditional, so Recover is safe at
// any moment, on any replica, beside live traffic: a turn runs once.
// Turns whose message is older than maxAge are not run; the user is asked
// to send again. Up to RecoveryConcurrency turns run at once, each under
// its session key's lock. It returns how many turns it ran and how many
// it marked expired.
func (m *Manager) Recover(ctx context.Context, maxAge time.Duration) (int, int, error) {
	seen := map[TurnRef]bool{}
	var mu sync.Mutex
	var ran, expired int
	sem := make(chan struct{}, m.opts.RecoveryConcurrency)
	var wg sync.WaitGroup
	var scanErr error
pages:
	for ctx.Err() == nil {
		due, err := m.store.DueTurns(ctx, m.now(), recoveryPage)
		if err != nil {
			scanErr = err
			break
		}
		// One goroutine per session key, its turns in order, so that a
		// user's turns are answered in the order they were sent.
		var keys []string
		byKey := map[string][]DueTurn{}
		fresh := 0
		for _, d := range due {
			ref := TurnRef{ConversationID: d.ConversationID, Seq: d.Seq}
			if seen[ref] {
				continue
			}
			seen[ref] = true
			if _, ok := m.deliverer(d.Channel); !ok {
				continue // no channel here to deliver it: left to a replica that has one
			}
			fresh++
			if byKey[d.SessionKey] == nil {
				keys = append(keys, d.SessionKey)
			}
			byKey[d.SessionKey] = append(byKey[d.SessionKey], d)
		}
		for _, key := range keys {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				break pages
			}
			wg.Add(1)
			go func(turns []DueTurn) {
				defer wg.Done()
				defer func() { <-sem }()
				for _, d := range turns {
					kind, err := m.rescue(ctx, d, maxAge)
					if err != nil {
						if !errors.Is(err, ErrShuttingDown) && ctx.Err() == nil {
							m.log.Error("recovering a turn failed", slog.String("session_key", d.SessionKey), slog.Int64("seq", d.Seq), slog.String("error", err.Error()))
						}
						continue
					}
					mu.Lock()
					switch kind {
					case TurnExpired:
						expired++
					case TurnRunning:
						ran++
					}
					mu.Unlock()
				}
			}(byKey[key])
		}
		if fresh == 0 || len(due) < recoveryPage {
			break
		}
	}
	wg.Wait()
	if ran+expired > 0 {
		m.log.Info("recovered turns", slog.Int("ran", ran), slog.Int("expired", expired))
	}
	if scanErr == nil {
		scanErr = ctx.Err()
	}
	return ran, expired, scanErr
}

// rescue claims one due turn under its session key's lock and runs it (or
// marks it expired), then delivers its reply. It reports what it did:
// running (ran it), expired, answered (delivered only), or "" (someone
// else had it).
func (m *Manager) rescue(ctx context.Context, d DueTurn, maxAge time.Duration) (string, error) {
	release, err := m.acquire(ctx, d.SessionKey)
	if err != nil {
		return "", err
	}
	defer release()
	c, err := m.claim(ctx, d.ConversationID, d.Seq)
	if err != nil || c == nil {
		return "", err
	}
	c.UserID, c.ChatID = d.UserID, d.ChatID
	in := Inbound{Channel: c.Channel, SessionKey: c.SessionKey, UserID: c.UserID, ChatID: c.ChatID, ClientMsgID: c.ClientMsgID}
	kind := c.State
	var out Outcome
	if c.State != TurnRunning {
		// Answered before; only its delivery is due.
		t, err := m.store.TurnAt(ctx, c.ConversationID, c.Seq)
		if err != nil || t == nil {
			m.unhold(c.Claim)
			return "", errors.Join(errors.New("turn vanished"), err)
		}
		reply, err := m.store.Message(ctx, c.ConversationID, t.ReplySeq)
		if err != nil || reply == nil {
			m.unhold(c.Claim)
			return "", errors.Join(errors.New("reply vanished"), err)
		}
		out = Outcome{ConversationID: c.ConversationID, UserSeq: c.Seq, Reply: toReply(reply)}
	} else {
		// The conversation may have moved on (or been archived) since: work
		// on a fresh copy, and drop the cached one so the next turn reloads.
		m.hot.Remove(c.SessionKey)
		hc, err := m.loadConversation(ctx, c.ConversationID, c.Seq, c.Channel)
		if err != nil {
			m.unhold(c.Claim)
			return "", err
		}
		if now := m.now(); c.CreatedAt.Before(now.Add(-maxAge)) {
			kind = TurnExpired
			msgs := []Message{{ConversationID: c.ConversationID, Role: agent.RoleAssistant, Content: ExpiredText,
				ReplyTo: c.Seq, Status: MsgFailed, Error: "not run: older than recovery.max_age", CreatedAt: now}}
			settle := &Settle{Claim: c.Claim, State: TurnExpired}
			if m.tracks(c.Channel) {
				lease := now.Add(m.opts.LeaseTTL)
				settle.DueAt = &lease
			}
			if err := m.appendReply(ctx, hc, msgs, now, 0, 0, "", c.Seq, settle); err != nil {
				m.unhold(c.Claim)
				return "", err
			}
			out = Outcome{ConversationID: c.ConversationID, UserSeq: c.Seq, Reply: toReply(&msgs[0])}
		} else {
			um, err := m.store.Message(ctx, c.ConversationID, c.Seq)
			if err != nil || um == nil {
				m.unhold(c.Claim)
				return "", errors.Join(errors.New("message vanished"), err)
			}
			turnCtx, endTurn := m.startTurn(c.SessionKey)
			out, err = m.runAgent(turnCtx, hc, *um, c.Claim, m.Policy(c.Channel), in, Hooks{})
			endTurn()
			if err != nil {
				m.unhold(c.Claim)
				return "", err
			}
			if out.Reply.Status == MsgInterrupted && out.Reply.Error == InterruptedByShutdown && !m.opts.NoRerun {
				m.unhold(c.Claim)
				return kind, nil // interrupted again: claimable, nothing to deliver yet
			}
		}
	}
	m.deliver(ctx, in, c, out)
	return kind, nil
}

// deliver hands a rescued turn's reply to its channel and, when the
// channel confirms delivery, records the outcome.
func (m *Manager) deliver(ctx context.Context, in Inbound, c *Claimed, out Outcome) {
	dv, _ := m.deliverer(c.Channel)
	ref := TurnRef{ConversationID: c.ConversationID, Seq: c.Seq, Claim: c.Claim}
	d := Delivery{Channel: c.Channel, SessionKey: c.SessionKey, UserID: in.UserID, ChatID: in.ChatID,
		ClientMsgID: c.ClientMsgID, UserSeq: c.Seq, Reply: out.Reply, Turn: ref}
	sent, err := dv.fn(ctx, d)
	if !dv.track {
		m.unhold(c.Claim)
		return
	}
	if err := m.Delivered(ctx, ref, sent, err); err != nil {
		m.log.Warn("recording a delivery failed", slog.String("session_key", c.SessionKey), slog.Int64("seq", c.Seq), slog.String("error", err.Error()))
	}
}
