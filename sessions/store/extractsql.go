package store

// The SQL of extractions (ledger.Extraction): the jobs that write an
// archived conversation's notes, each claimed by one statement and
// settled in the transaction that stores its notes.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// ExtractAtArchive makes every archive record the extraction of each
// conversation it archives, in the transaction that archives it, when
// user — given the conversation's channel and session key — names whose
// notes it writes ("" for none): an archive that commits has its
// extraction, whatever happens to the process after. The archives are
// Archive (a reset on arrival, /new, the CLI's ResetKey), the sweeps and
// Reopen. A recorded extraction whose user's memory is off by the time
// it is claimed is skipped.
func (s *DB) ExtractAtArchive(user func(channel, sessionKey string) string) { s.extractAt.Store(&user) }

// minExtractSeq is the fewest messages an archived conversation has for
// its extraction to be recorded: an extraction reads two user messages
// at least, so one message and its reply (or none) are passed over.
const minExtractSeq = 3

// recordExtractions inserts the extractions of the conversations tx
// archived, at, for those ExtractAtArchive's function names a user of.
func (s *DB) recordExtractions(tx *gorm.DB, archived []ledger.Archived, at time.Time) error {
	fn := s.extractAt.Load()
	if fn == nil {
		return nil
	}
	for _, a := range archived {
		user := (*fn)(a.Channel, a.SessionKey)
		if user == "" {
			continue
		}
		// A conversation extracted before (resumed, then archived again)
		// is extracted again, from where its last round read; one whose
		// extraction is still due reads the new messages with the rest,
		// and one whose round is running has its next round made due
		// when it settles (Again).
		if err := tx.Exec(`UPDATE memory_extractions SET again = ? WHERE conversation_id = ? AND state = ?`,
			true, a.ID, ledger.ExtractRunning).Error; err != nil {
			return err
		}
		if err := tx.Exec(`INSERT INTO memory_extractions (conversation_id, session_key, channel, user_key, state, owner, attempt, notes, error, created_at, round, after_seq, read_to)
			VALUES (?, ?, ?, ?, ?, '', 0, 0, '', ?, 0, 0, 0)
			ON CONFLICT (conversation_id) DO UPDATE SET state = excluded.state, owner = '', lease_until = NULL, attempt = 0, error = '',
				ended_at = NULL, round = memory_extractions.round + 1, after_seq = memory_extractions.read_to, user_key = excluded.user_key
			WHERE memory_extractions.state <> ? AND memory_extractions.state <> ?`,
			a.ID, a.SessionKey, a.Channel, user, ledger.ExtractDue, at.UTC(), ledger.ExtractDue, ledger.ExtractRunning).Error; err != nil {
			return err
		}
	}
	return nil
}

// recordExtraction is recordExtractions of one conversation tx archived,
// read by its id.
func (s *DB) recordExtraction(tx *gorm.DB, convID string, at time.Time) error {
	if s.extractAt.Load() == nil {
		return nil
	}
	a := ledger.Archived{ID: convID}
	if err := tx.Raw(`SELECT session_key, channel, last_seq FROM conversations WHERE id = ?`, convID).Row().Scan(&a.SessionKey, &a.Channel, &a.LastSeq); err != nil {
		return err
	}
	return s.recordExtractions(tx, worthExtracting([]ledger.Archived{a}), at)
}

// AddExtraction records the job of an archived conversation, due now;
// one already recorded (in any state) is left as it is.
func (s *DB) AddExtraction(ctx context.Context, e ledger.Extraction) error {
	_, err := observe(ctx, s, ledger.Call{Op: "AddExtraction"}, func() (struct{}, error) {
		e.State, e.Owner, e.Attempt, e.CreatedAt = ledger.ExtractDue, "", 0, e.CreatedAt.UTC()
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			return tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&e).Error
		})
		if err != nil {
			return struct{}{}, fmt.Errorf("record the extraction of %s: %w", e.ConversationID, err)
		}
		return struct{}{}, nil
	})
	return err
}

// ClaimExtraction claims the oldest extraction that is due (its pause
// over), or running under a claim that lapsed — its lease ran out, or its
// owner is none of alive — for owner until leaseUntil, and returns it
// with the attempt its claim made; nil when none is. One conditional
// statement, its condition checked again on the row it updates: on
// PostgreSQL a second claim that waited for the first one's row lock
// finds the row held, and takes nothing — two replicas never hold one.
func (s *DB) ClaimExtraction(ctx context.Context, owner string, alive []string, at, leaseUntil time.Time) (*ledger.Extraction, error) {
	return observe(ctx, s, ledger.Call{Op: "ClaimExtraction"}, func() (*ledger.Extraction, error) {
		at = at.UTC()
		var got []ledger.Extraction
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			got = got[:0]
			// On PostgreSQL the pick skips rows another claim holds
			// locked: workers claiming at once take different rows
			// instead of all but one finding theirs gone.
			skip := ""
			if s.driver == DriverPostgres {
				skip = " FOR UPDATE SKIP LOCKED"
			}
			return tx.Raw(`UPDATE memory_extractions SET state = ?, owner = ?, lease_until = ?, attempt = attempt + 1
				WHERE conversation_id = (SELECT conversation_id FROM memory_extractions
					WHERE (state = ? AND (lease_until IS NULL OR lease_until <= ?))
					   OR (state = ? AND (lease_until <= ? OR owner NOT IN ?))
					ORDER BY created_at LIMIT 1`+skip+`)
				AND ((state = ? AND (lease_until IS NULL OR lease_until <= ?)) OR (state = ? AND (lease_until <= ? OR owner NOT IN ?)))
				RETURNING *`,
				ledger.ExtractRunning, owner, leaseUntil.UTC(), ledger.ExtractDue, at, ledger.ExtractRunning, at, alive,
				ledger.ExtractDue, at, ledger.ExtractRunning, at, alive).Scan(&got).Error
		})
		if err != nil {
			return nil, fmt.Errorf("claim an extraction: %w", err)
		}
		if len(got) == 0 {
			return nil, nil
		}
		return &got[0], nil
	})
}

