package agent

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// Attachment kinds.
const (
	KindImage    = "image"    // sent to a model that reads images
	KindDocument = "document" // a text file, read into the message's text before the agent
	KindOther    = "other"    // stickers, video, voice not transcribed…: stored, never sent
)

// MissingImageText is what a model that reads images is told in place of an
// image that can no longer be fetched.
const MissingImageText = "[image no longer available]"

// ToolImagesText introduces, to a model that reads images, the pictures
// the tool calls just before it returned (they follow it as images).
const ToolImagesText = "[the pictures the tool calls above returned; the user gets them with your reply]"

// UnseenImageText stands for a message that is only a picture, to a model
// that does not read images.
const UnseenImageText = "[the user sent a picture, which you cannot see]"

// Attachment is something a user message carries besides its text. Its
// metadata is stored with the message; Data (an image's bytes) never is:
// it is fetched from the channel when a turn is built, and Missing tells
// that the channel no longer has it.
type Attachment struct {
	Kind string `json:"kind"`
	Mime string `json:"mime,omitempty"`
	Name string `json:"name,omitempty"`
	Size int64  `json:"size,omitempty"`
	// FileID is the channel's handle to fetch it again (Telegram's
	// file_id); Hash is the SHA-256 of the bytes, hex (WebSocket images,
	// kept in the gateway's memory under it).
	FileID string `json:"file_id,omitempty"`
	Hash   string `json:"hash,omitempty"`
	// Type is the channel's own word for it when Kind is other (voice,
	// sticker, video, …).
	Type string `json:"type,omitempty"`
	// Media is the id of an image a tool returned, kept by the gateway
	// (an attachment of a tool message): its bytes are read from there,
	// not from a channel.
	Media string `json:"media,omitempty"`

	Data    []byte `json:"-"`
	Missing bool   `json:"-"`
}

// DataURL is the image as a data: URL, as the chat-completions format
// carries inline images.
func (a Attachment) DataURL() string {
	return "data:" + a.Mime + ";base64," + base64.StdEncoding.EncodeToString(a.Data)
}

// ImageReader is implemented by agents that can be given images. An agent
// that does not implement it, or says false, gets the text of a message
// only, and images are not fetched for it.
type ImageReader interface {
	ReadsImages() bool
}

// ReadsImages reports whether a reads images.
func ReadsImages(a Agent) bool {
	r, ok := a.(ImageReader)
	return ok && r.ReadsImages()
}

// describe is how Echo shows a message's attachments: "[image image/png]",
// "[image no longer available]", "[document notes.txt]".
func describe(atts []Attachment) string {
	var parts []string
	for _, a := range atts {
		switch {
		case a.Kind == KindImage && a.Missing:
			parts = append(parts, MissingImageText)
		case a.Kind == KindImage:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", a.Mime, len(a.Data)))
		case a.Name != "":
			parts = append(parts, fmt.Sprintf("[%s %s]", a.Kind, a.Name))
		default:
			parts = append(parts, "["+a.Kind+"]")
		}
	}
	return strings.Join(parts, " ")
}
