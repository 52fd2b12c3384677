package gateway

import (
	"context"
	"errors"
	"log/slog"

	"github.com/chatgate/chatgate/sessions"
)

// Going back to the previous conversation. {"type":"resume_previous"}
// reopens the session's most recently archived conversation; every
// connection of the session — this one, the others here, and through the
// reset event those on other replicas — gets a reset frame with reason
// "resume" carrying the reopened conversation's history, and shows it
// from then on.

// errNothingToResume is the not_found answer to resume_previous.
var errNothingToResume = errNotFound.with("there is no earlier conversation to go back to")

// resumePrevious runs a resume_previous frame on the connection's worker.
// The reset frame comes through onReset, to every connection of the key,
// before the worker takes the connection's next frame.
func (c *wsConn) resumePrevious(ctx context.Context, in sessions.Inbound) {
	defer c.finish()
	_, err := c.ws.sess.ResumePrevious(ctx, in)
	switch {
	case errors.Is(err, sessions.ErrNothingToResume):
		c.sendError(errNothingToResume)
	case err != nil:
		c.sendError(handleError(err))
	}
}

// onResume switches the key's connections to the reopened conversation.
// A resume made here is announced while the key's state lock is held, so
// the history read now is exactly what was stored before any later
// message, and the frame goes out before the ack of any such message
// (also on the connection that asked); a resume forwarded from another
// replica is read on a goroutine of its own, off the event receiver's.
func (ws *WebSocket) onResume(ev sessions.ResetEvent) {
	if !ws.hasConns(ev.SessionKey) {
		return
	}
	if ev.Remote {
		go ws.switchTo(ev)
		return
	}
	ws.switchTo(ev)
}

func (ws *WebSocket) switchTo(ev sessions.ResetEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
	defer cancel()
	t, err := ws.sess.ConversationTranscript(ctx, ev.NewConversation, ws.cur.Load().historyLimit)
	if err != nil {
		// The clients see the reopened conversation on their next hello.
		ws.log.Warn("loading a resumed conversation failed", slog.String("session_key", ev.SessionKey), slog.String("error", err.Error()))
		return
	}
	f := ws.resetFrame(t.Conversation, ev.Reason)
	f.History = historyItems(t.Entries)
	frame := encode(f)
	for _, c := range ws.connsOf(ev.SessionKey) {
		c.enqueue(frame)
		c.moved(t.Conversation, t.LastSeq)
	}
}

// resetFrame is the reset frame telling that conv is the session's
// conversation now, and why.
func (ws *WebSocket) resetFrame(conv, reason string) resetFrame {
	f := resetFrame{Type: "reset", Conversation: conv, Reason: reason}
	if reason == sessions.ReasonIdle {
		f.IdleMinutes = int(ws.sess.Policy(Channel).Reset.IdleFor.Minutes())
	}
	return f
}
