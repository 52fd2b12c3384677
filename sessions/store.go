package sessions

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Errors of the store.
var (
	// ErrStale means a conditional write found the conversation changed:
	// archived, or appended to by someone else. The caller reloads.
	ErrStale = errors.New("conversation changed underneath")
	// ErrDuplicate means the client message id is already stored.
	ErrDuplicate = errors.New("client message id already stored")
	// ErrClosed means the store was closed.
	ErrClosed = errors.New("store closed")
)

// Ledger is what a turn needs from storage on its way from a stored
// message to a delivered reply: the conversation it belongs to, the
// appends, the claims and their settling, the replicas' liveness and the
// session leases. Every call may fail: a turn's state after any failed
// call is still one the ledger recovers from (see watch.go), which the
// fault-injection tests prove by failing each call in turn.
type Ledger interface {
	ActiveConversation(ctx context.Context, key string) (*Conversation, error)
	Conversation(ctx context.Context, id string) (*Conversation, error)
	CreateConversation(ctx context.Context, c *Conversation) error
	RecentMessages(ctx context.Context, convID string, limit int) ([]Message, error)
	MessageByClientID(ctx context.Context, convID, clientID string) (*Message, error)
	// EditPending replaces the text of user message seq if its turn has
	// not started (pending, never claimed); false when it had.
	EditPending(ctx context.Context, convID string, seq int64, text string) (bool, error)
	Message(ctx context.Context, convID string, seq int64) (*Message, error)
	FinalReply(ctx context.Context, convID string, userSeq int64) (*Message, error)
	Append(ctx context.Context, a Append) error
	Archive(ctx context.Context, convID, reason string, at time.Time, expectSeq int64) (bool, error)
	TurnAt(ctx context.Context, convID string, seq int64) (*Turn, error)
	TurnByClientID(ctx context.Context, key, clientID string) (*Turn, error)
	DueTurns(ctx context.Context, now time.Time, limit int) ([]DueTurn, error)
	OrphanTurns(ctx context.Context, since time.Time, alive []string, limit int) ([]DueTurn, error)
	OwnTurns(ctx context.Context, convID, owner string) ([]DueTurn, error)
	ClaimTurn(ctx context.Context, convID string, seq int64, seenOwner string, seenAttempt int, owner string, now time.Time) (*Claimed, error)
	ClaimBatch(ctx context.Context, c Claim) (*Batch, error)
	Covers(ctx context.Context, convID string, lead int64) ([]BatchRow, error)
	ReleaseTurn(ctx context.Context, convID string, seq int64, owner string, attempt int, dueAt time.Time, why string) error
	MarkDelivered(ctx context.Context, convID string, seq int64, owner string, attempt int, ref, failure string, at time.Time) error
	Heartbeat(ctx context.Context, replica string, started time.Time) error
	Replicas(ctx context.Context, self string, ttl time.Duration) (gone []Replica, alive []string, err error)
	ForgetReplica(ctx context.Context, id string, heartbeat time.Time) error
	Retire(ctx context.Context, replica string) error
	Lease(ctx context.Context, key, replica string, ttl time.Duration) (release func(), err error)
}

