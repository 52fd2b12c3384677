package sessions

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cross-replica events. Replicas sharing a PostgreSQL database tell each
// other, through LISTEN/NOTIFY, that a turn's reply was stored or that a
// conversation was reset, so that a client connected to another replica
// gets it live, and that a turn became claimable, so that another
// replica's rescuer looks at once. A notification only wakes others up:
// it carries ids, never text, and its receiver reads the rows, which stay
// the truth. One that is lost (no replica listening, the listen connection
// dropped, the publish queue full) costs latency — the client gets the
// reply on its next resume, the rescuer finds the turn on its next pass —
// never a message. SQLite serves one gateway per file: nothing to tell.

// Event kinds.
const (
	eventReply = "reply"
	eventReset = "reset"
	eventHello = "hello" // a replica started listening
)

// event is one notification's payload. PostgreSQL limits a payload to
// 8000 bytes; ids and seqs stay far below that.
type event struct {
	Kind    string `json:"k"`
	Origin  string `json:"o"` // the replica that published it
	Channel string `json:"ch"`
	Key     string `json:"key"`
	// Conv is the reply's conversation, or the conversation a reset
	// opened ("" for sweeps: the next message opens one).
	Conv   string `json:"c,omitempty"`
	Seq    int64  `json:"s,omitempty"`   // reply: the user message's seq
	Reply  int64  `json:"r,omitempty"`   // reply: the reply's seq
	State  string `json:"st,omitempty"`  // reply: the turn's state
	Old    string `json:"old,omitempty"` // reset: the archived conversation
	Reason string `json:"why,omitempty"` // reset: manual, idle, daily
	// missed is set on the event a listener gets after its connection
	// came back: notifications sent meanwhile are lost.
	missed bool
}

// maxPayload is PostgreSQL's limit on a notification's payload.
const maxPayload = 8000

// notifier is implemented by stores that carry events between replicas.
type notifier interface {
	// notify publishes ev to every listening replica after the writes it
	// announces have committed. It never blocks.
	notify(ev event)
	// listen registers fn for every event published on the database
	// (this replica's own included) and returns once notifications are
	// being received, or when ctx ends (listening then starts as soon as
	// the database can be reached). fn runs on the listener's goroutine
	// and must be quick.
	listen(ctx context.Context, fn func(event)) error
}

// events is a PostgreSQL store's side of LISTEN/NOTIFY: a publisher that
// batches notifications, and one dedicated connection that listens.
//
// Notifications are sent after the writes they announce have committed,
// not inside their transaction: a transaction that notifies holds a
// cluster-wide lock from its NOTIFY until its commit is flushed, so
// notifying inside the group commit would make the committer's workers
// (and every other replica's) commit one at a time. Sent apart, on the
// lease pool's connections (synchronous_commit off: a notification has
// nothing to make durable), they hold that lock for a moment, many
// notifications per statement.
type events struct {
	dsn     string
	timeout time.Duration // a request's (pgdeadline.go), and the silence that has the listen connection pinged
	channel string
	pool    *sql.DB
	log     *slog.Logger

	pubMu   sync.RWMutex // guards pubOff against sends on a closed queue
	pubOff  bool
	queue   chan string // payloads waiting for the publisher
	pubDone chan struct{}
	dropped atomic.Int64

	mu         sync.Mutex
	subs       []func(event)
	started    bool
	closed     bool
	connected  chan struct{} // closed once the first LISTEN is in effect
	stop       context.CancelFunc
	listenDone chan struct{}
	pid        atomic.Uint32 // the listen connection's backend, for tests
}

// publishQueue bounds the notifications waiting to be sent; past it they
// are dropped (counted and logged), so a burst — a sweep archiving many
// conversations — never holds up turns.
const publishQueue = 16384

// publishBatch is how many notifications one statement sends at most.
const publishBatch = 1000

