package query

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// Export is one conversation with all its messages, as the CLI's
// `gateway sessions export` and the admin API write it.
type Export struct {
	Conversation ledger.Conversation `json:"conversation"`
	Messages     []ExportMessage     `json:"messages"`
	// Fires are the fires of schedules and reminders whose turns are in
	// the conversation, by the seq of their message (TurnSeq).
	Fires []ExportFire `json:"fires,omitempty"`
	// MemoryUser is whose notes the conversation's turns read
	// (sessions.MemoryUser); "" for a group chat its members share, whose
	// turns read each sender's own.
	MemoryUser string `json:"memory_user,omitempty"`
	// Notes are the notes those turns read, as they are when exported —
	// MemoryUser's, or each member's of a shared group chat (a note's
	// user says whose) — newest first. They are the user's, not the
	// conversation's: every export of the user's conversations carries
	// them, and forgetting a note is what deletes it.
	Notes []ledger.Note `json:"notes,omitempty"`
}

// fireAt is the fire whose turn is the message seq, or nil.
func (t *Export) fireAt(seq int64) *ExportFire {
	for i := range t.Fires {
		if t.Fires[i].TurnSeq == seq {
			return &t.Fires[i]
		}
	}
	return nil
}

// fireNote is a line on a fire, before its message's text:
// "[scheduled schedule:morning, due 2026-03-30T06:00:00Z: sent] ".
func fireNote(f *ExportFire) string {
	if f == nil {
		return ""
	}
	note := fmt.Sprintf("[scheduled %s, due %s", f.ScheduleKey, f.DueAt.Format(time.RFC3339))
	if f.LateMS >= 60_000 {
		note += fmt.Sprintf(", %s late", (time.Duration(f.LateMS) * time.Millisecond).Round(time.Second))
	}
	note += ": " + f.State
	if f.Reason != "" {
		note += " (" + f.Reason + ")"
	}
	return note + "] "
}

// ExportMessage is one message of an Export. A user message carries its
// turn (see package ledger): its state as the ledger derives it (answered,
// failed or expired once its final reply is stored), owner replica,
// attempt, and the seq of the reply that answers it.
type ExportMessage struct {
	Seq         int64           `json:"seq"`
	Role        string          `json:"role"`
	Content     string          `json:"content"`
	ToolCalls   json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID  string          `json:"tool_call_id,omitempty"`
	ClientMsgID string          `json:"client_msg_id,omitempty"`
	// Quote is the text a user message replies to or quotes, as stored
	// with it (the model reads it before the message).
	Quote       string          `json:"quote,omitempty"`
	Attachments json.RawMessage `json:"attachments,omitempty"` // metadata, as stored
	ReplyTo     int64           `json:"reply_to,omitempty"`
	// Covers is a summary's span of seqs [first, last]: the messages it
	// stands for in the history a model gets (they stay stored).
	Covers      []int64    `json:"covers,omitempty"`
	Status      string     `json:"status"`
	Error       string     `json:"error,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	TurnState   string     `json:"turn_state,omitempty"`
	TurnOwner   string     `json:"turn_owner,omitempty"`
	TurnAttempt int        `json:"turn_attempt,omitempty"`
	ReplySeq    int64      `json:"reply_seq,omitempty"`
	DeliveredAt *time.Time `json:"delivered_at,omitempty"`
	// Calls are where the tool calls of an assistant message stand in the
	// ledger (ledger.ToolCall), in the order the model asked for them.
	Calls []ExportCall `json:"calls,omitempty"`
}

// ExportCall is one tool call as the ledger holds it.
type ExportCall struct {
	ID         int64      `json:"id"`
	CallID     string     `json:"call_id"`
	Name       string     `json:"name"`
	Arguments  string     `json:"arguments"`
	State      string     `json:"state"`
	Runs       int        `json:"runs"`
	Result     string     `json:"result,omitempty"`
	IsError    bool       `json:"is_error,omitempty"`
	DecidedBy  string     `json:"decided_by,omitempty"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	DurationMS int64      `json:"duration_ms,omitempty"`
	// Media are the pictures, audio and files the call returned and the
	// gateway kept (ledger.ToolMedia): metadata; the admin API serves
	// the bytes.
	Media []ExportMedia `json:"media,omitempty"`
}

// ExportMedia is an item a tool call returned, as an export lists it.
type ExportMedia struct {
	ID          string     `json:"id"`
	Kind        string     `json:"kind"`
	Mime        string     `json:"mime,omitempty"`
	Name        string     `json:"name,omitempty"`
	Size        int64      `json:"size"`
	DeliveredAt *time.Time `json:"delivered_at,omitempty"`
	DeliveryRef string     `json:"delivery_ref,omitempty"`
}

