package gateway

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/chatgate/chatgate/internal/gopool"
	"github.com/chatgate/chatgate/sessions"
)

// A connection's worker: the message, edit, reset, resume_previous,
// compact, status, model and tool_decision frames, one at a time in the
// order they came, so that a reset never overtakes the message sent
// before it, and a model chosen applies to the messages after it. Each
// message is handed to the session manager and acknowledged once stored;
// a waiter per message then waits for its turn's outcome (wsConn.await).
// stop does not queue: the reader runs it at once (readLoop).

// admit counts a message or reset in, unless QueueSize of them are open.
func (c *wsConn) admit() bool {
	c.workMu.Lock()
	defer c.workMu.Unlock()
	if c.open >= c.ws.opts.QueueSize {
		return false
	}
	c.open++
	return true
}

// finish counts a message or reset out.
func (c *wsConn) finish() {
	c.workMu.Lock()
	c.open--
	c.workMu.Unlock()
}

// kick starts the worker unless it runs. The worker exists only while
// messages wait, so an idle connection costs no goroutine for it.
func (c *wsConn) kick() {
	c.workMu.Lock()
	defer c.workMu.Unlock()
	if c.working {
		return
	}
	c.working = true
	c.ws.wg.Add(1)
	gopool.Go(c.workLoop)
}

// workLoop submits the connection's messages and runs its resets in
// arrival order, until the queue is empty. Submitting waits for no turn:
// each message is acknowledged once stored, and messages that arrive
// while a turn runs can join the next one (busy_mode). A message already
// received is submitted even if the client has gone: its reply is stored
// and delivered on resume.
func (c *wsConn) workLoop() {
	defer c.ws.wg.Done()
	for {
		select {
		case f := <-c.queue:
			c.run(f)
			continue
		default:
		}
		c.workMu.Lock()
		if len(c.queue) == 0 {
			c.working = false
			c.workMu.Unlock()
			return
		}
		c.workMu.Unlock()
	}
}

// run hands a frame taken off the queue to its handler; each handler
// counts the frame out (finish) once done with it.
func (c *wsConn) run(f *clientFrame) {
	ctx := context.Background()
	in := sessions.Inbound{Channel: Channel, SessionKey: c.key, UserID: c.principal, ClientMsgID: f.ID}
	if f.Type == "resume_previous" {
		c.resumePrevious(ctx, in)
		return
	}
	if f.Type == "compact" {
		c.compact(ctx, in)
		return
	}
	if f.Type == "status" {
		c.status(ctx, in)
		return
	}
	if f.Type == "model" {
		c.model(ctx, in, f.Name)
		return
	}
	if f.Type == "schedules" || f.Type == "schedule_opt_in" {
		c.schedules(ctx, in, f.Name, f.On)
		return
	}
	if f.Type == "reset" {
		c.reset(ctx, in)
		return
	}
	if f.Type == "tool_decision" {
		c.decide(f)
		return
	}
	if f.Type == "reminders" {
		c.reminders(ctx)
		return
	}
	if f.Type == "reminder_cancel" {
		c.cancelReminder(ctx, f.ReminderID)
		return
	}
	if isMemoryFrame(f.Type) {
		c.memory(ctx, f)
		return
	}
	c.submit(ctx, in, f)
}

// reset runs a reset frame. The reset frame answering it comes through
// onReset, to every connection of the key.
func (c *wsConn) reset(ctx context.Context, in sessions.Inbound) {
	defer c.finish()
	if _, err := c.ws.sess.Reset(ctx, in); err != nil {
		c.sendError(handleError(err))
	}
}

