package ledger

import "time"

// ToolMedia is one picture, audio clip or file a tool call returned, kept
// with the turn whose call it was: stored with the call's outcome (the
// same statement's transaction, ToolEnd.Media), once — keyed by the call
// and the item's place in its result, so an outcome stored twice (a retry
// whose first answer was lost) keeps one row. It goes with its
// conversation: a purge deletes it with the conversation's tool calls.
type ToolMedia struct {
	// ID names it to whoever fetches it (the WebSocket channel's URL): a
	// random UUID, so ids are not counted.
	ID             string `gorm:"primaryKey;size:36"`
	ConversationID string `gorm:"size:36;not null;index:ix_tool_media_turn,priority:1"`
	// TurnSeq is the lead of the turn whose call returned it: the reply
	// of that turn delivers it.
	TurnSeq int64 `gorm:"not null;index:ix_tool_media_turn,priority:2"`
	// ToolCallID and Idx are the call (ToolCall.ID) and the item's place
	// among the media of its result: unique, so it is stored once.
	ToolCallID int64  `gorm:"not null;uniqueIndex:uq_tool_media,priority:1"`
	Idx        int    `gorm:"not null;uniqueIndex:uq_tool_media,priority:2"`
	SessionKey string `gorm:"size:255;not null;default:''"`
	Kind       string `gorm:"size:16;not null"` // image, audio or file (tools.Media*)
	Mime       string `gorm:"size:255;not null;default:''"`
	Name       string `gorm:"size:255;not null;default:''"`
	Size       int64  `gorm:"not null"`
	// Data is the item's bytes; left unread where only its metadata is
	// wanted (ToolMediaOfTurn).
	Data []byte `gorm:"not null"`
	// DeliveredAt is when a channel that marks delivery (Telegram) sent
	// it; DeliveryRef is what it sent (a message id).
	DeliveredAt *time.Time
	DeliveryRef string `gorm:"size:255;not null;default:''"` // MaxDeliveryRef
	// SendingAt is when a channel that marks delivery claimed it for a
	// send (MediaClaimed), cleared when that send surely did not reach
	// the user. A claim still standing, undelivered, when the item is
	// delivered again means a send was cut off after it may have
	// reached the user: it is not sent again (MediaCut).
	SendingAt *time.Time
	// SendClaim names the delivery whose claim stands (a token it chose),
	// so that a delivery drops only its own claim (ReleaseMediaSend) —
	// also one it made without learning that it had, its answer lost.
	SendClaim string `gorm:"size:64;not null;default:''"`
	// SendAttempts counts the claims.
	SendAttempts int `gorm:"not null;default:0"`
	CreatedAt    time.Time
}

// MaxDeliveryRef is the most characters ToolMedia.DeliveryRef holds (its
// column's size): a longer ref — a long error after MediaUnsureRef — is
// cut to it when stored.
const MaxDeliveryRef = 255

// How a channel's claim on an item for a send stands (ClaimMediaSend).
type MediaClaim int

const (
	// MediaClaimed: claimed now; send it, then mark it delivered, or
	// release the claim when the send surely did not reach the user.
	MediaClaimed MediaClaim = iota
	// MediaDelivered: marked delivered already; nothing to send.
	MediaDelivered
	// MediaCut: an earlier send was cut off (a crash, a connection lost
	// after the request went): it may have reached the user, so it is
	// not sent again.
	MediaCut
	// MediaGone: no such item (purged).
	MediaGone
)

// The delivery refs of an item marked delivered without reaching the
// user for sure: refused for good, or cut off in its send.
const (
	MediaRefusedRef = "refused: "
	MediaUnsureRef  = "unsure: "
)
