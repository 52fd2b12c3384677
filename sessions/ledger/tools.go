package ledger

import (
	"fmt"
	"time"
)

// Tool calls ride the turn ledger. A model's answer that asks for tools
// is stored first, as an assistant message with its calls; each call then
// gets a row here, and its life is a state machine whose every
// transition is conditional, as a turn's is:
//
//	new ──┬─ ask ─> asking ─┬─ allow ─> allowed ─┐
//	      │                 └─ deny/expire ──────┼─> denied
//	      ├─ (approve: deny) ────────────────────┘
//	      └─ (approve: auto) ─────────────────────> started(token) ─┬─> done | failed | cancelled
//	                                                               └─ (never answered) ─> unknown
//
// Starting a call needs the turn's claim (the lead's owner and attempt),
// checked in the statement that starts it, and takes a token of its own;
// only the holder of the token stores the call's result. A call found
// started without a result — its runner died, was stopped, or was taken
// over while it ran — is never started again blindly: only a tool marked
// idempotent starts again (a new token, runs counted); any other is
// settled unknown, and the model is told so. The result is kept here,
// whether or not the claim still holds, and stored as a tool message in
// the conversation by the claim's holder: a runner that takes the turn
// over finds the result of a call that finished and uses it.

// Tool call states.
const (
	ToolNew       = "new"
	ToolAsking    = "asking"
	ToolAllowed   = "allowed"
	ToolStarted   = "started"
	ToolDone      = "done"
	ToolFailed    = "failed"
	ToolDenied    = "denied"
	ToolCancelled = "cancelled"
	ToolUnknown   = "unknown"
)

// ToolExpiredBy is who decided an ask nobody answered in time.
const ToolExpiredBy = "expired"

// ToolSettled reports whether a call in state is over: its result is
// stored, and it never runs again.
func ToolSettled(state string) bool {
	switch state {
	case ToolDone, ToolFailed, ToolDenied, ToolCancelled, ToolUnknown:
		return true
	}
	return false
}

// ToolCall is one call of a tool a model asked for.
type ToolCall struct {
	ID int64 `gorm:"primaryKey;autoIncrement"`
	// The call's identity: the assistant message that asked for it, and
	// the model's id of the call in that message.
	ConversationID string `gorm:"size:36;not null;uniqueIndex:uq_tool_calls,priority:1"`
	MessageSeq     int64  `gorm:"not null;uniqueIndex:uq_tool_calls,priority:2"`
	CallID         string `gorm:"size:128;not null;uniqueIndex:uq_tool_calls,priority:3"`
	// TurnSeq is the lead of the turn that asked for it.
	TurnSeq int64 `gorm:"not null"`
	// The calls waiting for a decision are found by key (a channel asks
	// them again when its user comes back): only those enter the index.
	SessionKey string `gorm:"size:255;not null;default:'';index:ix_tool_calls_asking,where:state = 'asking'"`
	// UserID is the user whose turn it is: only they decide an ask.
	UserID    string `gorm:"size:128;not null;default:''"`
	Name      string `gorm:"size:255;not null"` // server__tool
	Arguments string `gorm:"type:text;not null;default:''"`
	State     string `gorm:"size:16;not null"`
	// The start: the claim it ran under, its token, and how often the
	// tool was started (more than once only for an idempotent tool).
	Owner   string `gorm:"size:64;not null;default:''"`
	Attempt int    `gorm:"not null;default:0"`
	Token   string `gorm:"size:64;not null;default:''"`
	Runs    int    `gorm:"not null;default:0"`
	// The ask: when it expires, the channel's reference to what it sent,
	// and who decided.
	ExpiresAt *time.Time
	AskRef    string `gorm:"size:255;not null;default:''"`
	DecidedBy string `gorm:"size:128;not null;default:''"`
	// The outcome: the text the model gets, and whether it is an error.
	Result    string `gorm:"type:text;not null;default:''"`
	IsError   bool   `gorm:"not null;default:false"`
	CreatedAt time.Time
	StartedAt *time.Time
	EndedAt   *time.Time
}

// IdempotencyKey is the key a call carries to its server, the same on
// every run of the call: conversation, the message that asked for it, and
// the model's call id.
func (c *ToolCall) IdempotencyKey() string {
	return fmt.Sprintf("%s/%d/%s", c.ConversationID, c.MessageSeq, c.CallID)
}

// TurnClaim is a turn's claim, as the start of a call checks it: the
// turn's lead, held by Owner under Attempt.
type TurnClaim struct {
	ConversationID string
	Lead           int64
	Owner          string
	Attempt        int
}

// ToolEnd is the outcome a call's runner stores.
type ToolEnd struct {
	ID      int64
	Token   string // the start's; "" settles a call nobody answers (From)
	From    string // the state the call must be in
	State   string // done, failed, denied, cancelled or unknown
	Result  string
	IsError bool
	At      time.Time
	// Media are the pictures and files the call returned, stored with
	// the outcome when it lands, each once (ToolMedia's key).
	Media []ToolMedia
}
