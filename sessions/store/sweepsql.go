package store

// The SQL of the reset sweeps (idle and daily archiving) and of purging
// what retention lets go.

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// SweepIdle archives the channel's active conversations idle since cutoff or
// longer. Set-based and idempotent: a repeated or concurrent run archives
// nothing twice. It passes each committed chunk of archived conversations
// to each and returns how many it archived.
func (s *DB) SweepIdle(ctx context.Context, channel string, cutoff, at time.Time, each func([]ledger.Archived)) (int, error) {
	// The minute's bound first: it is the index's column, and every
	// conversation idle since cutoff has its minute at or before cutoff.
	return s.sweep(ctx, ledger.ReasonIdle, at, each, idleWhere, channel, cutoff, cutoff)
}

// SweepDaily archives the channel's active conversations started before
// boundary. Idempotent like SweepIdle.
func (s *DB) SweepDaily(ctx context.Context, channel string, boundary, at time.Time, each func([]ledger.Archived)) (int, error) {
	return s.sweep(ctx, ledger.ReasonDaily, at, each, dailyWhere, channel, boundary)
}

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

// sweep archives the channel's conversations matching where (its
// arguments: the channel, then its bounds), s.chunk at a time, until
// a chunk comes back short.
// A conversation a chunk passes over because a turn changed it meanwhile
// is left to the next run, or to the check on the user's next message.
func (s *DB) sweep(ctx context.Context, reason string, at time.Time, each func([]ledger.Archived), where, channel string, bounds ...time.Time) (int, error) {
	query := sweepQuery(s.driver, where)
	// SQLite compares the stored times as text, which orders instants only
	// in one offset: every time is stored in UTC, and a daily boundary
	// comes in its policy's zone. On PostgreSQL activity_minute is a UTC
	// timestamp without a zone, which pgx sends as the time's wall clock.
	params := []any{ledger.StatusArchived, at.UTC(), reason, channel}
	for _, b := range bounds {
		params = append(params, b.UTC())
	}
	params = append(params, s.chunk)
	total := 0
	got := make([]ledger.Archived, 0, s.chunk)
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
				a := ledger.Archived{Channel: channel}
				if err := rows.Scan(&a.ID, &a.SessionKey, &a.LastSeq); err != nil {
					return err
				}
				got = append(got, a)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			rows.Close()
			return s.recordExtractions(tx, worthExtracting(got), at)
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

// worthExtracting are those of archived that hold enough messages for an
// extraction (minExtractSeq), in a slice of their own.
func worthExtracting(archived []ledger.Archived) []ledger.Archived {
	var out []ledger.Archived
	for _, a := range archived {
		if a.LastSeq >= minExtractSeq {
			out = append(out, a)
		}
	}
	return out
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
	ctx = maintenance(ctx)
	var n int64
	ids := make([]string, 0, s.chunk)
	for {
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("purge stopped after %d: %w", n, err)
		}
		ids = ids[:0]
		rows, err := s.read.WithContext(ctx).Raw(find, after, ledger.StatusArchived, archivedBefore, s.chunk).Rows()
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
			tx = tx.WithContext(maintenance(tx.Statement.Context))
			if err := tx.Where("conversation_id IN ?", ids).Delete(&ledger.ToolMedia{}).Error; err != nil {
				return err
			}
			if err := tx.Where("conversation_id IN ?", ids).Delete(&ledger.ToolCall{}).Error; err != nil {
				return err
			}
			// An extraction goes with its conversation; the notes it
			// wrote are the user's, kept until they are forgotten.
			if err := tx.Where("conversation_id IN ?", ids).Delete(&ledger.Extraction{}).Error; err != nil {
				return err
			}
			if err := tx.Where("conversation_id IN ?", ids).Delete(&ledger.Message{}).Error; err != nil {
				return err
			}
			res := tx.Where("id IN ? AND status = ?", ids, ledger.StatusArchived).Delete(&ledger.Conversation{})
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

// The idle sweep's index holds the minute of a conversation's last
// activity, not the time itself. Every turn updates its conversation's
// last_activity_at; on PostgreSQL an update that changes an indexed column
// writes a new entry into every index of the table and leaves the old row
// version for vacuum, while one that changes no indexed column is
// heap-only (HOT): the new version goes on the same page, no index is
// touched, and the page reclaims the old version itself. activity_minute
// is computed by the database from last_activity_at (a generated column,
// so no writer can let the two disagree), and it changes once a minute at
// most, so a user's turns within a minute update their conversation
// without touching an index.
//
// The sweep asks for activity_minute <= cutoff and last_activity_at <=
// cutoff: the minute is never later than the time, so every conversation
// idle since cutoff is in the index's range, and the range holds at most
// one minute more, which the second condition leaves out.
const sweepIndex = "ix_conversations_sweep_minute"

// migrateSweepIndex adds activity_minute and the sweep index over it.
// PostgreSQL stores the minute (a UTC timestamp without a zone: the
// expression must not depend on the session's time zone), so adding it
// rewrites the table once; SQLite computes it when it reads or indexes a
// row (the first 16 characters of the stored UTC text, "2006-01-02
// 15:04").
func migrateSweepIndex(tx *gorm.DB) error {
	if tx.Dialector.Name() == DriverPostgres {
		if err := tx.Exec(`ALTER TABLE conversations ADD COLUMN IF NOT EXISTS activity_minute timestamp
			GENERATED ALWAYS AS (date_trunc('minute', last_activity_at AT TIME ZONE 'UTC')) STORED`).Error; err != nil {
			return err
		}
	} else {
		var n int64
		if err := tx.Raw("SELECT count(*) FROM pragma_table_xinfo('conversations') WHERE name = 'activity_minute'").Scan(&n).Error; err != nil {
			return err
		}
		if n == 0 {
			if err := tx.Exec(`ALTER TABLE conversations ADD COLUMN activity_minute TEXT
				GENERATED ALWAYS AS (substr(last_activity_at, 1, 16)) VIRTUAL`).Error; err != nil {
				return err
			}
		}
	}
	return tx.Exec("CREATE INDEX IF NOT EXISTS " + sweepIndex +
		" ON conversations (channel, activity_minute, started_at) WHERE status = 'active'").Error
}
