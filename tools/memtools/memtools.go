// Package memtools is the gateway's own MCP server of memory tools
// (remember, recall, forget), served in the process over the SDK's
// in-memory transport (inproc), as remindtools is. The gateway's MCP client calls
// it as any other server, so its calls go through the same tool ledger,
// approval, metrics and tool frames.
//
// Whose notes a call reads and writes is the turn's user, which the
// gateway's client puts in the request's _meta (tools.MetaSessionKey,
// tools.MetaUserID, ...; mcpclient.ServerConfig.Caller): the model writes
// only the arguments, which name no user, so it can neither read nor
// write another user's notes. In a group chat its members share, the
// user is the turn's sender (sessions.MemoryUser). A call without that
// _meta is refused.
//
// Remember is keyed by the call's idempotency key (tools.MetaKey): run
// again after a crash cut it, it finds the note it wrote rather than
// writing a second.
package memtools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chatgate/chatgate/tools/inproc"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/tools"
)

// ServerName is the server's name: its tools are offered to the model as
// memory__remember, memory__recall and memory__forget.
const ServerName = sessions.MemoryToolServer

// Backend is what the tools act on (sessions.Memory).
type Backend interface {
	Remember(ctx context.Context, req sessions.NoteRequest) (ledger.Note, error)
	Recall(ctx context.Context, user, query string, limit int) ([]ledger.Note, error)
	List(ctx context.Context, user string) ([]ledger.Note, error)
	Forget(ctx context.Context, user string, id int64) error
}

// RememberInput is the arguments of remember.
type RememberInput struct {
	Text string `json:"text" jsonschema:"one short fact about the user worth keeping across conversations, in the third person, such as: The user's name is Ann; she prefers short answers"`
}

// RecallInput is the arguments of recall.
type RecallInput struct {
	Query string `json:"query,omitempty" jsonschema:"words to search the user's notes for; empty: the newest notes"`
}

// ForgetInput is the arguments of forget.
type ForgetInput struct {
	ID int64 `json:"id" jsonschema:"the note's number, as recall shows it"`
}

// recallLimit bounds the notes one recall returns.
const recallLimit = 20

// NewServer returns the MCP server of the memory tools over b (nil until
// the session manager is built: a call then fails).
func NewServer(b func() Backend) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "chatgate-memory", Version: "1"}, nil)
	h := handlers{backend: b}
	mcp.AddTool(s, &mcp.Tool{Name: "remember", Description: "Keep a note about the user across conversations (they are reset from time to time; " +
		"notes stay): their name, projects, preferences, what they asked you never to do again. One fact per note, about this user only. " +
		"The user can see and delete every note."}, h.remember)
	mcp.AddTool(s, &mcp.Tool{Name: "recall", Description: "Search the notes kept about the user: number, day written, who wrote it, and text. " +
		"The notes most relevant to each message are given to you already; search for others."}, h.recall)
	mcp.AddTool(s, &mcp.Tool{Name: "forget", Description: "Delete one note about the user by its number (see recall), when it is wrong, " +
		"out of date, or the user asks."}, h.forget)
	return s
}

type handlers struct {
	backend func() Backend
}

// call is whom the call acts for, from the request's _meta that the
// gateway's client wrote.
type call struct {
	b       Backend
	caller  tools.Caller
	user    string
	callKey string
}

func (h handlers) caller(req *mcp.CallToolRequest) (call, error) {
	var c call
	meta := req.Params.GetMeta()
	c.caller.SessionKey, _ = meta[tools.MetaSessionKey].(string)
	c.caller.Channel, _ = meta[tools.MetaChannel].(string)
	c.caller.UserID, _ = meta[tools.MetaUserID].(string)
	c.caller.Scheduled, _ = meta[tools.MetaScheduled].(bool)
	c.caller.ConversationID, _ = meta[tools.MetaConv].(string)
	switch seq := meta[tools.MetaSeq].(type) { // a JSON number, decoded as float64 when it crossed a transport
	case float64:
		c.caller.MessageSeq = int64(seq)
	case int64:
		c.caller.MessageSeq = seq
	}
	c.callKey, _ = meta[tools.MetaKey].(string)
	if c.caller.SessionKey == "" || c.caller.Channel == "" {
		return c, errors.New("memory can only be used from a chat turn")
	}
	if c.user = sessions.MemoryUser(c.caller.SessionKey, c.caller.UserID); c.user == "" {
		return c, errors.New("this turn's user is not known: no notes can be kept for them")
	}
	if h.backend != nil {
		c.b = h.backend()
	}
	if c.b == nil {
		return c, errors.New("memory is not ready yet")
	}
	return c, nil
}

func (h handlers) remember(ctx context.Context, req *mcp.CallToolRequest, in RememberInput) (*mcp.CallToolResult, any, error) {
	c, err := h.caller(req)
	if err != nil {
		return nil, nil, err
	}
	if c.caller.Scheduled {
		// A fire's turn has no user speaking: nothing in it is the user's
		// to keep, and nobody watches what it writes.
		return nil, nil, errors.New("a scheduled turn cannot write notes: only a turn the user started can")
	}
	n, err := c.b.Remember(ctx, sessions.NoteRequest{Channel: c.caller.Channel, User: c.user, Text: in.Text, Author: ledger.NoteByModel,
		ConversationID: c.caller.ConversationID, MessageSeq: c.caller.MessageSeq, CallKey: c.callKey})
	if err != nil {
		return nil, nil, userError(err)
	}
	return text("Noted (note %d).", n.ID), nil, nil
}

func (h handlers) recall(ctx context.Context, req *mcp.CallToolRequest, in RecallInput) (*mcp.CallToolResult, any, error) {
	c, err := h.caller(req)
	if err != nil {
		return nil, nil, err
	}
	var notes []ledger.Note
	if strings.TrimSpace(in.Query) == "" {
		notes, err = c.b.List(ctx, c.user)
		if len(notes) > recallLimit {
			notes = notes[:recallLimit]
		}
	} else {
		notes, err = c.b.Recall(ctx, c.user, in.Query, recallLimit)
	}
	if err != nil {
		return nil, nil, userError(err)
	}
	if len(notes) == 0 {
		return text("No note found."), nil, nil
	}
	var sb strings.Builder
	for _, n := range notes {
		fmt.Fprintf(&sb, "%d. (%s, by %s) %s\n", n.ID, n.CreatedAt.UTC().Format(time.DateOnly), n.Author, n.Text)
	}
	return text("%s", strings.TrimSpace(sb.String())), nil, nil
}

func (h handlers) forget(ctx context.Context, req *mcp.CallToolRequest, in ForgetInput) (*mcp.CallToolResult, any, error) {
	c, err := h.caller(req)
	if err != nil {
		return nil, nil, err
	}
	if c.caller.Scheduled {
		return nil, nil, errors.New("a scheduled turn cannot forget notes: only a turn the user started can")
	}
	if err := c.b.Forget(ctx, c.user, in.ID); err != nil {
		return nil, nil, userError(err)
	}
	return text("Note %d is forgotten.", in.ID), nil, nil
}

// userError is what the model is told of a refusal: the reason, not the
// internals of a storage failure.
func userError(err error) error {
	for _, known := range []error{sessions.ErrMemoryOff, sessions.ErrBadNote, sessions.ErrTooManyNotes, sessions.ErrNoSuchNote, sessions.ErrNoMemoryOwner} {
		if errors.Is(err, known) {
			return err
		}
	}
	return errors.New("the notes could not be reached; try again later")
}

var text = inproc.Text
