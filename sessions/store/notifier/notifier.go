// Package notifier carries events between replicas sharing a PostgreSQL
// database, through LISTEN/NOTIFY: a publisher that batches notifications
// and one dedicated connection that listens. It is a service of its own,
// built by New from what it needs (a pool to publish on, a way to open
// the listen connection), and reached through its exported methods.
package notifier

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

	"github.com/chatgate/chatgate/sessions/ledger"
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

// Notifier is one database's side of LISTEN/NOTIFY: a publisher that
// batches notifications, and one dedicated connection that listens. A nil
// *Notifier (SQLite: one gateway per file, nothing to tell) publishes
// nothing and listens to nothing.
//
// Notifications are sent after the writes they announce have committed,
// not inside their transaction: a transaction that notifies holds a
// cluster-wide lock from its NOTIFY until its commit is flushed, so
// notifying inside the group commit would make the committer's workers
// (and every other replica's) commit one at a time. Sent apart, on the
// lease pool's connections (synchronous_commit off: a notification has
// nothing to make durable), they hold that lock for a moment, many
// notifications per statement.
type Notifier struct {
	connect func(ctx context.Context) (*pgx.Conn, error)
	silence time.Duration // after which the listen connection is pinged
	channel string
	pool    *sql.DB
	log     *slog.Logger

	pubMu   sync.RWMutex // guards pubOff against sends on a closed queue
	pubOff  bool
	queue   chan string // payloads waiting for the publisher
	pubDone chan struct{}
	dropped atomic.Int64

	mu         sync.Mutex
	subs       []func(ledger.Event)
	started    bool
	closed     bool
	connected  chan struct{} // closed once the first LISTEN is in effect
	stop       context.CancelFunc
	listenDone chan struct{}
	pid        atomic.Uint32 // the listen connection's backend, for tests
}

// maxPayload is PostgreSQL's limit on a notification's payload.
const maxPayload = 8000

// publishQueue bounds the notifications waiting to be sent; past it they
// are dropped (counted and logged), so a burst — a sweep archiving many
// conversations — never holds up turns.
const publishQueue = 16384

// publishBatch is how many notifications one statement sends at most.
const publishBatch = 1000

// Config is what a Notifier needs.
type Config struct {
	// Pool publishes: notifications go out on it, many per statement.
	Pool *sql.DB
	// Connect opens a connection for listening (with the store's deadlines
	// and keepalives).
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Schema is the store's schema: each has a channel of its own.
	Schema string
	// Silence is how long the listen connection waits for a notification
	// before it pings the server, and how long the ping may take.
	Silence time.Duration
	Logger  *slog.Logger
}

// New starts the publisher; listening starts with the first Listen.
func New(cfg Config) *Notifier {
	e := &Notifier{connect: cfg.Connect, silence: cfg.Silence, channel: Channel(cfg.Schema), pool: cfg.Pool, log: cfg.Logger,
		queue: make(chan string, publishQueue), pubDone: make(chan struct{}), connected: make(chan struct{})}
	if e.log == nil {
		e.log = slog.Default()
	}
	go e.publishLoop()
	return e
}

// Channel names the channel of a schema. Notifications go to every
// session of the database whatever its search_path, so deployments (and
// tests) in separate schemas of one database get channels of their own.
// A channel name is an identifier: at most 63 bytes.
func Channel(schema string) string {
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

// ListenPID is the backend pid of the listen connection (0 when none),
// for tests that end it.
func (e *Notifier) ListenPID() uint32 {
	if e == nil {
		return 0
	}
	return e.pid.Load()
}

// Publish sends ev to every listening replica. Call it after the writes
// it announces have committed; it never blocks: past the queue's bound
// the event is dropped, and counted.
func (e *Notifier) Publish(ev ledger.Event) {
	if e == nil {
		return
	}
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
func (e *Notifier) publishLoop() {
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

// Subscribe registers fn for every event, as Listen does, without
// starting to listen: events reach it once somebody listens.
func (e *Notifier) Subscribe(fn func(ledger.Event)) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.subs = append(e.subs, fn)
	e.mu.Unlock()
}

// Listen registers fn for every event published on the database (this
// replica's own included) and returns once notifications are being
// received, or when ctx ends (listening then starts as soon as the
// database can be reached). fn runs on the listener's goroutine and must
// be quick.
func (e *Notifier) Listen(ctx context.Context, fn func(ledger.Event)) error {
	if e == nil {
		return nil
	}
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
func (e *Notifier) listenLoop(ctx context.Context) {
	defer close(e.listenDone)
	wait := 100 * time.Millisecond
	first := true
	for {
		conn, err := e.connectListen(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			e.log.Warn("cannot listen for events of other replicas; retrying", slog.Duration("in", wait), slog.String("error", err.Error()))
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
			e.dispatch(ledger.Event{Missed: true})
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

// receive hands every notification to the subscribers until the
// connection fails or ctx ends.
//
// A connection that only waits never learns by itself that the server
// stopped answering (frozen, or behind a network that drops what it
// carries without closing anything): it would wait for ever while the
// notifications are lost. So after each silence of e.silence it pings
// the server, within e.silence, and one unanswered ping is a lost
// connection: listenLoop opens another and tells the subscribers that
// events may have been missed.
func (e *Notifier) receive(ctx context.Context, conn *pgx.Conn) error {
	silence := e.silence
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
		var ev ledger.Event
		if err := json.Unmarshal([]byte(n.Payload), &ev); err != nil || ev.Kind == "" {
			e.log.Warn("ignoring a malformed event", slog.String("channel", n.Channel))
			continue
		}
		e.dispatch(ev)
	}
}

func (e *Notifier) dispatch(ev ledger.Event) {
	e.mu.Lock()
	subs := e.subs
	e.mu.Unlock()
	for _, fn := range subs {
		fn(ev)
	}
}

// Close stops the listener, then sends what is still queued.
func (e *Notifier) Close() {
	if e == nil {
		return
	}
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

// connectListen opens the listen connection and subscribes it to the
// channel.
func (e *Notifier) connectListen(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := e.connect(cctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(cctx, "LISTEN "+pgx.Identifier{e.channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// ErrClosed means the notifier was closed.
var ErrClosed = errors.New("notifier closed")
