package gateway

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/ratelimit"
	"github.com/chatgate/chatgate/sessions"
)

// The WebSocket channel, protocol v1 at GET /ws (docs/protocol.md): what
// it needs from the session manager, its options, its open connections by
// session key, the pings that keep them alive, and how it stops. One
// connection's parts: wsConn (ServeHTTP, readLoop, close), doHello,
// workLoop, the send queue (enqueue), deliver and the tool asks (askTool,
// decide); the channel's: the limits (newLimits, checkOrigin), the relay
// of other replicas' replies (onReply), resumePrevious, compact, the
// imageCache, transcribe, Reconfigure, and the wire format (clientFrame).

// Channel is the WebSocket channel's name in session keys and policies.
const Channel = "websocket"

// Sessions is what the WebSocket channel uses of the session manager,
// one door per role, each a small interface: what a channel can do is
// said by the doors it is built with. SessionsOf opens every door on one
// session manager; a test may put another behind one of them.
type Sessions struct {
	Turns
	Transcripts
	Principals
	Policies
	Standing
	ToolDecisions
	Registry
	// Reminders serves the reminder frames (nil: they are answered
	// unsupported).
	Reminders Reminders
	// Schedules serves the schedules frames (nil: they are answered
	// unsupported).
	Schedules Schedules
	// Memory serves the memory frames (nil: they are answered
	// unsupported).
	Memory Memory
	// ToolMedia serves what tools returned (MediaHandler; nil: 404).
	ToolMedia MediaFiles
}

// SessionsOf is every door of the WebSocket channel on m; Transcripts
// and Principals open on its conversations (Manager.Conversations).
// Schedules stays nil: the gateway's wiring opens it on its timetable.
func SessionsOf(m *sessions.Manager) Sessions {
	c := m.Conversations()
	return Sessions{Turns: m, Transcripts: c, Principals: c, Policies: m, Standing: m.Standing(), ToolDecisions: m.Approvals(), Registry: m.Routes(),
		Reminders: m.Reminders(), Memory: m.Memory(), ToolMedia: c}
}

// Turns are the frames that start, change or stop a turn.
type Turns interface {
	// Submit stores and acknowledges a message without waiting for any
	// turn; its Ticket yields the outcome of the turn that answers it.
	Submit(ctx context.Context, in sessions.Inbound, h sessions.Hooks) (*sessions.Ticket, error)
	// Edit applies an edit of the stored message originalID: its text is
	// replaced while its turn has not started, else the edit is a new
	// message (the outcome's Ticket).
	Edit(ctx context.Context, in sessions.Inbound, originalID string, h sessions.Hooks) (sessions.EditOutcome, error)
	Reset(ctx context.Context, in sessions.Inbound) (sessions.ResetEvent, error)
	Stop(key string) bool
	// Compact sums the conversation up now (wsConn.compact).
	Compact(ctx context.Context, in sessions.Inbound) (int, error)
}

// Transcripts are what a client reads of its conversations.
type Transcripts interface {
	Open(ctx context.Context, in sessions.Inbound, afterSeq int64, limit int) (sessions.Transcript, error)
	// ResumePrevious and ConversationTranscript take a session back to
	// its previous conversation (wsConn.resumePrevious).
	ResumePrevious(ctx context.Context, in sessions.Inbound) (sessions.Resumed, error)
	ConversationTranscript(ctx context.Context, convID string, limit int) (sessions.Transcript, error)
	// StoredReply brings a reply another replica stored to the clients
	// connected here (WebSocket.onReply).
	StoredReply(ctx context.Context, convID string, userSeq, replySeq int64) (clientMsgID string, r sessions.Reply, err error)
}

// Principals are the resume tokens that bring a client back as the same
// principal.
type Principals interface {
	NewResumeToken(ctx context.Context, channel, principal string) (string, error)
	ResumePrincipal(ctx context.Context, channel, token string) (string, error)
}

// Policies are the channel's conversation policy: a reset frame tells
// how long a conversation idles before it is reset (WebSocket.resetFrame).
type Policies interface {
	Policy(channel string) sessions.Policy
}

// Standing is where a session stands: its status, its budget, the
// models it may choose, and whether its agent reads images.
type Standing interface {
	// Status serves the status frame; OffersModels, Models and
	// ChooseModel the model frame (wsConn.model).
	Status(ctx context.Context, in sessions.Inbound) (sessions.Status, error)
	OffersModels() bool
	Models(ctx context.Context, in sessions.Inbound) (sessions.ModelState, error)
	ChooseModel(ctx context.Context, in sessions.Inbound, name string) (sessions.ModelState, error)
	// Usage is where a session key's user stands against their budget:
	// audio is not transcribed for a user over it (WebSocket.transcribe).
	Usage(ctx context.Context, channel, sessionKey string) (sessions.UsageStanding, error)
	ReadsImages() bool
}

