package store

// Replicas in the ledger: heartbeats, who is alive and who is gone,
// and forgetting a gone replica once its turns are taken over.

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// Heartbeat records that replica is alive. On PostgreSQL the time is the
// database's, so replicas' clocks need not agree.
func (s *DB) Heartbeat(ctx context.Context, replica string, started time.Time) error {
	return observe0(ctx, s, ledger.Call{Op: "Heartbeat", Conv: ""}, func() error {
		var err error
		if s.driver == DriverPostgres {
			err = s.leases.heartbeat(ctx, replica, started)
		} else {
			err = s.commit.do(ctx, func(tx *gorm.DB) error {
				return tx.Exec(`INSERT INTO replicas (id, started_at, heartbeat_at) VALUES (?, ?, ?)
				ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at`, replica, started, time.Now().UTC()).Error
			})
		}
		if err != nil {
			return fmt.Errorf("heartbeat: %w", err)
		}
		return nil
	})
}

// Replicas returns the replicas other than self that are gone — no
// heartbeat for ttl — and the ids of those alive. SQLite serves one
// gateway per file: every other replica there is a process that ended.
func (s *DB) Replicas(ctx context.Context, self string, ttl time.Duration) ([]ledger.Replica, []string, error) {
	type seen struct {
		gone  []ledger.Replica
		alive []string
	}
	r, err := observe(ctx, s, ledger.Call{Op: "Replicas"}, func() (seen, error) {
		gone, alive, err := s.replicas(ctx, self, ttl)
		return seen{gone, alive}, err
	})
	return r.gone, r.alive, err
}

func (s *DB) replicas(ctx context.Context, self string, ttl time.Duration) (gone []ledger.Replica, alive []string, err error) {
	var all []ledger.Replica
	var fresh []bool
	q := "SELECT id, started_at, heartbeat_at, id = ? FROM replicas"
	args := []any{self}
	if s.driver == DriverPostgres {
		q = "SELECT id, started_at, heartbeat_at, heartbeat_at >= now() - make_interval(secs => ?) FROM replicas"
		args = []any{ttl.Seconds()}
	}
	rows, err := s.read.WithContext(ctx).Raw(q, args...).Rows()
	if err != nil {
		return nil, nil, fmt.Errorf("read replicas: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r ledger.Replica
		var ok bool
		if err := rows.Scan(&r.ID, &r.StartedAt, &r.HeartbeatAt, &ok); err != nil {
			return nil, nil, fmt.Errorf("read replicas: %w", err)
		}
		all, fresh = append(all, r), append(fresh, ok)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read replicas: %w", err)
	}
	alive = []string{self}
	for i, r := range all {
		switch {
		case r.ID == self:
		case fresh[i]:
			alive = append(alive, r.ID)
		default:
			gone = append(gone, r)
		}
	}
	return gone, alive, nil
}

// Retire marks replica gone at once (its heartbeat as if long stopped):
// a replica that stopped cleanly holds nothing, and whatever it could not
// settle is taken over by the others without waiting for the lease.
func (s *DB) Retire(ctx context.Context, replica string) error {
	return observe0(ctx, s, ledger.Call{Op: "Retire", Conv: ""}, func() error {
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			return tx.Exec("UPDATE replicas SET heartbeat_at = ? WHERE id = ?", time.Unix(0, 0).UTC(), replica).Error
		})
		if err != nil {
			return fmt.Errorf("retire replica %s: %w", replica, err)
		}
		if s.leases != nil {
			s.leases.retire(replica)
		}
		return nil
	})
}

// ForgetReplica removes a gone replica's row once its turns were taken
// over; a replica that was only cut off writes its row again.
func (s *DB) ForgetReplica(ctx context.Context, id string, heartbeat time.Time) error {
	return observe0(ctx, s, ledger.Call{Op: "ForgetReplica", Conv: ""}, func() error {
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			return tx.Exec("DELETE FROM replicas WHERE id = ? AND heartbeat_at <= ?", id, heartbeat).Error
		})
		if err != nil {
			return fmt.Errorf("forget replica %s: %w", id, err)
		}
		return nil
	})
}