// openEvents sets up LISTEN/NOTIFY on PostgreSQL; SQLite has none.
func (s *DB) openEvents(ctx context.Context, dsn string, timeout time.Duration, log *slog.Logger) error {
	if s.driver != DriverPostgres {
		return nil
	}
	var schema string
	if err := s.read.WithContext(ctx).Raw("SELECT current_schema()").Scan(&schema).Error; err != nil {
		return fmt.Errorf("find the schema's event channel: %w", err)
	}
	e := &events{dsn: dsn, timeout: timeout, channel: eventChannel(schema), pool: s.leases, log: log,
		queue: make(chan string, publishQueue), pubDone: make(chan struct{}), connected: make(chan struct{})}
	// Another replica's request for a lease kept here.
	e.subs = append(e.subs, s.kept.wanted)
	go e.publishLoop()
	s.events = e
	return nil
}

// eventChannel names the channel of a schema. Notifications go to every
// session of the database whatever its search_path, so deployments (and
// tests) in separate schemas of one database get channels of their own.
// A channel name is an identifier: at most 63 bytes.
func eventChannel(schema string) string {
	name := "chatgate_events"
	if schema != "" && schema != "public" {
		name += "_" + schema
	}
	if len(name) > 63 {
		sum := sha256.Sum256([]byte(schema))
		name = "chatgate_events_" + hex.EncodeToString(sum[:12])
	}
	return name
}

func (s *DB) notify(ev event) {
	if s.events != nil {
		s.events.publish(ev)
	}
}

func (s *DB) listen(ctx context.Context, fn func(event)) error {
	if s.events == nil {
		return nil
	}
	return s.events.listen(ctx, fn)
}

// closeEvents stops listening and sends the notifications still queued.
func (s *DB) closeEvents() {
	if s.events != nil {
		s.events.close()
	}
}

// listenPID is the backend pid of the listen connection (0 when none).
func (s *DB) listenPID() uint32 {
	if s.events == nil {
		return 0
	}
	return s.events.pid.Load()
}

func (e *events) publish(ev event) {
	data, err := json.Marshal(ev)
	if err != nil || len(data) >= maxPayload {
		e.log.Warn("event not published: payload too large", slog.String("kind", ev.Kind), slog.Int("bytes", len(data)))
		return
	}
	e.pubMu.RLock()
	defer e.pubMu.RUnlock()
	if e.pubOff {
		return
	}
	select {
	case e.queue <- string(data):
	default:
		e.dropped.Add(1)
	}
}

