package store

import (
	"context"
	"fmt"
	"time"
)

// Lead takes or renews the role name for holder for ttl and reports whether
// holder has it. Time is the database's, so replicas' clocks need not
// agree. SQLite serves one gateway per file, which always leads.
func (s *DB) Lead(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if s.driver != DriverPostgres {
		return true, nil
	}
	res, err := s.leases.ExecContext(ctx, `INSERT INTO leaders (name, holder, expires_at)
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
	if _, err := s.leases.ExecContext(ctx, `DELETE FROM leaders WHERE name = $1 AND holder = $2`, name, holder); err != nil {
		return fmt.Errorf("resign %s: %w", name, err)
	}
	return nil
}
