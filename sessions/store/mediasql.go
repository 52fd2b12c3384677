package store

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// The media tool calls returned (ledger.ToolMedia): inserted with their
// call's outcome (EndTool), read by turn for a reply and by id for a
// fetch, marked delivered by a channel that marks delivery.

// mediaMeta is every column of tool_media but the bytes.
var mediaMeta = []string{"id", "conversation_id", "turn_seq", "tool_call_id", "idx", "session_key", "kind", "mime", "name", "size",
	"delivered_at", "delivery_ref", "sending_at", "send_claim", "send_attempts", "created_at"}

// insertToolMedia inserts rows in tx; a row of a call and index stored
// already is left as it is.
func insertToolMedia(tx *gorm.DB, rows []ledger.ToolMedia) error {
	rows = append([]ledger.ToolMedia(nil), rows...)
	for i := range rows {
		rows[i].Name, rows[i].Mime = storableText(rows[i].Name), storableText(rows[i].Mime)
		rows[i].Size = int64(len(rows[i].Data))
		if rows[i].Data == nil {
			rows[i].Data = []byte{}
		}
	}
	return tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&rows).Error
}

// ToolMediaOfTurn returns the media the calls of turn (its lead's seq)
// returned, and those of the turns it superseded — turns a newer message
// cut, whose messages it answers (their rows' turn_lead) — without their
// bytes, in call and result order.
func (s *DB) ToolMediaOfTurn(ctx context.Context, convID string, turn int64) ([]ledger.ToolMedia, error) {
	return observe(ctx, s, ledger.Call{Op: "ToolMediaOfTurn", Conv: convID}, func() ([]ledger.ToolMedia, error) {
		var out []ledger.ToolMedia
		if err := s.read.WithContext(ctx).Select(mediaMeta).Where(`conversation_id = ? AND (turn_seq = ? OR turn_seq IN
			(SELECT seq FROM messages WHERE conversation_id = ? AND role = 'user' AND turn_lead = ? AND seq < ?))`,
			convID, turn, convID, turn, turn).
			Order("turn_seq, tool_call_id, idx").Find(&out).Error; err != nil {
			return nil, fmt.Errorf("load media of %s/%d: %w", convID, turn, err)
		}
		return out, nil
	})
}

// ConversationToolMedia returns the media of a conversation, without
// their bytes, oldest first (for export and admin).
func (s *DB) ConversationToolMedia(ctx context.Context, convID string) ([]ledger.ToolMedia, error) {
	var out []ledger.ToolMedia
	if err := s.read.WithContext(ctx).Select(mediaMeta).Where("conversation_id = ?", convID).
		Order("turn_seq, tool_call_id, idx").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("load media of %s: %w", convID, err)
	}
	return out, nil
}

// ToolMedia returns the item with that id, bytes and all, or nil.
func (s *DB) ToolMedia(ctx context.Context, id string) (*ledger.ToolMedia, error) {
	return observe(ctx, s, ledger.Call{Op: "ToolMedia"}, func() (*ledger.ToolMedia, error) {
		var row ledger.ToolMedia
		err := s.read.WithContext(ctx).Where("id = ?", id).Take(&row).Error
		if notFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("load media %s: %w", id, err)
		}
		return &row, nil
	})
}

// ToolMediaInfo returns the item with that id without its bytes, or nil:
// what a fetch checks (whose it is, how large) before it loads them.
func (s *DB) ToolMediaInfo(ctx context.Context, id string) (*ledger.ToolMedia, error) {
	return observe(ctx, s, ledger.Call{Op: "ToolMediaInfo"}, func() (*ledger.ToolMedia, error) {
		var row ledger.ToolMedia
		err := s.read.WithContext(ctx).Select(mediaMeta).Where("id = ?", id).Take(&row).Error
		if notFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("load media %s: %w", id, err)
		}
		return &row, nil
	})
}

