package gateway

import (
	"context"
	"time"

	"github.com/chatgate/chatgate/sessions"
)

// Replies and resets reaching the connections of this replica: a message's
// waiter hands its reply to the connection that sent it (or, if that one
// has gone, to the key's others), the rescuer's replies go to every
// connection of the key, and reset notices tell each connection which
// conversation it shows now. Replies stored by other replicas come
// through WebSocket.onReply.

// deliver sends a turn's frame to the connection that sent the message or,
// if that one has gone, to the key's live connections: a client that
// resumed while its turn was running gets the rest of the stream and the
// reply there. shown is the conversation the sender showed when the
// message was acknowledged: a connection told of a reset since shows a
// new conversation, and the frames of the archived one's turns are not
// sent to it.
func (c *wsConn) deliver(shown string, frame []byte) (sent int) {
	select {
	case <-c.done:
	default:
		if c.shows(shown) {
			c.enqueue(frame)
			return 1
		}
		return 0
	}
	for _, other := range c.ws.connsOf(c.key) {
		if other.shows(shown) {
			other.enqueue(frame)
			sent++
		}
	}
	return sent
}

// await waits for the outcome of a submitted message and, once the
// message before it has had its frames, sends its own: the reply, or an
// error, or nothing when a later message's reply answers it too (merged)
// or another runner holds its turn and delivers the reply (pending).
func (c *wsConn) await(t *sessions.Ticket, id, shown string, prev <-chan struct{}, sent chan struct{}) {
	defer c.ws.wg.Done()
	defer c.finish()
	defer close(sent)
	out, err := t.Wait(context.Background())
	if prev != nil {
		<-prev
	}
	switch {
	case err != nil:
		c.sendMessageError(messageError(err, id), id)
	case out.Merged, out.Pending:
	default:
		c.saw(out.ConversationID, out.Reply.Seq)
		end := c.ws.traceDelivery(out)
		n := c.deliver(shown, encode(newReplyFrame(c.replyTo(id, out), out.Reply)))
		c.ws.delivered(n)
		end(n)
	}
}

// replyTo is the client id of the message a reply answers: the message's
// own, unless it is a resend of a message that a later one's turn answered
// with it — then the id of that later message, the last the reply covers.
func (c *wsConn) replyTo(id string, out sessions.Outcome) string {
	if out.Turn.Seq == 0 || out.Turn.Seq == out.UserSeq {
		return id
	}
	ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
	defer cancel()
	if last, _, err := c.ws.sess.StoredReply(ctx, out.ConversationID, out.Turn.Seq, out.Reply.Seq); err == nil {
		return last
	}
	if n := len(out.Reply.Covers); n > 0 {
		return out.Reply.Covers[n-1]
	}
	return id
}

// deliverStored delivers a reply produced outside a live turn (by the
// rescuer, after a restart or for a replica that died) to the principal's
// open connections; others get it on resume. WebSocket cannot confirm
// delivery, so the turn does not wait for it.
func (ws *WebSocket) deliverStored(_ context.Context, d sessions.Delivery) (string, error) {
	frame := encode(newReplyFrame(d.ClientMsgID, d.Reply))
	conns := ws.connsOf(d.SessionKey)
	for _, c := range conns {
		c.enqueue(frame)
		c.saw(d.Turn.ConversationID, d.Reply.Seq)
	}
	ws.delivered(len(conns))
	return "", nil
}

// onReset tells every connection of the session key that its conversation
// was archived. Sweeps do not open the next conversation; the notice then
// opens it so that the client learns its id.
func (ws *WebSocket) onReset(ev sessions.ResetEvent) {
	// Only this channel's resets reach its route (sessions.Routes).
	if ev.Reason == sessions.ReasonResume {
		ws.onResume(ev)
		return
	}
	targets := ws.connsOf(ev.SessionKey)
	if len(targets) == 0 {
		return
	}
	if ev.NewConversation != "" {
		frame := encode(ws.resetFrame(ev.NewConversation, ev.Reason))
		for _, c := range targets {
			c.enqueue(frame)
			c.moved(ev.NewConversation, 0)
		}
		return
	}
	// Not on the sweep's goroutine: opening takes the key's lock.
	go ws.announceSweep(ev, targets)
}

// announceSweep tells targets that a sweep archived their conversation,
// opening the next one so that they learn its id. When the key's active
// conversation is the archived one again, a resume_previous reopened it
// after the sweep (before this ran): its own reset frame, with the
// history, told the clients, and an idle or daily one now would make
// them show that conversation as new and empty.
func (ws *WebSocket) announceSweep(ev sessions.ResetEvent, targets []*wsConn) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t, err := ws.sess.Open(ctx, sessions.Inbound{Channel: Channel, SessionKey: ev.SessionKey, UserID: targets[0].principal}, 0, 1)
	if err != nil || t.Conversation == ev.OldConversation {
		return
	}
	frame := encode(ws.resetFrame(t.Conversation, ev.Reason))
	for _, c := range targets {
		c.enqueue(frame)
		c.moved(t.Conversation, t.LastSeq)
	}
}
