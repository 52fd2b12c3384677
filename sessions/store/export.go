package store

import (
	"context"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/query"
)

// Export is query.Export, the answer of ExportConversation, under the
// name the store's callers know it by.
type Export = query.Export

// Export formats: query's, under the names the store's callers know.
const (
	FormatJSON     = query.FormatJSON
	FormatText     = query.FormatText
	FormatMarkdown = query.FormatMarkdown
)

// exportCall is a tool call as an export shows it.
func exportCall(c *ledger.ToolCall) query.ExportCall {
	e := query.ExportCall{ID: c.ID, CallID: c.CallID, Name: c.Name, Arguments: c.Arguments, State: c.State, Runs: c.Runs,
		Result: c.Result, IsError: c.IsError, DecidedBy: c.DecidedBy, ExpiresAt: c.ExpiresAt, StartedAt: c.StartedAt, EndedAt: c.EndedAt}
	if c.StartedAt != nil && c.EndedAt != nil {
		e.DurationMS = c.EndedAt.Sub(*c.StartedAt).Milliseconds()
	}
	return e
}

// ExportConversation reads a conversation and its messages; nil when there is no
// conversation with that id (query.Exports).
func (s *DB) ExportConversation(ctx context.Context, id string) (*query.Export, error) {
	conv, err := s.Conversation(ctx, id)
	if err != nil || conv == nil {
		return nil, err
	}
	msgs, err := s.MessagesAfter(maintenance(ctx), id, 0, 0)
	if err != nil {
		return nil, err
	}
	calls, err := s.ConversationToolCalls(maintenance(ctx), id)
	if err != nil {
		return nil, err
	}
	media, err := s.ConversationToolMedia(maintenance(ctx), id)
	if err != nil {
		return nil, err
	}
	byCall := map[int64][]query.ExportMedia{}
	for _, md := range media {
		byCall[md.ToolCallID] = append(byCall[md.ToolCallID], query.ExportMedia{ID: md.ID, Kind: md.Kind, Mime: md.Mime, Name: md.Name,
			Size: md.Size, DeliveredAt: md.DeliveredAt, DeliveryRef: md.DeliveryRef})
	}
	byMsg := map[int64][]query.ExportCall{}
	for i := range calls {
		e := exportCall(&calls[i])
		e.Media = byCall[calls[i].ID]
		byMsg[calls[i].MessageSeq] = append(byMsg[calls[i].MessageSeq], e)
	}
	fires, err := s.ConversationFires(ctx, conv.SessionKey, id)
	if err != nil {
		return nil, err
	}
	notes, err := s.exportNotes(maintenance(ctx), conv)
	if err != nil {
		return nil, err
	}
	t := &query.Export{Conversation: *conv, Messages: make([]query.ExportMessage, 0, len(msgs)),
		Notes: notes}
	if ledger.NoteMembers(conv.SessionKey) == "" {
		t.MemoryUser = ledger.NoteUser(conv.SessionKey, conv.UserID)
	}
	for i := range fires {
		t.Fires = append(t.Fires, query.ExportFireOf(&fires[i]))
	}
	for i := range msgs {
		m := &msgs[i]
		em := query.ExportMessage{Seq: m.Seq, Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Quote: m.Quote,
			ReplyTo: m.ReplyTo, Status: m.Status, Error: m.Error, CreatedAt: m.CreatedAt,
			TurnState: m.TurnState, TurnOwner: m.TurnOwner, TurnAttempt: m.TurnAttempt, DeliveredAt: m.DeliveredAt}
		if m.Role == "user" && m.TurnState != "" {
			turn := ledger.TurnOf(m)
			if reply := finalReplyIn(msgs, turn.Lead); reply != nil {
				turn.ApplyReply(reply)
			}
			em.TurnState, em.ReplySeq = turn.State, turn.ReplySeq
		}
		if m.Role == ledger.RoleSummary {
			em.Covers = []int64{1, m.ReplyTo}
		}
		if m.ToolCalls != "" {
			em.ToolCalls = json.RawMessage(m.ToolCalls)
			em.Calls = byMsg[m.Seq]
		}
		if m.ClientMsgID != nil {
			em.ClientMsgID = *m.ClientMsgID
		}
		if m.Attachments != "" {
			em.Attachments = json.RawMessage(m.Attachments)
		}
		t.Messages = append(t.Messages, em)
	}
	return t, nil
}

// exportNotes bounds the notes an export carries: more than any user
// keeps (sessions.DefaultMaxNotes, or session.memory.max_notes).
const exportNotes = 100_000

// exportNotes are the notes the turns of conv read, newest first: its
// user's, or in a group chat its members share, every member's
// (ledger.NoteMembers).
func (s *DB) exportNotes(ctx context.Context, conv *ledger.Conversation) ([]ledger.Note, error) {
	prefix := ledger.NoteMembers(conv.SessionKey)
	if prefix == "" {
		return s.Notes(ctx, ledger.NoteUser(conv.SessionKey, conv.UserID), exportNotes)
	}
	return observe(ctx, s, ledger.Call{Op: "MemberNotes"}, func() ([]ledger.Note, error) {
		// substr, not LIKE: a key's _ and % are no patterns, and SQLite's
		// LIKE ignores case.
		var out []ledger.Note
		if err := s.read.WithContext(ctx).Where("substr(user_key, 1, ?) = ?", utf8.RuneCountInString(prefix), prefix).
			Order("created_at DESC, id DESC").Limit(exportNotes).Find(&out).Error; err != nil {
			return nil, fmt.Errorf("load the notes of %s's members: %w", conv.SessionKey, err)
		}
		return out, nil
	})
}

// finalReplyIn finds, as FinalReply does in the store, the final reply to
// the message lead among a conversation's messages: the newest.
func finalReplyIn(msgs []ledger.Message, lead int64) *ledger.Message {
	for i := len(msgs) - 1; i >= 0 && msgs[i].Seq > lead; i-- {
		r := &msgs[i]
		if r.ReplyTo == lead && ledger.SettlesTurn(r) {
			return r
		}
	}
	return nil
}