// publishLoop sends queued notifications, as many per statement as are
// waiting, in the order they were queued.
func (e *events) publishLoop() {
	defer close(e.pubDone)
	batch := make([]string, 0, publishBatch)
	for p := range e.queue {
		batch = append(batch[:0], p)
	fill:
		for len(batch) < publishBatch {
			select {
			case more, ok := <-e.queue:
				if !ok {
					break fill
				}
				batch = append(batch, more)
			default:
				break fill
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := e.pool.ExecContext(ctx, `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, e.channel, batch)
		cancel()
		if err != nil {
			e.log.Warn("publishing events to other replicas failed; they see these replies on resume", slog.Int("events", len(batch)), slog.String("error", err.Error()))
		}
		if n := e.dropped.Swap(0); n > 0 {
			e.log.Warn("events to other replicas dropped: the publish queue was full; they see these replies on resume", slog.Int64("events", n))
		}
	}
}

func (e *events) listen(ctx context.Context, fn func(event)) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.subs = append(e.subs, fn)
	if !e.started {
		e.started = true
		lctx, stop := context.WithCancel(context.Background())
		e.stop = stop
		e.listenDone = make(chan struct{})
		go e.listenLoop(lctx)
	}
	e.mu.Unlock()
	select {
	case <-e.connected:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("listen for events of other replicas: %w", ctx.Err())
	}
}

// listenLoop keeps one connection listening, reconnecting with backoff
// when it drops. After a reconnect the subscribers are told that events
// may have been missed, and look again at what they show.
func (e *events) listenLoop(ctx context.Context) {
	defer close(e.listenDone)
	wait := 100 * time.Millisecond
	first := true
	for {
		conn, err := e.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			e.log.Warn("cannot listen for events of other replicas; retrying", slog.Duration("in", wait), slog.String("error", redactErr(err, e.dsn).Error()))
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			wait = min(2*wait, 5*time.Second)
			continue
		}
		wait = 100 * time.Millisecond
		e.pid.Store(conn.PgConn().PID())
		if first {
			first = false
			close(e.connected)
		} else {
			e.log.Info("listening for events of other replicas again")
			e.dispatch(event{missed: true})
		}
		err = e.receive(ctx, conn)
		e.pid.Store(0)
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(closeCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		e.log.Warn("lost the connection listening for events of other replicas; reconnecting", slog.String("error", err.Error()))
	}
}

// connect opens the listen connection and subscribes it to the channel.
func (e *events) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgConfig(e.dsn, e.timeout, nil)
	if err != nil {
		return nil, err
	}
	// So that an operator can tell it apart in pg_stat_activity.
	cfg.RuntimeParams["application_name"] = "chatgate listen"
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(cctx, "LISTEN "+pgx.Identifier{e.channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// receive hands every notification to the subscribers until the
// connection fails or ctx ends.
//
// A connection that only waits never learns by itself that the server
// stopped answering (frozen, or behind a network that drops what it
// carries without closing anything): it would wait for ever while the
// notifications are lost. So after each silence of e.timeout it pings
// the server, within e.timeout, and one unanswered ping is a lost
// connection: listenLoop opens another and tells the subscribers that
// events may have been missed.
func (e *events) receive(ctx context.Context, conn *pgx.Conn) error {
	silence := e.timeout
	if silence <= 0 {
		silence = DefaultTimeout
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, silence)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			pctx, cancel := context.WithTimeout(ctx, silence)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("the server did not answer a ping after %s without a notification: %w", silence, err)
			}
			continue
		}
		if err != nil {
			return err
		}
		var ev event
		if err := json.Unmarshal([]byte(n.Payload), &ev); err != nil || ev.Kind == "" {
			e.log.Warn("ignoring a malformed event", slog.String("channel", n.Channel))
			continue
		}
		e.dispatch(ev)
	}
}

func (e *events) dispatch(ev event) {
	e.mu.Lock()
	subs := e.subs
	e.mu.Unlock()
	for _, fn := range subs {
		fn(ev)
	}
}

// close stops the listener, then sends what is still queued.
func (e *events) close() {
	e.mu.Lock()
	e.closed = true
	stop, done := e.stop, e.listenDone
	e.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	e.pubMu.Lock()
	if !e.pubOff {
		e.pubOff = true
		close(e.queue)
	}
	e.pubMu.Unlock()
	<-e.pubDone
}

// ReplyEvent tells that another replica stored a turn's reply. Load it
// with StoredReply; the event itself carries no text.
type ReplyEvent struct {
	Channel        string
	SessionKey     string
	ConversationID string
	Seq            int64  // the user message's seq
	ReplySeq       int64  // the reply's seq
	State          string // the turn's state: answered, failed, expired, interrupted
	// Missed, when true, says that events of other replicas may have been
	// lost (the connection listening for them dropped and is back); the
	// other fields are empty. Look again at what you show.
	Missed bool
}

// ErrNoReply means the reply an event named is not stored (any more).
var ErrNoReply = errors.New("reply not stored")

// relay is the manager's side of cross-replica events.
type relay struct {
	mu      sync.Mutex
	replies []func(ReplyEvent)
}

// OnReply registers fn for replies other replicas store, so that a channel
// delivers them to its clients connected here. fn runs on the goroutine
// receiving events and must be quick. Replies this replica stores are not
// reported: its channels deliver them themselves.
func (m *Manager) OnReply(fn func(ReplyEvent)) {
	m.relay.mu.Lock()
	m.relay.replies = append(m.relay.replies, fn)
	m.relay.mu.Unlock()
}

// StoredReply returns a stored reply (with the client ids it covers) and
// the client message id of the user message it answers: what a channel
// sends for a ReplyEvent.
func (m *Manager) StoredReply(ctx context.Context, convID string, userSeq, replySeq int64) (string, Reply, error) {
	reply, err := m.store.Message(ctx, convID, replySeq)
	if err != nil {
		return "", Reply{}, err
	}
	if reply == nil || reply.ReplyTo != userSeq {
		return "", Reply{}, fmt.Errorf("reply %d to %s/%d: %w", replySeq, convID, userSeq, ErrNoReply)
	}
	um, err := m.store.Message(ctx, convID, userSeq)
	if err != nil {
		return "", Reply{}, err
	}
	clientID := ""
	if um != nil && um.ClientMsgID != nil {
		clientID = *um.ClientMsgID
	}
	r := toReply(reply)
	covers, err := m.store.Covers(ctx, convID, userSeq)
	if err != nil {
		return "", Reply{}, err
	}
	r.Covers = clientIDs(covers)
	return clientID, r, nil
}

// listenEvents subscribes the manager to the other replicas' events, when
// its store carries them. It waits a few seconds at most for the listen
// connection; past that, listening starts when the database answers.
func (m *Manager) listenEvents() {
	n, ok := m.backing.(notifier)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(m.base, 10*time.Second)
	defer cancel()
	if err := n.listen(ctx, m.onEvent); err != nil {
		m.log.Warn("not yet receiving events of other replicas: their replies reach clients here on resume", slog.String("error", err.Error()))
	}
	// Replicas publish only while another one lives (peers): this one
	// tells them it does, rather than wait for their next look.
	ev := event{Kind: eventHello, Origin: m.opts.ReplicaID}
	n.notify(ev)
}

// onEvent handles an event of any replica.
func (m *Manager) onEvent(ev event) {
	if ev.missed {
		// A turn may have become claimable meanwhile, and replies may
		// have been stored for clients connected here.
		m.Wake()
		m.replyListeners(ReplyEvent{Missed: true})
		return
	}
	if ev.Origin == m.opts.ReplicaID {
		return
	}
	m.setPeers(true)
	if ev.Kind == eventHello || ev.Kind == eventWant {
		return // (a want is the store's: leasekeep.go)
	}
	// Another replica changed the key's conversation: the cached copy
	// would fail its next append and be reloaded anyway.
	m.hot.Remove(ev.Key)
	switch ev.Kind {
	case eventReply:
		if ev.State == TurnInterrupted {
			m.Wake() // a shutdown left it claimable: run it here, now
		}
		m.replyListeners(ReplyEvent{Channel: ev.Channel, SessionKey: ev.Key, ConversationID: ev.Conv,
			Seq: ev.Seq, ReplySeq: ev.Reply, State: ev.State})
	case eventReset:
		r := ResetEvent{Channel: ev.Channel, SessionKey: ev.Key, OldConversation: ev.Old, NewConversation: ev.Conv,
			Reason: ev.Reason, Remote: true}
		m.mu.Lock()
		ls := m.listeners
		m.mu.Unlock()
		for _, fn := range ls {
			fn(r)
		}
	}
}

func (m *Manager) replyListeners(ev ReplyEvent) {
	m.relay.mu.Lock()
	ls := m.relay.replies
	m.relay.mu.Unlock()
	for _, fn := range ls {
		fn(ev)
	}
}

// announce publishes an event of this replica, when the store carries
// events.
func (m *Manager) announce(ev event) {
	if !m.peers.Load() {
		return // nobody else to tell; the rows stay the truth
	}
	if n, ok := m.backing.(notifier); ok {
		ev.Origin = m.opts.ReplicaID
		n.notify(ev)
	}
}

// announceReply tells other replicas that the turn of user message
// userSeq has its reply replySeq stored, in state (interrupted: claimable
// again).
func (m *Manager) announceReply(conv *Conversation, userSeq, replySeq int64, state string) {
	m.announce(event{Kind: eventReply, Channel: conv.Channel, Key: conv.SessionKey, Conv: conv.ID,
		Seq: userSeq, Reply: replySeq, State: state})
}

// announceReset tells other replicas about a reset made here; forwarded
// resets are not announced again.
func (m *Manager) announceReset(ev ResetEvent) {
	if ev.Remote {
		return
	}
	m.announce(event{Kind: eventReset, Channel: ev.Channel, Key: ev.SessionKey, Conv: ev.NewConversation,
		Old: ev.OldConversation, Reason: ev.Reason})
}
