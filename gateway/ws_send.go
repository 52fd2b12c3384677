package gateway

import (
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatgate/chatgate/internal/gopool"
)

// A connection's way out. Frames are queued, not written by whoever
// produced them, so that a slow client stalls no turn: a writer goroutine
// exists only while frames wait, writes all of them in one go, and after
// a close sends the close frame last. The key's frames wait for ready
// (greet); only errors answering the client's own frames go before it.

// sendQueue is how many frames may wait for a connection's writer; a client
// that falls further behind is disconnected and resumes from storage.
const sendQueue = 64

// enqueue hands a frame to the writer. A client too slow to take its frames
// is disconnected; it resumes and gets its replies from storage.
//
// A connection is registered for its key's frames before it reads the
// history its ready carries, so that nothing stored after that read
// passes it by; the frames that come before ready is queued wait for it
// (greet): a client hears nothing before ready. (One may then repeat a
// line of ready's history; the client keeps one per seq.)
func (c *wsConn) enqueue(frame []byte) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if c.closing {
		return
	}
	if !c.greeted {
		if len(c.held) >= sendQueue {
			c.held = nil
			c.closeLocked(websocket.CloseTryAgainLater, "client too slow")
			return
		}
		c.held = append(c.held, frame)
		return
	}
	c.enqueueLocked(frame)
}

// greet queues ready, then the frames held for it.
func (c *wsConn) greet(ready []byte) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if c.closing {
		return
	}
	c.greeted = true
	c.enqueueLocked(ready)
	for _, f := range c.held {
		c.enqueueLocked(f)
	}
	c.held = nil
}

// enqueueOwn queues a frame answering the client's own frame (an error),
// which needs no ready before it: a hello refused is told why.
func (c *wsConn) enqueueOwn(frame []byte) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	c.enqueueLocked(frame)
}

func (c *wsConn) enqueueLocked(frame []byte) {
	if c.closing {
		return
	}
	if len(c.out) >= sendQueue {
		c.out = nil
		c.closeLocked(websocket.CloseTryAgainLater, "client too slow")
		return
	}
	c.out = append(c.out, frame)
	c.startWriterLocked()
}

func (c *wsConn) startWriterLocked() {
	if c.writing {
		return
	}
	c.writing = true
	c.ws.wg.Add(1)
	gopool.Go(c.writeLoop)
}

// writeLoop writes the queued frames and exits when none are left; after a
// close it writes the close frame and closes the socket.
func (c *wsConn) writeLoop() {
	defer c.ws.wg.Done()
	for {
		c.outMu.Lock()
		if len(c.out) == 0 {
			c.out = nil // give the backing array back
			if !c.closing {
				c.writing = false
				c.outMu.Unlock()
				return
			}
			code, text := c.closeCode, c.closeText
			c.outMu.Unlock() // writing stays true: this was the last writer
			c.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
			c.conn.Close()
			return
		}
		frames := c.out
		c.out = nil
		c.outMu.Unlock()
		// Every frame queued so far goes out in one write (corkConn).
		deadline := time.Now().Add(c.ws.opts.WriteTimeout)
		c.conn.SetWriteDeadline(deadline)
		c.sock.cork()
		var err error
		for i, frame := range frames {
			frames[i] = nil
			if err = c.conn.WriteMessage(websocket.TextMessage, frame); err != nil {
				break
			}
		}
		if uerr := c.sock.uncork(deadline); err == nil {
			err = uerr
		}
		if err != nil {
			c.outMu.Lock()
			c.out = nil
			if !c.closing {
				c.closing = true
				c.closeCode = websocket.CloseAbnormalClosure
				close(c.done)
			}
			c.outMu.Unlock()
			c.conn.Close()
			return
		}
	}
}

func (c *wsConn) sendError(e *wsError) {
	c.enqueueOwn(encode(errorFrame{Type: "error", wsError: *e}))
}

// sendMessageError sends the error frame about message id.
func (c *wsConn) sendMessageError(e *wsError, id string) {
	c.enqueueOwn(encode(errorFrame{Type: "error", wsError: *e, ID: id}))
}

// fail sends an error frame, then closes with code.
func (c *wsConn) fail(e *wsError, code int) {
	c.sendError(e)
	c.close(code, e.Message)
}
