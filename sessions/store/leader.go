package store

// What one replica at a time does: the leader row, written by the leaser
// on the lease pool, and Exclusive, a lock held by a transaction of the
// writer.

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// Lead takes or renews the role name for holder for ttl and reports whether
// holder has it. Time is the database's, so replicas' clocks need not
// agree. SQLite serves one gateway per file, which always leads.
func (s *DB) Lead(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if s.driver != DriverPostgres {
		return true, nil
	}
	return s.leases.lead(ctx, name, holder, ttl)
}

func (l *leaser) lead(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	res, err := l.pool.ExecContext(ctx, `INSERT INTO leaders (name, holder, expires_at)
		VALUES ($1, $2, now() + make_interval(secs => $3))
		ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
		WHERE leaders.expires_at < now() OR leaders.holder = EXCLUDED.holder`, name, holder, ttl.Seconds())
	if err != nil {
		return false, fmt.Errorf("lead %s: %w", name, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// Resign gives up the role if holder has it, so that another replica can
// take it at once.
func (s *DB) Resign(ctx context.Context, name, holder string) error {
	if s.driver != DriverPostgres {
		return nil
	}
	return s.leases.resign(ctx, name, holder)
}

func (l *leaser) resign(ctx context.Context, name, holder string) error {
	if _, err := l.pool.ExecContext(ctx, `DELETE FROM leaders WHERE name = $1 AND holder = $2`, name, holder); err != nil {
		return fmt.Errorf("resign %s: %w", name, err)
	}
	return nil
}

// Exclusive runs fn unless another process sharing the database is running
// the same name: on PostgreSQL it holds pg_try_advisory_xact_lock inside a
// transaction for fn's duration (the lock ends with the transaction, also
// when a replica dies); SQLite has one gateway per file and just runs fn.
// It reports whether fn ran. The lock is a transaction's of the writer,
// not a row of the leaser's: nothing outlives fn to be given back.
func (s *DB) Exclusive(ctx context.Context, name string, fn func() error) (bool, error) {
	if s.driver != DriverPostgres {
		return true, fn()
	}
	ran := false
	err := s.write.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var got bool
		// The schema's lock: deployments in other schemas of the same
		// database run their own.
		if err := tx.Raw("SELECT pg_try_advisory_xact_lock(hashtext('chatgate:' || coalesce(current_schema(), '') || ':' || ?))", name).Scan(&got).Error; err != nil {
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
