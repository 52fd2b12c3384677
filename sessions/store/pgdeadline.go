package store

import (
	"context"
	"database/sql"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/stdlib"
)

// Every request the store sends PostgreSQL has a deadline: a statement
// (with the reading of its rows), a pipeline, BEGIN and COMMIT, the
// preparing of a statement and the opening of a connection each end
// within DefaultTimeout (OpenOptions.Timeout) of their start, or fail
// (maintenance: maintenanceFactor times it).
//
// A database that stops answering without closing its connections — a
// server frozen on a stalled disk, a failover whose old primary's address
// leads nowhere, a row lock held by a session that went idle, a network
// that drops what it carries — would otherwise hold the caller for as long
// as the kernel keeps the connection (minutes, or for ever behind a proxy
// that still acknowledges): the append worker and every turn waiting on
// it, with their users unanswered until a restart. With a deadline, a
// request that is not answered fails like one whose connection was lost:
// pgx closes the connection (database/sql opens another), the write's
// outcome is uncertain as after a lost COMMIT, and each of the turn's
// steps already recovers from that failure (the sessions package's
// watcher): its turn is left due and is run again once the database
// answers, and a user kept waiting past session.delay_notice is told.
// The deadline is a bound on one request, not on the work a caller does
// between requests (a transaction held open around other work, the
// listen connection's wait for a notification, watched apart by package
// notifier).
//
// The deadline is set where pgx starts each request, through its tracer
// hooks, whose context pgx uses for the rest of the request: one place
// covers the group commit's pipeline and transactions, the reads, the
// leases and the events, whichever pool or connection they take.

// DefaultTimeout is how long one request to PostgreSQL may take when
// OpenOptions.Timeout is zero (storage.timeout).
const DefaultTimeout = 10 * time.Second

// maintenanceFactor is how many times the timeout a request of
// maintenance may take (maintenance).
const maintenanceFactor = 30

type maintenanceKey struct{}

// maintenance marks the requests made with ctx as maintenance: the schema
// migration, the retention purge's walk and deletes, an administrator's
// listing, count, export or purge. On a large and healthy database one of
// those can rightly take longer than a turn's request ever does, and no
// turn waits on it; its deadline is maintenanceFactor times the timeout.
func maintenance(ctx context.Context) context.Context {
	return context.WithValue(ctx, maintenanceKey{}, true)
}

type unboundedKey struct{}

// unbounded marks the requests made with ctx as bounded by ctx alone:
// the schema migration's, which runs before anything else and ends with
// its caller's ctx (a stop signal). A connection whose server is gone is
// still ended by its TCP keepalives.
func unbounded(ctx context.Context) context.Context {
	return context.WithValue(ctx, unboundedKey{}, true)
}

// deadlines bounds each request pgx traces; requests already bounded
// more tightly by their caller keep their own deadline.
type deadlines struct{ d time.Duration }

type cancelKey struct{}

func (t deadlines) start(ctx context.Context) context.Context {
	if ctx.Value(unboundedKey{}) != nil {
		return ctx
	}
	d := t.d
	if ctx.Value(maintenanceKey{}) != nil {
		d *= maintenanceFactor
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	return context.WithValue(ctx, cancelKey{}, cancel)
}

// end releases the deadline's timer of the request ctx started.
func (deadlines) end(ctx context.Context) {
	if cancel, ok := ctx.Value(cancelKey{}).(context.CancelFunc); ok {
		cancel()
	}
}

func (t deadlines) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return t.start(ctx)
}

func (t deadlines) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	t.end(ctx)
}

func (t deadlines) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return t.start(ctx)
}

func (deadlines) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (t deadlines) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	t.end(ctx)
}

func (t deadlines) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return t.start(ctx)
}

func (t deadlines) TracePrepareEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareEndData) {
	t.end(ctx)
}

func (t deadlines) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	return t.start(ctx)
}

func (t deadlines) TraceCopyFromEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromEndData) {
	t.end(ctx)
}

func (t deadlines) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	return t.start(ctx)
}

func (t deadlines) TraceConnectEnd(ctx context.Context, _ pgx.TraceConnectEndData) { t.end(ctx) }

// openPGPool is a database/sql pool of pgx connections configured by cfg
// (pgConfig). Before database/sql hands out again a connection that was
// idle for over a second, pgx's stdlib pings it with the caller's context,
// which pgx does not trace: a caller without a deadline (the group commit)
// would wait for ever on a stalled connection. The ping is made here
// instead, within a quarter of timeout. One that fails has closed its
// connection; asked to ping again, pgx finds it closed at once and reports
// it bad, and database/sql tries another — up to two idle ones, then a new
// one — for every caller, db.Conn's (the appends' pipeline) included. So
// on a stalled database a request fails within about 1.5 times the
// timeout; the ping answers in a millisecond when the server is well.
func openPGPool(cfg *pgx.ConnConfig, timeout time.Duration) *sql.DB {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ping := stdlib.OptionShouldPing(func(ctx context.Context, p stdlib.ShouldPingParams) bool {
		if p.IdleDuration <= time.Second {
			return false
		}
		ctx, cancel := context.WithTimeout(ctx, timeout/4)
		defer cancel()
		if p.Conn.PgConn().Ping(ctx) == nil {
			return false
		}
		if !p.Conn.IsClosed() {
			p.Conn.Close(ctx)
		}
		return true // pgx's ping finds the connection closed: database/sql takes another
	})
	// Every argument of every statement is made storable
	// (storablePGConn).
	return sql.OpenDB(storablePGConnector{stdlib.GetConnector(*cfg, ping)})
}

// pgConfig is the pgx configuration of every connection the store opens
// to dsn: requests bounded by timeout, observed by tracer when set, and
// TCP keepalives frequent enough that a connection waiting on the server
// alone (the listen connection) learns within a minute or so that the
// server's host is gone, where the system's default takes hours.
func pgConfig(dsn string, timeout time.Duration, tracer pgx.QueryTracer) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	cfg.Tracer = deadlines{timeout}
	if tracer != nil {
		cfg.Tracer = multitracer.New(deadlines{timeout}, tracer)
	}
	dialer := &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 4}}
	cfg.DialFunc = dialer.DialContext
	return cfg, nil
}
