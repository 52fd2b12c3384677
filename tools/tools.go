// Package tools connects the gateway to MCP servers (the official Go SDK)
// and runs their tools for the model: it lists each server's tools at
// start and again when the server says its list changed, offers them as
// function tools named server__tool, and calls them with a timeout, a cap
// on the result's size and an idempotency key in the request's _meta.
//
// Whether a call may run (approval) and whether it runs once (the turn
// ledger) are the session manager's: this package only runs what it is
// asked to.
package tools

import (
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
}
