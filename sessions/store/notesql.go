package store

// The SQL of notes (ledger.Note): what the bot keeps about a user across
// conversations. Relevance is the database's own full-text search — FTS5
// on SQLite (an external-content table over notes, kept by triggers),
// a generated tsvector with a GIN index on PostgreSQL — and recency
// breaks ties. Every query names the user: no note is read for another.

import (
	"context"
	"fmt"
	"strings"
	"unicode"

	"gorm.io/gorm"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// migrateNotes adds the notes' full-text search.
func migrateNotes(tx *gorm.DB, driver string) error {
	var stmts []string
	if driver == DriverPostgres {
		stmts = []string{
			`ALTER TABLE notes ADD COLUMN IF NOT EXISTS search tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED`,
			`CREATE INDEX IF NOT EXISTS ix_notes_search ON notes USING gin (search)`,
		}
	} else {
		stmts = []string{
			`CREATE VIRTUAL TABLE IF NOT EXISTS notes_fts USING fts5(text, content='notes', content_rowid='id', tokenize='unicode61 remove_diacritics 2')`,
			`CREATE TRIGGER IF NOT EXISTS notes_fts_insert AFTER INSERT ON notes BEGIN
				INSERT INTO notes_fts(rowid, text) VALUES (new.id, new.text); END`,
			`CREATE TRIGGER IF NOT EXISTS notes_fts_delete AFTER DELETE ON notes BEGIN
				INSERT INTO notes_fts(notes_fts, rowid, text) VALUES ('delete', old.id, old.text); END`,
			`CREATE TRIGGER IF NOT EXISTS notes_fts_update AFTER UPDATE OF text ON notes BEGIN
				INSERT INTO notes_fts(notes_fts, rowid, text) VALUES ('delete', old.id, old.text);
				INSERT INTO notes_fts(rowid, text) VALUES (new.id, new.text); END`,
		}
	}
	for _, q := range stmts {
		if err := tx.Exec(q).Error; err != nil {
			return err
		}
	}
	return nil
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

// RecallNotes returns up to limit of a user's notes that share a word
// with query, the most relevant first (the full-text search's rank), the
// newer first among equals; a query with no word returns none.
func (s *DB) RecallNotes(ctx context.Context, user, query string, limit int) ([]ledger.Note, error) {
	return observe(ctx, s, ledger.Call{Op: "RecallNotes"}, func() ([]ledger.Note, error) {
		words := searchWords(query)
		if len(words) == 0 {
			return nil, nil
		}
		var out []ledger.Note
		var err error
		db := s.read.WithContext(ctx)
		if s.driver == DriverPostgres {
			// Each word its own lexeme, OR'ed: a note sharing any word is
			// found, and ts_rank orders them.
			q := strings.Join(words, " | ")
			err = db.Raw(`SELECT id, user_key, text, author, conversation_id, message_seq, call_key, created_at FROM notes
				WHERE user_key = ? AND search @@ to_tsquery('simple', ?)
				ORDER BY ts_rank(search, to_tsquery('simple', ?)) DESC, created_at DESC, id DESC LIMIT ?`, user, q, q, limit).Scan(&out).Error
		} else {
			// Each word a quoted FTS5 string, OR'ed; bm25 is lower for
			// better matches.
			quoted := make([]string, len(words))
			for i, w := range words {
				quoted[i] = `"` + w + `"`
			}
			err = db.Raw(`SELECT n.id, n.user_key, n.text, n.author, n.conversation_id, n.message_seq, n.call_key, n.created_at
				FROM notes_fts JOIN notes AS n ON n.id = notes_fts.rowid
				WHERE notes_fts MATCH ? AND n.user_key = ?
				ORDER BY bm25(notes_fts), n.created_at DESC, n.id DESC LIMIT ?`, strings.Join(quoted, " OR "), user, limit).Scan(&out).Error
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
		words := searchWords(query)
		var q string
		var args []any
		switch {
		case len(words) == 0:
			q, args = newest, []any{user, limit}
		case s.driver == DriverPostgres:
			tq := strings.Join(words, " | ")
			q = `SELECT * FROM ((SELECT ` + cols + `, 0 AS part, ts_rank(search, to_tsquery('simple', ?)) AS rank FROM notes
				WHERE user_key = ? AND search @@ to_tsquery('simple', ?) ORDER BY rank DESC, created_at DESC, id DESC LIMIT ?)
				UNION ALL (` + newest + `)) AS u ORDER BY part, rank DESC, created_at DESC, id DESC`
			args = []any{tq, user, tq, limit, user, limit}
		default:
			quoted := make([]string, len(words))
			for i, w := range words {
				quoted[i] = `"` + w + `"`
			}
			// bm25 is lower for better matches: its negation ranks as
			// ts_rank does.
			q = `SELECT * FROM (SELECT * FROM (SELECT n.id, n.user_key, n.text, n.author, n.conversation_id, n.message_seq, n.call_key, n.created_at,
				0 AS part, -bm25(notes_fts) AS rank FROM notes_fts JOIN notes AS n ON n.id = notes_fts.rowid
				WHERE notes_fts MATCH ? AND n.user_key = ? ORDER BY rank DESC, n.created_at DESC, n.id DESC LIMIT ?)
				UNION ALL SELECT * FROM (` + newest + `)) ORDER BY part, rank DESC, created_at DESC, id DESC`
			args = []any{strings.Join(quoted, " OR "), user, limit, user, limit}
		}
		var rows []struct {
			ledger.Note
			Part int
			Rank float64
		}
		if err := s.read.WithContext(ctx).Raw(q, args...).Scan(&rows).Error; err != nil {
			return nil, fmt.Errorf("read the notes of %s: %w", user, err)
		}
		out := make([]ledger.Note, 0, len(rows))
		seen := make(map[int64]bool, len(rows))
		for _, r := range rows {
			if !seen[r.ID] {
				seen[r.ID] = true
				out = append(out, r.Note)
			}
		}
		return out, nil
	})
}

// maxSearchWords bounds the words of a recall: a long message searches
// by its first ones.
const maxSearchWords = 32

// searchWords are the words of a query as both searches take them:
// letters and digits, lower-cased, at most maxSearchWords, each once.
// Nothing else of the query reaches the search's syntax.
func searchWords(query string) []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range strings.FieldsFunc(strings.ToLower(query), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if seen[w] {
			continue
		}
		seen[w] = true
		out = append(out, w)
		if len(out) == maxSearchWords {
			break
		}
	}
	return out
}

// ForgetNote deletes a user's note; false when the user has no such note
// (another user's id, or one forgotten already).
func (s *DB) ForgetNote(ctx context.Context, user string, id int64) (bool, error) {
	return observe(ctx, s, ledger.Call{Op: "ForgetNote"}, func() (bool, error) {
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
		n, err := s.moveRows(ctx, `DELETE FROM notes WHERE user_key = ?`, user)
		if err != nil {
			return 0, fmt.Errorf("forget the notes of %s: %w", user, err)
		}
		return n, nil
	})
}
