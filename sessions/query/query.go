// Package query is the port that the operator's tools read stored
// conversations through, beside the turn path: the admin API and page,
// and the command line's sessions, usage and readiness. It declares,
// split by role, what they ask of the database — listings, exports,
// usage reports, the purges and resets an operator asks for, a ping —
// and the filters and answers those calls carry. Package store
// implements every role on SQLite and PostgreSQL; this package, like
// package ledger whose records it carries, imports no driver.
package query

import (
	"context"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// Conversations lists and reads stored conversations, active and
// archived.
type Conversations interface {
	// ListConversations returns the conversations f selects, most
	// recently active first, paged by f.Limit and f.Offset.
	ListConversations(ctx context.Context, f ListFilter) ([]ledger.Conversation, error)
	// CountConversations counts the conversations f selects, ignoring
	// its Limit and Offset.
	CountConversations(ctx context.Context, f ListFilter) (int64, error)
	// Conversation is the conversation with an id; nil when there is none.
	Conversation(ctx context.Context, id string) (*ledger.Conversation, error)
	// ActiveConversation is a session key's active conversation; nil when
	// it has none.
	ActiveConversation(ctx context.Context, key string) (*ledger.Conversation, error)
}

// Exports reads one conversation whole: its messages, their turns and
// their tool calls.
type Exports interface {
	// ExportConversation reads a conversation and its messages; nil when
	// there is no conversation with that id.
	ExportConversation(ctx context.Context, id string) (*Export, error)
}

// MediaFiles are the pictures, audio and files tools returned, by id,
// with their bytes (the admin API's download); nil when there is none.
type MediaFiles interface {
	ToolMedia(ctx context.Context, id string) (*ledger.ToolMedia, error)
}

// UsageReports sums the usage tallies (ledger.UsageDay).
type UsageReports interface {
	// UsageReport sums the tallies f selects, by its groups, ordered by
	// f.Sort then by the groups, and paged by f.Limit and f.Offset.
	UsageReport(ctx context.Context, f UsageFilter) ([]UsageRow, error)
	// UsageSummary counts the rows UsageReport has for f (Sort, Limit
	// and Offset aside) and sums them.
	UsageSummary(ctx context.Context, f UsageFilter) (UsageSummary, error)
}

// Purges deletes archived conversations and their messages, as the
// retention purge does. An active conversation is never deleted.
type Purges interface {
	// PurgeConversation deletes one archived conversation; false when
	// there is no archived conversation with that id.
	PurgeConversation(ctx context.Context, id string) (bool, error)
	// Purge deletes the conversations archived before archivedBefore and
	// reports how many.
	Purge(ctx context.Context, archivedBefore time.Time) (int64, error)
}

// Resets archives a session key's active conversation from outside a
// running gateway (the command line): a gateway that has the
// conversation in memory notices on its next append.
type Resets interface {
	// ResetKey archives key's active conversation (reason manual) and
	// returns it; nil when the key has none.
	ResetKey(ctx context.Context, key string, at time.Time) (*ledger.Conversation, error)
}

// Pinger tells whether the database answers, for readiness.
type Pinger interface {
	Ping(ctx context.Context) error
}

// ListFilter selects conversations for Conversations.ListConversations
// and CountConversations. Empty fields select everything.
type ListFilter struct {
	SessionKey  string // exact key
	KeyContains string // part of the key (case-sensitive)
	Channel     string // websocket, telegram, …
	UserID      string // the channel's user id
	Status      string // active | archived
	Limit       int    // 0: 100
	Offset      int    // skip that many of the matches
}
