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

	"github.com/glebarez/sqlite"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
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
	// closed is closed by Close, ending background retries.
	closed chan struct{}
}

// OpenOptions tunes Open.
type OpenOptions struct {
	Logger   *slog.Logger
	MaxBatch int // writes per group commit (default 512)
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
	workers := 1
	switch driver {
	case DriverSQLite:
		w, err := gorm.Open(sqlite.Open(sqliteDSN(dsn, false)), gcfg)
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
		db, err := gorm.Open(postgres.Open(dsn), gcfg)
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", redactErr(err, dsn))
		}
		sqlDB, _ := db.DB()
		sqlDB.SetMaxOpenConns(16)
		sqlDB.SetMaxIdleConns(16)
		s.write, s.read = db, db
		workers = 4
		if s.leases, err = openLeasePool(dsn); err != nil {
			s.closeDBs()
			return nil, fmt.Errorf("open postgres: %w", redactErr(err, dsn))
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
	if err := s.openEvents(ctx, dsn, opts.Logger); err != nil {
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
	r, err := gorm.Open(sqlite.Open(sqliteDSN(dsn, true)), gcfg)
	if err != nil {
		return fmt.Errorf("open sqlite %s: %w", dsn, err)
	}
	rdb, _ := r.DB()
	rdb.SetMaxOpenConns(4)
	s.read = r
	c, err := sql.Open("sqlite", sqliteDSN(dsn, false))
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
// read-then-write transaction fails with SQLITE_BUSY despite busy_timeout).
func sqliteDSN(path string, readOnly bool) string {
	base, query, _ := strings.Cut(path, "?")
	if !strings.HasPrefix(base, "file:") {
		base = "file:" + base
	}
	q, _ := url.ParseQuery(query)
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
		return migrateModels(tx)
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
	// Replies are found in the primary key's range after their message.
	{&Message{}, "ix_messages_reply"},
}

func migrateModels(tx *gorm.DB) error {
	newLedger := tx.Migrator().HasTable(&Message{}) && !tx.Migrator().HasColumn(&Message{}, "turn_state")
	if err := tx.AutoMigrate(&Conversation{}, &Message{}, &ChannelState{}, &SessionLease{}, &Replica{}, &Leader{}); err != nil {
		return err
	}
	if newLedger {
		if err := backfillTurns(tx, time.Now().UTC()); err != nil {
			return fmt.Errorf("give earlier messages their turns: %w", err)
		}
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

func notFound(err error) bool { return errors.Is(err, gorm.ErrRecordNotFound) }

// ActiveConversation returns the key's active conversation, or nil.
func (s *DB) ActiveConversation(ctx context.Context, key string) (*Conversation, error) {
	var c Conversation
	// status as a literal, so that the partial unique index applies.
	err := s.read.WithContext(ctx).Where("session_key = ? AND status = 'active'", key).Take(&c).Error
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load active conversation of %s: %w", key, err)
	}
	return &c, nil
}

// Conversation returns a conversation by id, or nil.
func (s *DB) Conversation(ctx context.Context, id string) (*Conversation, error) {
	var c Conversation
	err := s.read.WithContext(ctx).Where("id = ?", id).Take(&c).Error
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load conversation %s: %w", id, err)
	}
	return &c, nil
}

// CreateConversation inserts c. It fails with ErrStale when the key already
// has an active conversation.
func (s *DB) CreateConversation(ctx context.Context, c *Conversation) error {
	err := s.commit.do(ctx, func(tx *gorm.DB) error { return tx.Create(c).Error })
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return ErrStale
	}
	if err != nil {
		return fmt.Errorf("create conversation for %s: %w", c.SessionKey, err)
	}
	return nil
}

// RecentMessages returns the newest limit messages, oldest first.
func (s *DB) RecentMessages(ctx context.Context, convID string, limit int) ([]Message, error) {
	var msgs []Message
	err := s.read.WithContext(ctx).Where("conversation_id = ?", convID).
		Order("seq DESC").Limit(limit).Find(&msgs).Error
	if err != nil {
		return nil, fmt.Errorf("load messages of %s: %w", convID, err)
	}
	for i, j := 0, len(msgs)-1; i < j; i, j = i+1, j-1 {
		msgs[i], msgs[j] = msgs[j], msgs[i]
	}
	return msgs, nil
}

// MessagesAfter returns messages with seq > afterSeq, oldest first, at most
// limit (0: no limit).
func (s *DB) MessagesAfter(ctx context.Context, convID string, afterSeq int64, limit int) ([]Message, error) {
	var msgs []Message
	q := s.read.WithContext(ctx).Where("conversation_id = ? AND seq > ?", convID, afterSeq).Order("seq")
	if limit > 0 {
		q = q.Limit(limit)
	}
	if err := q.Find(&msgs).Error; err != nil {
		return nil, fmt.Errorf("load messages of %s: %w", convID, err)
	}
	return msgs, nil
}

// MessageByClientID returns the user message with that client id, or nil.
func (s *DB) MessageByClientID(ctx context.Context, convID, clientID string) (*Message, error) {
	var m Message
	err := s.read.WithContext(ctx).Where("conversation_id = ? AND client_msg_id = ?", convID, clientID).Take(&m).Error
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up client message %s: %w", clientID, err)
	}
	return &m, nil
}

// FinalReply returns the reply the user saw to their message userSeq, or nil.
func (s *DB) FinalReply(ctx context.Context, convID string, userSeq int64) (*Message, error) {
	var m Message
	err := s.read.WithContext(ctx).
		// A reply follows its message: the primary key's range after the
		// message's seq holds it.
		// A partial reply a shutdown cut is not final (the turn runs
		// again), nor one cut for a newer message (one turn answers both).
		Where("conversation_id = ? AND seq > ? AND reply_to = ? AND role = 'assistant' AND (tool_calls IS NULL OR tool_calls = '') AND NOT (status = 'interrupted' AND error IN ?)",
			convID, userSeq, userSeq, []string{InterruptedByShutdown, InterruptedByMessage}).
		Order("seq DESC").Take(&m).Error
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load reply to %d in %s: %w", userSeq, convID, err)
	}
	return &m, nil
}

