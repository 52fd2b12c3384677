package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/chatgate/chatgate/sessions"
)

// Protocol v1 frames. Names and fields are a public contract
// (docs/protocol.md): fields may be added, never renamed.

// clientFrame is any frame a client sends; Type selects which fields count.
type clientFrame struct {
	Type string `json:"type"`
	// hello
	User         string `json:"user,omitempty"`
	Session      string `json:"session,omitempty"`
	LastSeq      *int64 `json:"last_seq,omitempty"`
	Conversation string `json:"conversation,omitempty"`
	Token        string `json:"token,omitempty"`
	// message
	ID   string  `json:"id,omitempty"`
	Text *string `json:"text,omitempty"`
	// Attachments: images (imageCache) and audio (transcribe); with one,
	// text may be empty.
	Attachments []frameAttachment `json:"attachments,omitempty"`
	// ReplyTo is the seq of an earlier message of the conversation (the
	// user's or the bot's) a message answers: its text goes to the model
	// with the message, quoted (WebSocket.quoted).
	ReplyTo *int64 `json:"reply_to,omitempty"`
	// edit: the client id of the message it edits (ID is the edit's own).
	Edits string `json:"edits,omitempty"`
	// Name is a model frame's choice: absent, the frame asks for the
	// models; "" goes back to the default one (wsConn.model). In a
	// schedule_opt_in frame it names the schedule, and On says in or
	// out (wsConn.schedules).
	Name *string `json:"name,omitempty"`
	On   *bool   `json:"on,omitempty"`
	// Decision is a tool_decision's content: its id is a number, where
	// every other frame's is a string, so it is decoded apart
	// (decodeToolDecision).
	Decision *toolDecision `json:"-"`
	// ReminderID is a reminder_cancel's reminder (a number too:
	// decodeReminderCancel).
	ReminderID int64 `json:"-"`
	// NoteID is a forget frame's note, AllNotes a forget of every note
	// (decodeMemoryFrame; a remember frame's note is Text).
	NoteID   int64 `json:"-"`
	AllNotes bool  `json:"-"`
}

// toolDecision is a tool_decision frame: allow or deny the call id.
type toolDecision struct {
	Type  string `json:"type"`
	ID    *int64 `json:"id"`
	Allow *bool  `json:"allow"`
}

// Error codes of error frames, declared once with their default text.
type wsError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *wsError) Error() string { return e.Code + ": " + e.Message }

func (e *wsError) with(format string, args ...any) *wsError {
	return &wsError{Code: e.Code, Message: fmt.Sprintf(format, args...)}
}

var (
	errBadFrame     = &wsError{"bad_frame", "frame is not valid protocol v1 JSON"}
	errTooLarge     = &wsError{"too_large", "frame is over the size limit"}
	errRateLimited  = &wsError{"rate_limited", "too many frames; slow down and resend"}
	errUnauthorized = &wsError{"unauthorized", "a valid token is required"}
	errNotFound     = &wsError{"not_found", "nothing to act on"}
	errUnavailable  = &wsError{"unavailable", "the gateway is shutting down; reconnect and resend"}
	errInternal     = &wsError{"internal", "the message could not be stored; resend it"}
	errUnsupported  = &wsError{"unsupported", "this gateway does not transcribe audio; type the message instead"}
	errTranscribe   = &wsError{"transcription_failed", "the audio could not be transcribed; send it again or type it"}
	errNotYours     = &wsError{"not_yours", "only the user whose turn it is can decide this tool call"}
	errDecided      = &wsError{"decided", "this tool call was decided already"}
)

const maxClientMsgID = 128

