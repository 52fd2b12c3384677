// Package tools connects the gateway to MCP servers (the official Go SDK)
// and runs their tools for the model: it lists each server's tools at
// start and again when the server says its list changed, offers them as
// function tools named server__tool, and calls them with a timeout, a cap
// on the result's size and an idempotency key in the request's _meta.
//
// A Set holds one supervisor per server. Start returns at once; each
// supervisor opens a session in the background (a stdio server is
// started as a process, a streamable HTTP server is reached at its URL
// with the configured headers), lists the tools (every page, only those
// the allowlist names) and then waits: on list_changed it lists again,
// and when the session ends (the process exited, the connection broke)
// it opens a new one after a backoff that doubles from 0.5 s to 30 s and
// starts over once a session lasted a minute. Meanwhile the server offers
// no tools and its calls fail as not connected; its last listing still
// answers Rule, so a call stored before the restart keeps its rule.
//
// Call tells apart what the model should hear from what failed: a tool's
// error result, an error the server answered with and arguments that are
// not a JSON object are Results with IsError (the model can correct
// itself); an unknown tool, a server that is down, a timeout, a
// cancellation (the server is sent notifications/cancelled) or a broken
// transport are errors.
//
// Whether a call may run (approval), who is offered which servers (the
// policy ladder) and whether a call runs once (the turn ledger) are the
// session manager's and the gateway's: this package only runs what it is
// asked to. Offer narrows a Set to the servers a channel's user gets and
// is what the session manager consumes.
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
