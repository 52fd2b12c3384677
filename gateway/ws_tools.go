package gateway

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/chatgate/chatgate/sessions"
)

// Tool calls on the WebSocket channel (docs/protocol.md, "Tool calls"). A
// turn's calls reach the connection that sent its message as tool frames
// (the OnTool hook, set in wsConn.submit). A call that needs the user's
// approval is asked of every connection of its session key as a
// tool_request, and asked again on each hello while it waits — a client
// that reconnects, a reloaded page, a restarted gateway: the ask is
// stored, not held here. A tool_decision from any of the principal's
// connections decides it; every connection of the key is then told the
// ask is over (tool_resolved).

// errNobodyConnected is the asker's answer when no connection of the key
// is open here: the call waits, and is asked again on the next hello.
var errNobodyConnected = errors.New("no connection of the session is open here; asked again on its next hello")

// decideTimeout bounds the storage of one decision.
const decideTimeout = 30 * time.Second

// askTool sends a call's tool_request to the connections of its key.
func (ws *WebSocket) askTool(_ context.Context, a sessions.ToolAsk) (string, error) {
	conns := ws.connsOf(a.SessionKey)
	if len(conns) == 0 {
		return "", errNobodyConnected
	}
	frame := encode(newToolRequestFrame(a.Call))
	for _, c := range conns {
		c.enqueue(frame)
	}
	return "", nil
}

// toolSettled tells the key's connections that the ask is over.
func (ws *WebSocket) toolSettled(_ context.Context, a sessions.ToolAsk, _ string) {
	ws.resolved(a.SessionKey, a.Call)
}

// resolved sends tool_resolved for call ev to the connections of key. A
// client may get it twice (from the decision and from the turn that
// waited for it); it is the same frame.
func (ws *WebSocket) resolved(key string, ev sessions.ToolEvent) {
	frame := encode(toolResolvedFrame{Type: "tool_resolved", ID: ev.ID, ReplyTo: ev.Seq, Status: ev.Status})
	for _, c := range ws.connsOf(key) {
		c.enqueue(frame)
	}
}

// askAgain sends the connection the asks of its key that wait for a
// decision, after ready: the turn waiting for them asks nobody again.
func (c *wsConn) askAgain(ctx context.Context) {
	asks, err := c.ws.sess.PendingToolAsks(ctx, c.key)
	if err != nil {
		c.ws.log.Warn("loading the tool calls waiting for a decision failed; they are asked on the next hello",
			slog.String("session_key", c.key), slog.String("error", err.Error()))
		return
	}
	for _, a := range asks {
		c.enqueue(encode(newToolRequestFrame(a.Call)))
	}
}

// decide runs a tool_decision frame on the worker. A refusal is an error
// frame naming the call (tool_id); a decision taken is told to every
// connection of the key at once, and the turn goes on. A refusal that
// says the ask is over (it expired) is told to them too, as the
// tool_resolved the turn sends when it ends the ask: a client whose ask
// was never settled here (the turn runs on no replica now) still sees
// the end of it.
func (c *wsConn) decide(f *clientFrame) {
	defer c.finish()
	ctx, cancel := context.WithTimeout(context.Background(), decideTimeout)
	defer cancel()
	id := *f.Decision.ID
	ev, err := c.ws.sess.DecideTool(ctx, sessions.ToolDecision{SessionKey: c.key, UserID: c.principal, ID: id, Allow: *f.Decision.Allow})
	if err != nil {
		r := refusalOf(err)
		if r.ends != "" {
			ev.Status = r.ends
			c.ws.resolved(c.key, ev)
		}
		c.enqueueOwn(encode(errorFrame{Type: "error", wsError: *r.frame(id), ToolID: id}))
		return
	}
	c.ws.resolved(c.key, ev)
}

// decisionRefusal is how a tool_decision that DecideTool refused with err
// is answered: the error frame, and, when the refusal means the ask is
// over, the status its tool_resolved says it ended with ("": it goes on).
type decisionRefusal struct {
	err   error
	frame func(id int64) *wsError
	ends  string
}

// decisionRefusals answer every error DecideTool names (a test walks
// them all); any other error is a decision that could not be stored.
var decisionRefusals = []decisionRefusal{
	{err: sessions.ErrToolNotFound, frame: func(id int64) *wsError { return errNotFound.with("there is no tool call %d", id) }},
	{err: sessions.ErrToolNotYours, frame: func(id int64) *wsError {
		return errNotYours.with("tool call %d is not yours to decide: only the user whose turn it is can", id)
	}},
	{err: sessions.ErrToolExpired, ends: sessions.ToolExpired, frame: func(id int64) *wsError {
		return errDecided.with("tool call %d has expired: nobody decided it in time, so it counts as denied and does not run", id)
	}},
	{err: sessions.ErrToolDecided, frame: func(id int64) *wsError { return errDecided.with("tool call %d was decided already", id) }},
	{err: sessions.ErrShuttingDown, frame: func(int64) *wsError { return errUnavailable }},
}

// refusalOf is the answer to a decision DecideTool refused with err.
func refusalOf(err error) decisionRefusal {
	for _, r := range decisionRefusals {
		if errors.Is(err, r.err) {
			return r
		}
	}
	return decisionRefusal{err: err, frame: func(id int64) *wsError {
		return errInternal.with("the decision on tool call %d could not be stored; send it again", id)
	}}
}