// decodeFrame parses and checks one client frame. It never panics, whatever
// the input (see FuzzDecodeFrame).
func decodeFrame(data []byte) (*clientFrame, *wsError) {
	if !utf8.Valid(data) {
		return nil, errBadFrame.with("frame is not UTF-8 text")
	}
	if bytes.Contains(data, []byte(`"tool_decision"`)) {
		if f, err, ok := decodeToolDecision(data); ok {
			return f, err
		}
	}
	if bytes.Contains(data, []byte(`"reminder_cancel"`)) {
		if f, err, ok := decodeReminderCancel(data); ok {
			return f, err
		}
	}
	if bytes.Contains(data, []byte(`"memory"`)) || bytes.Contains(data, []byte(`"remember"`)) || bytes.Contains(data, []byte(`"forget"`)) {
		if f, err, ok := decodeMemoryFrame(data); ok {
			return f, err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f clientFrame
	if err := dec.Decode(&f); err != nil {
		return nil, errBadFrame.with("frame is not a valid JSON object: %v", err)
	}
	if dec.More() {
		return nil, errBadFrame.with("one JSON object per frame")
	}
	switch f.Type {
	case "hello":
		if len(f.User) > 128 || len(f.Session) > 128 || len(f.Conversation) > 64 || len(f.Token) > 256 {
			return nil, errBadFrame.with("hello field too long")
		}
		if f.LastSeq != nil && *f.LastSeq < 0 {
			return nil, errBadFrame.with("last_seq must not be negative")
		}
	case "message":
		if f.Text == nil && len(f.Attachments) == 0 {
			return nil, errBadFrame.with("message needs a text")
		}
		if f.Text == nil {
			f.Text = new(string) // an image alone
		}
		if err := checkAttachments(f.Attachments); err != nil {
			return nil, err
		}
		if len(f.ID) > maxClientMsgID {
			return nil, errBadFrame.with("message id is over %d bytes", maxClientMsgID)
		}
		if f.ReplyTo != nil && *f.ReplyTo < 1 {
			return nil, errBadFrame.with("reply_to must be the seq of a message (1 or more)")
		}
	case "edit":
		if f.Edits == "" {
			return nil, errBadFrame.with("edit needs the id of the message it edits (edits)")
		}
		if f.Text == nil || len(f.Attachments) > 0 {
			return nil, errBadFrame.with("edit needs a text, and carries no attachments")
		}
		if len(f.ID) > maxClientMsgID || len(f.Edits) > maxClientMsgID {
			return nil, errBadFrame.with("message id is over %d bytes", maxClientMsgID)
		}
	case "model":
		if f.Name != nil && len(*f.Name) > maxModelName {
			return nil, errBadFrame.with("model name is over %d bytes", maxModelName)
		}
	case "schedule_opt_in":
		if f.Name == nil || *f.Name == "" || f.On == nil {
			return nil, errBadFrame.with("schedule_opt_in needs the schedule's name and on (true or false)")
		}
		if len(*f.Name) > maxScheduleName {
			return nil, errBadFrame.with("schedule name is over %d bytes", maxScheduleName)
		}
	case "reset", "stop", "resume_previous", "compact", "status", "reminders", "schedules":
	case "tool_decision": // its name escaped, so decodeFrame did not see it at first
		if d, err, ok := decodeToolDecision(data); ok {
			return d, err
		}
		return nil, errBadFrame.with("tool_decision needs the id of the call (a number) and allow")
	case "reminder_cancel": // its name escaped, as tool_decision's
		if d, err, ok := decodeReminderCancel(data); ok {
			return d, err
		}
		return nil, errBadFrame.with("reminder_cancel needs the id of the reminder (a number)")
	case "memory", "remember", "forget": // their names escaped, as tool_decision's
		if d, err, ok := decodeMemoryFrame(data); ok {
			return d, err
		}
		return nil, errBadFrame.with("%s is not valid", f.Type)
	case "":
		return nil, errBadFrame.with("frame has no type")
	default:
		return nil, errBadFrame.with("unknown frame type %q", f.Type)
	}
	if f.Name != nil && f.Type != "model" && f.Type != "schedule_opt_in" {
		return nil, errBadFrame.with("name is a field of model and schedule_opt_in frames")
	}
	if f.On != nil && f.Type != "schedule_opt_in" {
		return nil, errBadFrame.with("on is a field of schedule_opt_in frames")
	}
	return &f, nil
}

// decodeToolDecision decodes a tool_decision frame; ok is false when data
// is no such frame (its "tool_decision" was in some other field), for
// decodeFrame to decode it.
func decodeToolDecision(data []byte) (f *clientFrame, werr *wsError, ok bool) {
	var probe struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &probe) != nil || probe.Type != "tool_decision" {
		return nil, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d toolDecision
	if err := dec.Decode(&d); err != nil {
		return nil, errBadFrame.with("tool_decision is not valid: %v", err), true
	}
	if dec.More() {
		return nil, errBadFrame.with("one JSON object per frame"), true
	}
	switch {
	case d.ID == nil:
		return nil, errBadFrame.with("tool_decision needs the id of the call (id, a number)"), true
	case *d.ID <= 0:
		return nil, errBadFrame.with("tool_decision id must be a positive number"), true
	case d.Allow == nil:
		return nil, errBadFrame.with("tool_decision needs allow: true or false"), true
	}
	return &clientFrame{Type: d.Type, Decision: &d}, nil, true
}

// Server frames.

type historyItem struct {
	Seq     int64  `json:"seq"`
	Role    string `json:"role"`
	Text    string `json:"text"`
	Status  string `json:"status"`
	ID      string `json:"id,omitempty"`       // the client message id of a user message
	ReplyTo int64  `json:"reply_to,omitempty"` // the user message's seq, for replies
	// Quote is the text a user message replied to, as stored with it.
	Quote string `json:"quote,omitempty"`
	// Attachments of a user message: metadata only.
	Attachments []historyAttachment `json:"attachments,omitempty"`
}

type readyFrame struct {
	Type         string        `json:"type"`
	Session      string        `json:"session"`
	Conversation string        `json:"conversation"`
	Resumed      bool          `json:"resumed"`
	User         string        `json:"user"`
	History      []historyItem `json:"history"`
	// MaxFrameBytes is the largest frame the server reads: a client checks
	// a message with pictures against it before sending, since a larger
	// frame closes the connection (1009) and a resend would close it again.
	MaxFrameBytes int64 `json:"max_frame_bytes"`
	// Images tells whether the model is given the pictures sent; without
	// it a client says so rather than offering to send them.
	Images bool `json:"images"`
	// Audio tells whether audio attachments are transcribed (transcribe);
	// without it they are refused, and a client does not offer them.
	Audio bool `json:"audio"`
	// MaxAudioBytes bounds one audio attachment, decoded (0 without
	// Audio); the frame must still fit in MaxFrameBytes.
	MaxAudioBytes int64 `json:"max_audio_bytes,omitempty"`
	// Models tells whether the session may choose a model (the model
	// frame, modelFrame); without it a client offers no choice.
	Models bool `json:"models"`
}

type ackFrame struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Seq  int64  `json:"seq"`
	// Edited: the ack of an edit that replaced the text of message Edited
	// (whose seq Seq is) before its turn started; its reply answers it.
	Edited string `json:"edited,omitempty"`
}

type deltaFrame struct {
	Type    string `json:"type"`
	ReplyTo string `json:"reply_to"`
	Text    string `json:"text"`
}

type replyFrame struct {
	Type    string `json:"type"`
	ReplyTo string `json:"reply_to"`
	// Covers are the client ids of every message the reply answers, oldest
	// first, when a burst was merged into one turn; ReplyTo is the last.
	Covers []string `json:"covers,omitempty"`
	Seq    int64    `json:"seq"`
	Text   string   `json:"text"`
	Status string   `json:"status"`
	// Attachments are the pictures, audio and files the turn's tools
	// returned, each fetched from its url (MediaHandler).
	Attachments []mediaAttachment `json:"attachments,omitempty"`
	// AttachmentsUnread: the turn's tools returned media that could not
	// be read from storage for this frame (Attachments is then empty);
	// the reply in ready.history carries them after a reconnect.
	AttachmentsUnread bool `json:"attachments_unread,omitempty"`
}

// newReplyFrame is the reply frame of a stored reply to message replyTo.
func newReplyFrame(replyTo string, r sessions.Reply) replyFrame {
	return replyFrame{Type: "reply", ReplyTo: replyTo, Covers: r.Covers, Seq: r.Seq, Text: r.Text, Status: r.Status,
		Attachments: mediaAttachments(r.Media), AttachmentsUnread: r.MediaUnread}
}

type resetFrame struct {
	Type         string `json:"type"`
	Conversation string `json:"conversation"`
	Reason       string `json:"reason"`
	// IdleMinutes is the idle period of an idle reset, so a client can
	// say why.
	IdleMinutes int `json:"idle_minutes,omitempty"`
	// History is the reopened conversation's recent lines, on a reset
	// with reason resume (wsConn.resumePrevious).
	History []historyItem `json:"history,omitempty"`
}

// noticeFrame tells a client something about one of its messages that is
// not an error: code "delayed" — the message is stored and waits on the
// database; it is answered once the database is back (do not resend).
type noticeFrame struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	ID      string `json:"id,omitempty"`
	Message string `json:"message"`
}

