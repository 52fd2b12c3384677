package gateway

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"sync"

	"github.com/chatgate/chatgate/agent"
)

// Images a client sends on a message frame (audio: checkAudio). They are
// not stored in the database: the message row keeps their metadata (kind,
// mime type, size, SHA-256), and the bytes stay in this replica's memory,
// in a cache bounded by bytes, so that the turn that answers the message
// and later turns can send them to the model. An image evicted from the
// cache, or a turn run by another replica or after a restart, tells the
// model the image is no longer available.

// Limits of message attachments.
const (
	// MaxAttachments is how many attachments one message may carry.
	MaxAttachments = 4
	// MaxImageBytes bounds one image, decoded.
	MaxImageBytes = 5 << 20
	// DefaultImageCacheBytes bounds the cache of images by their bytes.
	DefaultImageCacheBytes = 64 << 20
)

// imageMimes are the image types accepted, as http.DetectContentType
// names them.
var imageMimes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// frameAttachment is an attachment of a message frame.
type frameAttachment struct {
	Kind string `json:"kind"`
	Mime string `json:"mime"`
	Name string `json:"name,omitempty"`
	Data string `json:"data"` // base64 (standard alphabet, padded)

	bytes []byte // Data decoded, by decodeFrame
}

// checkAttachments validates and decodes a message's attachments.
func checkAttachments(atts []frameAttachment) *wsError {
	if len(atts) > MaxAttachments {
		return errBadFrame.with("a message carries at most %d attachments, got %d", MaxAttachments, len(atts))
	}
	for i := range atts {
		a := &atts[i]
		if a.Kind == agent.KindAudio {
			if err := checkAudio(i, a); err != nil {
				return err
			}
			continue
		}
		if a.Kind != agent.KindImage {
			return errBadFrame.with("attachment %d: kind must be \"image\" or \"audio\", got %q", i+1, a.Kind)
		}
		if !imageMimes[a.Mime] {
			return errBadFrame.with("attachment %d: mime must be image/png, image/jpeg, image/gif or image/webp, got %q", i+1, a.Mime)
		}
		if len(a.Name) > 255 {
			return errBadFrame.with("attachment %d: name is over 255 bytes", i+1)
		}
		if base64.StdEncoding.DecodedLen(len(a.Data)) > MaxImageBytes+2 {
			return errBadFrame.with("attachment %d: image is over %d bytes", i+1, MaxImageBytes)
		}
		data, werr := decodeData(i, a)
		switch {
		case werr != nil:
			return werr
		case len(data) > MaxImageBytes:
			return errBadFrame.with("attachment %d: image is over %d bytes", i+1, MaxImageBytes)
		}
		if got := http.DetectContentType(data); got != a.Mime {
			return errBadFrame.with("attachment %d: data is not %s (it looks like %s)", i+1, a.Mime, strings.Split(got, ";")[0])
		}
		a.bytes = data
	}
	return nil
}

// imageCache keeps images by SHA-256, least recently used first out,
// within max bytes in all.
type imageCache struct {
	mu    sync.Mutex
	max   int64
	used  int64
	order *list.List // of *cachedImage, most recent first
	byKey map[string]*list.Element
}

type cachedImage struct {
	hash string
	data []byte
}

func newImageCache(max int64) *imageCache {
	return &imageCache{max: max, order: list.New(), byKey: map[string]*list.Element{}}
}

// put keeps data and returns its hash.
func (c *imageCache) put(data []byte) string {
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:])
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[hash]; ok {
		c.order.MoveToFront(e)
		return hash
	}
	if int64(len(data)) > c.max {
		return hash
	}
	c.byKey[hash] = c.order.PushFront(&cachedImage{hash: hash, data: data})
	c.used += int64(len(data))
	for c.used > c.max {
		e := c.order.Back()
		img := e.Value.(*cachedImage)
		c.order.Remove(e)
		delete(c.byKey, img.hash)
		c.used -= int64(len(img.data))
	}
	return hash
}

var errImageGone = errors.New("the image is not in this gateway's memory")

// fetch is the WebSocket channel's sessions.Fetcher.
func (c *imageCache) fetch(_ context.Context, a agent.Attachment) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[a.Hash]
	if !ok {
		return nil, errImageGone
	}
	c.order.MoveToFront(e)
	return e.Value.(*cachedImage).data, nil
}

// attachments keeps a message's images in the cache and returns the
// metadata of its attachments for storing (audio, transcribed by then,
// is not kept).
func (ws *WebSocket) attachments(atts []frameAttachment) []agent.Attachment {
	var out []agent.Attachment
	for _, a := range atts {
		m := agent.Attachment{Kind: a.Kind, Mime: a.Mime, Name: a.Name, Size: int64(len(a.bytes))}
		if a.Kind == agent.KindImage {
			m.Hash = ws.images.put(a.bytes)
		}
		out = append(out, m)
	}
	return out
}

// historyAttachment is an attachment as ready's history shows it: its
// metadata (the bytes are not kept).
type historyAttachment struct {
	// ID and URL are set on a reply's media from tools (mediaAttachment).
	ID   string `json:"id,omitempty"`
	Kind string `json:"kind"`
	Mime string `json:"mime,omitempty"`
	Name string `json:"name,omitempty"`
	Size int64  `json:"size,omitempty"`
	URL  string `json:"url,omitempty"`
}

func historyAttachments(atts []agent.Attachment) []historyAttachment {
	var out []historyAttachment
	for _, a := range atts {
		out = append(out, historyAttachment{Kind: a.Kind, Mime: a.Mime, Name: a.Name, Size: a.Size})
	}
	return out
}

// decodeData decodes attachment i's data, base64 that must not be empty.
func decodeData(i int, a *frameAttachment) ([]byte, *wsError) {
	data, err := base64.StdEncoding.DecodeString(a.Data)
	switch {
	case err != nil:
		return nil, errBadFrame.with("attachment %d: data is not valid base64: %v", i+1, err)
	case len(data) == 0:
		return nil, errBadFrame.with("attachment %d: data is empty", i+1)
	}
	return data, nil
}
