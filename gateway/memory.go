package gateway

// The memory frames (docs/protocol.md, "Memory"): the notes the bot keeps
// about the user across conversations (sessions.Memory).
//
// {"type":"memory"} is answered with a memory frame listing the user's
// notes, newest first. {"type":"remember","text":"…"} keeps a note the
// user wrote; {"type":"forget","id":12} deletes one, and
// {"type":"forget","all":true} every one. Each change is answered with
// the memory frame as it is after it, sent to every connection of the
// session, as a reminder_cancel is. The user is always the connection's
// own (sessions.MemoryUser of its session key and principal), never one a
// frame names: an id that is not one of the user's notes gets not_found,
// whether or not another user has it. All run on the connection's
// worker, in order.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"

	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// Memory is the door of the memory frames (sessions.Memory).
type Memory interface {
	Enabled(channel, user string) bool
	List(ctx context.Context, user string) ([]ledger.Note, error)
	Remember(ctx context.Context, req sessions.NoteRequest) (ledger.Note, error)
	Forget(ctx context.Context, user string, id int64) error
	ForgetAll(ctx context.Context, user string) (int64, error)
}

var (
	errNoMemory     = &wsError{"unsupported", "this gateway keeps no notes"}
	errMemoryOff    = &wsError{"unsupported", "memory is not enabled here: no note is kept (those kept already can still be listed and forgotten)"}
	errTooManyNotes = &wsError{"limit_reached", "too many notes are kept; forget one first"}
)

// noteInfo is a note as frames show it.
type noteInfo struct {
	ID   int64  `json:"id"`
	Text string `json:"text"`
	// Author is who wrote it: model, user, operator or reset.
	Author    string `json:"author"`
	CreatedAt string `json:"created_at"`
	// ConversationID is the conversation it came from; absent when none
	// (the operator's).
	ConversationID string `json:"conversation_id,omitempty"`
}

// memoryFrame is the user's notes.
type memoryFrame struct {
	Type string `json:"type"`
	// Enabled tells whether notes are kept here (session.memory.enabled):
	// without it remember is refused, and the bot neither writes nor
	// reads notes; those kept are listed, and may be forgotten, either way.
	Enabled bool       `json:"enabled"`
	Notes   []noteInfo `json:"notes"`
}

func newMemoryFrame(enabled bool, list []ledger.Note) memoryFrame {
	f := memoryFrame{Type: "memory", Enabled: enabled, Notes: make([]noteInfo, 0, len(list))}
	for _, n := range list {
		f.Notes = append(f.Notes, noteInfo{ID: n.ID, Text: n.Text, Author: n.Author, CreatedAt: rfc3339(n.CreatedAt),
			ConversationID: n.ConversationID})
	}
	return f
}

// memoryFrameIn is a memory, remember or forget frame: forget's id is a
// number, where most frames' is a string, so all three are decoded apart
// (decodeMemoryFrame), each with its fields only.
type memoryFrameIn struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
	// ID is forget's note (a number), or remember's own id (a string):
	// a remember sent again with the same id keeps one note.
	ID  json.RawMessage `json:"id,omitempty"`
	All *bool           `json:"all,omitempty"`
}

// isMemoryFrame reports whether a frame's type is one of the memory
// frames.
func isMemoryFrame(typ string) bool { return typ == "memory" || typ == "remember" || typ == "forget" }

// decodeMemoryFrame decodes a memory, remember or forget frame; ok is
// false when data is none of them.
func decodeMemoryFrame(data []byte) (f *clientFrame, werr *wsError, ok bool) {
	var probe struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &probe) != nil || !isMemoryFrame(probe.Type) {
		return nil, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d memoryFrameIn
	if err := dec.Decode(&d); err != nil {
		return nil, errBadFrame.with("%s is not valid: %v", probe.Type, err), true
	}
	if dec.More() {
		return nil, errBadFrame.with("one JSON object per frame"), true
	}
	if string(d.ID) == "null" {
		d.ID = nil // as if absent, as for the other fields
	}
	out := &clientFrame{Type: d.Type}
	switch d.Type {
	case "memory":
		if d.Text != nil || d.ID != nil || d.All != nil {
			return nil, errBadFrame.with("memory asks for the notes: it has no text, id or all"), true
		}
	case "remember":
		if d.Text == nil || d.All != nil {
			return nil, errBadFrame.with("remember needs the note's text (text), an id of the client's (a string) if any, and nothing else"), true
		}
		out.Text = d.Text
		if d.ID != nil {
			if json.Unmarshal(d.ID, &out.ID) != nil || out.ID == "" {
				return nil, errBadFrame.with("remember's id is the client's own: a string, not empty"), true
			}
			if len(out.ID) > maxClientMsgID {
				return nil, errBadFrame.with("remember's id is over %d bytes", maxClientMsgID), true
			}
		}
	case "forget":
		var id *int64
		if d.ID != nil {
			id = new(int64)
			if json.Unmarshal(d.ID, id) != nil {
				return nil, errBadFrame.with("forget id is a note's id: a number"), true
			}
		}
		switch {
		case d.Text != nil:
			return nil, errBadFrame.with("forget names a note by its id (a number), or all: true"), true
		case id != nil && d.All != nil:
			return nil, errBadFrame.with("forget takes an id or all, not both"), true
		case id != nil && *id <= 0:
			return nil, errBadFrame.with("forget id must be a positive number"), true
		case id != nil:
			out.NoteID = *id
		case d.All != nil && *d.All:
			out.AllNotes = true
		default:
			return nil, errBadFrame.with("forget needs the id of a note (id, a number), or all: true"), true
		}
	}
	return out, nil, true
}

