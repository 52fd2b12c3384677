// Package ledger holds the records of the turn ledger and the rules that
// the domain (package sessions) and the SQL below it (package store) both
// need: conversations, their append-only messages and each user message's
// turn, the claims and batches that run turns, the appends that store
// them, and — once, in Go and in SQL (SettlesTurn, FinalReplySQL) — what
// settles a turn. It depends on nothing of chatgate's but the agent's
// message roles.
package ledger

import "time"

// Conversation statuses.
const (
	StatusActive   = "active"
	StatusArchived = "archived"
)

// RoleSummary is the role of a summary row: what compaction made of the
// messages before it (sessions.Manager.Compact).
const RoleSummary = "summary"

// Reset reasons.
const (
	ReasonManual = "manual"
	ReasonIdle   = "idle"
	ReasonDaily  = "daily"
)

// Message statuses.
const (
	MsgOK          = "ok"
	MsgFailed      = "failed"
	MsgInterrupted = "interrupted"
)

// Why a reply is interrupted; recovery runs shutdown-interrupted turns again,
// never ones the user stopped.
const (
	InterruptedByShutdown = "shutdown"
	InterruptedByUser     = "stopped"
	// InterruptedByMessage: busy mode interrupt cut the turn for a newer
	// message; one new turn answers both.
	InterruptedByMessage = "new message"
	// InterruptedByShutdownFinal: a shutdown cut the turn and the gateway
	// is configured not to run such turns again (the partial reply stands).
	InterruptedByShutdownFinal = "shutdown, not run again"
)

// Conversation is one conversation of a session key. At most one per key is
// active; resets archive it and never delete it.
type Conversation struct {
	ID         string `gorm:"primaryKey;size:36" json:"id"`
	SessionKey string `gorm:"size:255;not null;uniqueIndex:uq_conversations_active,where:status = 'active';index:ix_conversations_key" json:"session_key"`
	// Both sweeps read one partial index over active conversations,
	// ix_conversations_sweep_minute (channel, activity_minute, started_at),
	// built by the store's migration: archiving takes a row out of
	// it, so it stays as small as the active set. The idle sweep seeks it by
	// the minute of last activity; the daily sweep reads started_at from it
	// without touching the table (at its boundary nearly every active
	// conversation is due).
	Channel        string    `gorm:"size:32;not null" json:"channel"`
	Status         string    `gorm:"size:16;not null" json:"status"`
	StartedAt      time.Time `gorm:"not null" json:"started_at"`
	LastActivityAt time.Time `gorm:"not null" json:"last_activity_at"`
	// ArchivedAt has no index: a sweep would pay for one on every row it
	// archives, and only the hourly purge reads it (on a reader, by a walk
	// of the table).
	ArchivedAt  *time.Time `json:"archived_at,omitempty"`
	ResetReason string     `gorm:"size:16" json:"reset_reason,omitempty"`
	AgentName   string     `gorm:"size:64" json:"agent_name"`
	Model       string     `gorm:"size:128" json:"model"`
	TotalTokens int64      `gorm:"not null;default:0" json:"total_tokens"`
	Cost        float64    `gorm:"not null;default:0" json:"cost"`
	// LastSeq is the seq of the newest message. Every append checks it, so
	// two writers can never both append the same seq.
	LastSeq int64 `gorm:"not null;default:0" json:"last_seq"`
	// Epoch moves whenever a turn of the conversation is claimed by a
	// runner other than the one that stored it (the ledger's ClaimTurn).
	// Every append checks it too, so the runner a turn was taken from
	// cannot store its reply: its append finds the epoch moved.
	Epoch int64 `gorm:"not null;default:0" json:"-"`
	// Key history: archived conversations keep their session key, so that
	// `gateway sessions show KEY` lists them.
	UserID string `gorm:"size:128" json:"user_id,omitempty"`
	ChatID string `gorm:"size:128" json:"chat_id,omitempty"`
}

