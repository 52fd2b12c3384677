package sessions

import "github.com/chatgate/chatgate/sessions/ledger"

// The ledger's records and states, as the channels and commands know them
// (package ledger defines them).
type (
	// Conversation is one conversation of a session key.
	Conversation = ledger.Conversation
	// Message is one append-only row of a conversation.
	Message = ledger.Message
	// Turn is the ledger state of one user message's turn.
	Turn = ledger.Turn
	// TurnRef names a turn and, when set, the claim its holder delivers
	// under.
	TurnRef = ledger.TurnRef
	// ChannelState is a small key/value row a channel keeps.
	ChannelState = ledger.ChannelState
)

// Conversation statuses.
const (
	StatusActive   = ledger.StatusActive
	StatusArchived = ledger.StatusArchived
)

// Reset reasons.
const (
	ReasonManual = ledger.ReasonManual
	ReasonIdle   = ledger.ReasonIdle
	ReasonDaily  = ledger.ReasonDaily
)

// Message statuses, and why a reply was interrupted.
const (
	MsgOK                      = ledger.MsgOK
	MsgFailed                  = ledger.MsgFailed
	MsgInterrupted             = ledger.MsgInterrupted
	InterruptedByShutdown      = ledger.InterruptedByShutdown
	InterruptedByUser          = ledger.InterruptedByUser
	InterruptedByMessage       = ledger.InterruptedByMessage
	InterruptedByShutdownFinal = ledger.InterruptedByShutdownFinal
	// OverBudgetPrefix starts the error of a budget reply (Standing.overBudget's).
	OverBudgetPrefix = ledger.OverBudgetPrefix
)

// RoleSummary is the role of a summary row.
const RoleSummary = ledger.RoleSummary

// Turn states.
const (
	TurnPending     = ledger.TurnPending
	TurnRunning     = ledger.TurnRunning
	TurnInterrupted = ledger.TurnInterrupted
	TurnAnswered    = ledger.TurnAnswered
	TurnFailed      = ledger.TurnFailed
	TurnExpired     = ledger.TurnExpired
	TurnDelivered   = ledger.TurnDelivered
)
