// Package tools is what a turn needs to know of tools, whoever runs
// them: how a call is run (Rule: its approval, whether it may run again,
// its timeout), what it gave the model (Result), and the names and keys
// shared with the servers (Separator, MetaKey). It imports no SDK: the
// session manager consumes tools through its own Toolbox port, and the
// MCP client that implements it is package mcpclient, which only the
// gateway's wiring imports.
package tools

import (
	"context"
	"time"
)

// Approve is what a call to a tool needs before it runs.
type Approve string

// Approval modes.
const (
	ApproveAuto Approve = "auto" // runs at once
	ApproveAsk  Approve = "ask"  // the user whose turn it is allows or denies it
	ApproveDeny Approve = "deny" // never runs; the model is told so
)

// Separator joins a server's name and its tool's in the name the model sees.
const Separator = "__"

// MetaKey is the key of the idempotency key in a call's _meta.
const MetaKey = "chatgate/idempotency-key"

// Rule is how one tool is run.
type Rule struct {
	Server     string
	Tool       string
	Approve    Approve
	Idempotent bool          // a call started but never answered may run again
	Timeout    time.Duration // per call
}

// Result is what a call gave the model.
type Result struct {
	// Text is the result as the model gets it: the tool's text content
	// (other content described), cut to the server's cap with a note.
	Text string
	// IsError: the tool reported an error, or the call failed.
	IsError bool
	// Cut: the result was longer than the cap.
	Cut bool
	// Media are the pictures, audio clips and files the tool returned,
	// in the order it returned them; Text describes each in a line of its
	// own. They are the tool's (untrusted) bytes, kept with the turn and
	// delivered with its reply within the gateway's limits.
	Media []Media
}

// Media kinds of a tool's result.
const (
	MediaImage = "image"
	MediaAudio = "audio"
	MediaFile  = "file"
)

// Media is one picture, audio clip or file a tool returned.
type Media struct {
	Kind string // MediaImage, MediaAudio or MediaFile
	Mime string // as the tool said it; "" when it did not
	// Name is the file's name when the tool gave one (an embedded
	// resource's URI's last element), else "".
	Name string
	Data []byte
}

// Caller is whom a call runs for: the turn's session (its key and
// channel) and user, as the gateway knows them — never as the model says.
// The session manager puts it in the call's context (WithCaller); the
// MCP client passes it in the request's _meta (MetaSessionKey, ...) only
// to the gateway's own in-process servers, which act for that session and
// trust nothing else to name it. Servers outside the process never get
// it: a session key is the user's identity.
type Caller struct {
	SessionKey string
	Channel    string
	UserID     string
	// Scheduled: the turn is a fire's — the bot acting on its own time,
	// with nobody asking.
	Scheduled bool
	// The turn's conversation and its lead message: where what a call
	// writes came from (a note's provenance).
	ConversationID string
	MessageSeq     int64
}

// The keys of the caller in a call's _meta.
const (
	MetaSessionKey = "chatgate/session-key"
	MetaChannel    = "chatgate/channel"
	MetaUserID     = "chatgate/user-id"
	MetaScheduled  = "chatgate/scheduled"
	MetaConv       = "chatgate/conversation"
	MetaSeq        = "chatgate/message-seq"
)

type callerKey struct{}

// WithCaller returns ctx carrying the caller of the calls made under it.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerOf is the caller ctx carries; false when none.
func CallerOf(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}
