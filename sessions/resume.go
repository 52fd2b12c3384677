package sessions

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// Resume tokens let a channel's client come back to its session after a
// disconnect, on any replica. A token is 256 random bits; the store keeps
// only its SHA-256, bound to the principal it was issued to and the time
// it was issued; it expires Options.ResumeTTL later.

// ErrResumeExpired is ResumePrincipal's answer for a token older than the
// resume TTL: it resumes nothing, and nothing is opened from it.
var ErrResumeExpired = errors.New("resume token expired")

// binding is a resume token's channel_states value.
type binding struct {
	Principal string    `json:"principal"`
	Issued    time.Time `json:"issued"`
}

func (b binding) encode(issued time.Time) string {
	b.Issued = issued.UTC()
	v, _ := json.Marshal(b)
	return string(v)
}

// parseBinding reads a binding; a bare principal (written before tokens
// carried their issue time) is legacy.
func parseBinding(v string) (b binding, legacy bool) {
	if strings.HasPrefix(v, "{") && json.Unmarshal([]byte(v), &b) == nil && b.Principal != "" {
		return b, false
	}
	return binding{Principal: v}, true
}

func (m *Manager) expired(b binding, now time.Time) bool {
	return m.opts.ResumeTTL > 0 && !b.Issued.IsZero() && now.Sub(b.Issued) > m.opts.ResumeTTL
}

// NewResumeToken issues a token for principal and stores its binding.
func (m *Manager) NewResumeToken(ctx context.Context, channel, principal string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("resume token: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(b[:])
	if err := m.store.SetState(ctx, resumeKey(channel, token), binding{Principal: principal}.encode(m.now())); err != nil {
		return "", err
	}
	return token, nil
}

// ResumePrincipal returns the principal a token was issued to, "" for an
// unknown token, or ErrResumeExpired for one older than the resume TTL.
func (m *Manager) ResumePrincipal(ctx context.Context, channel, token string) (string, error) {
	if token == "" || len(token) > 128 {
		return "", nil
	}
	v, err := m.store.GetState(ctx, resumeKey(channel, token))
	if err != nil || v == "" {
		return "", err
	}
	b, _ := parseBinding(v)
	if m.expired(b, m.now()) {
		return "", ErrResumeExpired
	}
	return b.Principal, nil
}

func resumePrefix(channel string) string { return channel + ":resume:" }

func resumeKey(channel, token string) string {
	sum := sha256.Sum256([]byte(token))
	return resumePrefix(channel) + hex.EncodeToString(sum[:])
}

// Transcript is what a chat client is shown of a session key's active
// conversation: its id, how far it goes, and its lines.
type Transcript struct {
	Conversation string // the active conversation's id
	// LastSeq is the newest seq read: the conversation's last seq, or
	// that of a message stored since, whatever the message (tool calls
	// included). A client shown the transcript has seen everything up to
	// it.
	LastSeq int64
	Entries []Entry
}

// Entry is one line of a transcript: a user message or a final reply.
// Tool calls and tool results are not lines.
type Entry struct {
	Seq         int64
	Role        string // user | assistant
	Text        string
	Status      string // ok | failed | interrupted
	ClientMsgID string // a user message's client message id, if it had one
	ReplyTo     int64  // a reply's user message seq
	// Attachments of a user message: metadata only, no bytes.
	Attachments []agent.Attachment
	// Quote is the text a user message replies to or quotes, as stored
	// with it.
	Quote string
}

// toTranscript keeps of msgs, oldest first, the lines of conv a client shows.
func toTranscript(conv *ledger.Conversation, msgs []ledger.Message) Transcript {
	t := Transcript{Conversation: conv.ID, LastSeq: conv.LastSeq, Entries: make([]Entry, 0, len(msgs))}
	if len(msgs) > 0 {
		t.LastSeq = max(t.LastSeq, msgs[len(msgs)-1].Seq)
	}
	for _, m := range msgs {
		if m.Role != agent.RoleUser && (m.Role != agent.RoleAssistant || m.ToolCalls != "") {
			continue
		}
		e := Entry{Seq: m.Seq, Role: m.Role, Text: m.Content, Status: m.Status, ReplyTo: m.ReplyTo, Attachments: decodeAttachments(m.Attachments),
			Quote: m.Quote}
		if m.ClientMsgID != nil {
			e.ClientMsgID = *m.ClientMsgID
		}
		t.Entries = append(t.Entries, e)
	}
	return t
}

// Open returns the transcript of the session key's active conversation,
// opening one if there is none: the lines of the messages after afterSeq
// (or of the last limit messages when afterSeq < 0), read from at most
// limit messages (0: no limit with afterSeq). A running turn's reply, if
// not yet stored, is not among them; the turn delivers it.
func (m *Manager) Open(ctx context.Context, in Inbound, afterSeq int64, limit int) (Transcript, error) {
	if in.Channel == "" || in.SessionKey == "" {
		return Transcript{}, ErrBadInbound
	}
	conv, err := m.store.ActiveConversation(ctx, in.SessionKey)
	if err != nil {
		return Transcript{}, err
	}
	if conv == nil {
		release, err := m.acquire(ctx, in.SessionKey)
		if err != nil {
			return Transcript{}, err
		}
		hc, err := m.load(ctx, in, m.Policy(in.Channel), m.now())
		release()
		if err != nil {
			return Transcript{}, err
		}
		c := hc.conv
		conv = &c
	}
	var msgs []ledger.Message
	if afterSeq >= 0 {
		msgs, err = m.store.MessagesAfter(ctx, conv.ID, afterSeq, limit)
	} else {
		msgs, err = m.store.RecentMessages(ctx, conv.ID, limit)
	}
	if err != nil {
		return Transcript{}, err
	}
	return toTranscript(conv, msgs), nil
}

// ChannelState reads a value a channel keeps through the store (such as
// Telegram's update offset); "" when unset.
func (m *Manager) ChannelState(ctx context.Context, key string) (string, error) {
	return m.store.GetState(ctx, key)
}

// SetChannelState durably stores a channel's value.
func (m *Manager) SetChannelState(ctx context.Context, key, value string) error {
	return m.store.SetState(ctx, key, value)
}