// ToolDecisions are the user's answers to tool asks (wsConn.decide), and
// the asks a client coming back is shown again.
type ToolDecisions interface {
	DecideTool(ctx context.Context, d sessions.ToolDecision) (sessions.ToolEvent, error)
	PendingToolAsks(ctx context.Context, key string) ([]sessions.ToolAsk, error)
}

// Registry is how the session manager's work finds its way back to this
// channel: its one route (sessions.Route), registered once when the
// channel is built — replies delivered outside a live turn, those other
// replicas stored, resets, tool asks, and the fetch of stored images.
type Registry interface {
	Register(channel string, r sessions.Route)
}

// WSOptions configures the WebSocket channel.
type WSOptions struct {
	// AuthTokens maps a principal's name to its token. Empty: development
	// mode, where a client names itself in hello.
	AuthTokens map[string]string
	// Anonymous (without AuthTokens): clients get generated guest
	// principals only, and hello.user is ignored.
	Anonymous      bool
	AllowedOrigins []string
	MaxFrameBytes  int64
	// RatePerSecond and RateBurst are each principal's token bucket,
	// shared by all its connections (before hello, each connection's);
	// RateGlobalPerSecond and RateGlobalBurst the channel's (0: none).
	RatePerSecond       float64
	RateBurst           int
	RateGlobalPerSecond float64
	RateGlobalBurst     int
	// RateLimited is told which limit refused a frame (metrics).
	RateLimited func(limit string)
	// Now is the rate limiters' clock, and the one the budget note of
	// refused audio counts from (default time.Now).
	Now func() time.Time
	// HistoryLimit is how many messages ready carries without last_seq
	// (the channel's max_history).
	HistoryLimit int
	HelloTimeout time.Duration // first frame deadline (10s)
	PingInterval time.Duration // keepalive ping period (25s); a peer silent for 2.5× this is dropped
	WriteTimeout time.Duration // per frame (10s)
	QueueSize    int           // messages waiting for their replies per connection (32)
	// ImageCacheBytes bounds the memory kept for images clients sent
	// (imageCache; default DefaultImageCacheBytes).
	ImageCacheBytes int64
	// MediaServeBytes bounds the bytes of tool media being served at once
	// by GET /ws/media (MediaHandler; default DefaultMediaServeBytes); a
	// fetch waits up to MediaWait (default DefaultMediaWait) for room,
	// else is answered 503.
	MediaServeBytes int64
	MediaWait       time.Duration
	// Transcriber, when set, turns audio attachments into the text of
	// their message (WebSocket.transcribe); without it they are refused.
	// MaxAudioBytes bounds one (default agent.DefaultMaxAudioBytes).
	Transcriber   agent.Transcriber
	MaxAudioBytes int64
	Logger        *slog.Logger
	// TracerProvider makes a reply's span "delivery" (nil: none).
	TracerProvider trace.TracerProvider
	// OnDeliveryFailed is called for a reply no open connection of its
	// user could be sent (it is read on resume).
	OnDeliveryFailed func()
}

// WebSocket is the channel serving GET /ws.
type WebSocket struct {
	opts     WSOptions
	sess     Sessions
	upgrader websocket.Upgrader
	log      *slog.Logger

	stopPings chan struct{}
	stopOnce  sync.Once

	mu      sync.Mutex
	closing bool
	conns   map[*wsConn]struct{}
	byKey   map[string]map[*wsConn]struct{}
	wg      sync.WaitGroup // connection goroutines

	rechecks atomic.Int32        // re-checks asked for and not yet run (recheckLater)
	images   *imageCache         // images clients sent, by hash
	serving  *semaphore.Weighted // bytes of tool media being served (MediaHandler)
	// mediaHook, when set (tests), is told how a media fetch moves.
	mediaHook mediaHook
	// mediaWriteTime bounds the write of an item to its client (nil:
	// mediaWriteTime, the function; tests shorten it).
	mediaWriteTime func(size int64) time.Duration

	limits *ratelimit.Limiter     // per principal and channel-wide (newLimits)
	cur    atomic.Pointer[wsLive] // what a reload changes (Reconfigure)
}

