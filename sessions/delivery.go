package sessions

// Delivery: how a stored reply reaches a channel outside a live turn
// (the rescuer's, or one whose delivery never completed), and the
// channels' deliverers.

import (
	"context"
	"errors"
	"log/slog"

	"github.com/chatgate/chatgate/sessions/ledger"
)

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
	Turn        ledger.TurnRef
}

// DeliverFunc delivers a reply. A channel that confirms delivery returns
// its reference to what it sent (such as Telegram message ids), or an
// error; one wrapping ErrUndeliverable means the channel refused it for
// good, any other is retried later.
type DeliverFunc func(ctx context.Context, d Delivery) (ref string, err error)

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
	// Turns of this channel that passes left alone may be claimable now.
	m.rescue.rescan()
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

// deliverTurn hands a reply nobody here waits for to its channel and,
// when the channel confirms delivery, records the outcome under the
// claim d.Turn.
func (m *Manager) deliverTurn(ctx context.Context, d Delivery) {
	dv, ok := m.deliverer(d.Channel)
	if !ok {
		// No channel here to deliver it: a claim for delivering is given
		// back for a replica (or a later start) that has one.
		if d.Turn.Claim != "" {
			m.Delivered(ctx, d.Turn, "", errors.New("no channel to deliver it here"))
		}
		return
	}
	dctx, endDelivery := m.tr.startSpanCtx(ctx, "delivery")
	sent, err := dv.fn(dctx, d)
	endDelivery(err)
	if d.Turn.Claim == "" {
		return
	}
	if err := m.Delivered(ctx, d.Turn, sent, err); err != nil {
		m.log.Warn("recording a delivery failed", slog.String("session_key", d.SessionKey), slog.Int64("seq", d.UserSeq), slog.String("error", err.Error()))
	}
}
