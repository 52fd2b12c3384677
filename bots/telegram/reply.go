package telegram

// A message's turn and its reply: the message submitted with its text and
// media, the turn's session hooks, the wait for its end on the key's reply
// queue, and the reply sent — at the end of a live turn (answer), or as the
// rescuer hands over one produced outside it (deliverStored).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/chatgate/chatgate/sessions"
)

// emptyReplyText stands in for a reply with nothing visible in it, which
// Telegram would refuse to send.
const emptyReplyText = "(The answer was empty.)"

// submitMessage reads m's text and media (once, however often m is
// retried), submits them with the turn's typing action and preview, and
// queues the answer (awaitTurn). It returns as process does.
func (b *Bot) submitMessage(ctx context.Context, m *message, key string, in sessions.Inbound, first bool, stored func()) error {
	media := m.media
	if media == nil {
		// Read once: a message retried because it could not be stored is
		// not downloaded, transcribed or told about again.
		var read inbound
		if m.album != nil {
			read = b.readAlbum(ctx, m, key, strings.TrimSpace(b.stripMention(m)))
		} else {
			read = b.readMedia(ctx, m, key, strings.TrimSpace(b.stripMention(m)))
		}
		media, m.media = &read, &read
		for _, notice := range media.notices {
			b.later(key, func() { b.sendPlain(ctx, m.to(), notice, m.MessageID) })
		}
	}
	if strings.TrimSpace(media.text) == "" && len(media.atts) == 0 {
		return nil
	}
	in.Text, in.Attachments = media.text, media.atts
	quote := b.quoteOf(media.transcript)
	stopTyping := b.typing(m.to())
	// Deltas reach the hooks of the turn's lead message only: a burst
	// streams once, into the reply to its last message.
	st := b.newStream(m, key)
	if st != nil {
		st.quote = quote
	}
	t, err := b.sess.Submit(ctx, in, b.hooks(ctx, m, key, st, stored))
	return b.awaitTurn(ctx, m, key, first, t, err, stopTyping, st, quote)
}

// hooks are the session hooks of message m's turn; st, when the chat
// gets a preview, shows the reply as it is written and the turn's tool
// calls as they run.
func (b *Bot) hooks(ctx context.Context, m *message, key string, st *stream, stored func()) sessions.Hooks {
	h := sessions.Hooks{
		OnAck:   func(sessions.Ack) { stored() },
		OnReset: func(ev sessions.ResetEvent) { b.tellReset(ctx, m.to(), key, ev) },
		OnDelay: func(sessions.Delay) { b.tellDelay(ctx, key, m) },
	}
	if st != nil {
		h.OnDelta, h.OnTool = st.delta, st.tool
	}
	return h
}

// awaitTurn queues the answer to m, stored as t (or not, err), on the
// key's reply queue; see process. quote goes above the reply (answer).
func (b *Bot) awaitTurn(ctx context.Context, m *message, key string, first bool, t *sessions.Ticket, err error,
	stopTyping func(), st *stream, quote string) error {
	if err != nil {
		stopTyping()
		st.end()
		st.release()
	}
	switch {
	case errors.Is(err, sessions.ErrShuttingDown):
		return err
	case errors.Is(err, sessions.ErrTooLong):
		b.later(key, func() {
			b.sendPlain(ctx, m.to(), "That message is too long for me; please send a shorter one.", m.MessageID)
		})
		return nil
	case err != nil:
		if ctx.Err() == nil { // else polling stopped: nothing failed
			b.failed(first, "telegram: storing a message failed; retrying", key, err)
		}
		return err
	}
	b.later(key, func() {
		// The turn runs to its end whatever happens to polling: its
		// reply is sent during a drain too.
		out, err := t.Wait(context.WithoutCancel(ctx))
		stopTyping()
		st.end()
		b.answer(ctx, m, key, out, err, st, quote)
		st.release()
	})
	return nil
}

