package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store/notifier"
)

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
	// leases is the session leases and the leader role (PostgreSQL);
	// nil on SQLite.
	leases *leaser
	// afterTurnRead, set only by this package's tests, runs in TurnAt
	// between its read of the message and its read of the reply.
	afterTurnRead func()
	// afterMediaClaim, set only by this package's tests, runs in
	// ClaimMediaSend between its update and its read of the item.
	afterMediaClaim func()
	// chunk is how many conversations one sweep or purge transaction
	// handles (defaultChunk; tests make it small).
	chunk int
	// events carries events between replicas (PostgreSQL; openEvents).
	events *notifier.Notifier
	// hooks see every ledger call (DB.Observe).
	hooks hooks
	// closed is closed by Close, ending background retries.
	closed chan struct{}
	// notesRead is the reader of the notes' reads (notesql.go), set
	// once by notesOnce.
	notesOnce sync.Once
	// versions batches PostgreSQL's reads of notes' versions, made once
	// by versionsOnce (notesql.go).
	versionsOnce sync.Once
	versions     *versionReads
	// extractAt names whose notes an archived conversation writes
	// (ExtractAtArchive); nil: no extraction is recorded.
	extractAt atomic.Pointer[func(channel, sessionKey string) string]
	notesRead *gorm.DB
}

// OpenOptions tunes Open.
type OpenOptions struct {
	Logger   *slog.Logger
	MaxBatch int // writes per group commit (default 512)
	// Tracer, on PostgreSQL, sees every statement the store's pools send
	// (the benchmark counts round trips and transactions with it).
	Tracer pgx.QueryTracer
	// Chunk is how many conversations one sweep or purge transaction
	// handles; 0 is 2,000.
	Chunk int
	// Timeout, on PostgreSQL, is how long one request to the server may
	// take before it fails and its connection is closed (deadlines);
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
	if opts.Chunk > 0 {
		s.chunk = opts.Chunk
	}
	workers := 1
	// PostgreSQL: the lease pool. The notifier publishes on it and the
	// leaser hears requests for leases on the notifier, so the pool is
	// opened here and the leaser built last, over both.
	var leasePool *sql.DB
	switch driver {
	case DriverSQLite:
		d, err := openSQLite(sqliteDSN(dsn, false))
		if err != nil {
			return nil, fmt.Errorf("open sqlite %s: %w", dsn, err)
		}
		w, err := gorm.Open(d, gcfg)
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
		workers = 4 // for the writes other than appends: those have one of their own (committer)
		if leasePool, err = openLeasePool(dsn, opts.Timeout, opts.Tracer); err != nil {
			s.closeDBs(nil)
			return nil, fmt.Errorf("open postgres: %w", redactErr(err, dsn))
		}
	default:
		return nil, fmt.Errorf("unknown storage driver %q (want sqlite or postgres)", driver)
	}
	// Reaching the database is bounded like a request; the migration
	// after it only by ctx: an upgrade's on a large database may rightly
	// take minutes, and cutting it short would fail every start after.
	reach := opts.Timeout
	if reach <= 0 {
		reach = DefaultTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, reach)
	err := s.ping(pctx)
	cancel()
	if err != nil {
		s.closeDBs(leasePool)
		return nil, err
	}
	if err := s.migrate(ctx, opts.Logger); err != nil {
		s.closeDBs(leasePool)
		return nil, fmt.Errorf("migrate %s schema: %w", driver, err)
	}
	if driver == DriverSQLite {
		// Readers open after the migration: a connection that cached the
		// schema before it would expand SELECT * to the columns of old.
		if err := s.openSQLiteReaders(dsn, gcfg, opts.Logger); err != nil {
			s.closeDBs(leasePool)
			return nil, err
		}
	}
	if err := s.openEvents(ctx, leasePool, dsn, opts.Timeout, opts.Logger); err != nil {
		s.closeDBs(leasePool)
		return nil, err
	}
	if leasePool != nil {
		s.leases = newLeaser(leasePool, s.events, s.closed)
	}
	s.commit = newCommitter(s.write, driver, workers, opts.MaxBatch)
	if s.ckpt != nil {
		s.commit.afterCommit = s.ckpt.committed
	}
	return s, nil
}