// NewWebSocket returns the channel and registers its route.
func NewWebSocket(sess Sessions, opts WSOptions) *WebSocket {
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = 64 << 10
	}
	if opts.RatePerSecond <= 0 {
		opts.RatePerSecond = 5
	}
	if opts.RateBurst <= 0 {
		opts.RateBurst = 10
	}
	if opts.HistoryLimit <= 0 {
		opts.HistoryLimit = 100
	}
	if opts.HelloTimeout <= 0 {
		opts.HelloTimeout = 10 * time.Second
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = 25 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 10 * time.Second
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = 32
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ImageCacheBytes <= 0 {
		opts.ImageCacheBytes = DefaultImageCacheBytes
	}
	if opts.MediaServeBytes <= 0 {
		opts.MediaServeBytes = DefaultMediaServeBytes
	}
	if opts.MediaWait <= 0 {
		opts.MediaWait = DefaultMediaWait
	}
	if opts.MaxAudioBytes <= 0 {
		opts.MaxAudioBytes = agent.DefaultMaxAudioBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ws := &WebSocket{
		opts: opts, sess: sess, log: opts.Logger,
		conns: map[*wsConn]struct{}{}, byKey: map[string]map[*wsConn]struct{}{},
		images:  newImageCache(opts.ImageCacheBytes),
		serving: semaphore.NewWeighted(opts.MediaServeBytes),
		limits:  newLimits(opts),
	}
	ws.cur.Store(liveOf(opts))
	ws.upgrader = websocket.Upgrader{
		ReadBufferSize:  1024,
		WriteBufferSize: 1024,
		// Pooled write buffers: an idle connection holds no write buffer.
		WriteBufferPool: &sync.Pool{},
		CheckOrigin:     ws.checkOrigin,
	}
	sess.Register(Channel, sessions.Route{
		Deliver: ws.deliverStored, // untracked: a client that missed it reads it on resume
		Reply:   ws.onReply,
		Reset:   ws.onReset,
		Ask:     ws.askTool, AskSettled: ws.toolSettled,
		// Stored images are fetched again through the channel for every
		// turn that needs them.
		Fetch: ws.images.fetch,
	})
	ws.stopPings = make(chan struct{})
	go ws.pingLoop()
	return ws
}

// pingLoop pings every connection each PingInterval, from one goroutine
// for all of them. A peer that stops answering is dropped by its reader's
// deadline; a ping that cannot be written closes the connection at once.
func (ws *WebSocket) pingLoop() {
	t := time.NewTicker(ws.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ws.stopPings:
			return
		case <-t.C:
		}
		conns := ws.allConns()
		for _, c := range conns {
			if err := c.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second)); err != nil {
				c.close(websocket.CloseAbnormalClosure, "ping failed")
			}
		}
	}
}

// allConns returns the open connections.
func (ws *WebSocket) allConns() []*wsConn {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	conns := make([]*wsConn, 0, len(ws.conns))
	for c := range ws.conns {
		conns = append(conns, c)
	}
	return conns
}

// connsOf returns the open connections of a session key.
func (ws *WebSocket) connsOf(key string) []*wsConn {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	out := make([]*wsConn, 0, len(ws.byKey[key]))
	for c := range ws.byKey[key] {
		out = append(out, c)
	}
	return out
}

// Connections is the number of open connections.
func (ws *WebSocket) Connections() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.conns)
}

func (ws *WebSocket) register(c *wsConn) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	set := ws.byKey[c.key]
	if set == nil {
		set = map[*wsConn]struct{}{}
		ws.byKey[c.key] = set
	}
	set[c] = struct{}{}
}

func (ws *WebSocket) unregister(c *wsConn) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.conns, c)
	if set := ws.byKey[c.key]; set != nil {
		delete(set, c)
		if len(set) == 0 {
			delete(ws.byKey, c.key)
		}
	}
}

// StopAccepting refuses new connections (503) while existing ones keep
// receiving the replies of turns that are draining.
func (ws *WebSocket) StopAccepting() {
	ws.mu.Lock()
	ws.closing = true
	ws.mu.Unlock()
}

// Shutdown waits (until ctx ends) for the connections' workers and
// waiters to hand over their last frames, then closes every connection
// with 1001 (going away), through the same path as a client disconnect,
// and waits for their goroutines. Call it after the session manager has
// drained.
func (ws *WebSocket) Shutdown(ctx context.Context) {
	ws.mu.Lock()
	ws.closing = true
	conns := make([]*wsConn, 0, len(ws.conns))
	for c := range ws.conns {
		conns = append(conns, c)
	}
	ws.mu.Unlock()
	ws.stopOnce.Do(func() { close(ws.stopPings) })
	// Turns still finishing hand their last frames (an interrupted reply)
	// to their connection before it closes.
	for busy := true; busy && ctx.Err() == nil; {
		busy = false
		for _, c := range conns {
			c.workMu.Lock()
			busy = busy || c.working || c.open > 0
			c.workMu.Unlock()
		}
		if busy {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	for _, c := range conns {
		c.close(websocket.CloseGoingAway, "server shutting down")
	}
	done := make(chan struct{})
	go func() {
		ws.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// dropAll closes every connection with code while still accepting new
// ones, as a network drop or a restart behind a load balancer would.
func (ws *WebSocket) dropAll(code int) {
	conns := ws.allConns()
	for _, c := range conns {
		c.close(code, "dropped")
	}
}
