package sessions

// Delivery: how a stored reply reaches a channel outside a live turn
// (the rescuer's, or one whose delivery never completed), through the
// channel's Route.Deliver.

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

// deliver hands a reply nobody here waits for to its channel's
// Route.Deliver and, when the channel confirms delivery, records the
// outcome under the claim d.Turn.
func (r *Routes) deliver(ctx context.Context, d Delivery) {
	rt, _ := r.route(d.Channel)
	if rt.Deliver == nil {
		// No channel here to deliver it: a claim for delivering is given
		// back for a replica (or a later start) that has one.
		if d.Turn.Claim != "" {
			r.delivered(ctx, d.Turn, "", errors.New("no channel to deliver it here"))
		}
		return
	}
	dctx, endDelivery := r.tr.startSpanCtx(ctx, "delivery")
	sent, err := rt.Deliver(dctx, d)
	endDelivery(err)
	if d.Turn.Claim == "" {
		return
	}
	if err := r.delivered(ctx, d.Turn, sent, err); err != nil {
		r.log.Warn("recording a delivery failed", slog.String("session_key", d.SessionKey), slog.Int64("seq", d.UserSeq), slog.String("error", err.Error()))
	}
}
