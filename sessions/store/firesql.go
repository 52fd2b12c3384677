package store

// The SQL of schedule fires (ledger.ScheduleFire): one row per schedule
// key and due time, taken by one conditional statement, so that of any
// number of replicas claiming the same fire exactly one gets it; every
// later move checks the state it comes from (and the claim, where it
// needs one).

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// fireTime is a due time as the fires' rows key it: UTC, to the
// microsecond, which both databases keep exactly (SQLite keeps the text
// of the time, so two spellings of one instant would be two keys).
func fireTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// claimFireSQL inserts a fire claimed, or takes one that is due or whose
// claim's lease ran out; a fire in any other state is left as it is and
// nothing is returned. One statement on both databases: PostgreSQL makes a
// second inserter of the same key wait for the first's commit and then
// finds the row, SQLite has one writer.
const claimFireSQL = `INSERT INTO schedule_fires
	(schedule_key, due_at, session_key, state, owner, attempt, lease_until, late_ms, created_at, claimed_at)
	VALUES (?, ?, ?, 'claimed', ?, 1, ?, ?, ?, ?)
	ON CONFLICT (schedule_key, due_at) DO UPDATE SET state = 'claimed', owner = excluded.owner,
		attempt = schedule_fires.attempt + 1, lease_until = excluded.lease_until, late_ms = excluded.late_ms,
		claimed_at = excluded.claimed_at,
		session_key = CASE WHEN schedule_fires.session_key = '' THEN excluded.session_key ELSE schedule_fires.session_key END
	WHERE schedule_fires.state = 'due' OR (schedule_fires.state = 'claimed' AND schedule_fires.lease_until <= ?)
	RETURNING attempt`

// ClaimFire takes the fire (c.ScheduleKey, c.DueAt) for c.Owner until
// c.LeaseUntil: a fire not stored yet, one planned due, or one whose
// earlier claim's lease ran out before its turn was stored. ok is false
// when the fire is someone else's (claimed under a live lease) or past
// claiming (its turn stored, or settled). The claim returned names the
// attempt, which the fire's later moves check.
func (s *DB) ClaimFire(ctx context.Context, c ledger.FireClaim) (held ledger.FireHeld, ok bool, err error) {
	type result struct {
		held ledger.FireHeld
		ok   bool
	}
	r, err := observe(ctx, s, ledger.Call{Op: "ClaimFire"}, func() (result, error) {
		due, at := fireTime(c.DueAt), c.At.UTC()
		late := max(at.Sub(due).Milliseconds(), 0)
		var attempts []int
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			attempts = attempts[:0]
			return tx.Raw(claimFireSQL, c.ScheduleKey, due, c.SessionKey, c.Owner, c.LeaseUntil.UTC(), late, at, at, at).
				Scan(&attempts).Error
		})
		if err != nil {
			return result{}, fmt.Errorf("claim fire %s at %s: %w", c.ScheduleKey, due.Format(time.RFC3339), err)
		}
		if len(attempts) == 0 {
			return result{}, nil
		}
		return result{ledger.FireHeld{ScheduleKey: c.ScheduleKey, DueAt: due, Owner: c.Owner, Attempt: attempts[0]}, true}, nil
	})
	return r.held, r.ok, err
}

// PlanFires writes fires due ahead of their time, each once: a fire
// written already, in any state, is left as it is. It returns how many it
// wrote.
func (s *DB) PlanFires(ctx context.Context, fires []ledger.ScheduleFire) (int64, error) {
	return observe(ctx, s, ledger.Call{Op: "PlanFires"}, func() (int64, error) {
		if len(fires) == 0 {
			return 0, nil
		}
		rows := make([]ledger.ScheduleFire, len(fires))
		for i, f := range fires {
			rows[i] = ledger.ScheduleFire{ScheduleKey: f.ScheduleKey, DueAt: fireTime(f.DueAt), SessionKey: f.SessionKey,
				State: ledger.FireDue, CreatedAt: f.CreatedAt.UTC()}
		}
		var n int64
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			n = 0
			for chunk := range slices.Chunk(rows, stmtRows) {
				res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&chunk)
				if res.Error != nil {
					return res.Error
				}
				n += res.RowsAffected
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("plan %d fires: %w", len(fires), err)
		}
		return n, nil
	})
}