// Store is what the session manager needs from a database: the ledger,
// and what sweeps, resumes, retention and the channels' own state need.
// DB implements it on GORM for SQLite and PostgreSQL.
type Store interface {
	Ledger
	MessagesAfter(ctx context.Context, convID string, afterSeq int64, limit int) ([]Message, error)
	// LastArchived and Reopen take a key back to its previous
	// conversation (reopen.go).
	LastArchived(ctx context.Context, key string) (*Conversation, error)
	Reopen(ctx context.Context, r Reopen) error
	SweepIdle(ctx context.Context, channel string, cutoff, at time.Time, each func([]Archived)) (int, error)
	SweepDaily(ctx context.Context, channel string, boundary, at time.Time, each func([]Archived)) (int, error)
	Purge(ctx context.Context, archivedBefore time.Time) (int64, error)
	Exclusive(ctx context.Context, name string, fn func() error) (bool, error)
	Lead(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	Resign(ctx context.Context, name, holder string) error
	// Shared reports whether several gateways may use the database at
	// once (PostgreSQL); SQLite serves one.
	Shared() bool
	GetState(ctx context.Context, key string) (string, error)
	SetState(ctx context.Context, key, value string) error
	// Retention of states and guests (retention.go).
	StateRows(ctx context.Context, prefix, after string, limit int) ([]ChannelState, error)
	DeleteStates(ctx context.Context, names []string) (int64, error)
	KeysWithConversations(ctx context.Context, keys []string) (map[string]bool, error)
	IdleActive(ctx context.Context, channel, keyPrefix string, cutoff time.Time, limit int) ([]Conversation, error)
	DeleteIdle(ctx context.Context, convID string, cutoff time.Time) (bool, error)
	Close() error
}

// Append is one conditional append of messages to a conversation.
type Append struct {
	Conv *Conversation
	// ExpectSeq is the conversation's LastSeq the caller saw; the append
	// fails with ErrStale when it moved.
	ExpectSeq int64
	// RequireActive refuses the append to an archived conversation (a user
	// message must open a new conversation instead).
	RequireActive bool
	Messages      []Message
	At            time.Time
	Tokens        int64
	Cost          float64
	Model         string
	// Settle, when set, hands the turn of user message TurnSeq back in the
	// same transaction (interrupted by a shutdown: claimable again), guarded
	// by its claim: the append fails with ErrLostClaim when the claim was
	// taken over.
	Settle  *Settle
	TurnSeq int64
	// Answers are the user messages a final reply among Messages answers,
	// by seq: its burst, as the claim took it. The same transaction marks
	// those still open answered — only those the reply answers (its lead,
	// or merged into it, stored before it); none given is the lead alone.
	Answers []int64
}

// Driver names.
const (
	DriverSQLite   = "sqlite"
	DriverPostgres = "postgres"
)

// DB is the GORM store. Writes go through a group committer: concurrent
// writes share one transaction, and each caller returns when its write is
// committed.
type DB struct {
	closeOnce sync.Once
	closeErr  error
	driver    string
	write     *gorm.DB
	read      *gorm.DB
	commit    *committer
	ckpt      *checkpointer // SQLite only
	// leases is the PostgreSQL pool the session leases are written
	// through, without waiting for their commit to reach disk.
	leases *sql.DB
	// chunk is how many conversations one sweep or purge transaction
	// handles (defaultChunk; tests make it small).
	chunk int
	// events carries events between replicas (PostgreSQL; notify.go).
	events *events
	// kept is the session leases kept across turns (leasekeep.go).
	kept keptLeases
	// leaseQ feeds lease acquisitions to the workers that batch them
	// (leasesql.go); leaseWG waits for those workers.
	leaseQ  chan *leaseReq
	leaseWG sync.WaitGroup
	// closed is closed by Close, ending background retries.
	closed chan struct{}
}

// OpenOptions tunes Open.
type OpenOptions struct {
	Logger   *slog.Logger
	MaxBatch int // writes per group commit (default 512)
	// Tracer, on PostgreSQL, sees every statement the store's pools send
	// (the benchmark counts round trips and transactions with it).
	Tracer pgx.QueryTracer
	// Timeout, on PostgreSQL, is how long one request to the server may
	// take before it fails and its connection is closed (pgdeadline.go);
	// 0 is DefaultTimeout.
	Timeout time.Duration
}

// Open opens (and migrates) the database. For sqlite, dsn is a file path.
func Open(ctx context.Context, driver, dsn string, opts OpenOptions) (*DB, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	gcfg := &gorm.Config{
		TranslateError: true,
		Logger:         logger.Discard,
		NowFunc:        func() time.Time { return time.Now().UTC() },
	}
	s := &DB{driver: driver, chunk: defaultChunk, closed: make(chan struct{})}
	s.kept.db = s
	workers := 1
	switch driver {
	case DriverSQLite:
		w, err := gorm.Open(openSQLite(sqliteDSN(dsn, false)), gcfg)
		if err != nil {
			return nil, fmt.Errorf("open sqlite %s: %w", dsn, err)
		}
		s.write = w
		// One writer connection: SQLite allows one writer at a time, and
		// immediate transactions make a second process wait (busy_timeout)
		// instead of failing mid-transaction.
		sqlDB, _ := w.DB()
		sqlDB.SetMaxOpenConns(1)
	case DriverPostgres:
		cfg, err := pgConfig(dsn, opts.Timeout, opts.Tracer)
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", redactErr(err, dsn))
		}
		// No ping inside gorm.Open: it would have no deadline (the pool's
		// first connection's ping is untraced); s.ping below has ctx's.
		pgcfg := *gcfg
		pgcfg.DisableAutomaticPing = true
		db, err := gorm.Open(postgres.New(postgres.Config{Conn: openPGPool(cfg, opts.Timeout)}), &pgcfg)
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", redactErr(err, dsn))
		}
		sqlDB, _ := db.DB()
		sqlDB.SetMaxOpenConns(16)
		sqlDB.SetMaxIdleConns(16)
		s.write, s.read = db, db
		workers = 4 // for the writes other than appends: those have one of their own (commit.go)
		if s.leases, err = openLeasePool(dsn, opts.Timeout, opts.Tracer); err != nil {
			s.closeDBs()
			return nil, fmt.Errorf("open postgres: %w", redactErr(err, dsn))
		}
		s.leaseQ = make(chan *leaseReq, leaseBatchMax)
		for i := 0; i < leaseWorkers; i++ {
			s.leaseWG.Add(1)
			go s.leaseWorker()
		}
	default:
		return nil, fmt.Errorf("unknown storage driver %q (want sqlite or postgres)", driver)
	}
	if err := s.ping(ctx); err != nil {
		s.closeDBs()
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		s.closeDBs()
		return nil, fmt.Errorf("migrate %s schema: %w", driver, err)
	}
	if driver == DriverSQLite {
		// Readers open after the migration: a connection that cached the
		// schema before it would expand SELECT * to the columns of old.
		if err := s.openSQLiteReaders(dsn, gcfg, opts.Logger); err != nil {
			s.closeDBs()
			return nil, err
		}
	}
	if err := s.openEvents(ctx, dsn, opts.Timeout, opts.Logger); err != nil {
		s.closeDBs()
		return nil, err
	}
	s.commit = newCommitter(s.write, driver, workers, opts.MaxBatch)
	if s.ckpt != nil {
		s.commit.afterCommit = s.ckpt.committed
	}
	return s, nil
}