func (s *DB) openSQLiteReaders(dsn string, gcfg *gorm.Config, log *slog.Logger) error {
	d, err := openSQLite(sqliteDSN(dsn, true))
	if err != nil {
		return fmt.Errorf("open sqlite %s: %w", dsn, err)
	}
	r, err := gorm.Open(d, gcfg)
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
// and the text format of times (sqliteTimeFormat).
func sqliteDSN(path string, readOnly bool) string {
	base, query, _ := strings.Cut(path, "?")
	if !strings.HasPrefix(base, "file:") {
		base = "file:" + base
	}
	q, _ := url.ParseQuery(query)
	q.Set("_timefmt", sqliteTimeFormat)
	if !q.Has("vfs") {
		// The operating system's files, a commit's log frames written
		// together (gatherVFS).
		q.Set("vfs", sqliteVFSName)
	}
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

func (s *DB) migrate(ctx context.Context, log *slog.Logger) error {
	// Bounded by ctx (Open's caller: a stop signal) alone, not a request
	// at a time: one statement of an upgrade's (an index over a large
	// table) may rightly take longer than any bound that suits a turn.
	ctx = unbounded(ctx)
	if s.driver != DriverPostgres {
		return timedMigration(log, func() error { return migrateModels(s.write.WithContext(ctx)) })
	}
	// Replicas starting together must not migrate concurrently: hold a
	// session advisory lock on one pinned connection while migrating. It
	// is tried, not waited for in one statement, so that the wait says
	// so and ends with ctx. The lock is the schema's: deployments sharing
	// a database in schemas of their own do not wait for each other's
	// migrations. The database-wide key earlier versions lock alone is
	// held shared as well, so that one of those starting during an
	// upgrade waits for this migration, and this one for its.
	return s.write.WithContext(ctx).Connection(func(tx *gorm.DB) error {
		var key int32
		if err := tx.Raw(MigrationLockKeyQuery).Scan(&key).Error; err != nil {
			return err
		}
		waited := false
		take := func(try string, args ...any) error {
			for {
				var got bool
				if err := tx.Raw(try, args...).Scan(&got).Error; err != nil {
					return err
				}
				if got {
					return nil
				}
				if !waited {
					waited = true
					log.Info("storage: another gateway is migrating the schema; waiting for it")
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
		if err := take("SELECT pg_try_advisory_lock_shared(hashtext(?))", legacyMigrationKey); err != nil {
			return err
		}
		defer tx.Exec("SELECT pg_advisory_unlock_shared(hashtext(?))", legacyMigrationKey)
		if err := take("SELECT pg_try_advisory_lock(?)", key); err != nil {
			return err
		}
		defer tx.Exec("SELECT pg_advisory_unlock(?)", key)
		return timedMigration(log, func() error {
			if err := migrateModels(tx); err != nil {
				return err
			}
			// The guard of pgPipe's appends.
			return tx.Exec(pgExpectFunc).Error
		})
	})
}

// MigrationLockKeyQuery reads the key of the advisory lock a replica
// holds while it migrates its schema (PostgreSQL): the schema's, so that
// deployments in other schemas of one database do not wait on it.
const MigrationLockKeyQuery = "SELECT hashtext('chatgate:migrate:' || coalesce(current_schema(), ''))"

// legacyMigrationKey is what earlier versions lock, database-wide, while
// they migrate; hashed by hashtext.
const legacyMigrationKey = "chatgate:migrate"

// timedMigration runs a migration and, when it took long, logs that it
// is done: an operator watching a slow start sees what it was doing.
func timedMigration(log *slog.Logger, migrate func() error) error {
	start := time.Now()
	err := migrate()
	if took := time.Since(start); err == nil && took >= slowMigration {
		log.Info("storage: schema migrated", slog.Duration("took", took))
	}
	return err
}

// slowMigration is how long a migration takes before its end is logged
// (timedMigration).
const slowMigration = 2 * time.Second

// droppedIndexes are indexes earlier versions created that chatgate no
// longer keeps, by table.
var droppedIndexes = []struct {
	model any
	name  string
}{
	{&ledger.Conversation{}, "idx_conversations_archived_at"},
	{&ledger.Conversation{}, "ix_conversations_idle"},
	{&ledger.Conversation{}, "ix_conversations_daily"},
	// Indexed last_activity_at itself, so no turn's update of its
	// conversation could be heap-only on PostgreSQL (sweepIndex indexes
	// its minute instead).
	{&ledger.Conversation{}, "ix_conversations_sweep"},
	// Replies are found in the primary key's range after their message.
	{&ledger.Message{}, "ix_messages_reply"},
	// The rescuer found its turns by time among every user message; it
	// reads the open turns instead (ix_messages_open).
	{&ledger.Message{}, "ix_messages_user_created"},
}

func migrateModels(tx *gorm.DB) error {
	newLedger := tx.Migrator().HasTable(&ledger.Message{}) && !tx.Migrator().HasColumn(&ledger.Message{}, "turn_state")
	if err := tx.AutoMigrate(&ledger.Conversation{}, &ledger.Message{}, &ledger.ChannelState{}, &ledger.SessionLease{}, &ledger.Replica{}, &ledger.Leader{}, &ledger.ToolCall{}, &ledger.UsageDay{}, &ledger.ModelChoice{},
		&ledger.ScheduleFire{}, &ledger.Reminder{}, &ledger.ScheduleOptIn{}, &ledger.Note{}, &ledger.Extraction{}, &ledger.ToolMedia{}); err != nil {
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
	if err := migrateNotes(tx, tx.Dialector.Name()); err != nil {
		return fmt.Errorf("add the notes' full-text search: %w", err)
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
		var leasePool *sql.DB
		if s.leases != nil {
			s.leases.close()
			leasePool = s.leases.pool
		}
		s.events.Close()
		s.closeErr = s.closeDBs(leasePool)
	})
	return s.closeErr
}

// closeDBs closes the pools; leasePool is passed, not found on the
// leaser, since a failed Open has none built yet.
func (s *DB) closeDBs(leasePool *sql.DB) error {
	var errs []error
	if s.ckpt != nil {
		errs = append(errs, s.ckpt.close())
	}
	if leasePool != nil {
		errs = append(errs, leasePool.Close())
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
