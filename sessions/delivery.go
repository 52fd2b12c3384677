package sessions

// A turn's outcome delivered (runBatch's last step): to the tickets
// waiting here, or through the channel's Route.Deliver
// (deliverOutcome); a tracked channel's confirmation is stored
// (Delivered). Also how a stored reply reaches a channel outside a live
// turn (the rescuer's, or one whose delivery never completed).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions/ledger"
	"go.opentelemetry.io/otel/trace"
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
//
// A fire's reply that has nothing to report (quietFire) is not sent: its
// delivery is recorded done with no reference, and the fire settles
// quiet.
func (r *Routes) deliver(ctx context.Context, d Delivery) {
	if quietDelivery(d) {
		if d.Turn.Claim != "" {
			if err := r.delivered(ctx, d.Turn, "", nil); err != nil {
				r.log.Warn("recording a quiet fire's reply failed", slog.String("session_key", d.SessionKey), slog.Int64("seq", d.UserSeq), slog.String("error", err.Error()))
			}
		}
		return
	}
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

// deliverOutcome is the delivery: the stored reply goes to the lead's
// ticket, the merged messages' tickets learn they were answered with it,
// and a reply nobody here waits for goes out through the channel.
func (m *Manager) deliverOutcome(ctx context.Context, t *turnRun, msgs []ledger.Message, state string) {
	b, conv, lead := t.b, t.conv, t.b.Lead()
	final := toReply(&msgs[len(msgs)-1])
	final.Covers = clientIDs(b.Rows)
	// Media go with the reply that settles a turn: a reply a newer
	// message or a shutdown cut leaves them to the turn that answers its
	// messages again (ToolMediaOfTurn reads a turn's and those it took
	// over). Only a turn that called its agent ran tools, or one that
	// took over a cut turn's messages (a batch of several).
	settles := ledger.SettlesTurn(&msgs[len(msgs)-1])
	if m.opts.Tools != nil && settles && (t.called || len(b.Rows) > 1) {
		// (Only a turn that called its agent ran tools.) Read until
		// storage answers; still unread (a shutdown), the reply says so:
		// a channel that marks delivery fails this delivery, and the one
		// done again reads them (storedOutcome).
		err := m.untilStored(ctx, "read the media of a turn", func() (err error) {
			final.Media, err = m.media.ofTurn(ctx, conv, lead)
			return err
		})
		if err != nil {
			final.MediaUnread = true
			m.log.WarnContext(ctx, "the media of a turn could not be read", slog.String("conversation", conv),
				slog.Int64("turn", lead), slog.String("error", err.Error()))
		}
	}
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

// quietDelivery reports whether d is a fire's reply with nothing to
// report.
// A fire refused for its user's budget (the turn's own check, when the
// user went over between the fire's check and its turn) is not sent
// either: the fire settles skipped_budget, and the user is not told of
// a turn they did not ask for.
func quietDelivery(d Delivery) bool {
	if !ledger.IsFireMsgID(d.ClientMsgID) {
		return false
	}
	return (d.Reply.Status == ledger.MsgOK && schedules.IsQuiet(d.Reply.Text)) ||
		(d.Reply.Status == ledger.MsgFailed && strings.HasPrefix(d.Reply.Error, ledger.OverBudgetPrefix))
}