// memory runs a memory, remember or forget frame.
func (c *wsConn) memory(ctx context.Context, f *clientFrame) {
	defer c.finish()
	mem := c.ws.sess.Memory
	if mem == nil {
		c.sendError(errNoMemory)
		return
	}
	user := sessions.MemoryUser(c.key, c.principal)
	if user == "" {
		c.sendError(errNoMemory.with("memory needs the user it belongs to"))
		return
	}
	if f.Type == "memory" {
		frame, werr := c.memoryFrame(ctx, mem, user)
		if werr != nil {
			c.sendError(werr)
			return
		}
		c.enqueue(frame)
		return
	}
	if werr := c.changeMemory(ctx, mem, user, f); werr != nil {
		c.sendError(werr)
		return
	}
	frame, werr := c.memoryFrame(ctx, mem, user)
	if werr != nil {
		c.sendError(werr)
		return
	}
	// The session's connections are the user's: a WebSocket session key
	// is its principal's, topics aside (sessions.MemoryUser).
	for _, other := range c.ws.connsOf(c.key) {
		if other != c {
			other.enqueue(frame)
		}
	}
	c.enqueue(frame)
}

// changeMemory keeps a remember frame's note, or forgets what a forget
// frame names, for user.
func (c *wsConn) changeMemory(ctx context.Context, mem Memory, user string, f *clientFrame) *wsError {
	switch {
	case f.Type == "remember":
		conv, _ := c.position()
		_, err := mem.Remember(ctx, sessions.NoteRequest{Channel: Channel, User: user, Text: *f.Text, Author: ledger.NoteByUser,
			ConversationID: conv, CallKey: rememberKey(user, f.ID)})
		switch {
		case errors.Is(err, sessions.ErrMemoryOff):
			return errMemoryOff
		case errors.Is(err, sessions.ErrBadNote):
			return errBadFrame.with("%v", err)
		case errors.Is(err, sessions.ErrTooManyNotes):
			return errTooManyNotes.with("%v", err)
		case err != nil:
			return readError(err, "the note could not be kept; send it again")
		}
	case f.AllNotes:
		if _, err := mem.ForgetAll(ctx, user); err != nil {
			return readError(err, "the notes could not be forgotten; send it again")
		}
	default:
		switch err := mem.Forget(ctx, user, f.NoteID); {
		case errors.Is(err, sessions.ErrNoSuchNote):
			return errNotFound.with("you have no note %d (forgotten already?)", f.NoteID)
		case err != nil:
			return readError(err, "the note could not be forgotten; send it again")
		}
	}
	return nil
}

func (c *wsConn) memoryFrame(ctx context.Context, mem Memory, user string) ([]byte, *wsError) {
	list, err := mem.List(ctx, user)
	if err != nil {
		return nil, readError(err, "the notes could not be read; ask again")
	}
	return encode(newMemoryFrame(mem.Enabled(Channel, user), list)), nil
}

// rememberKey is the call key of a remember frame with the client's id
// (sessions.NoteRequest.CallKey): the user's and the id's hash, so that
// the same id sent again by the same user keeps one note, and no user's
// id can name another's. "" without an id.
func rememberKey(user, id string) string {
	if id == "" {
		return ""
	}
	h := sha256.Sum256([]byte(user + "\x00" + id))
	return "ws-remember:" + hex.EncodeToString(h[:16])
}