// answer sends the reply of the turn that answered m, when m's outcome
// carries it — into the preview st made, if any — and records its
// delivery. quote, when m was a voice note, goes above the reply: the
// transcript the answer is to (the stored reply is the model's alone).
func (b *Bot) answer(ctx context.Context, m *message, key string, out sessions.Outcome, err error, st *stream, quote string) {
	switch {
	case errors.Is(err, sessions.ErrShuttingDown):
		// Stored but not run: the next start (or another replica) runs it
		// and sends the reply.
		return
	case errors.Is(err, sessions.ErrReplyNotStored):
		// The ledger runs the turn again and delivers that reply.
		return
	case err != nil:
		b.log.Warn("telegram: a turn ended without a reply to send", slog.String("session_key", key), slog.String("error", err.Error()))
		return
	case out.Turn.Claim == "":
		if out.Reply.Status == sessions.MsgInterrupted && out.Reply.Error == sessions.InterruptedByMessage {
			// The next turn answers in a message of its own: the half
			// reply this one's preview shows goes.
			b.dropPreview(st)
		}
		// Nothing for this message to send: a later message of its burst
		// carries the reply (Merged); another runner holds the turn and
		// delivers it (Pending); a newer message cut the turn (busy mode
		// interrupt: the next turn answers both) or a shutdown did
		// (whoever runs it again sends that reply); or its reply was
		// delivered already (a repeated update).
		return
	}
	// The reply answers the newest message of the burst: this one, or,
	// for a repeated update of an earlier one whose delivery never
	// completed, the newest it covers.
	replyTo := m.MessageID
	if n := len(out.Reply.Covers); n > 0 {
		if id, ok := messageIn(out.Reply.Covers[n-1], m.Chat.ID); ok {
			replyTo = id
		}
	}
	var ref string
	// What the turn's tools returned goes first, each item marked as it
	// is sent; a failure leaves the text for the delivery done again.
	notes, serr := b.sendMedia(ctx, m.to(), out.Reply, replyTo)
	if serr != nil {
		b.deliveryFailed(serr)
	}
	if text, ok := withMediaNotes(replyText(out.Reply))(notes); ok && serr == nil {
		dctx, endDelivery := b.traceDelivery(ctx, out)
		ref, serr = b.deliverReply(dctx, st, m.to(), quote+text, replyTo)
		endDelivery(serr)
		if serr == nil {
			b.delayTold.Remove(key) // a later delay is told again
		}
		b.deliveryFailed(serr)
	}
	if err := b.sess.Delivered(ctx, out.Turn, ref, serr); err != nil {
		b.log.Warn("telegram: recording a delivery failed", slog.String("session_key", key), slog.String("error", err.Error()))
	}
}

// replyText is what the chat is sent for a stored reply, and false when
// nothing is: a turn stopped by /stop before anything was written (the
// answer to /stop said so). A reply with nothing visible in it, which
// Telegram refuses to send, is told as empty.
func replyText(r sessions.Reply) (string, bool) {
	switch {
	case strings.TrimSpace(r.Text) != "":
		return r.Text, true
	case r.Status != sessions.MsgInterrupted:
		return emptyReplyText, true
	case r.Error == sessions.InterruptedByUser:
		return "", false
	}
	return stoppedText, true
}

// withMediaNotes puts under a reply's text the lines that tell the user
// of files that may not have reached them (sendMedia); with such lines
// a reply that has no text of its own is sent for them.
func withMediaNotes(text string, ok bool) func(notes []string) (string, bool) {
	return func(notes []string) (string, bool) {
		if len(notes) == 0 {
			return text, ok
		}
		lines := strings.Join(notes, "\n")
		if !ok || text == "" {
			return lines, true
		}
		return text + "\n\n" + lines, true
	}
}

// deliverStored sends a reply produced outside a live turn (by the
// rescuer, after a restart or for a replica that died), or one whose
// earlier delivery did not complete.
func (b *Bot) deliverStored(ctx context.Context, d sessions.Delivery) (string, error) {
	if !b.Ready() {
		// The rescuer may run before getMe succeeded; the turn is
		// delivered again later.
		return "", errors.New("telegram: the bot has not connected yet")
	}
	to, err := parsePlace(d.ChatID)
	if err != nil {
		return "", fmt.Errorf("%w: %v", sessions.ErrUndeliverable, err)
	}
	// The reply answers the newest message its turn covers.
	replyTo, _ := messageIn(d.ClientMsgID, to.chat)
	notes, err := b.sendMedia(ctx, to, d.Reply, replyTo)
	if err != nil {
		b.deliveryFailed(err)
		return "", err
	}
	text, ok := withMediaNotes(replyText(d.Reply))(notes)
	if !ok {
		return "", nil
	}
	ref, err := b.deliverStoredText(ctx, d, to, text, replyTo)
	b.deliveryFailed(err)
	return ref, err
}