// Append stores messages and advances the conversation, in one group commit.
func (s *DB) Append(ctx context.Context, a Append) error {
	err := s.commit.append(ctx, &a)
	switch {
	case errors.Is(err, ErrStale):
		return ErrStale
	case errors.Is(err, ErrLostClaim):
		return ErrLostClaim
	case errors.Is(err, gorm.ErrDuplicatedKey):
		for _, m := range a.Messages {
			if m.ClientMsgID != nil {
				return ErrDuplicate
			}
		}
		return ErrStale // a seq someone else took
	case err != nil:
		return fmt.Errorf("append to conversation %s: %w", a.Conv.ID, err)
	}
	n := int64(len(a.Messages))
	a.Conv.LastSeq += n
	a.Conv.LastActivityAt = a.At
	a.Conv.TotalTokens += a.Tokens
	a.Conv.Cost += a.Cost
	if a.Model != "" {
		a.Conv.Model = a.Model
	}
	return nil
}

// Archive archives one active conversation, if its last seq is still
// expectSeq (the state its caller judged; -1 archives whatever it holds).
// It reports false when the conversation was not active or had moved on:
// another replica used it meanwhile, or a sweep got there first.
func (s *DB) Archive(ctx context.Context, convID, reason string, at time.Time, expectSeq int64) (bool, error) {
	var archived bool
	err := s.commit.do(ctx, func(tx *gorm.DB) error {
		q := tx.Model(&Conversation{}).Where("id = ? AND status = ?", convID, StatusActive)
		if expectSeq >= 0 {
			q = q.Where("last_seq = ?", expectSeq)
		}
		res := q.Updates(map[string]any{"status": StatusArchived, "archived_at": at, "reset_reason": reason})
		archived = res.RowsAffected == 1
		return res.Error
	})
	if err != nil {
		return false, fmt.Errorf("archive conversation %s: %w", convID, err)
	}
	return archived, nil
}

// Archived is a conversation a sweep archived.
type Archived struct {
	ID         string
	SessionKey string
	Channel    string
	LastSeq    int64 // 0: the conversation was empty
}

// defaultChunk is how many conversations one sweep or purge transaction
// handles. A sweep over a million conversations is five hundred short
// transactions, so turns keep committing between them instead of waiting
// for the whole sweep.
const defaultChunk = 2000

// SweepIdle archives the channel's active conversations idle since cutoff or
// longer. Set-based and idempotent: a repeated or concurrent run archives
// nothing twice. It passes each committed chunk of archived conversations
// to each and returns how many it archived.
func (s *DB) SweepIdle(ctx context.Context, channel string, cutoff, at time.Time, each func([]Archived)) (int, error) {
	return s.sweep(ctx, ReasonIdle, at, each, idleWhere, channel, cutoff)
}

// SweepDaily archives the channel's active conversations started before
// boundary. Idempotent like SweepIdle.
func (s *DB) SweepDaily(ctx context.Context, channel string, boundary, at time.Time, each func([]Archived)) (int, error) {
	return s.sweep(ctx, ReasonDaily, at, each, dailyWhere, channel, boundary)
}

// The sweeps' conditions, status as a literal so that the partial indexes
// apply.
const (
	idleWhere  = "status = 'active' AND channel = ? AND last_activity_at <= ?"
	dailyWhere = "status = 'active' AND channel = ? AND started_at < ?"
)