// toolFrame tells how a tool call of the turn answering message ReplyTo
// (its seq) moves: asking, started, then its outcome with DurationMS.
type toolFrame struct {
	Type       string `json:"type"`
	ReplyTo    int64  `json:"reply_to"`
	ID         int64  `json:"id"`
	CallID     string `json:"call_id"`
	Name       string `json:"name"`
	Status     string `json:"status"`
	DurationMS *int64 `json:"duration_ms,omitempty"`
	// ExpiresAt (RFC 3339) is when an asking call counts as denied.
	ExpiresAt string `json:"expires_at,omitempty"`
}

func newToolFrame(ev sessions.ToolEvent) toolFrame {
	f := toolFrame{Type: "tool", ReplyTo: ev.Seq, ID: ev.ID, CallID: ev.CallID, Name: ev.Name, Status: ev.Status}
	switch ev.Status {
	case sessions.ToolAsking:
		f.ExpiresAt = rfc3339(ev.ExpiresAt)
	case sessions.ToolStarted:
	default: // an outcome
		ms := ev.Duration.Milliseconds()
		f.DurationMS = &ms
	}
	return f
}

// toolRequestFrame asks the user to allow or deny a call (tool_decision
// answers it). Arguments is the JSON text the model wrote: untrusted.
type toolRequestFrame struct {
	Type      string `json:"type"`
	ID        int64  `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	ExpiresAt string `json:"expires_at,omitempty"`
	ReplyTo   int64  `json:"reply_to"`
}

func newToolRequestFrame(ev sessions.ToolEvent) toolRequestFrame {
	return toolRequestFrame{Type: "tool_request", ID: ev.ID, CallID: ev.CallID, Name: ev.Name, Arguments: ev.Arguments,
		ExpiresAt: rfc3339(ev.ExpiresAt), ReplyTo: ev.Seq}
}

// toolResolvedFrame tells that the ask of call ID is over: Status
// "started" (allowed: it runs now), "denied" (by the user) or "expired"
// (sessions.ToolExpired: nobody decided in time; denied).
type toolResolvedFrame struct {
	Type    string `json:"type"`
	ID      int64  `json:"id"`
	ReplyTo int64  `json:"reply_to"`
	Status  string `json:"status"`
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

type errorFrame struct {
	Type string `json:"type"`
	wsError
	// ID is the client id of the message the error is about, if any: a
	// client stops resending a message refused for what it is.
	ID string `json:"id,omitempty"`
	// ToolID is the tool call a refused tool_decision named.
	ToolID int64 `json:"tool_id,omitempty"`
}

// refusedID is the id of a message frame that decodeFrame refused, read
// leniently, or "" when the frame is no message or has no usable id.
func refusedID(data []byte) string {
	var probe struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	}
	if json.Unmarshal(data, &probe) != nil || probe.Type != "message" || len(probe.ID) > maxClientMsgID || !utf8.ValidString(probe.ID) {
		return ""
	}
	return probe.ID
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("gateway: encoding %T: %v", v, err)) // only fixed frame types reach here
	}
	return b
}
