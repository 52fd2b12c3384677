package gateway

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/time/rate"
)

// A connection's life: the upgrade, the reader that takes every frame the
// client sends, and the close. The reader checks each frame (rate, type,
// hello first), answers stop itself and hands the frames that must keep
// their order to the worker (workLoop); what goes out goes through the
// send queue (enqueue).

// wsConn is one connection. An idle connection has one goroutine, its
// reader; a writer goroutine exists only while frames wait to be written,
// a worker only while messages and resets wait to be submitted (arrival
// order), and a waiter per message only until its turn has answered it.
// Writers, workers and waiters run on goroutines of a pool shared by all
// connections (internal/gopool), which keep their grown stacks from one
// message to the next and exit once idle for a few seconds.
// Pings come from one goroutine for the whole channel. done is closed
// once, by close; queue is never closed.
type wsConn struct {
	ws      *WebSocket
	conn    *websocket.Conn
	sock    *corkConn // under conn, corks its writes
	done    chan struct{}
	queue   chan *clientFrame
	limiter *rate.Limiter

	// Set by the reader before the worker starts; read-only afterwards.
	principal string
	key       string
	hello     bool

	workMu  sync.Mutex
	working bool // a worker goroutine is running the queue
	// open counts the messages and resets taken from the client and not
	// yet done with: queued, or submitted and waiting for their turn's
	// outcome. It bounds what one connection has waiting (QueueSize).
	open int
	// sent is closed once the newest waiter has handed over its frames:
	// each waiter sends after the one before it, so replies go out in the
	// order their messages came.
	sent chan struct{}

	outMu     sync.Mutex
	out       [][]byte // frames waiting for the writer
	greeted   bool     // ready is queued: frames for the key go out
	held      [][]byte // the key's frames that came before ready
	writing   bool     // a writer goroutine is flushing out
	closing   bool     // after out, the close frame, then the socket closes
	closeCode int
	closeText string

	posMu sync.Mutex
	conv  string // the conversation the client shows
	seen  int64  // the last seq of conv it was sent
}

// ServeHTTP upgrades GET /ws.
func (ws *WebSocket) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ws.mu.Lock()
	closing := ws.closing
	ws.mu.Unlock()
	if closing {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	token := requestToken(r)
	principal := ""
	authFailed := false
	if !ws.DevMode() && token != "" {
		if principal = ws.principalFor(token); principal == "" {
			authFailed = true
		}
	}
	cw := &corkingWriter{ResponseWriter: w}
	conn, err := ws.upgrader.Upgrade(cw, r, nil)
	if err != nil {
		return // the upgrader answered the client
	}
	c := &wsConn{
		ws: ws, conn: conn, sock: cw.conn, principal: principal,
		done:    make(chan struct{}),
		queue:   make(chan *clientFrame, ws.opts.QueueSize),
		limiter: rate.NewLimiter(rate.Limit(ws.cur.Load().perSecond), ws.cur.Load().burst),
	}
	ws.mu.Lock()
	if ws.closing {
		ws.mu.Unlock()
		conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "server shutting down"), time.Now().Add(time.Second))
		conn.Close()
		return
	}
	ws.conns[c] = struct{}{}
	ws.wg.Add(1) // the reader
	ws.mu.Unlock()
	if authFailed {
		c.fail(errUnauthorized.with("unknown token"), websocket.ClosePolicyViolation)
	}
	// The read loop gets a goroutine of its own so that this handler
	// returns: net/http then frees the connection's buffers and the
	// handler's deep stack, which an idle connection would otherwise keep.
	go c.readLoop()
}

func (c *wsConn) readLoop() {
	defer c.ws.wg.Done()
	defer c.ws.unregister(c)
	defer c.close(websocket.CloseNormalClosure, "")
	opts := c.ws.opts
	pongWait := opts.PingInterval * 5 / 2
	c.conn.SetReadLimit(opts.MaxFrameBytes)
	c.conn.SetReadDeadline(time.Now().Add(opts.HelloTimeout))
	c.conn.SetPongHandler(func(string) error {
		if c.hello {
			c.conn.SetReadDeadline(time.Now().Add(pongWait))
		}
		return nil
	})
	for {
		mt, data, err := c.conn.ReadMessage()
		if err != nil {
			switch {
			case errors.Is(err, websocket.ErrReadLimit):
				c.close(websocket.CloseMessageTooBig, errTooLarge.Message)
			case !c.hello && isTimeout(err):
				c.fail(errBadFrame.with("no hello within %s", opts.HelloTimeout), websocket.ClosePolicyViolation)
			}
			return
		}
		if c.hello {
			c.conn.SetReadDeadline(time.Now().Add(pongWait))
		}
		if !c.allow() {
			c.sendError(errRateLimited)
			continue
		}
		if mt != websocket.TextMessage {
			c.sendError(errBadFrame.with("binary frames are not part of the protocol"))
			continue
		}
		f, perr := decodeFrame(data)
		if perr != nil {
			if !c.hello && !c.ws.DevMode() && c.principal == "" {
				c.fail(errUnauthorized.with("send hello with a token first"), websocket.ClosePolicyViolation)
				return
			}
			c.sendMessageError(perr, refusedID(data))
			continue
		}
		if f.Type == "hello" {
			if c.hello {
				c.sendError(errBadFrame.with("hello was already sent"))
				continue
			}
			if c.resumeExpired(f) {
				continue // the client may send hello again, without the token
			}
			if !c.doHello(f) {
				return
			}
			c.hello = true
			c.conn.SetReadDeadline(time.Now().Add(pongWait))
			continue
		}
		if !c.hello {
			if !c.ws.DevMode() && c.principal == "" {
				c.fail(errUnauthorized.with("send hello with a token first"), websocket.ClosePolicyViolation)
				return
			}
			c.sendError(errBadFrame.with("the first frame must be hello"))
			continue
		}
		switch f.Type {
		case "stop":
			if !c.ws.sess.Stop(c.key) {
				c.sendError(errNotFound.with("no turn is running"))
			}
		default: // message, edit, reset, resume_previous, compact, status, model, tool_decision, reminders, reminder_cancel, memory, remember, forget: in arrival order, on the worker
			if werr := c.ws.admitAudio(f); werr != nil {
				c.sendMessageError(werr, f.ID)
				continue
			}
			if !c.admit() {
				c.sendError(errRateLimited.with("too many messages waiting; resend after the replies arrive"))
				continue
			}
			c.queue <- f // never blocks: open counts what the queue holds
			c.kick()
		}
	}
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

// close ends the connection: frames already queued go out, then a close
// frame with code, then the socket closes, which ends the reader.
func (c *wsConn) close(code int, text string) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	c.closeLocked(code, text)
}

func (c *wsConn) closeLocked(code int, text string) {
	if c.closing {
		return
	}
	c.closing = true
	c.closeCode, c.closeText = code, text
	close(c.done)
	c.startWriterLocked()
}