// sweepQuery archives one chunk of the conversations matching where and
// returns their ids, session keys and last seqs. Its parameters: status, archived_at,
// reset_reason, where's arguments, the chunk size.
func sweepQuery(driver, where string) string {
	if driver == DriverPostgres {
		// FOR UPDATE locks the chosen rows and, when a replica's turn
		// updated one meanwhile, checks where again on its new version, so
		// that a conversation active again is left alone. The ids as an
		// array make the update find each by its primary key.
		return "UPDATE conversations SET status = ?, archived_at = ?, reset_reason = ? WHERE id = ANY(ARRAY(SELECT id FROM conversations WHERE " +
			where + " LIMIT ? FOR UPDATE)) RETURNING id, session_key, last_seq"
	}
	// SQLite: the one writer runs the statement alone, so the rows the
	// subquery picks still match; the update finds them by rowid.
	return "UPDATE conversations SET status = ?, archived_at = ?, reset_reason = ? WHERE rowid IN (SELECT rowid FROM conversations WHERE " +
		where + " LIMIT ?) RETURNING id, session_key, last_seq"
}

// sweep archives the channel's conversations matching where (its bound
// the second argument), s.chunk at a time, until a chunk comes back short.
// A conversation a chunk passes over because a turn changed it meanwhile
// is left to the next run, or to the check on the user's next message.
func (s *DB) sweep(ctx context.Context, reason string, at time.Time, each func([]Archived), where, channel string, bound time.Time) (int, error) {
	query := sweepQuery(s.driver, where)
	// SQLite compares the stored times as text, which orders instants only
	// in one offset: every time is stored in UTC, and a daily boundary
	// comes in its policy's zone.
	params := []any{StatusArchived, at.UTC(), reason, channel, bound.UTC(), s.chunk}
	total := 0
	got := make([]Archived, 0, s.chunk)
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("%s sweep stopped after %d: %w", reason, total, err)
		}
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			got = got[:0] // a batch that failed runs its writes again
			rows, err := tx.Raw(query, params...).Rows()
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				a := Archived{Channel: channel}
				if err := rows.Scan(&a.ID, &a.SessionKey, &a.LastSeq); err != nil {
					return err
				}
				got = append(got, a)
			}
			return rows.Err()
		})
		if err != nil {
			return total, fmt.Errorf("%s sweep: %w", reason, err)
		}
		total += len(got)
		if len(got) > 0 && each != nil {
			each(got)
		}
		if len(got) < s.chunk {
			return total, nil
		}
	}
}

// Purge deletes archived conversations (and their messages) archived before
// the given time. It is the only deletion chatgate does.
//
// archived_at has no index (archiving a million conversations would pay
// for one on every row), so the conversations to delete are found by a walk
// of the table in key order on a reader; the writer only deletes them, a
// chunk per transaction.
func (s *DB) Purge(ctx context.Context, archivedBefore time.Time) (int64, error) {
	// The walk's key and its start: SQLite's rowid (the table's own
	// order), PostgreSQL's primary key.
	key, after := "rowid", any(int64(0))
	if s.driver == DriverPostgres {
		key, after = "id", ""
	}
	find := "SELECT " + key + ", id FROM conversations WHERE " + key + " > ? AND status = ? AND archived_at < ? ORDER BY " + key + " LIMIT ?"
	var n int64
	ids := make([]string, 0, s.chunk)
	for {
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("purge stopped after %d: %w", n, err)
		}
		ids = ids[:0]
		rows, err := s.read.WithContext(ctx).Raw(find, after, StatusArchived, archivedBefore, s.chunk).Rows()
		if err != nil {
			return n, fmt.Errorf("purge archived conversations: %w", err)
		}
		for rows.Next() {
			var id string
			if err = rows.Scan(&after, &id); err != nil {
				break
			}
			ids = append(ids, id)
		}
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
		if err != nil {
			return n, fmt.Errorf("purge archived conversations: %w", err)
		}
		if len(ids) == 0 {
			return n, nil
		}
		var deleted int64
		err = s.commit.do(ctx, func(tx *gorm.DB) error {
			if err := tx.Where("conversation_id IN ?", ids).Delete(&Message{}).Error; err != nil {
				return err
			}
			res := tx.Where("id IN ? AND status = ?", ids, StatusArchived).Delete(&Conversation{})
			deleted = res.RowsAffected
			return res.Error
		})
		if err != nil {
			return n, fmt.Errorf("purge archived conversations: %w", err)
		}
		n += deleted
		if len(ids) < s.chunk {
			return n, nil
		}
	}
}

