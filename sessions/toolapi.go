package sessions

import (
	"context"
	"errors"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/tools"
)

// Toolbox is what a turn needs of the tools it offers (mcpclient.Offer
// implements it over MCP servers, narrowed by the policy ladder the
// gateway's wiring gives it).
type Toolbox interface {
	// Offered are the tools the model is offered for a turn of this
	// channel and user (none: the turn runs without tools).
	Offered(channel, userID string) []agent.Tool
	// Rule is how the tool of that name is run in a turn of this channel
	// and user; false when it is not one Offered gives them, or no server
	// offers it (any more): a model may name any tool, and only what the
	// policy offers runs. A server still starting (a gateway that just
	// started) is waited for, within ctx, until it listed its tools or
	// failed to start.
	Rule(ctx context.Context, channel, userID, name string) (tools.Rule, bool)
	// Call runs the tool. An error is a failed call (the server is down,
	// the call timed out or was cancelled); a tool's own error is a
	// Result with IsError. key is the call's idempotency key.
	Call(ctx context.Context, name, arguments, key string) (tools.Result, error)
}

// Tool call statuses, as channels show them (ToolEvent.Status) and the
// ledger stores them (ledger.ToolCall.State).
const (
	ToolAsking    = ledger.ToolAsking    // waiting for the user's decision
	ToolStarted   = ledger.ToolStarted   // running
	ToolDone      = ledger.ToolDone      // answered
	ToolFailed    = ledger.ToolFailed    // the tool reported an error, or the call failed or timed out
	ToolDenied    = ledger.ToolDenied    // the user (or the operator's rule, or the expiry) said no
	ToolCancelled = ledger.ToolCancelled // /stop or a newer message cut it
	ToolUnknown   = ledger.ToolUnknown   // the gateway stopped while it ran; whether it took effect is unknown
	// ToolExpired is what channels are told of an ask nobody answered in
	// time (stored as denied, decided by ledger.ToolExpiredBy).
	ToolExpired = "expired"
)

// ToolEvent is what a channel shows of one tool call.
type ToolEvent struct {
	ConversationID string
	Seq            int64  // the user message the turn answers
	ID             int64  // the call's ledger id: what a decision names
	CallID         string // the model's id of the call
	Name           string // server__tool
	Arguments      string // JSON, as the model wrote it (untrusted)
	Status         string // one of the Tool* statuses
	Duration       time.Duration
	// ExpiresAt is when an asking call counts as denied.
	ExpiresAt time.Time
}

// ToolAsk is a call waiting for a decision, for the channel to ask the
// user whose turn it is.
type ToolAsk struct {
	Channel    string
	SessionKey string
	UserID     string
	ChatID     string
	Call       ToolEvent
	// Ref is the channel's reference to an ask of this call an earlier
	// run of the turn sent (a turn run again after a restart asks
	// again): the channel takes that one back, so that only the new ask
	// can be answered. "" for a first ask.
	Ref string
	// Remote marks an ask (or its end) that a turn on another replica
	// made: the channel shows it to the user's clients connected here
	// only, and sends nothing the replica running the turn sends itself
	// (a Telegram message). Its ChatID is empty, its Ref too; the end of
	// a remote ask carries only the call's ID, Seq and Status.
	Remote bool
}

// ToolAsker asks a channel's user to allow or deny a call. It returns
// the channel's reference to what it sent (such as a Telegram message
// id), kept with the call, or an error (the ask is retried on the next
// run of the turn; meanwhile the call waits for its expiry).
type ToolAsker func(ctx context.Context, a ToolAsk) (ref string, err error)

// ToolDecision is a user's answer to an ask.
type ToolDecision struct {
	SessionKey string
	UserID     string // who decided: only the user whose turn it is may
	ID         int64  // ToolEvent.ID
	Allow      bool
}

// Errors of DecideTool.
var (
	ErrToolNotFound = errors.New("no such tool call")
	ErrToolNotYours = errors.New("only the user whose turn it is can decide this call")
	ErrToolDecided  = errors.New("this call was decided already")
	ErrToolExpired  = errors.New("this call's ask has expired")
)

// ToolDecisionErrors are the errors DecideTool refuses a decision with:
// a channel answers each in its own words (its tests walk this list), and
// any other error is a decision that could not be stored. A new refusal
// goes here with its declaration.
var ToolDecisionErrors = []error{ErrToolNotFound, ErrToolNotYours, ErrToolDecided, ErrToolExpired}