// mediaNote is one line on an item a call returned: "media image
// image/png 79 bytes chart.png (id …) delivered 2026-…".
func mediaNote(m ExportMedia) string {
	note := fmt.Sprintf("media %s %s %d bytes", m.Kind, m.Mime, m.Size)
	if m.Name != "" {
		note += " " + m.Name
	}
	note += " (id " + m.ID + ")"
	if m.DeliveredAt != nil {
		note += " delivered " + m.DeliveredAt.UTC().Format(time.RFC3339)
	}
	return note
}

// Export formats.
const (
	FormatJSON     = "json"
	FormatText     = "text"
	FormatMarkdown = "markdown"
)

// Write writes the transcript in a format: json, text (one line per
// message) or markdown.
func (t *Export) Write(w io.Writer, format string) error {
	switch format {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(t)
	case FormatText:
		return t.writeText(w)
	case FormatMarkdown:
		return t.writeMarkdown(w)
	}
	return fmt.Errorf("unknown export format %q (want json, text or markdown)", format)
}

func (t *Export) writeText(w io.Writer) error {
	conv := t.Conversation
	var b strings.Builder
	fmt.Fprintf(&b, "conversation %s  key %s  %s", conv.ID, conv.SessionKey, conv.Status)
	if conv.ResetReason != "" {
		fmt.Fprintf(&b, " (%s)", conv.ResetReason)
	}
	fmt.Fprintf(&b, "\nstarted %s  agent %s  model %s  tokens %d  cost %.4f\n\n",
		conv.StartedAt.Format(time.RFC3339), conv.AgentName, conv.Model, conv.TotalTokens, conv.Cost)
	for _, m := range t.Messages {
		status := ""
		if m.Status != ledger.MsgOK {
			status = " [" + m.Status + "]"
		}
		fmt.Fprintf(&b, "%4d %-9s %s%s%s%s%s%s\n", m.Seq, m.Role, fireNote(t.fireAt(m.Seq)), coversNote(m.Covers), quoteNote(m.Quote), m.Content, attachmentsNote(m.Attachments), status)
		for _, c := range m.Calls {
			fmt.Fprintf(&b, "     %-9s %s\n", "", callNote(c))
			for _, md := range c.Media {
				fmt.Fprintf(&b, "     %-9s   %s\n", "", mediaNote(md))
			}
		}
	}
	if len(t.Notes) > 0 {
		fmt.Fprintf(&b, "\nmemory: %d notes\n", len(t.Notes))
		for _, n := range t.Notes {
			fmt.Fprintf(&b, "  %s: %s\n", noteHead(n), n.Text)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// noteHead is a note's id, author, time, user and source:
// "12 user 2026-03-28T12:00:00Z websocket:ann (conversation 4c1e…)".
func noteHead(n ledger.Note) string {
	head := fmt.Sprintf("%d %s %s %s", n.ID, n.Author, n.CreatedAt.UTC().Format(time.RFC3339), n.UserKey)
	if n.ConversationID != "" {
		head += " (conversation " + n.ConversationID + ")"
	}
	return head
}

func (t *Export) writeMarkdown(w io.Writer) error {
	conv := t.Conversation
	var b strings.Builder
	fmt.Fprintf(&b, "# Conversation %s\n\n", conv.ID)
	fmt.Fprintf(&b, "- Session key: `%s`\n", mdCode(conv.SessionKey))
	fmt.Fprintf(&b, "- Channel: %s\n", conv.Channel)
	status := conv.Status
	if conv.ResetReason != "" {
		status += " (" + conv.ResetReason + ")"
	}
	fmt.Fprintf(&b, "- Status: %s\n", status)
	fmt.Fprintf(&b, "- Started: %s\n", conv.StartedAt.Format(time.RFC3339))
	fmt.Fprintf(&b, "- Last activity: %s\n", conv.LastActivityAt.Format(time.RFC3339))
	fmt.Fprintf(&b, "- Agent: %s, model %s, %d tokens, cost %.4f\n", conv.AgentName, conv.Model, conv.TotalTokens, conv.Cost)
	for _, m := range t.Messages {
		fmt.Fprintf(&b, "\n## %d · %s", m.Seq, m.Role)
		if len(m.Covers) == 2 {
			fmt.Fprintf(&b, " of messages %d–%d", m.Covers[0], m.Covers[1])
		}
		if m.TurnState != "" {
			fmt.Fprintf(&b, " · turn %s", m.TurnState)
		}
		if m.Status != ledger.MsgOK {
			fmt.Fprintf(&b, " · %s", m.Status)
		}
		fmt.Fprintf(&b, "\n\n_%s_\n\n", m.CreatedAt.Format(time.RFC3339))
		if f := t.fireAt(m.Seq); f != nil {
			fmt.Fprintf(&b, "Scheduled: `%s`\n\n", mdCode(strings.TrimSuffix(strings.TrimPrefix(fireNote(f), "[scheduled "), "] ")))
		}
		// Quoted, so that whatever the message contains (headings, fences)
		// stays inside its message; the text it replies to, quoted once
		// more, above it.
		if m.Quote != "" {
			for _, line := range strings.Split(m.Quote, "\n") {
				b.WriteString(strings.TrimRight("> > "+line, " ") + "\n")
			}
			b.WriteString(">\n")
		}
		for _, line := range strings.Split(m.Content, "\n") {
			b.WriteString(strings.TrimRight("> "+line, " ") + "\n")
		}
		if note := attachmentsNote(m.Attachments); note != "" {
			fmt.Fprintf(&b, "\nAttachments:%s\n", note)
		}
		if m.Error != "" {
			fmt.Fprintf(&b, "\nError: %s\n", m.Error)
		}
		if len(m.ToolCalls) > 0 {
			fmt.Fprintf(&b, "\nTool calls: `%s`\n", mdCode(string(m.ToolCalls)))
		}
		for _, c := range m.Calls {
			fmt.Fprintf(&b, "\n- `%s`\n", mdCode(callNote(c)))
			for _, md := range c.Media {
				fmt.Fprintf(&b, "  - `%s`\n", mdCode(mediaNote(md)))
			}
		}
	}
	if len(t.Notes) > 0 {
		// Each note quoted, as a message is: its text is the model's or a
		// user's words.
		fmt.Fprintf(&b, "\n## Memory · %d notes\n", len(t.Notes))
		for _, n := range t.Notes {
			fmt.Fprintf(&b, "\n- `%s`\n\n", mdCode(noteHead(n)))
			for _, line := range strings.Split(n.Text, "\n") {
				b.WriteString(strings.TrimRight("  > "+line, " ") + "\n")
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// callNote is one line on a tool call: what was called, and where it
// stands — "calls t__counter {"key":"k"} → done, 1 run, 12 ms".
func callNote(c ExportCall) string {
	note := fmt.Sprintf("calls %s %s → %s", c.Name, c.Arguments, c.State)
	if c.Runs != 1 {
		note += fmt.Sprintf(", %d runs", c.Runs)
	} else {
		note += ", 1 run"
	}
	if c.DurationMS > 0 {
		note += fmt.Sprintf(", %d ms", c.DurationMS)
	}
	if c.DecidedBy != "" {
		note += ", decided by " + c.DecidedBy
	}
	return note
}

// mdCode keeps a value inside a one-backtick code span.
func mdCode(s string) string { return strings.ReplaceAll(s, "`", "'") }

// attachmentsNote names a message's stored attachments for the text and
// Markdown transcripts: " [image image/jpeg 48213 bytes]".
func attachmentsNote(stored json.RawMessage) string {
	var atts []agent.Attachment
	if len(stored) == 0 || json.Unmarshal(stored, &atts) != nil {
		return ""
	}
	var b strings.Builder
	for _, a := range atts {
		kind := a.Kind
		if a.Type != "" {
			kind = a.Type
		}
		fmt.Fprintf(&b, " [%s", kind)
		for _, s := range []string{a.Name, a.Mime} {
			if s != "" {
				b.WriteString(" " + s)
			}
		}
		if a.Size > 0 {
			fmt.Fprintf(&b, " %d bytes", a.Size)
		}
		b.WriteString("]")
	}
	return b.String()
}

// quoteRunes bounds what the text transcript shows of a quote (the JSON
// and Markdown ones show it whole).
const quoteRunes = 80

// quoteNote is the text a message replies to, for the text transcript:
// on one line, cut short, before the message — `[replying to "Which
// one…"] `.
func quoteNote(quote string) string {
	quote = strings.Join(strings.Fields(quote), " ")
	if quote == "" {
		return ""
	}
	if r := []rune(quote); len(r) > quoteRunes {
		quote = strings.TrimSpace(string(r[:quoteRunes-1])) + "…"
	}
	return fmt.Sprintf("[replying to %q] ", quote)
}

// coversNote is a summary's span, before its text: "[messages 1–40] ".
func coversNote(covers []int64) string {
	if len(covers) != 2 {
		return ""
	}
	return fmt.Sprintf("[messages %d–%d] ", covers[0], covers[1])
}
