package sessions

import (
	"context"
	"time"
)

// Roles is what an Elector needs of storage: a role is a row with a
// holder and an expiry, taken or renewed by one conditional statement
// (store.DB implements it).
type Roles interface {
	Lead(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	Resign(ctx context.Context, name, holder string) error
}

// Elector hands out roles that one replica at a time holds, such as
// polling one Telegram bot's updates (Telegram allows one getUpdates
// consumer per token). A holder renews its role well inside its expiry,
// and gives it up when it stops so that a successor starts at once; a
// holder that dies loses it when it expires. On SQLite the role is
// always this replica's. It is built in the gateway's wiring and given to
// the channels that need a role.
type Elector struct {
	roles   Roles
	replica string
}

// NewElector returns the Elector of replica (the session manager's
// ReplicaID) over roles.
func NewElector(roles Roles, replica string) *Elector {
	return &Elector{roles: roles, replica: replica}
}

// Lead takes or renews the role name for this replica for ttl, and
// reports whether this replica has it.
func (e *Elector) Lead(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	return e.roles.Lead(ctx, name, e.replica, ttl)
}

// Resign gives up the role name if this replica has it, so that another
// replica can take it at once.
func (e *Elector) Resign(ctx context.Context, name string) error {
	return e.roles.Resign(ctx, name, e.replica)
}