// MarkMediaDelivered records that a channel sent the item id (ref: what
// it sent, cut to ledger.MaxDeliveryRef); false when it was marked
// already.
func (s *DB) MarkMediaDelivered(ctx context.Context, id, ref string, at time.Time) (bool, error) {
	return observe(ctx, s, ledger.Call{Op: "MarkMediaDelivered"}, func() (bool, error) {
		if r := []rune(ref); len(r) > ledger.MaxDeliveryRef {
			ref = string(r[:ledger.MaxDeliveryRef])
		}
		n, err := s.moveRows(ctx, `UPDATE tool_media SET delivered_at = ?, delivery_ref = ? WHERE id = ? AND delivered_at IS NULL`, at, ref, id)
		if err != nil {
			return false, fmt.Errorf("mark media %s delivered: %w", id, err)
		}
		return n == 1, nil
	})
}

// ClaimMediaSend claims item id for a send at at, by the delivery that
// names itself claim: MediaClaimed with the claims made so far (this one
// counted), or how the item stands when it cannot be claimed —
// delivered, cut off in an earlier send, or gone. One claim wins however
// many channels or replicas try at once. A claim made again by the same
// delivery (its first answer lost) finds the item claimed by it:
// MediaClaimed, counted once.
func (s *DB) ClaimMediaSend(ctx context.Context, id, claim string, at time.Time) (ledger.MediaClaim, int, error) {
	type outcome struct {
		state    ledger.MediaClaim
		attempts int
	}
	c, err := observe(ctx, s, ledger.Call{Op: "ClaimMediaSend"}, func() (outcome, error) {
		if claim == "" {
			return outcome{}, fmt.Errorf("claim media %s: no claim named", id)
		}
		n, err := s.moveRows(ctx, `UPDATE tool_media SET sending_at = ?, send_claim = ?, send_attempts = send_attempts + 1
			WHERE id = ? AND delivered_at IS NULL AND sending_at IS NULL`, at, claim, id)
		if err != nil {
			return outcome{}, fmt.Errorf("claim media %s: %w", id, err)
		}
		if s.afterMediaClaim != nil {
			s.afterMediaClaim()
		}
		var row ledger.ToolMedia
		err = s.read.WithContext(ctx).Select("delivered_at", "sending_at", "send_claim", "send_attempts").Where("id = ?", id).Take(&row).Error
		switch {
		case notFound(err):
			return outcome{state: ledger.MediaGone}, nil
		case err != nil:
			return outcome{}, fmt.Errorf("claim media %s: %w", id, err)
		case n == 1:
			// Claimed now, whatever another delivery made of the item
			// since (one that found this claim marks it cut off).
			return outcome{state: ledger.MediaClaimed, attempts: row.SendAttempts}, nil
		case row.DeliveredAt != nil:
			return outcome{state: ledger.MediaDelivered, attempts: row.SendAttempts}, nil
		case row.SendingAt != nil && row.SendClaim == claim:
			return outcome{state: ledger.MediaClaimed, attempts: row.SendAttempts}, nil
		}
		return outcome{state: ledger.MediaCut, attempts: row.SendAttempts}, nil
	})
	return c.state, c.attempts, err
}

// ReleaseMediaSend drops the claim the delivery named claim made on item
// id, if it stands: its send surely did not reach the user (the Bot API
// answered with a failure, or was never reached), so a later delivery
// sends it. Another delivery's claim is left as it is.
func (s *DB) ReleaseMediaSend(ctx context.Context, id, claim string) error {
	return observe0(ctx, s, ledger.Call{Op: "ReleaseMediaSend"}, func() error {
		if _, err := s.moveRows(ctx, `UPDATE tool_media SET sending_at = NULL, send_claim = ''
			WHERE id = ? AND send_claim = ? AND delivered_at IS NULL`, id, claim); err != nil {
			return fmt.Errorf("release media %s: %w", id, err)
		}
		return nil
	})
}
