package store

// The SQL of notes (ledger.Note): what the bot keeps about a user across
// conversations. Relevance is the database's own full-text search — FTS5
// on SQLite, a generated tsvector with a GIN index on PostgreSQL — and
// recency breaks ties. Every query names the user: no note is read for
// another.
//
// On SQLite the index holds each user's words apart (notes_terms): a word
// is indexed as the user's token followed by the word (noteTerms), so a
// search walks only its user's notes, and bm25's statistics — how many
// notes hold a word — are the user's own. An index of the plain words
// (notes_fts, before) made every turn's read walk each note of every user
// holding a word of the message ("the", "my"), look each up to drop those
// of other users, and count every user's notes per word for bm25: a read
// for a user with 100 notes took half as long as one for a user with
// 10,000 (docs/performance.md, "Memory").

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncruces/go-sqlite3"
	"gorm.io/gorm"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// Every SQLite connection has noteTermsFunc: the triggers that keep
// notes_terms call it.
func init() { sqlite3.AutoExtension(registerNoteTerms) }

// noteTermsFunc is the SQL function noteTerms(user_key, text).
const noteTermsFunc = "chatgate_note_terms"

func registerNoteTerms(c *sqlite3.Conn) error {
	return c.CreateFunction(noteTermsFunc, 2, sqlite3.DETERMINISTIC|sqlite3.INNOCUOUS, func(ctx sqlite3.Context, arg ...sqlite3.Value) {
		ctx.ResultText(noteTerms(arg[0].Text(), arg[1].Text()))
	})
}