// submit runs a message or edit frame: it is acknowledged once stored, and
// a waiter of its own (await) sends the reply, so that the worker takes
// the next frame while the turn runs. An edit that replaced its message's
// text before the turn started needs no waiter: the original's reply
// answers it.
func (c *wsConn) submit(ctx context.Context, in sessions.Inbound, f *clientFrame) {
	ctx, endMessage := c.ws.traceMessage(ctx, f)
	in.Text = *f.Text
	if hasAudio(f) {
		text, werr := c.ws.transcribe(ctx, in, f)
		if werr != nil {
			endMessage(werr)
			c.finish()
			c.sendMessageError(werr, f.ID)
			return
		}
		in.Text = text
	}
	in.Attachments = c.ws.attachments(f.Attachments)
	if f.ReplyTo != nil && f.Type == "message" {
		quote, werr := c.ws.quoted(ctx, in, *f.ReplyTo)
		if werr != nil {
			endMessage(werr)
			c.finish()
			c.sendMessageError(werr, f.ID)
			return
		}
		in.Quote = quote
	}
	acked := false
	// The conversation this connection shows once the message is stored
	// (after a reset the message itself triggered). Set before the turn
	// can start, read by its deltas on the turn's goroutine.
	var shown atomic.Pointer[string]
	ack := func(conv string, seq int64) {
		acked = true
		c.saw(conv, seq)
		pos, _ := c.position()
		shown.Store(&pos)
		c.deliver(pos, encode(ackFrame{Type: "ack", ID: f.ID, Seq: seq}))
	}
	hooks := sessions.Hooks{
		OnAck: func(a sessions.Ack) { ack(a.ConversationID, a.Seq) },
		OnDelta: func(d string) {
			if pos := shown.Load(); pos != nil {
				c.deliver(*pos, encode(deltaFrame{Type: "delta", ReplyTo: f.ID, Text: d}))
			}
		},
		OnDelay: func(sessions.Delay) {
			if pos := shown.Load(); pos != nil {
				c.deliver(*pos, encode(noticeFrame{Type: "notice", Code: "delayed", ID: f.ID, Message: sessions.DelayText}))
			}
		},
		OnTool: func(ev sessions.ToolEvent) {
			if pos := shown.Load(); pos != nil {
				c.deliver(*pos, encode(newToolFrame(ev)))
			}
		},
	}
	var t *sessions.Ticket
	var err error
	if f.Type == "edit" {
		var ed sessions.EditOutcome
		ed, err = c.ws.sess.Edit(ctx, in, f.Edits, hooks)
		if err == nil && ed.Ticket == nil {
			// Replaced before its turn started: the original's reply
			// answers the edited text.
			c.finish()
			c.saw(ed.ConversationID, ed.Seq)
			pos, _ := c.position()
			c.deliver(pos, encode(ackFrame{Type: "ack", ID: f.ID, Seq: ed.Seq, Edited: f.Edits}))
			return
		}
		t = ed.Ticket
	} else {
		t, err = c.ws.sess.Submit(ctx, in, hooks)
	}
	if err != nil {
		endMessage(handleError(err))
		c.finish()
		c.sendMessageError(messageError(err, f.ID), f.ID)
		return
	}
	endMessage(nil)
	if !acked {
		ack(t.ConversationID(), t.Seq())
	}
	prev, sent := c.queueWaiter()
	c.ws.wg.Add(1)
	pos := *shown.Load()
	gopool.Go(func() { c.await(t, f.ID, pos, prev, sent) })
}

// queueWaiter puts a new waiter after the newest one: prev is closed once
// that one has handed over its frames, and the new waiter closes sent
// once it has handed over its own.
func (c *wsConn) queueWaiter() (prev, sent chan struct{}) {
	c.workMu.Lock()
	prev = c.sent
	sent = make(chan struct{})
	c.sent = sent
	c.workMu.Unlock()
	return prev, sent
}

// messageError is the error frame for a message that got no reply.
func messageError(err error, id string) *wsError {
	we := handleError(err)
	if id != "" {
		we = we.with("%s (message %s)", we.Message, id)
	}
	return we
}

func handleError(err error) *wsError {
	switch {
	case errors.Is(err, sessions.ErrShuttingDown):
		return errUnavailable
	case errors.Is(err, sessions.ErrEmptyMessage):
		return errBadFrame.with("message text is empty (and it carries no image)")
	case errors.Is(err, sessions.ErrTooLong):
		return errTooLarge.with("%v", err)
	case errors.Is(err, sessions.ErrBadText):
		return errBadFrame.with("%v", err)
	case errors.Is(err, sessions.ErrEditNotFound):
		return errNotFound.with("no message with that id to edit")
	case errors.Is(err, sessions.ErrReplyNotStored):
		return errUnavailable.with("the reply could not be stored yet; it is delivered once it is")
	default:
		return errInternal
	}
}