// Exclusive runs fn unless another process sharing the database is running
// the same name: on PostgreSQL it holds pg_try_advisory_xact_lock inside a
// transaction for fn's duration (the lock ends with the transaction, also
// when a replica dies); SQLite has one gateway per file and just runs fn.
// It reports whether fn ran.
func (s *DB) Exclusive(ctx context.Context, name string, fn func() error) (bool, error) {
	if s.driver != DriverPostgres {
		return true, fn()
	}
	ran := false
	err := s.write.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var got bool
		if err := tx.Raw("SELECT pg_try_advisory_xact_lock(hashtext(?))", "chatgate:"+name).Scan(&got).Error; err != nil {
			return err
		}
		if !got {
			return nil
		}
		ran = true
		return fn()
	})
	return ran, err
}

// LeaseTTL is how long a replica holds its turns and session leases after
// its last heartbeat; it beats every third of that.
const LeaseTTL = 30 * time.Second

// openLeasePool opens the connections session leases and heartbeats are
// written through. A lease lives for one turn and a heartbeat for a third
// of the lease, so their writes commit without waiting for the log flush
// (synchronous_commit off): they are as atomic and as visible to other
// replicas as any, and only a PostgreSQL crash could forget one — after
// which the turns' seq guards and claims still keep one user's messages
// from interleaving and each turn to one runner.
func openLeasePool(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["synchronous_commit"] = "off"
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	return db, nil
}

// Lease takes the cross-replica lease of a session key for replica,
// waiting while another replica holds it (until ctx ends). SQLite serves
// one gateway per file, where the in-process lock suffices: the lease is
// then free. A lease lives as long as its replica heartbeats (the turn
// ledger's liveness, ledger.go): a replica that stopped for ttl no longer
// holds its leases, and one that stops cleanly releases them.
//
// A replica may always retake its own lease: its in-process lock already
// keeps its own turns of a key apart, so a release that failed (the
// database was unreachable for a moment) never locks out that replica's
// users; it is retried in the background.
func (s *DB) Lease(ctx context.Context, key, replica string, ttl time.Duration) (func(), error) {
	if s.driver != DriverPostgres {
		return func() {}, nil
	}
	holder := uuid.NewString()
	wait := 5 * time.Millisecond
	for {
		res, err := s.leases.ExecContext(ctx, `INSERT INTO session_leases (session_key, holder, replica, expires_at)
			VALUES ($1, $2, $3, now())
			ON CONFLICT (session_key) DO UPDATE SET holder = EXCLUDED.holder, replica = EXCLUDED.replica, expires_at = EXCLUDED.expires_at
			WHERE session_leases.replica = EXCLUDED.replica OR NOT EXISTS (SELECT 1 FROM replicas AS r
				WHERE r.id = session_leases.replica AND r.heartbeat_at >= now() - make_interval(secs => $4))`,
			key, holder, replica, ttl.Seconds())
		if err != nil {
			// The insert may have landed with its answer lost: this
			// acquisition's row, if there is one, is deleted when the
			// database answers again (only this holder's).
			go s.retryUnlease(key, holder, ttl)
			return nil, fmt.Errorf("lease %s: %w", key, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, 200*time.Millisecond)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if s.unlease(key, holder) != nil {
				go s.retryUnlease(key, holder, ttl)
			}
		})
	}, nil
}

func (s *DB) unlease(key, holder string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.leases.ExecContext(ctx, `DELETE FROM session_leases WHERE session_key = $1 AND holder = $2`, key, holder)
	return err
}

// retryUnlease keeps trying to release a lease until it is released or
// the store closes (the process ends, and with its heartbeat its leases).
// Only this acquisition's row is deleted (holder is unique to it), so a
// late release never frees a lease taken again since.
func (s *DB) retryUnlease(key, holder string, ttl time.Duration) {
	for wait := 100 * time.Millisecond; ; wait = min(wait*2, ttl/6) {
		select {
		case <-s.closed:
			return
		case <-time.After(wait):
		}
		if s.unlease(key, holder) == nil {
			return
		}
	}
}

// GetState reads a channel state value ("" when unset).
func (s *DB) GetState(ctx context.Context, key string) (string, error) {
	var st ChannelState
	err := s.read.WithContext(ctx).Where("name = ?", key).Take(&st).Error
	if notFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read state %s: %w", key, err)
	}
	return st.Value, nil
}

// SetState writes a channel state value durably.
func (s *DB) SetState(ctx context.Context, key, value string) error {
	err := s.commit.do(ctx, func(tx *gorm.DB) error {
		return tx.Clauses(clause.OnConflict{
			Columns:   []clause.Column{{Name: "name"}},
			DoUpdates: clause.AssignmentColumns([]string{"value", "updated_at"}),
		}).Create(&ChannelState{Key: key, Value: value, UpdatedAt: time.Now().UTC()}).Error
	})
	if err != nil {
		return fmt.Errorf("write state %s: %w", key, err)
	}
	return nil
}
