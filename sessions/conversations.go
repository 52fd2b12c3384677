package sessions

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// Conversations is what channels read and change of a session key's
// conversations outside a turn: the transcripts a client is shown (Open,
// ConversationTranscript) and the replies other replicas stored
// (StoredReply), the way back to the previous conversation
// (ResumePrevious, ResumeConversation), the resume tokens that bring a
// client back (NewResumeToken, ResumePrincipal), and the values channels
// keep in the store (ChannelState, SetChannelState). It reads and writes
// through the store; of the turn path it uses only what turnPath names.
// New builds it; Manager.Conversations returns it.
type Conversations struct {
	store conversationStore
	turns turnPath
	// publish tells a reset to its channel's route and the other
	// replicas (relay.publish).
	publish func(ResetEvent)
	// hot is the turn path's cache of active conversations: a resume
	// drops the key's copy, which may be the one it archived.
	hot       *hotCache
	now       func() time.Time
	log       *slog.Logger
	resumeTTL time.Duration // Options.ResumeTTL
}

// conversationStore is what Conversations reads and writes of the Store.
type conversationStore interface {
	ActiveConversation(ctx context.Context, key string) (*ledger.Conversation, error)
	Conversation(ctx context.Context, id string) (*ledger.Conversation, error)
	LastArchived(ctx context.Context, key string) (*ledger.Conversation, error)
	Reopen(ctx context.Context, r ledger.Reopen) error
	RecentMessages(ctx context.Context, convID string, limit int) ([]ledger.Message, error)
	MessagesAfter(ctx context.Context, convID string, afterSeq int64, limit int) ([]ledger.Message, error)
	Message(ctx context.Context, convID string, seq int64) (*ledger.Message, error)
	Covers(ctx context.Context, convID string, lead int64) ([]ledger.BatchRow, error)
	GetState(ctx context.Context, key string) (string, error)
	SetState(ctx context.Context, key, value string) error
	ToolMediaLedger
}

// turnPath is what Conversations needs of the Manager's turn path: the
// key's state lock, held while a conversation is opened or reopened so
// that no message of the key is stored meanwhile on this replica
// (acquire, which also counts for the drain); the load, or creation, of
// the key's active conversation (load); and a channel's policy (Policy).
type turnPath interface {
	acquire(ctx context.Context, key string) (release func(), err error)
	load(ctx context.Context, in Inbound, policy Policy, now time.Time) (*hotConv, error)
	Policy(channel string) Policy
}

// newConversations returns the Conversations of a manager: st its store,
// turns its turn path, publish how a reset is told, hot its cache of active conversations, now its
// clock, resumeTTL how long a resume token is valid (0: no expiry).
func newConversations(st conversationStore, turns turnPath, publish func(ResetEvent), hot *hotCache, now func() time.Time, log *slog.Logger, resumeTTL time.Duration) *Conversations {
	return &Conversations{store: st, turns: turns, publish: publish, hot: hot, now: now, log: log, resumeTTL: resumeTTL}
}