// skipFireSQL records a fire skipped: a fire not written yet, or one
// planned due. A fire claimed, stored or settled is left as it is.
const skipFireSQL = `INSERT INTO schedule_fires (schedule_key, due_at, session_key, state, reason, created_at, ended_at)
	VALUES (?, ?, ?, 'skipped_late', ?, ?, ?)
	ON CONFLICT (schedule_key, due_at) DO UPDATE SET state = 'skipped_late', reason = excluded.reason, ended_at = excluded.ended_at,
		session_key = CASE WHEN schedule_fires.session_key = '' THEN excluded.session_key ELSE schedule_fires.session_key END
	WHERE schedule_fires.state = 'due'`

// SkipFires records the fires of key at the due times as skipped late,
// with the reason, in one transaction: those not written yet and those
// planned due; any other is left as it is (someone took it). It returns
// how many it recorded.
func (s *DB) SkipFires(ctx context.Context, key, sessionKey string, dues []time.Time, reason string, at time.Time) (int64, error) {
	return observe(ctx, s, ledger.Call{Op: "SkipFires"}, func() (int64, error) {
		var n int64
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			n = 0
			for _, due := range dues {
				res := tx.Exec(skipFireSQL, key, fireTime(due), sessionKey, reason, at.UTC(), at.UTC())
				if res.Error != nil {
					return res.Error
				}
				n += res.RowsAffected
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("skip %d fires of %s: %w", len(dues), key, err)
		}
		return n, nil
	})
}

// StoreFireTurn records that the claimed fire's turn is stored, as the
// seq's message of the conversation: from then on the turn ledger runs
// it, and the fire is claimed no more. It fails with ErrLostClaim when
// the claim h is not the fire's (its lease ran out and another runner
// took it).
func (s *DB) StoreFireTurn(ctx context.Context, h ledger.FireHeld, convID string, seq int64, at time.Time) error {
	return observe0(ctx, s, ledger.Call{Op: "StoreFireTurn", Conv: convID}, func() error {
		return s.fireMove(ctx, "store the turn of", h.ScheduleKey, h.DueAt, `UPDATE schedule_fires
			SET state = 'stored', conversation_id = ?, turn_seq = ?, stored_at = ?, lease_until = NULL
			WHERE schedule_key = ? AND due_at = ? AND state = 'claimed' AND owner = ? AND attempt = ?`,
			convID, seq, at.UTC(), h.ScheduleKey, fireTime(h.DueAt), h.Owner, h.Attempt)
	})
}

// SettleFire ends a fire (ledger.FireEnd): from claimed under the claim
// it names, or from stored. It fails with ErrLostClaim when the fire is
// not in that state (or not under that claim).
func (s *DB) SettleFire(ctx context.Context, e ledger.FireEnd) error {
	return observe0(ctx, s, ledger.Call{Op: "SettleFire"}, func() error {
		if !ledger.FireSettled(e.State) {
			return fmt.Errorf("settle fire %s: %q is not a final state", e.ScheduleKey, e.State)
		}
		set := `UPDATE schedule_fires SET state = ?, reason = ?, delivery_ref = ?, ended_at = ?, lease_until = NULL
			WHERE schedule_key = ? AND due_at = ? AND state = ?`
		args := []any{e.State, e.Reason, e.DeliveryRef, e.At.UTC(), e.ScheduleKey, fireTime(e.DueAt), e.From}
		switch e.From {
		case ledger.FireClaimed:
			set += ` AND owner = ? AND attempt = ?`
			args = append(args, e.Owner, e.Attempt)
		case ledger.FireStored, ledger.FireDue:
		default:
			return fmt.Errorf("settle fire %s: no fire is settled from %q", e.ScheduleKey, e.From)
		}
		return s.fireMove(ctx, "settle", e.ScheduleKey, e.DueAt, set, args...)
	})
}

func (s *DB) fireMove(ctx context.Context, what, key string, due time.Time, query string, args ...any) error {
	n, err := s.moveRows(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("%s fire %s at %s: %w", what, key, fireTime(due).Format(time.RFC3339), err)
	}
	if n == 0 {
		return fmt.Errorf("%s fire %s at %s: %w", what, key, fireTime(due).Format(time.RFC3339), ledger.ErrLostClaim)
	}
	return nil
}

