package gateway

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"
)

// A connection's writer sends the frames queued for it together: a turn's
// ack and first delta usually wait side by side, and a long reply goes out
// as several frames of the write buffer's size. gorilla/websocket writes
// every frame to the socket with a call of its own, so the writer corks the
// socket under it while it writes a batch, and the frames' bytes reach the
// socket in one write when it uncorks. Control frames written meanwhile
// from other goroutines (pings, pongs) join the batch.

// corkFlushBytes bounds what a cork holds before it writes anyway.
const corkFlushBytes = 64 << 10

// corkBufs holds the batches' buffers between uses, so that an idle
// connection holds none.
var corkBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// corkConn is the hijacked connection under a WebSocket.
type corkConn struct {
	net.Conn

	mu     sync.Mutex
	corked bool
	buf    *[]byte // what was written while corked; nil when empty
	err    error   // the first failed write; every later write fails with it
}

// Write writes p to the socket, or keeps it for the next flush while
// corked. gorilla/websocket calls it with its own write lock held, so
// frames never interleave.
func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if !c.corked {
		return c.write(p)
	}
	if c.buf == nil {
		c.buf = corkBufs.Get().(*[]byte)
	}
	*c.buf = append(*c.buf, p...)
	if len(*c.buf) >= corkFlushBytes {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (c *corkConn) write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.err = err
	}
	return n, err
}

// cork holds writes until uncork.
func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// uncork writes what the cork held, in one write with the given deadline,
// and lets later writes through. Its error is that write's: the frames
// written while corked were reported written, so a failure here is the
// batch's.
func (c *corkConn) uncork(deadline time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	if c.err != nil {
		return c.err
	}
	if c.buf == nil {
		return nil
	}
	c.Conn.SetWriteDeadline(deadline)
	return c.flushLocked()
}

func (c *corkConn) flushLocked() error {
	b := c.buf
	c.buf = nil
	_, err := c.write(*b)
	if cap(*b) <= corkFlushBytes*2 {
		*b = (*b)[:0]
		corkBufs.Put(b)
	}
	return err
}

// corkingWriter hands the upgrader a corkConn when it hijacks the request's
// connection.
type corkingWriter struct {
	http.ResponseWriter
	conn *corkConn
}

func (w *corkingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.conn = &corkConn{Conn: nc}
	return w.conn, brw, nil
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *corkingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