// migrateNotes adds the notes' full-text search.
func migrateNotes(tx *gorm.DB, driver string) error {
	var stmts []string
	if driver == DriverPostgres {
		stmts = []string{
			`ALTER TABLE notes ADD COLUMN IF NOT EXISTS search tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED`,
			// A GIN index over every user's notes: no read uses it (see
			// mineOnly), and every note written paid for it.
			`DROP INDEX IF EXISTS ix_notes_search`,
			`DROP INDEX IF EXISTS ix_notes_user_id`,
			// NotesVersion's row: every change of a user's notes, by any
			// statement of any process, counts in its user's row, in the
			// transaction that makes it.
			`CREATE TABLE IF NOT EXISTS note_versions (user_key varchar(255) PRIMARY KEY, version bigint NOT NULL)`,
			`CREATE OR REPLACE FUNCTION chatgate_note_version() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF TG_OP <> 'DELETE' THEN
					INSERT INTO note_versions (user_key, version) VALUES (NEW.user_key, 1)
						ON CONFLICT (user_key) DO UPDATE SET version = note_versions.version + 1;
				END IF;
				IF TG_OP = 'DELETE' OR OLD.user_key <> NEW.user_key THEN
					INSERT INTO note_versions (user_key, version) VALUES (OLD.user_key, 1)
						ON CONFLICT (user_key) DO UPDATE SET version = note_versions.version + 1;
				END IF;
				RETURN NULL;
			END $$`,
		}
		// The trigger once: making it takes the table's strongest lock,
		// which every start of every replica would otherwise wait for.
		var have int64
		if err := tx.Raw(`SELECT COUNT(*) FROM pg_trigger WHERE tgname = 'notes_version' AND tgrelid = 'notes'::regclass`).Scan(&have).Error; err != nil {
			return err
		}
		if have == 0 {
			stmts = append(stmts, `CREATE TRIGGER notes_version AFTER INSERT OR UPDATE OR DELETE ON notes FOR EACH ROW EXECUTE FUNCTION chatgate_note_version()`)
		}
	} else {
		var have int64
		if err := tx.Raw(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'notes_terms'`).Scan(&have).Error; err != nil {
			return err
		}
		stmts = []string{
			// The index of plain words, over every user's notes at once.
			`DROP TRIGGER IF EXISTS notes_fts_insert`,
			`DROP TRIGGER IF EXISTS notes_fts_delete`,
			`DROP TRIGGER IF EXISTS notes_fts_update`,
			`DROP TABLE IF EXISTS notes_fts`,
			// It keeps its text, the terms, so that a note's row is
			// deleted by its id alone (by any SQLite, the sqlite3 shell's
			// too); no query reads them back.
			`CREATE VIRTUAL TABLE IF NOT EXISTS notes_terms USING fts5(terms, tokenize='unicode61 remove_diacritics 2')`,
			`CREATE TRIGGER IF NOT EXISTS notes_terms_insert AFTER INSERT ON notes BEGIN
				INSERT INTO notes_terms(rowid, terms) VALUES (new.id, ` + noteTermsFunc + `(new.user_key, new.text)); END`,
			`CREATE TRIGGER IF NOT EXISTS notes_terms_delete AFTER DELETE ON notes BEGIN
				DELETE FROM notes_terms WHERE rowid = old.id; END`,
			`CREATE TRIGGER IF NOT EXISTS notes_terms_update AFTER UPDATE OF user_key, text ON notes BEGIN
				DELETE FROM notes_terms WHERE rowid = old.id;
				INSERT INTO notes_terms(rowid, terms) VALUES (new.id, ` + noteTermsFunc + `(new.user_key, new.text)); END`,
		}
		if have == 0 {
			stmts = append(stmts, `INSERT INTO notes_terms(rowid, terms) SELECT id, `+noteTermsFunc+`(user_key, text) FROM notes`)
		}
	}
	for _, q := range stmts {
		if err := tx.Exec(q).Error; err != nil {
			return err
		}
	}
	return nil
}

// userTokenLen is the hex digits of a user's token: 48 bits of a hash of
// the user's key. Two users whose tokens meet share their words'
// statistics, nothing else: every query also names the user's key.
const userTokenLen = 12

// userToken is what each of user's indexed words starts with on SQLite:
// "u" and userTokenLen hex digits, letters and digits only, so that the
// tokenizer keeps it and the word after it one token.
func userToken(user string) string {
	h := sha256.Sum256([]byte(user))
	return "u" + hex.EncodeToString(h[:])[:userTokenLen]
}

// noteTerms is a note's text as notes_terms indexes it: each of its words
// (noteWords) after user's token, in order.
func noteTerms(user, text string) string {
	tok := userToken(user)
	var b strings.Builder
	for _, w := range ledger.NoteWords(text) {
		b.WriteString(tok)
		b.WriteString(w)
		b.WriteByte(' ')
	}
	return b.String()
}

// sqliteMatch is the FTS5 query of words for user: each word after the
// user's token, a quoted string, OR'ed.
func sqliteMatch(user string, words []string) string {
	tok := userToken(user)
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = `"` + tok + w + `"`
	}
	return strings.Join(quoted, " OR ")
}

// AddNote stores n (its ID and CreatedAt as stored are set) unless its
// user keeps limit notes already (limit ≤ 0: no limit); ok is false then,
// and nothing is stored. A note whose CallKey a stored one has already is
// not stored again: n becomes the stored one and ok is true (its writer
// ran again after a crash). A call key of another user's note is an
// error. Count and insert are one transaction, serialised per user on
// PostgreSQL by an advisory lock, so the limit holds under concurrent
// writers.
func (s *DB) AddNote(ctx context.Context, n *ledger.Note, limit int) (ok bool, err error) {
	return observe(ctx, s, ledger.Call{Op: "AddNote"}, func() (bool, error) {
		defer notesWritten(n.UserKey)
		row := *n
		row.ID = 0
		row.CreatedAt = row.CreatedAt.UTC()
		kept, ok, err := addOwned(ctx, s, owned[ledger.Note]{
			lock: "chatgate:notes:" + row.UserKey, owner: row.UserKey, callKey: row.CallKey, limit: limit,
			ownerOf: func(n *ledger.Note) string { return n.UserKey },
			count:   func(tx *gorm.DB) *gorm.DB { return tx.Model(&ledger.Note{}).Where("user_key = ?", row.UserKey) },
		}, &row)
		if err != nil {
			return false, fmt.Errorf("add a note of %s: %w", n.UserKey, err)
		}
		switch {
		case kept != nil:
			*n = *kept
		case ok:
			*n = row
		}
		return ok, nil
	})
}

// Notes returns a user's notes, newest first, at most limit.
func (s *DB) Notes(ctx context.Context, user string, limit int) ([]ledger.Note, error) {
	return observe(ctx, s, ledger.Call{Op: "Notes"}, func() ([]ledger.Note, error) {
		var out []ledger.Note
		if err := s.read.WithContext(ctx).Where("user_key = ?", user).Order("created_at DESC, id DESC").Limit(limit).Find(&out).Error; err != nil {
			return nil, fmt.Errorf("load the notes of %s: %w", user, err)
		}
		return out, nil
	})
}

// mineOnly is a user's notes on PostgreSQL (the user's key its one
// argument), fenced (OFFSET 0) so that a search of them reads them by
// their user (ix_notes_user) and matches each: at most max_notes rows,
// where an index of the words would have walked every user's notes that
// hold a word of the query. The driver keeps statements prepared, and
// PostgreSQL's generic plan, which cannot see the query's words, took
// that way: 3.7 ms among 20,000 notes for a user with 100, 0.25 ms
// fenced (docs/performance.md, "Memory").
const mineOnly = `(SELECT * FROM notes WHERE user_key = ? OFFSET 0) AS mine`

// pgQuery is a search's words as one tsquery, q (the words its one
// argument, OR'ed), parsed once: in the generic plan of a prepared
// statement, to_tsquery of a parameter in a condition is parsed again for
// every row it is matched against, which for a user with 10,000 notes
// took 220 ms where the search took 17.
const pgQuery = `to_tsquery('simple', ?) AS q`

// RecallNotes returns up to limit of a user's notes that share a word
// with query, the most relevant first (the full-text search's rank), the
// newer first among equals; a query with no word returns none.
func (s *DB) RecallNotes(ctx context.Context, user, query string, limit int) ([]ledger.Note, error) {
	return observe(ctx, s, ledger.Call{Op: "RecallNotes"}, func() ([]ledger.Note, error) {
		words := ledger.SearchWords(query)
		if len(words) == 0 {
			return nil, nil
		}
		var out []ledger.Note
		var err error
		db := s.notesDB(ctx)
		if s.driver == DriverPostgres {
			// Each word its own lexeme, OR'ed: a note sharing any word is
			// found, and ts_rank orders them.
			q := strings.Join(words, " | ")
			err = db.Raw(`SELECT id, user_key, text, author, conversation_id, message_seq, call_key, created_at FROM `+mineOnly+`, `+pgQuery+`
				WHERE search @@ q ORDER BY ts_rank(search, q) DESC, created_at DESC, id DESC LIMIT ?`, user, q, limit).Scan(&out).Error
		} else {
			// The user's words OR'ed (sqliteMatch); bm25 is lower for
			// better matches.
			err = db.Raw(`SELECT n.id, n.user_key, n.text, n.author, n.conversation_id, n.message_seq, n.call_key, n.created_at
				FROM notes_terms JOIN notes AS n ON n.id = notes_terms.rowid
				WHERE notes_terms MATCH ? AND n.user_key = ?
				ORDER BY bm25(notes_terms), n.created_at DESC, n.id DESC LIMIT ?`, sqliteMatch(user, words), user, limit).Scan(&out).Error
		}
		if err != nil {
			return nil, fmt.Errorf("recall the notes of %s: %w", user, err)
		}
		return out, nil
	})
}

// NotesFor returns the notes a turn of user carries: up to limit of
// those sharing a word with query, the most relevant first, then up to
// limit of the newest, each once — in one statement (a round trip on the
// path to the reply).
func (s *DB) NotesFor(ctx context.Context, user, query string, limit int) ([]ledger.Note, error) {
	return observe(ctx, s, ledger.Call{Op: "NotesFor"}, func() ([]ledger.Note, error) {
		const cols = `id, user_key, text, author, conversation_id, message_seq, call_key, created_at`
		newest := `SELECT ` + cols + `, 1 AS part, 0.0 AS rank FROM notes WHERE user_key = ? ORDER BY created_at DESC, id DESC LIMIT ?`
		words := ledger.SearchWords(query)
		var q string
		var args []any
		switch {
		case len(words) == 0:
			q, args = newest, []any{user, limit}
		case s.driver == DriverPostgres:
			tq := strings.Join(words, " | ")
			q = `SELECT * FROM ((SELECT ` + cols + `, 0 AS part, ts_rank(search, q) AS rank FROM ` + mineOnly + `, ` + pgQuery + `
				WHERE search @@ q ORDER BY rank DESC, created_at DESC, id DESC LIMIT ?)
				UNION ALL (` + newest + `)) AS u ORDER BY part, rank DESC, created_at DESC, id DESC`
			args = []any{user, tq, limit, user, limit}
		default:
			// bm25 is lower for better matches: its negation ranks as
			// ts_rank does.
			q = `SELECT * FROM (SELECT * FROM (SELECT n.id, n.user_key, n.text, n.author, n.conversation_id, n.message_seq, n.call_key, n.created_at,
				0 AS part, -bm25(notes_terms) AS rank FROM notes_terms JOIN notes AS n ON n.id = notes_terms.rowid
				WHERE notes_terms MATCH ? AND n.user_key = ? ORDER BY rank DESC, n.created_at DESC, n.id DESC LIMIT ?)
				UNION ALL SELECT * FROM (` + newest + `)) ORDER BY part, rank DESC, created_at DESC, id DESC`
			args = []any{sqliteMatch(user, words), user, limit, user, limit}
		}
		// Scanned by hand: GORM's scan of a turn's 50-odd rows took a
		// sixth of the read.
		rows, err := s.notesDB(ctx).Raw(q, args...).Rows()
		if err != nil {
			return nil, fmt.Errorf("read the notes of %s: %w", user, err)
		}
		defer rows.Close()
		size := min(max(2*limit, 0), 128)
		out := make([]ledger.Note, 0, size)
		seen := make(map[int64]bool, size)
		for rows.Next() {
			var n ledger.Note
			var part int
			var rank float64
			if err := rows.Scan(&n.ID, &n.UserKey, &n.Text, &n.Author, &n.ConversationID, &n.MessageSeq, &n.CallKey, &n.CreatedAt, &part, &rank); err != nil {
				return nil, fmt.Errorf("read the notes of %s: %w", user, err)
			}
			if !seen[n.ID] {
				seen[n.ID] = true
				out = append(out, n)
			}
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("read the notes of %s: %w", user, err)
		}
		return out, nil
	})
}

// notesDB is the reader of RecallNotes and NotesFor. On SQLite it keeps
// their statements prepared: the driver compiles a statement each time it
// runs one that is not, which for a turn's read of its notes took a fifth
// of the read. (PostgreSQL's driver keeps them prepared itself.)
func (s *DB) notesDB(ctx context.Context) *gorm.DB {
	s.notesOnce.Do(func() {
		s.notesRead = s.read
		if s.driver == DriverSQLite {
			s.notesRead = s.read.Session(&gorm.Session{PrepareStmt: true})
		}
	})
	return s.notesRead.WithContext(ctx)
}

// ForgetNote deletes a user's note; false when the user has no such note
// (another user's id, or one forgotten already).
func (s *DB) ForgetNote(ctx context.Context, user string, id int64) (bool, error) {
	return observe(ctx, s, ledger.Call{Op: "ForgetNote"}, func() (bool, error) {
		defer notesWritten(user)
		n, err := s.moveRows(ctx, `DELETE FROM notes WHERE id = ? AND user_key = ?`, id, user)
		if err != nil {
			return false, fmt.Errorf("forget note %d of %s: %w", id, user, err)
		}
		return n == 1, nil
	})
}

// ForgetNotes deletes every note of a user and returns how many.
func (s *DB) ForgetNotes(ctx context.Context, user string) (int64, error) {
	return observe(ctx, s, ledger.Call{Op: "ForgetNotes"}, func() (int64, error) {
		defer notesWritten(user)
		n, err := s.moveRows(ctx, `DELETE FROM notes WHERE user_key = ?`, user)
		if err != nil {
			return 0, fmt.Errorf("forget the notes of %s: %w", user, err)
		}
		return n, nil
	})
}

// noteWrites counts this process's writes of notes, in stripes of users
// (a user's stripe: a hash of its key). A write counts when its statement
// is done, landed or not, so a copy read before it is never taken for
// one read after; two users sharing a stripe only read theirs again
// sooner. The process's stores share them: a SQLite file has one
// gateway process (its pid file), which may open it more than once.
var noteWrites [1024]atomic.Uint64

func noteStripe(user string) *atomic.Uint64 {
	h := fnv.New32a()
	h.Write([]byte(user))
	return &noteWrites[h.Sum32()%uint32(len(noteWrites))]
}

// notesWritten counts a write of user's notes.
func notesWritten(user string) { noteStripe(user).Add(1) }

// NotesVersion returns the version of user's notes (ledger.NotesVersion):
// on SQLite this process's count of their writes, read from memory; on
// PostgreSQL, where other replicas write too, also the count of every
// change of them (note_versions, kept by a trigger), read by key — one
// statement for the users of every turn asking at once (versionReads).
func (s *DB) NotesVersion(ctx context.Context, user string) (ledger.NotesVersion, error) {
	v := ledger.NotesVersion{Local: noteStripe(user).Load()}
	if s.driver != DriverPostgres {
		return v, nil
	}
	return observe(ctx, s, ledger.Call{Op: "NotesVersion"}, func() (ledger.NotesVersion, error) {
		s.versionsOnce.Do(func() { s.versions = &versionReads{db: s.readSQL(), wait: map[string][]chan versionAnswer{}} })
		changes, err := s.versions.read(ctx, user)
		if err != nil {
			return v, fmt.Errorf("read the version of the notes of %s: %w", user, err)
		}
		v.Changes = changes
		return v, nil
	})
}

// SharedNotes reports whether other processes write the notes too: on
// PostgreSQL, a gateway's replicas.
func (s *DB) SharedNotes() bool { return s.driver == DriverPostgres }

// NotesVersionRead is the version of user's notes whose changes an
// append's transaction read (ledger.Append.NotesOf): NotesVersion's,
// without its read.
func (s *DB) NotesVersionRead(user string, changes int64) ledger.NotesVersion {
	return ledger.NotesVersion{Local: noteStripe(user).Load(), Changes: changes}
}

// versionReads reads note_versions for the turns that ask, in batches:
// the users asking while a read is out are read together by the next
// one. At 50 turns at once a statement each cost a PostgreSQL turn a
// third of its time (docs/performance.md, "Memory").
type versionReads struct {
	db   *sql.DB
	mu   sync.Mutex
	wait map[string][]chan versionAnswer
	busy bool // a reader is running (readAll)
}

type versionAnswer struct {
	changes int64
	err     error
}

// read returns user's count of changes (0: none yet).
func (r *versionReads) read(ctx context.Context, user string) (int64, error) {
	ch := make(chan versionAnswer, 1)
	r.mu.Lock()
	r.wait[user] = append(r.wait[user], ch)
	lead := !r.busy
	r.busy = true
	r.mu.Unlock()
	if lead {
		go r.readAll()
	}
	select {
	case a := <-ch:
		return a.changes, a.err
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
}

// readAll reads the waiting users' versions, a statement at a time,
// until none waits.
func (r *versionReads) readAll() {
	for {
		r.mu.Lock()
		batch := r.wait
		if len(batch) == 0 {
			r.busy = false
			r.mu.Unlock()
			return
		}
		r.wait = make(map[string][]chan versionAnswer, len(batch))
		r.mu.Unlock()
		got, err := r.readBatch(batch)
		for user, chs := range batch {
			for _, ch := range chs {
				ch <- versionAnswer{changes: got[user], err: err}
			}
		}
	}
}

func (r *versionReads) readBatch(batch map[string][]chan versionAnswer) (map[string]int64, error) {
	users := make([]string, 0, len(batch))
	for u := range batch {
		users = append(users, u)
	}
	// Its own bound: the statement answers every waiter, whatever became
	// of the one that started it.
	ctx, cancel := context.WithTimeout(context.Background(), versionReadTimeout)
	defer cancel()
	rows, err := r.db.QueryContext(ctx, pgNotesVersions, users)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanNotesVersions(rows, len(users))
}

// pgNotesVersions reads the notes' versions of the users $1 names, for
// a read apart (versionReads) and in an append's pipeline
// (queueNotesVersions) alike. A user without a row has changed none:
// version 0, which the map scanNotesVersions returns gives.
const pgNotesVersions = `SELECT user_key, version FROM note_versions WHERE user_key = ANY($1)`

// scanNotesVersions is pgNotesVersions's rows (database/sql's or pgx's)
// as versions by user.
func scanNotesVersions(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
}, n int) (map[string]int64, error) {
	got := make(map[string]int64, n)
	for rows.Next() {
		var u string
		var v int64
		if err := rows.Scan(&u, &v); err != nil {
			return nil, err
		}
		got[u] = v
	}
	return got, rows.Err()
}

// versionReadTimeout bounds a batch's read of note_versions.
const versionReadTimeout = 5 * time.Second

// readSQL is the readers' database/sql pool.
func (s *DB) readSQL() *sql.DB {
	db, _ := s.read.DB()
	return db
}