// ClaimableFires returns up to limit fires anyone may claim at now,
// oldest first: planned fires that are due, and claimed ones whose lease
// ran out before their turn was stored. Each is found through a partial
// index that holds only fires in its state.
func (s *DB) ClaimableFires(ctx context.Context, now time.Time, limit int) ([]ledger.ScheduleFire, error) {
	return observe(ctx, s, ledger.Call{Op: "ClaimableFires"}, func() ([]ledger.ScheduleFire, error) {
		var due, lapsed []ledger.ScheduleFire
		db := s.read.WithContext(ctx)
		if err := db.Where("state = 'due' AND due_at <= ?", now.UTC()).Order("due_at, schedule_key").Limit(limit).Find(&due).Error; err != nil {
			return nil, fmt.Errorf("load due fires: %w", err)
		}
		if err := db.Where("state = 'claimed' AND lease_until <= ?", now.UTC()).Order("lease_until").Limit(limit).Find(&lapsed).Error; err != nil {
			return nil, fmt.Errorf("load fires whose claim lapsed: %w", err)
		}
		out := append(due, lapsed...)
		slices.SortFunc(out, func(a, b ledger.ScheduleFire) int {
			if c := a.DueAt.Compare(b.DueAt); c != 0 {
				return c
			}
			return cmp.Compare(a.ScheduleKey, b.ScheduleKey)
		})
		return out[:min(len(out), limit)], nil
	})
}

// StoredFires returns up to limit fires whose turn is stored and that
// are not settled yet, oldest first: the scheduler settles each from its
// turn once that turn has ended.
func (s *DB) StoredFires(ctx context.Context, limit int) ([]ledger.ScheduleFire, error) {
	return observe(ctx, s, ledger.Call{Op: "StoredFires"}, func() ([]ledger.ScheduleFire, error) {
		var out []ledger.ScheduleFire
		if err := s.read.WithContext(ctx).Where("state = 'stored'").Order("due_at, schedule_key").Limit(limit).Find(&out).Error; err != nil {
			return nil, fmt.Errorf("load stored fires: %w", err)
		}
		return out, nil
	})
}

// LatestFire is the latest due time key has a fire for, in any state;
// ok is false when it has none. A scheduler computes the fires due since
// from it.
func (s *DB) LatestFire(ctx context.Context, key string) (due time.Time, ok bool, err error) {
	type result struct {
		due time.Time
		ok  bool
	}
	r, err := observe(ctx, s, ledger.Call{Op: "LatestFire"}, func() (result, error) {
		var f ledger.ScheduleFire
		err := s.read.WithContext(ctx).Where("schedule_key = ?", key).Order("due_at DESC").Limit(1).Take(&f).Error
		if notFound(err) {
			return result{}, nil
		}
		if err != nil {
			return result{}, fmt.Errorf("load the latest fire of %s: %w", key, err)
		}
		return result{f.DueAt.UTC(), true}, nil
	})
	return r.due, r.ok, err
}

// Fire returns the fire (key, due), or nil.
func (s *DB) Fire(ctx context.Context, key string, due time.Time) (*ledger.ScheduleFire, error) {
	return observe(ctx, s, ledger.Call{Op: "Fire"}, func() (*ledger.ScheduleFire, error) {
		var f ledger.ScheduleFire
		err := s.read.WithContext(ctx).Where("schedule_key = ? AND due_at = ?", key, fireTime(due)).Take(&f).Error
		if notFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("load fire %s at %s: %w", key, fireTime(due).Format(time.RFC3339), err)
		}
		return &f, nil
	})
}

// Fires returns up to limit fires of key due before before (the zero
// time: any), newest first: a schedule's outcomes.
func (s *DB) Fires(ctx context.Context, key string, before time.Time, limit int) ([]ledger.ScheduleFire, error) {
	return observe(ctx, s, ledger.Call{Op: "Fires"}, func() ([]ledger.ScheduleFire, error) {
		q := s.read.WithContext(ctx).Where("schedule_key = ?", key)
		if !before.IsZero() {
			q = q.Where("due_at < ?", fireTime(before))
		}
		var out []ledger.ScheduleFire
		if err := q.Order("due_at DESC").Limit(limit).Find(&out).Error; err != nil {
			return nil, fmt.Errorf("load fires of %s: %w", key, err)
		}
		return out, nil
	})
}

// SessionFires returns up to limit fires whose turns go to a session,
// newest first.
func (s *DB) SessionFires(ctx context.Context, sessionKey string, limit int) ([]ledger.ScheduleFire, error) {
	return observe(ctx, s, ledger.Call{Op: "SessionFires"}, func() ([]ledger.ScheduleFire, error) {
		var out []ledger.ScheduleFire
		if err := s.read.WithContext(ctx).Where("session_key = ?", sessionKey).Order("due_at DESC, schedule_key").Limit(limit).Find(&out).Error; err != nil {
			return nil, fmt.Errorf("load fires of session %s: %w", sessionKey, err)
		}
		return out, nil
	})
}