func (s *DB) openSQLiteReaders(dsn string, gcfg *gorm.Config, log *slog.Logger) error {
	r, err := gorm.Open(openSQLite(sqliteDSN(dsn, true)), gcfg)
	if err != nil {
		return fmt.Errorf("open sqlite %s: %w", dsn, err)
	}
	rdb, _ := r.DB()
	rdb.SetMaxOpenConns(4)
	s.read = r
	c, err := sql.Open(sqliteDriverName, sqliteDSN(dsn, false))
	if err != nil {
		return fmt.Errorf("open sqlite %s: %w", dsn, err)
	}
	c.SetMaxOpenConns(1)
	s.ckpt = newCheckpointer(c, log)
	return nil
}

func (s *DB) ping(ctx context.Context) error {
	sqlDB, err := s.write.DB()
	if err == nil {
		err = sqlDB.PingContext(ctx)
	}
	if err != nil {
		return fmt.Errorf("cannot reach %s database: %w", s.driver, err)
	}
	return nil
}

// sqliteDSN adds the pragmas chatgate relies on: WAL so readers never block
// the writer, a busy timeout, synchronous=FULL so an acknowledged message
// survives power loss, and immediate write transactions (a deferred
// read-then-write transaction fails with SQLITE_BUSY despite busy_timeout);
// and the text format of times (sqlitedriver.go).
func sqliteDSN(path string, readOnly bool) string {
	base, query, _ := strings.Cut(path, "?")
	if !strings.HasPrefix(base, "file:") {
		base = "file:" + base
	}
	q, _ := url.ParseQuery(query)
	q.Set("_timefmt", sqliteTimeFormat)
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	// Statement journals and temporary tables in memory, not in files.
	q.Add("_pragma", "temp_store(MEMORY)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Set("_txlock", "immediate")
		// The page cache of the one connection every write goes through.
		q.Add("_pragma", "cache_size(-32768)")
		// A background checkpointer copies the log into the database file;
		// the writer does it only past this size.
		q.Add("_pragma", fmt.Sprintf("wal_autocheckpoint(%d)", walBackstopPages))
	}
	return base + "?" + q.Encode()
}

func redactErr(err error, dsn string) error {
	if u, perr := url.Parse(dsn); perr == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
		}
	}
	return err
}