// Message is one append-only row of a conversation. Replaying rows by Seq
// reproduces the transcript exactly.
type Message struct {
	// The primary key is (conversation_id, seq): seq is unique per
	// conversation, and the row needs no other identity.
	// Secondary indexes are partial and only user messages enter them: by
	// client id, and while their turn is open (ix_messages_open); a
	// reply is found in the primary key's range after the message it
	// answers, so it enters no secondary index.
	ConversationID string  `gorm:"primaryKey;size:36;uniqueIndex:uq_messages_client,priority:1,where:client_msg_id IS NOT NULL"`
	Seq            int64   `gorm:"primaryKey;autoIncrement:false"`
	Role           string  `gorm:"size:16;not null"`
	Content        string  `gorm:"type:text;not null"`
	ToolCalls      string  `gorm:"type:text"` // JSON array of agent.ToolCall
	ToolCallID     string  `gorm:"size:128"`
	ClientMsgID    *string `gorm:"size:128;uniqueIndex:uq_messages_client,priority:2,where:client_msg_id IS NOT NULL"`
	ReplyTo        int64   `gorm:"not null"` // the user message's seq, for agent output
	Status         string  `gorm:"size:16;not null"`
	Error          string  `gorm:"type:text"`
	PromptTokens   int64   `gorm:"not null"`
	CompletionTkns int64   `gorm:"column:completion_tokens;not null"`
	Cost           float64 `gorm:"not null"`
	CreatedAt      time.Time

	// The turn of a user message (Turn); empty on other rows.
	TurnState   string `gorm:"size:16;not null;default:''"`
	TurnOwner   string `gorm:"size:64;not null;default:''"`
	TurnAttempt int    `gorm:"not null;default:0"`
	// TurnDue is set only while nobody owns the turn and someone may claim
	// it, so the index holds only those.
	TurnDue     *time.Time `gorm:"index:ix_messages_turn_due,where:turn_due IS NOT NULL"`
	TurnTrack   bool       `gorm:"not null;default:false"`
	DeliveryRef string     `gorm:"size:255;not null;default:''"`
	DeliveredAt *time.Time
	// TurnLead is the seq of the newest message of the burst this
	// message's turn answers (the reply's reply_to), once a claim put it
	// in one; 0 before. Every message of a burst names the same lead.
	TurnLead int64 `gorm:"not null;default:0"`
	// Attachments of a user message: a JSON array of agent.Attachment's
	// metadata (kind, file id or hash, mime type, size, file name), never
	// an image's bytes; "" when none.
	Attachments string `gorm:"type:text;not null;default:''"`
	// Quote is the text a user message replies to or quotes (a Telegram
	// reply or quote, a WebSocket reply_to), bounded; "" when none. The
	// model reads it before the message, marked as quoted (sessions'
	// withQuote), in this message's turn and in later turns' history.
	Quote string `gorm:"type:text;not null;default:''"`
}

// SessionLease makes one replica at a time the runner of a session key's
// turns when several gateways share a PostgreSQL database. A lease lasts
// while its replica heartbeats, so a replica that dies does not block a
// user for long. ExpiresAt is when it was taken.
type SessionLease struct {
	SessionKey string `gorm:"primaryKey;size:255"`
	// Holder is unique to one acquisition; Replica names the gateway.
	Holder    string    `gorm:"size:64;not null"`
	Replica   string    `gorm:"size:64;not null;default:''"`
	ExpiresAt time.Time `gorm:"not null"`
}

// ChannelState is a small key/value row a channel keeps through the store,
// such as Telegram's update offset.
type ChannelState struct {
	Key       string `gorm:"column:name;primaryKey;size:255"`
	Value     string `gorm:"type:text;not null"`
	UpdatedAt time.Time
}

// Replica is a gateway sharing the database, known by its heartbeat.
type Replica struct {
	ID          string    `gorm:"primaryKey;size:64"`
	StartedAt   time.Time `gorm:"not null"`
	HeartbeatAt time.Time `gorm:"not null"`
}

// Leader is a named role that one replica holds at a time (such as polling
// a Telegram bot's updates), with an expiry: the holder renews it well
// inside its ttl and resigns on shutdown, so a successor takes over at
// once after a clean stop and within ttl after a crash.
type Leader struct {
	Name      string    `gorm:"primaryKey;size:255"`
	Holder    string    `gorm:"size:64;not null"`
	ExpiresAt time.Time `gorm:"not null"`
}

// ModelChoice is the model a session key chose among agent.models
// (Telegram's /model, the WebSocket model frame), by its name. It belongs
// to the key, not to a conversation: resets keep it.
type ModelChoice struct {
	SessionKey string    `gorm:"primaryKey;size:255"`
	Name       string    `gorm:"size:64;not null"`
	UpdatedAt  time.Time `gorm:"not null"`
}