// ErrExtractionLost is SettleExtraction's answer when the claim it names
// no longer holds the row (another replica claimed it after the lease
// ran out): nothing is stored.
var ErrExtractionLost = errors.New("the extraction's claim was lost")

// SettleExtraction ends a claimed extraction in one transaction: the row
// settled (or put back due for a retry), its notes stored — each once,
// by its call key, within the user's limit — and its spend tallied. A
// settle whose commit landed and whose answer was lost, made again, finds
// the row settled by the same attempt and reports it done; a claim that
// no longer holds gets ErrExtractionLost.
func (s *DB) SettleExtraction(ctx context.Context, e ledger.ExtractionEnd) (stored int, err error) {
	return observe(ctx, s, ledger.Call{Op: "SettleExtraction"}, func() (int, error) {
		// The user's notes' count of writes moves once the commit is
		// done (landed or not), never before it: a turn reading the
		// version between would take notes without these for current.
		wrote := ""
		defer func() {
			if wrote != "" {
				notesWritten(wrote)
			}
		}()
		at := e.At.UTC()
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			stored = 0
			if e.RetryAt != nil {
				// (Due again, it reads what came after its start: the
				// messages of an archive made meanwhile with the rest.)
				res := tx.Exec(`UPDATE memory_extractions SET state = ?, owner = '', lease_until = ?, error = ?, again = false
					WHERE conversation_id = ? AND state = ? AND owner = ? AND attempt = ? AND round = ?`,
					ledger.ExtractDue, e.RetryAt.UTC(), e.Error, e.ConversationID, ledger.ExtractRunning, e.Owner, e.Attempt, e.Round)
				if res.Error != nil {
					return res.Error
				}
				if res.RowsAffected == 0 {
					return ErrExtractionLost
				}
				return nil
			}
			if s.driver == DriverPostgres && len(e.Notes) > 0 {
				// The notes' limit holds against the user's other writers
				// (addOwned takes the same lock).
				if err := tx.Exec("SELECT pg_advisory_xact_lock(hashtext(?))", "chatgate:notes:"+e.Notes[0].UserKey).Error; err != nil {
					return err
				}
			}
			var row []ledger.Extraction
			if err := tx.Where("conversation_id = ?", e.ConversationID).Limit(1).Find(&row).Error; err != nil {
				return err
			}
			switch {
			case len(row) == 0:
				return ErrExtractionLost
			case row[0].Round != e.Round:
				return ErrExtractionLost // another round's row now
			case row[0].State != ledger.ExtractRunning && row[0].Owner == e.Owner && row[0].Attempt == e.Attempt:
				stored = row[0].Notes // settled by this attempt: its answer was lost
				return nil
			case row[0].State != ledger.ExtractRunning || row[0].Owner != e.Owner || row[0].Attempt != e.Attempt:
				return ErrExtractionLost
			}
			if len(e.Notes) > 0 {
				user := e.Notes[0].UserKey
				wrote = user
				var n int64
				if err := tx.Model(&ledger.Note{}).Where("user_key = ?", user).Count(&n).Error; err != nil {
					return err
				}
				for _, note := range e.Notes {
					if e.Limit > 0 && n >= int64(e.Limit) {
						break
					}
					note.ID, note.CreatedAt, note.UserKey = 0, note.CreatedAt.UTC(), user
					res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&note)
					if res.Error != nil {
						return res.Error
					}
					if res.RowsAffected == 1 {
						stored++
						n++
					}
				}
			}
			if e.Usage != nil {
				if err := tallyOne(tx, e.Usage); err != nil {
					return err
				}
			}
			readTo := row[0].ReadTo
			if e.State == ledger.ExtractDone {
				readTo = max(readTo, e.ReadTo)
			}
			if row[0].Again {
				// Archived again while this round ran: the next round,
				// from what this one read, is due now.
				return tx.Exec(`UPDATE memory_extractions SET state = ?, owner = '', lease_until = NULL, attempt = 0, notes = ?, error = ?,
					ended_at = NULL, read_to = ?, after_seq = ?, round = round + 1, again = false WHERE conversation_id = ?`,
					ledger.ExtractDue, stored, e.Error, readTo, readTo, e.ConversationID).Error
			}
			return tx.Exec(`UPDATE memory_extractions SET state = ?, lease_until = NULL, notes = ?, error = ?, ended_at = ?, read_to = ?
				WHERE conversation_id = ?`, e.State, stored, e.Error, at, readTo, e.ConversationID).Error
		})
		if err != nil {
			return 0, fmt.Errorf("settle the extraction of %s: %w", e.ConversationID, err)
		}
		return stored, nil
	})
}

// Extraction returns the extraction of a conversation, or nil.
func (s *DB) Extraction(ctx context.Context, convID string) (*ledger.Extraction, error) {
	return observe(ctx, s, ledger.Call{Op: "Extraction"}, func() (*ledger.Extraction, error) {
		var out []ledger.Extraction
		if err := s.read.WithContext(ctx).Where("conversation_id = ?", convID).Limit(1).Find(&out).Error; err != nil {
			return nil, fmt.Errorf("load the extraction of %s: %w", convID, err)
		}
		if len(out) == 0 {
			return nil, nil
		}
		return &out[0], nil
	})
}
