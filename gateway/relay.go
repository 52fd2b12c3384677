package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/chatgate/chatgate/sessions"
)

// Replies and resets of other replicas. With several gateways on one
// PostgreSQL database, a client connected here may have its turn run by
// another replica (it sent the message there and then reconnected here,
// or the other replica's rescuer took the turn over). The session manager
// reports those replies by ids; the channel reads the stored reply and
// sends the same reply frame the live path would. A client can get a
// reply twice (live and again on resume); it keeps one per seq.

// relayTimeout bounds the reads of one forwarded reply, and a re-check.
const relayTimeout = 10 * time.Second

// onReply forwards a reply another replica stored to the connections of
// its session key open here. It runs on the goroutine receiving events,
// so the reads happen on one of their own, and only when someone here
// waits for the reply.
func (ws *WebSocket) onReply(ev sessions.ReplyEvent) {
	if ev.Missed {
		ws.recheckLater()
		return
	}
	if !ws.hasConns(ev.SessionKey) { // only this channel's replies reach its route
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
		defer cancel()
		id, r, err := ws.sess.StoredReply(ctx, ev.ConversationID, ev.Seq, ev.ReplySeq)
		if err != nil {
			ws.log.Debug("forwarding another replica's reply failed; the client gets it on resume",
				slog.String("session_key", ev.SessionKey), slog.Int64("seq", ev.ReplySeq), slog.String("error", err.Error()))
			return
		}
		frame := encode(newReplyFrame(id, r))
		for _, c := range ws.connsOf(ev.SessionKey) {
			c.enqueue(frame)
			c.saw(ev.ConversationID, r.Seq)
		}
	}()
}

func (ws *WebSocket) hasConns(key string) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.byKey[key]) > 0
}

// recheckLater runs one re-check at a time; a request while one runs
// makes it run once more, since it may have started before the gap.
func (ws *WebSocket) recheckLater() {
	if ws.rechecks.Add(1) > 1 {
		return
	}
	go func() {
		for {
			ws.recheck()
			if ws.rechecks.Add(-1) == 0 {
				return
			}
			ws.rechecks.Store(1)
		}
	}()
}

// recheck sends every connection the replies stored after the last seq it
// was sent, in the conversation it shows: events of other replicas may
// have been lost while the connection listening for them was down.
func (ws *WebSocket) recheck() {
	conns := ws.allConns()
	for _, c := range conns {
		conv, seen := c.position()
		if conv == "" {
			continue // no hello yet
		}
		ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
		ws.recheckConn(ctx, c, conv, seen)
		cancel()
	}
}

func (ws *WebSocket) recheckConn(ctx context.Context, c *wsConn, conv string, seen int64) {
	t, err := ws.sess.Open(ctx, sessions.Inbound{Channel: Channel, SessionKey: c.key, UserID: c.principal}, seen, 100)
	if err != nil || t.Conversation != conv {
		return // a reset since: the client learns of it with its next message
	}
	for _, e := range t.Entries {
		if e.Role != "assistant" {
			continue
		}
		// Read with the reply: the client ids of the messages it answers.
		id, r, err := ws.sess.StoredReply(ctx, conv, e.ReplyTo, e.Seq)
		if err != nil {
			continue
		}
		c.enqueue(encode(newReplyFrame(id, r)))
		c.saw(conv, e.Seq)
	}
}

// saw records that the connection was sent seq of conversation conv.
func (c *wsConn) saw(conv string, seq int64) {
	c.posMu.Lock()
	defer c.posMu.Unlock()
	if conv == c.conv && seq > c.seen {
		c.seen = seq
	}
}

// moved records that the connection shows conversation conv, up to seq.
func (c *wsConn) moved(conv string, seq int64) {
	c.posMu.Lock()
	c.conv, c.seen = conv, seq
	c.posMu.Unlock()
}

// shows reports whether the connection shows conversation conv, or has
// not been told of one yet.
func (c *wsConn) shows(conv string) bool {
	c.posMu.Lock()
	defer c.posMu.Unlock()
	return c.conv == "" || conv == "" || c.conv == conv
}

// position is the conversation the connection shows and the last seq of
// it the connection was sent.
func (c *wsConn) position() (string, int64) {
	c.posMu.Lock()
	defer c.posMu.Unlock()
	return c.conv, c.seen
}