// Conversations returns what channels read and change of conversations
// outside a turn: transcripts, resumes, resume tokens and channel state.
func (m *Manager) Conversations() *Conversations { return m.convs }

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
	Error       string // why a reply failed or was cut short (InterruptedBy…)
	ClientMsgID string // a user message's client message id, if it had one
	ReplyTo     int64  // a reply's user message seq
	// Attachments of a user message: metadata only, no bytes.
	Attachments []agent.Attachment
	// Quote is the text a user message replies to or quotes, as stored
	// with it.
	Quote string
	// Media of a turn's final reply: what its tool calls returned.
	Media []Media
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
		e := Entry{Seq: m.Seq, Role: m.Role, Text: m.Content, Status: m.Status, Error: m.Error, ReplyTo: m.ReplyTo, Attachments: decodeAttachments(m.Attachments),
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
func (c *Conversations) Open(ctx context.Context, in Inbound, afterSeq int64, limit int) (Transcript, error) {
	if in.Channel == "" || in.SessionKey == "" {
		return Transcript{}, ErrBadInbound
	}
	conv, err := c.store.ActiveConversation(ctx, in.SessionKey)
	if err != nil {
		return Transcript{}, err
	}
	if conv == nil {
		release, err := c.turns.acquire(ctx, in.SessionKey)
		if err != nil {
			return Transcript{}, err
		}
		hc, err := c.turns.load(ctx, in, c.turns.Policy(in.Channel), c.now())
		release()
		if err != nil {
			return Transcript{}, err
		}
		active := hc.conv
		conv = &active
	}
	var msgs []ledger.Message
	if afterSeq >= 0 {
		msgs, err = c.store.MessagesAfter(ctx, conv.ID, afterSeq, limit)
	} else {
		msgs, err = c.store.RecentMessages(ctx, conv.ID, limit)
	}
	if err != nil {
		return Transcript{}, err
	}
	t := toTranscript(conv, msgs)
	c.withMedia(ctx, &t, msgs)
	return t, nil
}

// withMedia puts on each final reply of t the media its turn's tool
// calls returned, and those of the turns it superseded (cut by a newer
// message); only turns that called tools (a tool message among msgs)
// are read.
func (c *Conversations) withMedia(ctx context.Context, t *Transcript, msgs []ledger.Message) {
	var turns []int64
	for _, m := range msgs {
		if m.Role == agent.RoleTool && !slices.Contains(turns, m.ReplyTo) {
			turns = append(turns, m.ReplyTo)
		}
	}
	done := map[int]bool{}
	for _, turn := range turns {
		// The reply that carries turn's media: the first after it that
		// settles a turn — its own, or, when a newer message cut it, the
		// one that answers both.
		for i := range t.Entries {
			e := &t.Entries[i]
			if e.Role != agent.RoleAssistant || e.ReplyTo < turn || !ledger.Settles(e.Status, e.Error) {
				continue // (a reply a newer message or a shutdown cut: its turn is answered later)
			}
			if !done[i] {
				done[i] = true
				e.Media, _ = replyMedia(ctx, c.store, c.log, t.Conversation, e.ReplyTo)
			}
			break
		}
	}
}

// ConversationTranscript returns the lines of a conversation, active or
// archived, read from its last limit messages: what a client switching to
// it (after ResumePrevious) is shown.
func (c *Conversations) ConversationTranscript(ctx context.Context, convID string, limit int) (Transcript, error) {
	conv, err := c.store.Conversation(ctx, convID)
	if err != nil {
		return Transcript{}, err
	}
	if conv == nil {
		return Transcript{}, fmt.Errorf("conversation %s is not stored", convID)
	}
	msgs, err := c.store.RecentMessages(ctx, convID, limit)
	if err != nil {
		return Transcript{}, err
	}
	t := toTranscript(conv, msgs)
	c.withMedia(ctx, &t, msgs)
	return t, nil
}

// StoredReply returns a stored reply (with the client ids it covers) and
// the client message id of the user message it answers: what a channel
// sends for a ReplyEvent. Media that cannot be read leave the reply
// without them, MediaUnread.
func (c *Conversations) StoredReply(ctx context.Context, convID string, userSeq, replySeq int64) (string, Reply, error) {
	reply, err := c.store.Message(ctx, convID, replySeq)
	if err != nil {
		return "", Reply{}, err
	}
	if reply == nil || reply.ReplyTo != userSeq {
		return "", Reply{}, fmt.Errorf("reply %d to %s/%d: %w", replySeq, convID, userSeq, ErrNoReply)
	}
	um, err := c.store.Message(ctx, convID, userSeq)
	if err != nil {
		return "", Reply{}, err
	}
	clientID := ""
	if um != nil && um.ClientMsgID != nil {
		clientID = *um.ClientMsgID
	}
	r := toReply(reply)
	if ledger.SettlesTurn(reply) {
		// (A reply cut short leaves its media to the one that settles
		// its turn.)
		var read bool
		r.Media, read = replyMedia(ctx, c.store, c.log, convID, userSeq)
		r.MediaUnread = !read
	}
	covers, err := c.store.Covers(ctx, convID, userSeq)
	if err != nil {
		return "", Reply{}, err
	}
	r.Covers = clientIDs(covers)
	return clientID, r, nil
}

// ChannelState reads a value a channel keeps through the store (such as
// Telegram's update offset); "" when unset.
func (c *Conversations) ChannelState(ctx context.Context, key string) (string, error) {
	return c.store.GetState(ctx, key)
}

// SetChannelState durably stores a channel's value.
func (c *Conversations) SetChannelState(ctx context.Context, key, value string) error {
	return c.store.SetState(ctx, key, value)
}