func (s *DB) migrate(ctx context.Context) error {
	ctx = maintenance(ctx) // bounded by ctx (Open's caller), not by the timeout
	if s.driver != DriverPostgres {
		return migrateModels(s.write.WithContext(ctx))
	}
	// Replicas starting together must not migrate concurrently: hold a
	// session advisory lock on one pinned connection while migrating.
	return s.write.WithContext(ctx).Connection(func(tx *gorm.DB) error {
		if err := tx.Exec("SELECT pg_advisory_lock(hashtext('chatgate:migrate'))").Error; err != nil {
			return err
		}
		defer tx.Exec("SELECT pg_advisory_unlock(hashtext('chatgate:migrate'))")
		if err := migrateModels(tx); err != nil {
			return err
		}
		// The guard of pipelined appends (pgpipe.go).
		return tx.Exec(pgExpectFunc).Error
	})
}

// droppedIndexes are indexes earlier versions created that chatgate no
// longer keeps, by table.
var droppedIndexes = []struct {
	model any
	name  string
}{
	{&Conversation{}, "idx_conversations_archived_at"},
	{&Conversation{}, "ix_conversations_idle"},
	{&Conversation{}, "ix_conversations_daily"},
	// Indexed last_activity_at itself, so no turn's update of its
	// conversation could be heap-only on PostgreSQL (sweepsql.go).
	{&Conversation{}, "ix_conversations_sweep"},
	// Replies are found in the primary key's range after their message.
	{&Message{}, "ix_messages_reply"},
	// The rescuer found its turns by time among every user message; it
	// reads the open turns instead (ix_messages_open).
	{&Message{}, "ix_messages_user_created"},
}

func migrateModels(tx *gorm.DB) error {
	newLedger := tx.Migrator().HasTable(&Message{}) && !tx.Migrator().HasColumn(&Message{}, "turn_state")
	if err := tx.AutoMigrate(&Conversation{}, &Message{}, &ChannelState{}, &SessionLease{}, &Replica{}, &Leader{}); err != nil {
		return err
	}
	if err := migrateSweepIndex(tx); err != nil {
		return fmt.Errorf("add the sweep index over activity_minute: %w", err)
	}
	if newLedger {
		if err := backfillTurns(tx, time.Now().UTC()); err != nil {
			return fmt.Errorf("give earlier messages their turns: %w", err)
		}
	}
	if err := createOpenIndex(tx); err != nil {
		return fmt.Errorf("add the index of open turns: %w", err)
	}
	for _, ix := range droppedIndexes {
		if tx.Migrator().HasIndex(ix.model, ix.name) {
			if err := tx.Migrator().DropIndex(ix.model, ix.name); err != nil {
				return fmt.Errorf("drop index %s: %w", ix.name, err)
			}
		}
	}
	return nil
}

// Driver names the database driver.
func (s *DB) Driver() string { return s.driver }

// Shared reports whether several gateways may share the database.
func (s *DB) Shared() bool { return s.driver == DriverPostgres }

// Gorm is the writer handle, for the store's own commands and tests.
func (s *DB) Gorm() *gorm.DB { return s.write }

// Ping checks that the database answers, on a reader connection so that a
// long write does not hold it up.
func (s *DB) Ping(ctx context.Context) error {
	sqlDB, err := s.read.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}

// Close flushes pending writes and closes the database.
func (s *DB) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		if s.commit != nil {
			s.commit.close()
		}
		if s.leases != nil {
			s.leaseWG.Wait()
			s.closeLeases()
		}
		s.closeEvents()
		s.closeErr = s.closeDBs()
	})
	return s.closeErr
}

func (s *DB) closeDBs() error {
	var errs []error
	if s.ckpt != nil {
		errs = append(errs, s.ckpt.close())
	}
	if s.leases != nil {
		errs = append(errs, s.leases.Close())
	}
	for _, g := range []*gorm.DB{s.write, s.read} {
		if g == nil {
			continue
		}
		if sqlDB, err := g.DB(); err == nil {
			errs = append(errs, sqlDB.Close())
		}
		if s.read == s.write {
			break
		}
	}
	return errors.Join(errs...)
}

// defaultChunk is how many conversations one sweep or purge transaction
// handles. A sweep over a million conversations is five hundred short
// transactions, so turns keep committing between them instead of waiting
// for the whole sweep.
const defaultChunk = 2000

// The sweeps' conditions, status as a literal so that the partial indexes
// apply.
const (
	idleWhere  = "status = 'active' AND channel = ? AND activity_minute <= ? AND last_activity_at <= ?"
	dailyWhere = "status = 'active' AND channel = ? AND started_at < ?"
)
